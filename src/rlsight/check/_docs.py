"""Read a docs folder: the span tables the span-name guard compares against, and generated blocks.

A *span table* is any Markdown table whose header has a column titled ``span`` (or ``spans``,
``span name``). Each inline-code entry in that column (`` `rl.sc.step` ``; several per cell
are fine) documents one span name. An entry with a ``<placeholder>`` segment
(`` `rl.setup.<phase>` ``) documents a *pattern*: it must match some emitted name, but it
does not document any name by itself, so every concrete phase still needs its own row. When
the table also has a ``group`` column, the guard checks the emitted group against it.

A *generated block* sits between ``<!-- rlsight:begin NAME -->`` and
``<!-- rlsight:end NAME -->``, each marker on a line of its own; ``rlsight check`` regenerates
it and reports any difference.
Tables inside fenced code blocks are examples, not documentation, and are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["DocSpan", "DocsIndex", "GeneratedBlock", "read_docs"]

_SPAN_HEADERS: Final = frozenset({"span", "spans", "span name", "span names"})
_GROUP_HEADERS: Final = frozenset({"group", "groups", "span group"})
_CODE: Final = re.compile(r"`([^`]+)`")
_SEPARATOR: Final = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_BEGIN: Final = re.compile(r"<!--\s*rlsight:begin\s+([A-Za-z0-9_-]+)\s*-->")
_END: Final = re.compile(r"<!--\s*rlsight:end\s+([A-Za-z0-9_-]+)\s*-->")
_PLACEHOLDER: Final = re.compile(r"<[^<>]+>")
_FENCE: Final = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True, slots=True)
class DocSpan:
    """One span name (or pattern) documented in a table row."""

    name: str
    groups: frozenset[str] | None
    path: str
    line: int

    @property
    def is_pattern(self) -> bool:
        """Whether the entry has a ``<placeholder>`` segment."""
        return _PLACEHOLDER.search(self.name) is not None

    def matches(self, emitted: str) -> bool:
        """Whether ``emitted`` is an instance of this pattern (or equal to the name)."""
        if not self.is_pattern:
            return emitted == self.name
        parts = _PLACEHOLDER.split(self.name)
        regex = ".+".join(re.escape(p) for p in parts)
        return re.fullmatch(regex, emitted) is not None


@dataclass(frozen=True, slots=True)
class GeneratedBlock:
    """The text between a begin and an end marker (exclusive), with where it sits."""

    name: str
    path: Path
    display: str
    begin_line: int
    end_line: int
    content: str


@dataclass(slots=True)
class DocsIndex:
    """What the docs folder documents."""

    root: Path
    display: str
    spans: list[DocSpan] = field(default_factory=list)
    span_table_files: list[str] = field(default_factory=list)
    blocks: list[GeneratedBlock] = field(default_factory=list)
    marker_errors: list[tuple[str, int, str]] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    """Split a table row on ``|`` outside inline code, honouring ``\\|``."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    cells: list[str] = []
    current: list[str] = []
    in_code = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] == "|":
            current.append("|")
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    return cells


def _header_key(cell: str) -> str:
    return " ".join(cell.replace("*", "").replace("`", "").replace("_", " ").lower().split())


def _group_names(cell: str) -> frozenset[str]:
    coded = _CODE.findall(cell)
    words = coded or re.split(r"[,/\s]+|\bor\b", cell)
    return frozenset(w.strip() for w in words if w and w.strip())


def _read_tables(lines: list[str], display: str, index: DocsIndex) -> None:
    in_fence = False
    i = 0
    found_table = False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
            i += 1
            continue
        is_table = (
            line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and _SEPARATOR.match(lines[i + 1].strip()) is not None
        )
        if in_fence or not is_table:
            i += 1
            continue
        header = [_header_key(c) for c in _cells(line)]
        span_col = next((n for n, h in enumerate(header) if h in _SPAN_HEADERS), None)
        group_col = next((n for n, h in enumerate(header) if h in _GROUP_HEADERS), None)
        i += 2
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            row = _cells(lines[i])
            if span_col is not None and span_col < len(row):
                groups = (
                    _group_names(row[group_col])
                    if group_col is not None and group_col < len(row) and row[group_col]
                    else None
                )
                for name in _CODE.findall(row[span_col]):
                    index.spans.append(DocSpan(name.strip(), groups, display, i + 1))
            i += 1
        if span_col is not None:
            found_table = True
    if found_table:
        index.span_table_files.append(display)


def _read_blocks(path: Path, lines: list[str], display: str, index: DocsIndex) -> None:
    open_name: str | None = None
    open_line = 0
    for n, line in enumerate(lines, start=1):
        # A marker is a line of its own; one quoted in prose or inline code is text.
        begin, end = _BEGIN.fullmatch(line.strip()), _END.fullmatch(line.strip())
        if begin is not None:
            if open_name is not None:
                index.marker_errors.append(
                    (display, open_line, f"generated block {open_name!r} has no end marker before line {n}")
                )
            open_name, open_line = begin.group(1), n
        elif end is not None:
            if open_name is None or end.group(1) != open_name:
                index.marker_errors.append(
                    (display, n, f"end marker {end.group(1)!r} does not close an open begin marker")
                )
            else:
                content = "\n".join(lines[open_line:n - 1])
                index.blocks.append(GeneratedBlock(open_name, path, display, open_line, n, content))
            open_name = None
    if open_name is not None:
        index.marker_errors.append((display, open_line, f"generated block {open_name!r} is never closed"))


def read_docs(root: Path, display: str) -> DocsIndex:
    """Index every ``*.md`` file under ``root`` (sorted, so messages are stable)."""
    index = DocsIndex(root=root, display=display)
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root).as_posix()
        shown = f"{display.rstrip('/')}/{rel}"
        lines = path.read_text(encoding="utf-8").splitlines()
        _read_tables(lines, shown, index)
        _read_blocks(path, lines, shown, index)
    return index
