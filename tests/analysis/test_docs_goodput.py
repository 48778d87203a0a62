"""docs/goodput.md and docs/cli.md: the worked example runs, other blocks say why not, and the
JSON schema table names every field the report has."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from _build import RunBuilder, analyze

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NOT_RUN = re.compile(r"<!--\s*not run:\s*\S.*?-->\s*$")


def _blocks(page: str) -> list[tuple[str, str, bool]]:
    text = (DOCS / page).read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").splitlines()
        out.append((m.group(1), m.group(2), bool(before) and _NOT_RUN.search(before[-1]) is not None))
    return out


def test_the_worked_example_runs_and_checks_its_own_numbers(tmp_path: Path):
    (code,) = [code for lang, code, marked in _blocks("goodput.md") if lang == "python" and not marked]
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'productive': 8.0" in done.stdout


def test_shell_blocks_say_why_they_do_not_run():
    for page in ("goodput.md", "cli.md"):
        for lang, _, marked in _blocks(page):
            assert lang not in ("bash", "sh", "console") or marked, page


def test_the_json_schema_table_names_every_section_and_summary_field():
    run = RunBuilder()
    run.process().step(1, 0, 10)
    text = (DOCS / "cli.md").read_text()
    doc = analyze(run).to_dict()
    missing = [key for key in doc if f"`{key}" not in text]
    missing += [f"summary.{key}" for key in doc["summary"] if f"`summary.{key}`" not in text]
    assert missing == [], f"docs/cli.md does not describe {missing}"
