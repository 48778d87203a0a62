"""Content and secrets stay out of every file rlsight writes: spans, exceptions, timeline, manifest.

docs/reliability.md names these tests for "what is redacted".
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlsight._redact import REDACTED, scrub, scrub_argv
from rlsight.cli import EXIT_OK, main
from rlsight.spans import span
from rlsight.store import read_spans
from rlsight.testing import capture_telemetry

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"

CONTENT_KEYS = [
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt.0.content", "gen_ai.completion.0.content", "messages", "text", "content",
    "response", "hf_token", "access_token", "api-key", "apiKey", "prompt", "api_key",
    # the plurals docs/span-groups.md promises ("plurals too"); these leaked before
    "texts", "contents", "responses", "apiKeys", "api-keys", "my.passwords",
]


@pytest.mark.parametrize("key", CONTENT_KEYS)
def test_a_content_key_is_redacted_in_the_store(key: str, run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s", **{key: SECRET}):
        pass
    (record,) = read_spans(run_dir).spans
    full = key if "." in key else "rl." + key
    assert record.attributes[full] == REDACTED
    assert SECRET not in "".join(p.read_text() for p in run_dir.rglob("*.jsonl"))


def test_counts_under_content_like_keys_are_kept(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s", tokens=512, prompts=8):
        pass
    (record,) = read_spans(run_dir).spans
    assert (record.attributes["rl.tokens"], record.attributes["rl.prompts"]) == (512, 8)


def test_an_exception_message_on_a_span_is_scrubbed(run_dir: Path) -> None:
    """The status, the exception event's message and its stack trace never hold the token."""
    with capture_telemetry(run_dir=run_dir), pytest.raises(PermissionError):
        with span("generation", "rl.test.fail"):
            raise PermissionError(f"login failed for token={SECRET} (Authorization: Bearer abc.def)")
    text = "".join(p.read_text() for p in (run_dir / "traces").glob("*.jsonl"))
    assert SECRET not in text and "abc.def" not in text
    (record,) = read_spans(run_dir).spans
    assert record.status_message.startswith("PermissionError: login failed for token=<redacted>")


def test_the_timeline_redacts_what_the_store_holds_raw(run_dir: Path, tmp_path: Path) -> None:
    """A value written through set_attribute (not redacted on the way in) is redacted in the trace."""
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s") as s:
        s.set_attribute("gen_ai.input.messages", SECRET)
    assert main(["timeline", str(run_dir), "-o", str(tmp_path / "t.json")]) == EXIT_OK
    trace = (tmp_path / "t.json").read_text()
    assert SECRET not in trace and json.loads(trace)["traceEvents"]


def test_the_manifest_holds_no_secret_from_argv_or_config(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from rlsight import TelemetryConfig, setup_telemetry
        setup_telemetry(TelemetryConfig(
            run_dir=sys.argv[1], otlp_endpoint="https://user:pw{SECRET}@collector:4318",
            resource_attributes={{"deploy.api_key": "{SECRET}", "team": "rl"}})).shutdown(100)
    """)
    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-c", script, str(run_dir), f"--hf-token={SECRET}",
                    "--api-key", SECRET, f"--note=key {SECRET}", "--steps", "3"], check=True)
    manifest = (run_dir / "manifest.json").read_text()
    assert SECRET not in manifest
    doc = json.loads(manifest)
    assert doc["argv"][2:] == ["--hf-token=<redacted>", "--api-key", "<redacted>",
                               "--note=key <redacted>", "--steps", "3"]
    assert doc["config"]["resource_attributes"] == {"deploy.api_key": REDACTED, "team": "rl"}


@pytest.mark.parametrize(("text", "expected"), [
    ("password: hunter2, next", "password: <redacted>, next"),
    ("GITHUB_TOKEN=ghp_x", "GITHUB_TOKEN=<redacted>"),
    ("curl -H 'Authorization: Bearer abc'", "curl -H 'Authorization: <redacted>'"),
    ("plain message with 3 tokens", "plain message with 3 tokens"),
    # a dict in an exception message, as JSON or as Python's repr: the key is quoted
    ('config {"api_key": "XYZ123", "n": 2}', 'config {"api_key": <redacted>, "n": 2}'),
    ("bad request {'hf_token': 'abc', 'model': 'm'}", "bad request {'hf_token': <redacted>, 'model': 'm'}"),
    ('{"password":"pw"}', '{"password":<redacted>}'),
])
def test_scrub(text: str, expected: str) -> None:
    assert scrub(text) == expected


def test_scrub_argv_keeps_ordinary_flags() -> None:
    argv = ["train.py", "--lr=3e-4", "--steps", "10"]
    assert scrub_argv(argv) == argv
