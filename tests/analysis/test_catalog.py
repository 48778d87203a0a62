"""The report reads the run's span-group catalog from manifest.json, not the reader's imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from rlsight.analysis import analyze_run
from rlsight.groups import registered_groups

# A library's groups, registered only in the run's own process (a subprocess here).
_RUN = textwrap.dedent("""
    import sys
    from rlsight import SpanGroup, TelemetryConfig, register_span_groups, setup_telemetry, span, step_span

    register_span_groups("catalogtestlib", [SpanGroup("catalogtestlib_fetch", "fetch", "overhead")])
    config = TelemetryConfig(run_dir=sys.argv[1], span_groups=("per_step", "catalogtestlib"))
    with setup_telemetry(config):
        for step in range(3):
            with step_span(step), span("catalogtestlib_fetch", "catalogtestlib.fetch"):
                pass
""")
_GROUP = "catalogtestlib_fetch"


def _record_run(run_dir: Path) -> None:
    subprocess.run([sys.executable, "-c", _RUN, str(run_dir)], check=True, timeout=60)


def _volume(report_groups: list[object], name: str) -> object:
    return next(g for g in report_groups if getattr(g, "group", None) == name)


def test_a_library_group_registered_only_in_the_run_is_known_to_the_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record_run(run_dir)
    assert _GROUP not in registered_groups()  # the reading process never imported the library
    catalog = json.loads((run_dir / "manifest.json").read_text())["catalog"]
    assert catalog["span_groups"][_GROUP] == {
        "namespace": "catalogtestlib", "description": "fetch", "bucket": "overhead", "umbrella": False}
    assert _GROUP in catalog["enabled_span_groups"] and "step" in catalog["enabled_span_groups"]
    assert "step" in catalog["presets"]["per_step"]["groups"]
    assert catalog["efficiency_categories"]["idle/buffer_starvation"]["bucket"] == "idle"
    assert catalog["buckets"] == ["productive", "overhead", "idle", "wasted"]

    report = analyze_run(run_dir)
    assert _volume(report.volume.groups, _GROUP).in_per_step is False  # type: ignore[attr-defined]
    assert _volume(report.volume.groups, "step").in_per_step is True  # type: ignore[attr-defined]
    assert not any("catalog" in n for n in report.notes)


def test_a_manifest_without_a_catalog_falls_back_to_this_process_and_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _record_run(run_dir)
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["catalog"]  # as an older rlsight wrote it
    path.write_text(json.dumps(manifest))

    report = analyze_run(run_dir)
    assert _volume(report.volume.groups, _GROUP).in_per_step is None  # type: ignore[attr-defined]
    assert _volume(report.volume.groups, "step").in_per_step is True  # type: ignore[attr-defined]
    assert any("records no span-group catalog" in n for n in report.notes)
