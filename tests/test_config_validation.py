"""Config validation: values that would fail later, quietly or far away, are refused at setup.

docs/reliability.md names these tests for "bad config -> one clear error at setup".
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rlsight import TelemetryConfig, init_worker
from rlsight.config import MAX_SHUTDOWN_TIMEOUT_MS
from rlsight.errors import ConfigError, RlsightWarning


class TestRunIdsStayUnderTheRunsRoot:
    @pytest.mark.parametrize("run_id", ["..", ".", "a/b", "..\\x", "x\x1b[2J", "tab\there", "x" * 201])
    def test_a_run_id_that_is_a_path_step_or_holds_control_characters_is_refused(self, run_id: str):
        with pytest.raises(ConfigError, match=r"TelemetryConfig\.run_id"):
            TelemetryConfig(run_id=run_id)

    @pytest.mark.parametrize("run_id", ["..", "."])
    def test_from_the_environment_too(self, run_id: str):
        with pytest.raises(ConfigError, match="run_id"):
            TelemetryConfig.from_env({"RLSIGHT_RUN_ID": run_id})

    def test_a_hostile_slurm_job_id_is_not_used_and_a_warning_says_so(
            self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
        monkeypatch.setenv("SLURM_JOB_ID", "../../etc")
        monkeypatch.chdir(tmp_path)
        with pytest.warns(RlsightWarning, match="SLURM_JOB_ID"):
            config = TelemetryConfig()
        assert config.run_path.parent == tmp_path / "rlsight-runs"
        assert ".." not in str(config.run_id)

    def test_ordinary_ids_pass(self):
        for run_id in ("424242", "424242_7", "grpo-qwen.v2", "run<1>"):
            assert TelemetryConfig(run_id=run_id).run_id == run_id


class TestEndpoints:
    @pytest.mark.parametrize("endpoint", ["localhost:4318", "ftp://collector:4318", "not a url",
                                          "http://", "http://h:99999", "http://h:0"])
    def test_an_endpoint_that_is_not_an_http_url_is_refused(self, endpoint: str):
        with pytest.raises(ConfigError, match="expected a URL such as http://localhost:4318"):
            TelemetryConfig(otlp_endpoint=endpoint)

    def test_the_standard_variable_is_checked_as_well(self):
        with pytest.raises(ConfigError, match="otlp_endpoint"):
            TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"})

    @pytest.mark.parametrize("endpoint", ["http://localhost:4318", "https://otel.example.com",
                                          "http://127.0.0.1:4317/"])
    def test_urls_pass(self, endpoint: str):
        assert TelemetryConfig(otlp_endpoint=endpoint).otlp_endpoint == endpoint


def test_a_shutdown_timeout_beyond_an_hour_is_refused():
    """A huge budget used to pass validation and overflow the thread waits at shutdown."""
    assert TelemetryConfig(shutdown_timeout_ms=MAX_SHUTDOWN_TIMEOUT_MS).shutdown_timeout_ms == 3_600_000
    with pytest.raises(ConfigError, match="shutdown_timeout_ms"):
        TelemetryConfig(shutdown_timeout_ms=2**63 - 1)


@pytest.mark.parametrize("devices", ["-3", "0"])
def test_rlsight_devices_must_be_positive(devices: str, tmp_path: Path):
    env = {**TelemetryConfig(run_dir=str(tmp_path)).to_env(), "RLSIGHT_DEVICES": devices}
    with warnings.catch_warnings(), pytest.raises(ConfigError, match="RLSIGHT_DEVICES"):
        init_worker(environ=env)
