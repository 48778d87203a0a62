"""rlsight's own tree passes its drift guards, and its docs' examples run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlsight.check import load_check_config, run_check

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: Pages whose code blocks follow the runnable-or-marked convention of docs/check.md.
#: Every page of the manual: a new page is covered without anyone remembering to list it.
PAGES = tuple(sorted(p.name for p in DOCS.glob("*.md")))
#: Pages whose examples a dedicated test runs and checks the output of; not run twice here.
_RUN_ELSEWHERE = {
    "propagation.md": "tests/propagation/test_propagation_docs.py",
    "goodput.md": "tests/analysis/test_docs_goodput.py",
    "dashboards.md": "tests/test_logger_recipes.py",
    "timers.md": "tests/test_timers.py",
}
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NOT_RUN = re.compile(r"<!--\s*not run:\s*\S.*?-->\s*$")
_CODE = frozenset({"python", "bash", "sh", "console"})


def _blocks(page: str) -> list[tuple[str, int, str, bool]]:
    """(language, line, code, marked not-run) for every fenced block of ``page``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").splitlines()
        marked = bool(before) and _NOT_RUN.search(before[-1]) is not None
        line = text[: match.start()].count("\n") + 1
        out.append((match.group(1), line, match.group(2), marked))
    return out


_RUNNABLE = [
    pytest.param(code, id=f"{page}:{line}")
    for page in PAGES
    if page not in _RUN_ELSEWHERE
    for lang, line, code, marked in _blocks(page)
    if lang == "python" and not marked
]


def _rlsight_config(docs: Path = DOCS):  # type: ignore[no-untyped-def]
    return load_check_config(pyproject=REPO / "pyproject.toml").with_overrides(docs=str(docs))


def test_rlsight_tree_passes_its_own_check() -> None:
    report = run_check(_rlsight_config())
    assert report.violations == [], report.render()


def test_every_configured_guard_checked_something() -> None:
    for result in run_check(_rlsight_config()).results:
        assert all(n > 0 for key, n in result.counts.items() if key != "per_prompt"), result.summary


def test_removing_a_span_table_row_fails(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    page = docs / "span-groups.md"
    row = next(line for line in page.read_text().splitlines() if line.startswith("| `rl.train.policy`"))
    page.write_text(page.read_text().replace(row + "\n", ""))
    problems = [v.problem for v in run_check(_rlsight_config(docs)).violations]
    assert any(p.startswith("span 'rl.train.policy' emitted at src/rlsight/demo/") for p in problems)


def test_editing_a_generated_table_fails(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    page = docs / "configuration.md"
    page.write_text(page.read_text().replace("`RLSIGHT_STRICT`", "`RLSIGHT_STRICT_MODE`"))
    [violation] = run_check(_rlsight_config(docs)).violations
    assert violation.path.endswith("configuration.md")
    assert "generated block 'configuration' is out of date" in violation.problem


def test_check_md_lists_exactly_the_generated_blocks_there_are() -> None:
    """Issue #18: the page listed 5 blocks when there were 6."""
    from rlsight.check.tables import GENERATORS

    text = (DOCS / "check.md").read_text(encoding="utf-8")
    table = text[text.index("| block | content |"):]
    table = table[: table.index("\n\n")]
    listed = re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE)
    assert sorted(listed) == sorted(GENERATORS)


def test_every_code_block_runs_or_says_why_not() -> None:
    unmarked = [
        f"{page}:{line} ({lang})"
        for page in PAGES
        for lang, line, _code, marked in _blocks(page)
        if lang in _CODE and lang != "python" and not marked
    ]
    assert unmarked == [], "shell blocks must be preceded by <!-- not run: reason -->"
    assert _RUNNABLE, "found no runnable example: the block matcher is stale"


#: Runs blocks given as JSON [[page, line, code], ...] in one namespace, in order. Each block is
#: compiled with blank lines in front so a traceback names the page's own line.
_PASTE_IN_ORDER = """
import json, sys
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
for page, line, code in json.loads(sys.stdin.read()):
    exec(compile("\\n" * line + code, "docs/" + page, "exec"), namespace)
    print("ran docs/%s:%d" % (page, line), file=sys.stderr, flush=True)
"""
#: propagation.md has one runnable block (its own test says so), which starts a Ray instance of
#: its own: it runs, alone, in its own process there.
_OWN_PROCESS = {"propagation.md"}


def test_the_whole_manual_runs_in_one_interpreter_in_order(tmp_path: Path) -> None:
    """Issue #18: a user pasting every page's examples, in order, into one Python session.

    Pages in alphabetical order, blocks in page order, one namespace: an example that
    registers a name an earlier one registered, or leaves state behind, fails here.
    """
    blocks = [
        (page, line, code)
        for page in PAGES
        if page not in _OWN_PROCESS
        for lang, line, code, marked in _blocks(page)
        if lang == "python" and not marked
    ]
    assert len({page for page, _, _ in blocks}) >= 10, "found too few pages: the block matcher is stale"
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", _PASTE_IN_ORDER],
        input=json.dumps(blocks), cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("ran docs/") == len(blocks)


@pytest.mark.parametrize("code", _RUNNABLE)
def test_docs_example_runs(code: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_code_fence_of_the_manual_closes_on_a_bare_line() -> None:
    """Review: live.md had a closing fence with prose after it (```` ``` The run above ````): the
    block never closed, and every later block's fences paired the wrong way round. A fence
    opens with an optional language and closes on a line of its own; each page's fences pair."""
    for page in PAGES:
        fences = [(n, line.strip()) for n, line in enumerate(
            (DOCS / page).read_text(encoding="utf-8").splitlines(), 1) if line.lstrip().startswith("```")]
        opens = fences[::2]
        closes = fences[1::2]
        assert len(fences) % 2 == 0, f"{page}: a code fence is never closed (fences at {fences})"
        bad = [n for n, text in opens if not re.fullmatch(r"```[\w+-]*", text)]
        bad += [n for n, text in closes if text != "```"]
        assert not bad, f"{page}: lines {bad} open a fence with more than a language, or close one " \
                        "with text after it"
