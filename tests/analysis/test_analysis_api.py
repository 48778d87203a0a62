"""The analysis and render packages' public names, and what the CLI imports before it runs."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

MODULES = (
    "rlsight.analysis", "rlsight.analysis.model", "rlsight.analysis.goodput", "rlsight.analysis.fleets",
    "rlsight.analysis.stragglers", "rlsight.analysis.startup", "rlsight.analysis.volume",
    "rlsight.analysis.wasted", "rlsight.analysis.hotspots", "rlsight.analysis.engine",
    "rlsight.render.table", "rlsight.render.html", "rlsight.render.perfetto",
    "rlsight.commands.report", "rlsight.commands.timeline", "rlsight.commands.runs",
)


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_name_exists_and_says_what_it_is(name: str):
    module = importlib.import_module(name)
    assert [n for n in module.__all__ if not hasattr(module, n)] == []
    undocumented = [n for n in module.__all__
                    if (inspect.isclass(getattr(module, n)) or inspect.isfunction(getattr(module, n)))
                    and not (getattr(module, n).__doc__ or "").strip()]
    assert undocumented == []


def test_the_cli_help_imports_no_numpy_or_rich():
    """`rlsight --help` stays fast: report/timeline/runs import their heavy deps in run()."""
    code = ("import json, sys, contextlib, io\nfrom rlsight.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\n"
            "heavy = ('numpy', 'rich', 'orjson')\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=60)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
