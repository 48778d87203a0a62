"""The HTML report: one self-contained page that opens offline.

Sections: run summary, stacked buckets per step, startup waterfall, fleet utilisation,
stragglers, top spans by total and self time, engine tokens per second, span volume. Charts
are drawn by Chart.js, inlined from ``vendor/`` (no CDN). Every string that came from a span
(names, groups, run ids) reaches the page either through :func:`html.escape` in a table cell
or inside the JSON data block, where ``<``, ``>`` and ``&`` are written as ``\\u003c`` etc., so
a span named ``<script>...`` is shown as text and never parsed as markup. Chart.js draws
labels on a canvas, which has no markup at all.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any, Final

from rlsight.analysis.model import RunReport
from rlsight.render._format import (
    clock,
    count,
    engine_outcomes,
    error_line,
    pct,
    postmortem_rows,
    postmortem_summary,
    secs,
    short_time,
    span_label,
    startup_line,
    step_digits,
    summary_line,
    volume_lines,
)

__all__ = ["MAX_TABLE_ROWS", "render_html"]

#: Longest table the page shows (top spans, stragglers); the JSON has everything.
MAX_TABLE_ROWS: Final = 40
#: Ranks listed under "least utilised".
_LEAST_UTILISED: Final = 12

_PARTS: Final = ("productive", "overhead", "idle", "wasted", "unattributed")
_COLORS: Final = {"productive": "#2e7d32", "overhead": "#f9a825", "idle": "#90a4ae",
                  "wasted": "#c62828", "unattributed": "#e0e0e0"}

_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d232a;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.muted{color:#5f6b76} .warn{color:#b45309} .bad{color:#b91c1c}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
th:first-child,td:first-child{text-align:left} th{background:#f0f2f4}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{background:#fff;border:1px solid #e3e6e9;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:20px}
.chart{position:relative;height:320px;background:#fff;border:1px solid #e3e6e9;border-radius:6px;padding:8px}
.chart.small{height:220px}
"""

_SCRIPT: Final = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push(String(e.message));
    document.body.setAttribute('data-errors', String(errors.length));
  });
  var data = JSON.parse(document.getElementById('rlsight-data').textContent);
  var rendered = 0;
  function chart(id, config) {
    var canvas = document.getElementById(id);
    if (!canvas) { return; }
    config.options = Object.assign({animation: false, responsive: true, maintainAspectRatio: false},
                                   config.options || {});
    new Chart(canvas, config);
    canvas.setAttribute('data-rendered', 'true');
    rendered += 1;
  }
  var colors = data.colors;
  if (data.steps.labels.length) {
    chart('steps-chart', {type: 'bar', data: {labels: data.steps.labels, datasets:
      data.steps.series.map(function (s) {
        return {label: s.name, data: s.values, backgroundColor: colors[s.name], stack: 'wall'};
      })},
      options: {scales: {x: {stacked: true, title: {display: true, text: 'step'}},
                         y: {stacked: true, title: {display: true, text: 'seconds'}}}}});
  }
  if (data.startup.labels.length) {
    chart('startup-chart', {type: 'bar', data: {labels: data.startup.labels, datasets: [
      {label: 'seconds from run start', data: data.startup.ranges, backgroundColor: '#5c6bc0'}]},
      options: {indexAxis: 'y', scales: {x: {title: {display: true, text: 'seconds from run start'}}}}});
  }
  if (data.fleets.labels.length) {
    chart('fleets-chart', {type: 'bar', data: {labels: data.fleets.labels, datasets:
      data.fleets.series.map(function (s) {
        return {label: s.name, data: s.values, backgroundColor: colors[s.name], stack: 'wall'};
      })},
      options: {indexAxis: 'y', scales: {x: {stacked: true, max: 100, title: {display: true,
                text: '% of run wall (device-weighted)'}}, y: {stacked: true}}}});
  }
  if (data.engine.labels.length) {
    chart('engine-chart', {type: 'line', data: {labels: data.engine.labels, datasets: [
      {label: 'generation tokens/s', data: data.engine.values, borderColor: '#00838f', pointRadius: 0}]},
      options: {scales: {x: {title: {display: true, text: 'step'}}}}});
  }
  if (data.volume.labels.length) {
    chart('volume-chart', {type: 'line', data: {labels: data.volume.labels, datasets:
      data.volume.series.map(function (s) { return {label: s.name, data: s.values, pointRadius: 0}; })},
      options: {scales: {y: {type: 'logarithmic', title: {display: true, text: 'spans per step'}}}}});
  }
  document.body.setAttribute('data-charts-rendered', String(rendered));
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(headers: list[str], rows: list[list[object]], *, css: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{_e(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _json_for_script(data: Any) -> str:
    """JSON that cannot end a ``<script>`` element or open a comment inside it."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _bar(start_ns: int, duration_ns: int) -> list[float]:
    """A floating bar [start, end] in seconds (the waterfall's encoding)."""
    return [start_ns / 1e9, (start_ns + duration_ns) / 1e9]


def _chart_data(report: RunReport) -> dict[str, Any]:
    names = _PARTS
    steps = report.steps
    st = report.startup
    fleet_rows = [(g.worker_group, {"productive": g.productive, "overhead": g.overhead, "idle": g.idle,
                                    "wasted": g.wasted, "unattributed": g.unattributed})
                  for g in report.fleets.groups]
    volume = [g for g in report.volume.groups if any(g.per_step)]
    engine = report.engine.steps if report.engine is not None else []
    # One bar per worker group: its slowest rank's load, which is when the group is ready.
    loads = [next(x for x in st.load_model if (x.worker_group, x.rank) == (g.worker_group, g.max_rank))
             for g in st.load_model_groups]
    return {
        "colors": _COLORS,
        "steps": {
            "labels": [s.step for s in steps],
            "series": [{"name": n, "values": [round(s.buckets.get(n) / 1e9, 6) for s in steps]}
                       for n in names],
        },
        "startup": {
            "labels": [p.phase for p in st.phases]
            + [f"load_model {x.worker_group} (slowest: rank {x.rank})" for x in loads],
            "ranges": [_bar(p.start_offset_ns, p.duration_ns) for p in st.phases]
            + [_bar(x.start_offset_ns, x.duration_ns) for x in loads],
        },
        "fleets": {
            "labels": [g for g, _ in fleet_rows],
            "series": [{"name": n, "values": [round(100 * f[n], 3) for _, f in fleet_rows]} for n in names],
        },
        "engine": {"labels": [x.step for x in engine],
                   "values": [round(x.tokens_per_s, 3) for x in engine]},
        # Zero counts become gaps: the axis is logarithmic.
        "volume": {"labels": [s.step for s in steps],
                   "series": [{"name": g.group or "(no group)", "values": [v or None for v in g.per_step]}
                              for g in volume]},
    }


def _sections(report: RunReport) -> list[str]:
    s = report.summary
    d = step_digits(report)
    b = s.buckets
    out = [f"<h1>{_e(summary_line(report))}</h1>",
           f'<p class="muted">{_e(startup_line(report))}</p>']
    cards = [("goodput", f"{s.goodput_pct:.1f}%"), ("goodput in steps", f"{s.step_goodput_pct:.1f}%"),
             ("wall", clock(b.wall_ns)), ("steps", str(s.steps)), ("spans", count(s.spans)),
             ("skipped records", str(s.skipped))]
    out.append('<div class="cards">' + "".join(
        f'<div class="card"><span class="muted">{_e(k)}</span><b>{_e(v)}</b></div>' for k, v in cards
    ) + "</div>")
    out.append(_table(["run wall", *_PARTS, "wall"],
                      [["seconds", *(secs(b.get(n), d) for n in (*_PARTS, "wall"))],
                       ["share", *(pct(b.fraction(n)) for n in _PARTS), "100%"]]))
    out.append("<h2>Per step</h2>")
    if report.steps and report.step_summary is not None:
        out.append('<div class="chart"><canvas id="steps-chart" role="img" '
                   'aria-label="stacked seconds per bucket for each step"></canvas></div>')
        ss = report.step_summary
        out.append(_table(["per step", *_PARTS, "wall"],
                          [["median s", *(secs(getattr(ss, n).median_ns, d) for n in (*_PARTS, "wall"))],
                           ["p90 s", *(secs(getattr(ss, n).p90_ns, d) for n in (*_PARTS, "wall"))]]))
        out.append(_table(["decided by", "bucket", "seconds per step present", "steps present"],
                          [[span_label(c.name), c.bucket, secs(c.attributed_ns / max(1, c.steps_present), d),
                            f"{c.steps_present} of {len(report.steps)}"] for c in report.top]))
    else:
        out.append('<p class="warn">No rl.step spans: there is no per-step breakdown.</p>')
    out.append("<h2>Startup</h2>")
    st = report.startup
    if st.phases or st.load_model:
        out.append('<div class="chart small"><canvas id="startup-chart" role="img" '
                   'aria-label="startup waterfall"></canvas></div>')
    out.append(_table(["phase", "seconds", "spans"],
                      [[t.phase, secs(t.duration_ns, d), t.spans] for t in st.phase_totals]
                      + [["(unaccounted)", secs(st.unaccounted_ns, d), ""]]))
    if st.load_model_groups:
        out.append(_table(["load_model", "ranks", "slowest rank", "max s", "median s"],
                          [[g.worker_group, g.ranks, g.max_rank, secs(g.max_ns, d), secs(g.median_ns, d)]
                           for g in st.load_model_groups]))
    out.append("<h2>Fleets</h2>")
    if report.fleets.groups:
        out.append('<div class="chart small"><canvas id="fleets-chart" role="img" '
                   'aria-label="fleet utilisation"></canvas></div>')
        out.append(_table(["group", "ranks", "devices", "utilisation", "productive", "overhead", "wasted",
                           "idle", "unattributed"],
                          [[g.worker_group, g.ranks, g.devices, pct(g.utilisation), pct(g.productive),
                            pct(g.overhead), pct(g.wasted), pct(g.idle), pct(g.unattributed)]
                           for g in report.fleets.groups]))
        ranks = sorted(report.fleets.ranks, key=lambda r: (r.utilisation, r.worker_group, r.rank))
        out.append(f'<p class="muted">Least utilised ranks (of {len(ranks)}):</p>')
        out.append(_table(["rank", "devices", "timelines", "utilisation", "productive", "overhead", "idle"],
                          [[f"{r.worker_group}/{r.rank}", r.devices, r.timelines, pct(r.utilisation),
                            pct(r.buckets.fraction("productive")), pct(r.buckets.fraction("overhead")),
                            pct(r.buckets.fraction("idle"))] for r in ranks[:_LEAST_UTILISED]]))
    out.append("<h2>Stragglers</h2>")
    sg = report.stragglers
    out.append(f'<p class="muted">k = {sg.k:g} MADs; {sg.checks} comparison(s) with enough evidence, '
               f"{len(sg.findings)} straggler(s).</p>")
    if sg.findings:
        out.append(_table(["step", "rank", "span", "time", "median", "MAD", "excess (MADs)"],
                          [[f.step, f"{f.worker_group}/{f.rank}", f.name, short_time(f.duration_ns),
                            short_time(f.median_ns), short_time(f.mad_ns), f"{f.excess_mads:.1f}"]
                           for f in sg.findings[:MAX_TABLE_ROWS]], css="warn"))
    if sg.pairs:
        out.append(_table(["group", "span", "slower rank", "slower in", "median gap"],
                          [[p.worker_group, p.name, f"{p.slower_rank} (vs {p.faster_rank})",
                            f"{p.slower_steps}/{p.steps} steps",
                            f"{short_time(p.median_gap_ns)} ({p.median_gap_pct:+.1f}%)"]
                           for p in sg.pairs[:MAX_TABLE_ROWS]]))
    if sg.insufficient:
        out.append(_table(["group", "span", "insufficient evidence", "steps"],
                          [[i.worker_group, i.name, i.reason, i.steps]
                           for i in sg.insufficient[:MAX_TABLE_ROWS]]))
    out.append("<h2>Top spans</h2>")
    by_total = report.top_spans[:MAX_TABLE_ROWS]
    out.append(_table(["span (by total)", "count", "total s", "self s", "errors"],
                      [[x.name, x.count, secs(x.total_ns, d), secs(x.self_ns, d), x.errors]
                       for x in by_total]))
    by_self = sorted(report.top_spans, key=lambda x: (-x.self_ns, x.name))[:MAX_TABLE_ROWS]
    out.append(_table(["span (by self time)", "count", "self s", "total s"],
                      [[x.name, x.count, secs(x.self_ns, d), secs(x.total_ns, d)] for x in by_self]))
    out.append("<h2>Engine</h2>")
    if report.engine is not None and report.engine.steps:
        out.append('<div class="chart small"><canvas id="engine-chart" role="img" '
                   'aria-label="engine tokens per second per step"></canvas></div>')
        outcomes = engine_outcomes(report.engine).lstrip(", ")
        if outcomes:
            out.append(f'<p class="muted">{_e(outcomes)}</p>')
    else:
        out.append('<p class="muted">No engine metrics (rl.engine.generation_tokens) in this run.</p>')
    out.append("<h2>Span volume</h2>")
    if report.steps:
        out.append('<div class="chart small"><canvas id="volume-chart" role="img" '
                   'aria-label="spans per group per step"></canvas></div>')
    out.append("".join(f'<p class="{"bad" if line.startswith("WARNING") else "muted"}">{_e(line)}</p>'
                       for line in volume_lines(report)))
    out.append(_table(["group", "in per_step", "spans", "outside steps", "per step (median)",
                       "scales with prompts", "flagged"],
                      [[g.group or "(no group)", {True: "yes", False: "no", None: "?"}[g.in_per_step],
                        g.spans, g.outside_steps, count(sorted(g.per_step)[len(g.per_step) // 2])
                        if g.per_step else "-", {True: "yes", False: "no", None: "?"}[g.scales_with_prompts],
                        "YES" if g.flagged else ""] for g in report.volume.groups]))
    out.append("<h2>Open at end</h2>")
    pm = report.postmortem
    errors = error_line(pm)
    if errors is not None:
        out.append(f'<p class="bad">{_e(errors)}</p>')
    summary = postmortem_summary(pm)
    recorded = pm is not None and pm.start_records
    out.append(f'<p class="{"bad" if recorded and summary != "none" else "muted"}">{_e(summary)}</p>')
    if pm is not None and pm.processes:
        out.append(_table(["process", "pid", "ended", "doing last"],
                          [[f"{p.worker_group}/{p.rank}", p.pid if p.pid is not None else "?", ended, doing]
                           for p, ended, doing in postmortem_rows(pm)[:MAX_TABLE_ROWS]],
                          css="warn"))
        if pm.stall_records:
            out.append(f'<p class="bad">The stall watchdog fired {len(pm.stall_records)} time(s): '
                       + ", ".join(_e(r) for r in pm.stall_records) + "</p>")
        opened = [(p, o) for p in pm.processes for o in p.open]
        if opened:
            out.append(_table(["process", "span never ended", "group", "open for", "step", "parents"],
                              [[f"{p.worker_group}/{p.rank}", o.name, o.group or "", clock(o.age_ns),
                                "" if o.step is None else o.step, " < ".join(reversed(o.chain))]
                               for p, o in opened[:MAX_TABLE_ROWS]]))
    if s.skipped_examples or report.notes:
        out.append("<h2>Notes</h2>")
        out.append("".join(f'<p class="warn">skipped {_e(x)}</p>' for x in s.skipped_examples))
        out.append("".join(f'<p class="warn">{_e(n)}</p>' for n in report.notes))
    return out


def render_html(report: RunReport) -> str:
    """The report as one HTML document with the chart library and the data inlined."""
    chart_js = (resources.files("rlsight.render") / "vendor" / "chart.umd.min.js").read_text("utf-8")
    title = _e(f"rlsight report {report.summary.run_id or ''}".strip())
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{title}</title>"
        f"<style>{_CSS}</style></head><body><main>"
        + "".join(_sections(report))
        + "</main>"
        f'<script type="application/json" id="rlsight-data">{_json_for_script(_chart_data(report))}</script>'
        f"<script>{chart_js}</script><script>{_SCRIPT}</script></body></html>\n"
    )
