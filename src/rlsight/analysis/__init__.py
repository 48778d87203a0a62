"""Where did the time go: goodput rollup, fleets, stragglers, startup, volume, wasted work.

Import this package explicitly (it needs numpy, from the ``analysis`` extra)::

    from rlsight.analysis import analyze_run
    report = analyze_run("rlsight-runs/7f3a91c2")
    print(report.summary.goodput_pct)

The result is a plain :class:`~rlsight.analysis.model.RunReport`; ``report.to_dict()`` is the
``rlsight report --json`` document. ``docs/goodput.md`` defines every number.
:func:`diff_reports` compares two reports (``rlsight diff``, ``docs/diff.md``).
:func:`analyze_columns` analyses :class:`SpanColumns`, the analysis's own projection of a run
(:func:`read_span_columns`, :func:`span_columns_from_records`), for a caller that reads a run
once and analyses it several ways.
"""

from __future__ import annotations

from rlsight.analysis._read import read_span_columns
from rlsight.analysis._run import analyze_columns, analyze_run, analyze_spans
from rlsight.analysis.columns import SpanColumns, span_columns_from_records
from rlsight.analysis.diff import RunDiff, diff_reports
from rlsight.analysis.model import SCHEMA_VERSION, Buckets, RunReport

__all__ = [
    "SCHEMA_VERSION",
    "Buckets",
    "RunDiff",
    "RunReport",
    "SpanColumns",
    "analyze_columns",
    "analyze_run",
    "analyze_spans",
    "diff_reports",
    "read_span_columns",
    "span_columns_from_records",
]
