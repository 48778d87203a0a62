"""docs/dashboards.md's recipes run against the real W&B (offline), tensorboardX + TensorBoard
and MLflow (file store); what each library wrote is read back and equals the run's report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlsight.cli import EXIT_OK, main

DOCS = Path(__file__).resolve().parents[1] / "docs"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_KEYS = ("rlsight/goodput_pct", "rlsight/idle_s", "rlsight/productive_s", "rlsight/wall_s",
         "rlsight/idle/buffer_starvation_s")


def _python_blocks() -> list[str]:
    text = (DOCS / "dashboards.md").read_text(encoding="utf-8")
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(1) == "python"]


def _block(importing: str) -> str:
    (code,) = [c for c in _python_blocks() if f"import {importing}" in c]
    return code


def _run_block(code: str, cwd: Path) -> None:
    env = {**os.environ, "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          cwd=cwd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _report_steps(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[int, dict[str, float]]:
    """Per step, the values the recipe should have logged, from `rlsight report --json`."""
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    top = {c["name"] for c in doc["top"]}
    assert "rl.efficiency.idle.buffer_starvation" in top
    out = {}
    for s in doc["steps"]:
        b = s["buckets"]
        out[s["step"]] = {"rlsight/goodput_pct": 100 * b["productive_ns"] / b["wall_ns"],
                          "rlsight/idle_s": b["idle_ns"] / 1e9,
                          "rlsight/productive_s": b["productive_ns"] / 1e9,
                          "rlsight/wall_s": b["wall_ns"] / 1e9,
                          # the only idle span of the recipes: all idle time is its
                          "rlsight/idle/buffer_starvation_s": b["idle_ns"] / 1e9}
    return out


def _assert_logged(logged: dict[int, dict[str, float]], expected: dict[int, dict[str, float]]) -> None:
    assert sorted(logged) == sorted(expected) == [1, 2, 3]
    for step, values in expected.items():
        for key in _KEYS:
            # float32 in TensorBoard's events; the others keep doubles
            assert logged[step][key] == pytest.approx(values[key], rel=1e-6), (step, key)
        assert logged[step]["train/loss"] == pytest.approx(1.0 / step, rel=1e-6)


def _wandb_records(path: Path) -> Iterator[bytes]:
    """Records of a W&B transaction log (``run-*.wandb``): LevelDB's log format after a 7-byte
    ``:W&B`` header, 32 KiB blocks, records split FIRST/MIDDLE/LAST across blocks."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length = int.from_bytes(data[pos + 4:pos + 6], "little")
        kind = data[pos + 6]
        payload = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield payload
        elif kind == 2:
            pending = payload
        elif kind == 3:
            pending += payload
        elif kind == 4:
            yield pending + payload


def test_wandb_offline_run_holds_every_steps_summary(tmp_path, capsys):
    from wandb.proto import wandb_internal_pb2

    _run_block(_block("wandb"), tmp_path)
    (log,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    logged: dict[int, dict[str, float]] = {}
    for raw in _wandb_records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
               for item in record.history.item}
        logged[int(row["_step"])] = row
    _assert_logged(logged, _report_steps(tmp_path / "run", capsys))


def test_tensorboard_events_hold_every_steps_summary(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _run_block(_block("SummaryWriter"), tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    logged: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            logged.setdefault(event.step, {})[tag] = event.value
    _assert_logged(logged, _report_steps(tmp_path / "run", capsys))


def test_mlflow_file_store_holds_every_steps_summary(tmp_path, capsys, monkeypatch):
    import mlflow

    _run_block(_block("mlflow"), tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    (run,) = client.search_runs(experiment_ids=["0"])
    logged: dict[int, dict[str, float]] = {}
    for key in (*_KEYS, "train/loss"):
        for metric in client.get_metric_history(run.info.run_id, key):
            logged.setdefault(metric.step, {})[key] = metric.value
    _assert_logged(logged, _report_steps(tmp_path / "run", capsys))


def test_the_summary_example_runs(tmp_path):
    (code,) = [c for c in _python_blocks() if "assert summary" in c]
    _run_block(code, tmp_path)


def test_every_python_block_of_the_page_is_run_here():
    """A new block on docs/dashboards.md gets a test here (the docs test skips this page)."""
    assert len(_python_blocks()) == 4
