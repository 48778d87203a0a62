"""``rlsight diff`` on a terminal and as an HTML page: the same tables, built once.

:func:`diff_sections` turns a :class:`~rlsight.analysis.diff.RunDiff` into titled tables of
plain strings; the terminal prints them with rich, the page writes them as escaped HTML
tables, so both say the same thing in the same words. Every string from a run (span names,
run ids, worker groups) reaches the page through :func:`html.escape`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from rlsight.render._format import count, pct, span_label

if TYPE_CHECKING:
    from rich.console import Console

    from rlsight.analysis.diff import RunDiff, RunSide, StatChange, ValueChange

__all__ = ["MAX_SPAN_ROWS", "DiffSection", "diff_sections", "diff_title", "render_diff", "render_diff_html"]

#: Span names the terminal and page list (largest change first); the JSON has all of them.
MAX_SPAN_ROWS: Final = 15
#: A bucket's "most changed" span is named only when it moved at least this much (0.5 ms):
#: below, it would print as +0.000s and name noise.
_SMALLEST_NS: Final = 500_000


@dataclass(frozen=True, slots=True)
class DiffSection:
    """One table of the diff: a header row, body rows, and lines printed under it."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    lines: list[str] = field(default_factory=list)


def _s(ns: float | None) -> str:
    """Seconds with enough decimals that sub-second phases do not print as 0.0."""
    if ns is None:
        return "-"
    value = ns / 1e9
    digits = 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3
    return f"{value:.{digits}f}s"


def _signed_s(ns: float | None) -> str:
    if ns is None:
        return "-"
    if abs(ns) < _SMALLEST_NS / 1000:
        return "0"
    return ("+" if ns > 0 else "-") + _s(abs(ns))


def _signed_pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.0f}%"


def _side(name: str, side: RunSide) -> str:
    label = f"{name} {side.run_id or '?'}"
    return label + (f" ({side.algorithm})" if side.algorithm else "")


def diff_title(diff: RunDiff) -> str:
    """The headline: both runs and the median step change."""
    head = f"{_side('A', diff.a)}  vs  {_side('B', diff.b)}"
    if diff.a.median_step_ns is not None and diff.b.median_step_ns is not None:
        head += (f"      median step {_s(diff.a.median_step_ns)} -> {_s(diff.b.median_step_ns)}"
                 + (f" ({_signed_pct(diff.step_change_pct)})" if diff.step_change_pct is not None else ""))
    return head


def _stat_row(c: StatChange) -> list[str]:
    return [span_label(c.name), f"{_s(c.a_median_ns)} / {_s(c.a_p90_ns)}",
            f"{_s(c.b_median_ns)} / {_s(c.b_p90_ns)}", _signed_s(c.change_ns), _signed_pct(c.change_pct)]


def _values(changes: list[ValueChange], fmt: str) -> list[list[str]]:
    def one(v: float | None) -> str:
        if v is None:
            return "-"
        return _s(v) if fmt == "s" else pct(v) if fmt == "pct" else count(v)

    def delta(v: ValueChange) -> str:
        if v.change is None:
            return "only in " + ("A" if v.b is None else "B")
        if fmt == "s":
            return _signed_s(v.change)
        if fmt == "pct":
            return f"{100 * v.change:+.0f} pts"
        return ("+" if v.change > 0 else "") + count(v.change)

    return [[v.name, one(v.a), one(v.b), delta(v)] for v in changes]


def diff_sections(diff: RunDiff) -> list[DiffSection]:
    """The diff as titled tables of plain strings, in the order both renderers show them."""
    out = []
    if diff.buckets:
        rows: list[list[str]] = []
        for b in diff.buckets:
            row = _stat_row(b.change)
            if b.driver is not None and abs(b.driver_change_ns) >= _SMALLEST_NS:
                row.append(f"{span_label(b.driver)} {_signed_s(b.driver_change_ns)}")
            else:
                row.append("")
            rows.append(row)
        out.append(DiffSection("per step (median / p90)",
                               ["bucket", "A", "B", "change", "%", "most changed"], rows))
    if diff.spans or diff.spans_only_in_a or diff.spans_only_in_b:
        lines: list[str] = []
        if len(diff.spans) > MAX_SPAN_ROWS:
            lines.append(f"... {len(diff.spans) - MAX_SPAN_ROWS} more span name(s) (see --json)")
        if diff.spans_only_in_a:
            lines.append("only in A: " + ", ".join(map(span_label, diff.spans_only_in_a)))
        if diff.spans_only_in_b:
            lines.append("only in B: " + ", ".join(map(span_label, diff.spans_only_in_b)))
        out.append(DiffSection("seconds per step of each span name (median / p90)",
                               ["span", "A", "B", "change", "%"],
                               [_stat_row(c) for c in diff.spans[:MAX_SPAN_ROWS]], lines))
    if len(diff.startup) > 1 or any(v.a or v.b for v in diff.startup):
        out.append(DiffSection("startup", ["phase", "A", "B", "change"], _values(diff.startup, "s")))
    if diff.fleets:
        out.append(DiffSection("fleet utilisation", ["worker group", "A", "B", "change"],
                               _values(diff.fleets, "pct")))
    other = [diff.stragglers, *(replace(v, name=f"{v.name} (steps)")
                         for v in diff.straggler_ranks[:MAX_SPAN_ROWS])]
    out.append(DiffSection("stragglers", ["", "A", "B", "change"], _values(other, "n")))
    if diff.volume:
        out.append(DiffSection("span volume (spans per step)", ["span group", "A", "B", "change"],
                               _values(diff.volume, "n")))
    if diff.engine is not None:
        out.append(DiffSection("engine throughput (median over steps)", ["", "A", "B", "change"],
                               _values([diff.engine], "n")))
    return out


def render_diff(diff: RunDiff, console: Console) -> None:
    """Print ``diff`` to ``console`` as the ``rlsight diff`` terminal layout."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text(diff_title(diff), style="bold"), soft_wrap=True)
    for section in diff_sections(diff):
        console.print()
        console.print(Text(section.title, style="bold"))
        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        for i, header in enumerate(section.headers):
            table.add_column(Text(header), justify="left" if i in (0, 5) else "right", no_wrap=i == 0)
        for row in section.rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: a span name is never markup
        console.print(table)
        for text in section.lines:
            console.print(Text("  " + text), soft_wrap=True)
    for note in diff.notes:
        console.print(Text(f"note  {note}", style="yellow"), soft_wrap=True)


_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d232a;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.warn{color:#b45309} .up{color:#b91c1c} .down{color:#2e7d32}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
th:first-child,td:first-child{text-align:left} th{background:#f0f2f4}
"""


def _cell(text: str, column: int) -> str:
    css = ""
    if column == 3 and text[:1] in "+-" and text[1:2].isdigit():
        css = ' class="up"' if text.startswith("+") else ' class="down"'
    return f"<td{css}>{html.escape(text, quote=True)}</td>"


def render_diff_html(diff: RunDiff) -> str:
    """``diff`` as one self-contained HTML page (no script, no external resource)."""
    e = html.escape
    parts = [f"<h1>{e(diff_title(diff))}</h1>"]
    for section in diff_sections(diff):
        head = "".join(f"<th>{e(h)}</th>" for h in section.headers)
        body = "".join("<tr>" + "".join(_cell(c, i) for i, c in enumerate(row)) + "</tr>"
                       for row in section.rows)
        parts.append(f"<h2>{e(section.title)}</h2><table><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table>")
        parts.extend(f"<p>{e(text)}</p>" for text in section.lines)
    if diff.notes:
        parts.append("<h2>Notes</h2>" + "".join(f'<p class="warn">{e(n)}</p>' for n in diff.notes))
    title = e(f"rlsight diff {diff.a.run_id or 'A'} vs {diff.b.run_id or 'B'}")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{title}</title>"
        f"<style>{_CSS}</style></head><body><main>" + "".join(parts) + "</main></body></html>\n"
    )
