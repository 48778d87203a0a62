"""The README's usage example runs as written and writes a run the report can read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_example_runs_and_writes_a_readable_run(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "the README should show one usage example"
    code = blocks[0].replace("range(1, 101)", "range(1, 4)")  # same loop, fewer steps
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "rlsight-runs").iterdir()
    report = subprocess.run([sys.executable, "-m", "rlsight.cli", "report", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-3000:]
    assert json.loads(report.stdout)["summary"]["steps"] == 3
