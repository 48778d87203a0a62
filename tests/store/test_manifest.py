"""manifest.json's ``config`` is the run's settings, readable back into the same config.

docs/store.md: the manifest holds "the full `config`"; a reader rebuilds it with
``TelemetryConfig.from_mapping``, which warns on keys it does not know.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from rlsight import SETTINGS, TelemetryConfig, setup_telemetry
from rlsight.store import read_manifest


def test_the_manifest_config_holds_the_settings_and_reads_back_without_a_warning(run_dir: Path) -> None:
    config = TelemetryConfig(run_dir=str(run_dir), algorithm="grpo", span_groups=("per_step",))
    with setup_telemetry(config) as telemetry:
        pass
    manifest = read_manifest(run_dir)
    assert manifest is not None
    assert set(manifest["config"]) == {s.name for s in SETTINGS}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TelemetryConfig.from_mapping(manifest["config"]) == telemetry.config
