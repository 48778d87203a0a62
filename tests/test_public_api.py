"""The public contract: ``rlsight.__all__`` and the cost of ``import rlsight``."""

from __future__ import annotations
import __future__

import importlib
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import rlsight

_FOUNDATION_MODULES = (
    "rlsight.buckets", "rlsight.config", "rlsight.errors", "rlsight.groups", "rlsight.runtime",
    "rlsight.spans", "rlsight.store", "rlsight.testing",
)


def _public_names(module: types.ModuleType) -> set[str]:
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, (types.ModuleType, __future__._Feature))
    }


def test_all_is_exactly_the_public_names_of_the_package() -> None:
    """A name re-exported but not listed (or listed but missing) is caught here (httpx style)."""
    assert sorted(set(rlsight.__all__) - {"__version__"}) == sorted(_public_names(rlsight))


def test_all_has_no_duplicates() -> None:
    assert len(rlsight.__all__) == len(set(rlsight.__all__))


def test_every_exported_name_resolves() -> None:
    missing = [name for name in rlsight.__all__ if not hasattr(rlsight, name)]
    assert missing == []


@pytest.mark.parametrize("module_name", _FOUNDATION_MODULES)
def test_each_foundation_module_exports_only_names_it_has(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


def test_exported_functions_and_classes_have_docstrings() -> None:
    undocumented = [
        name for name in rlsight.__all__
        if (inspect.isclass(getattr(rlsight, name)) or inspect.isfunction(getattr(rlsight, name)))
        and not (getattr(rlsight, name).__doc__ or "").strip()
    ]
    assert undocumented == []


def test_version_comes_from_the_package_metadata() -> None:
    from importlib import metadata

    assert rlsight.__version__ == metadata.version("rlsight")


def test_import_rlsight_pulls_in_no_heavy_dependency() -> None:
    """``import rlsight`` must stay cheap: instrumented code imports it everywhere."""
    heavy = ("ray", "aiohttp", "numpy", "duckdb")
    code = (
        "import json, sys, rlsight\n"
        f"heavy = {heavy!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []


def test_import_rlsight_leaves_the_opentelemetry_sdk_for_setup(tmp_path: Path) -> None:
    """The SDK (about a third of the import time) loads at ``setup_telemetry``, not at import:
    a library that only instruments its code pays for the API alone."""
    code = (
        "import json, sys, rlsight\n"
        "before = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk'))\n"
        "rlsight.setup_telemetry(rlsight.TelemetryConfig(run_dir=sys.argv[1], span_groups=['rl']))\n"
        "with rlsight.span(rlsight.RL.ROLLOUT, 'rl.rollout.collect'):\n"
        "    pass\n"
        "after = 'opentelemetry.sdk.trace' in sys.modules\n"
        "rlsight.shutdown_telemetry()\n"
        "print(json.dumps([before, after]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, check=True, timeout=60)
    assert json.loads(done.stdout.splitlines()[-1]) == [[], True]


def test_every_span_helper_returns_a_span_context_manager_on_and_off() -> None:
    """The public return type holds for the live, the no-op and the setup span alike, and the
    ``as`` target is a span either way."""
    from rlsight.testing import capture_telemetry

    def helpers() -> list[rlsight.SpanContextManager]:
        return [
            rlsight.span(rlsight.RL.GENERATION, "rl.test.generate"),
            rlsight.umbrella_span(rlsight.RL.ROLLOUT, "rl.test.rollout"),
            rlsight.job_span(), rlsight.startup_span(), rlsight.step_span(1),
            rlsight.load_model_span("vllm"), rlsight.setup_span("workers"),
            rlsight.efficiency_span("idle/buffer_starvation"),
        ]

    for groups, recording in ((["all"], True), ([], False)):
        with capture_telemetry(span_groups=groups) as cap:
            for helper in helpers():
                assert isinstance(helper, rlsight.SpanContextManager)
                with helper as s:
                    assert s.is_recording() is recording
        assert len(cap.spans()) == (8 if recording else 0)
