"""The Markdown of generated doc tables: the table format and the metric tables' columns.

Pure formatting, importing nothing of rlsight, so the instrumentation modules that offer a
table to users (:func:`rlsight.metrics.metric_groups_table`, the dashboard panels) and the
drift checker that writes rlsight's own docs (:mod:`rlsight.check.tables`) share it without
importing one another.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["METRIC_COLUMNS", "markdown_table"]

#: Columns of every metric table: rlsight's own (docs/metrics.md) and declared groups'.
METRIC_COLUMNS: Final = ("metric", "kind", "unit", "attributes", "logger key", "description")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; ``|`` inside cells is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
