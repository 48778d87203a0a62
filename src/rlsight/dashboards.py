"""Dashboard panels over the driver's Prometheus endpoint, built from rlsight's metric names.

Each :class:`Panel` holds the PromQL of one chart. The names in it come from the constants
the recorders use, translated the way OpenTelemetry's Prometheus exporter translates them
(dots to underscores, the unit as a suffix, ``_total`` on counters), so the panels cannot
drift from what the endpoint serves. ``docs/dashboards.md`` lists them and carries the
Grafana dashboard JSON that :func:`grafana_dashboard` builds; ``rlsight check`` regenerates
both and fails on a difference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from rlsight._doc_tables import markdown_table
from rlsight.step_summary import (
    GOODPUT_CONTRIBUTOR_SECONDS,
    GOODPUT_PCT,
    GOODPUT_SECONDS,
    PROCESS_SECONDS,
)

__all__ = [
    "BUSY",
    "PANELS",
    "Panel",
    "fleet_utilisation",
    "grafana_dashboard",
    "panels_table",
    "prometheus_name",
]

#: OpenTelemetry's unit -> Prometheus suffix for the units rlsight's metrics use; an
#: annotation in braces (``{token}``) and ``1`` add no suffix.
_UNIT_SUFFIX: Final = {"s": "seconds", "%": "percent", "By": "bytes", "ms": "milliseconds"}
_INVALID: Final = re.compile(r"[^a-zA-Z0-9_:]")
_GENERATION_TOKENS: Final = "rl.engine.generation_tokens"
#: Grafana's rate window variable; the panels table shows it as Grafana users will see it.
RATE: Final = "$__rate_interval"


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The name OpenTelemetry's Prometheus exporter gives metric ``name`` of ``unit``/``kind``
    (``rl.goodput.seconds``, ``s``, ``counter`` -> ``rl_goodput_seconds_total``)."""
    out = _INVALID.sub("_", name)
    suffix = _UNIT_SUFFIX.get(unit, "")
    if suffix and not out.endswith("_" + suffix):
        out += "_" + suffix
    if kind == "counter" and not out.endswith("_total"):
        out += "_total"
    return out


_SECONDS: Final = prometheus_name(GOODPUT_SECONDS, "s", "counter")
_CONTRIB: Final = prometheus_name(GOODPUT_CONTRIBUTOR_SECONDS, "s", "counter")
_PCT: Final = prometheus_name(GOODPUT_PCT, "%", "gauge")
_TOKENS: Final = prometheus_name(_GENERATION_TOKENS, "{token}", "counter")
_PROCESS: Final = prometheus_name(PROCESS_SECONDS, "s", "counter")
#: The buckets that count as busy in the fleet view: the process was doing work, useful or not.
BUSY: Final = ("productive", "overhead", "wasted")


def fleet_utilisation(window: str | None = RATE) -> str:
    """PromQL of each worker group's busy share of its processes' wall time: over the rate
    ``window``, or (``None``) over the run so far."""
    busy = f'{_PROCESS}{{rl_bucket=~"{"|".join(BUSY)}"}}'
    if window is None:
        return f"sum by (rl_worker_group) ({busy}) / sum by (rl_worker_group) ({_PROCESS})"
    return (f"sum by (rl_worker_group) (rate({busy}[{window}])) / "
            f"sum by (rl_worker_group) (rate({_PROCESS}[{window}]))")


@dataclass(frozen=True, slots=True)
class Panel:
    """One chart: its PromQL, the series legend, the unit and whether series stack."""

    title: str
    expr: str
    legend: str
    unit: str
    """A Grafana unit id (``percentunit`` is a 0-1 fraction shown as %)."""
    stacked: bool
    description: str


PANELS: Final[tuple[Panel, ...]] = (
    Panel(
        "Step time by bucket",
        f"sum by (rl_bucket) (increase({_SECONDS}[{RATE}])) / ignoring(rl_bucket) group_left "
        f"sum(increase({_SECONDS}[{RATE}]))",
        "{{rl_bucket}}", "percentunit", True,
        "Share of the driver's step wall time in each bucket (productive, overhead, idle, "
        "wasted, unattributed); the stack adds up to 100%.",
    ),
    Panel(
        "Goodput of the last step", _PCT, "goodput", "percent", False,
        "The last step's productive share of its wall time (rlsight/goodput_pct).",
    ),
    Panel(
        "Idle by reason",
        f'sum by (rl_contributor) (rate({_CONTRIB}{{rl_bucket="idle"}}[{RATE}]))',
        "{{rl_contributor}}", "percentunit", True,
        "Seconds of idle per second of run, by efficiency category or span name.",
    ),
    Panel(
        "Overhead by span",
        f'sum by (rl_contributor) (rate({_CONTRIB}{{rl_bucket="overhead"}}[{RATE}]))',
        "{{rl_contributor}}", "percentunit", True,
        "Seconds of overhead per second of run, by span name (refit, checkpoint, validation).",
    ),
    Panel(
        "Fleet utilisation by worker group", fleet_utilisation(), "{{rl_worker_group}}",
        "percentunit", False,
        "Busy share (productive, overhead or wasted) of each worker group's processes, from "
        "the busy time every process records (rl.goodput.process.seconds); the driver's "
        "endpoint serves the driver's own, a collector all processes'.",
    ),
    Panel(
        "Engine generation tokens/s",
        f"sum by (rl_engine_name) (rate({_TOKENS}[{RATE}]))",
        "{{rl_engine_name}}", "short", False,
        "Generation tokens per second from the engine deltas the driver records.",
    ),
)


def panels_table() -> str:
    """The Markdown table of :data:`PANELS` for docs/dashboards.md."""
    rows = [[p.title, f"`{p.expr}`", "stacked" if p.stacked else "lines", p.description]
            for p in PANELS]
    return markdown_table(["panel", "PromQL", "style", "what it shows"], rows)


def grafana_dashboard() -> dict[str, Any]:
    """A Grafana dashboard (JSON model) with one time-series panel per :data:`PANELS` entry.

    Import it in Grafana (Dashboards -> New -> Import) and pick the Prometheus data source
    that scrapes the driver.
    """
    panels = []
    for i, p in enumerate(PANELS):
        custom: dict[str, Any] = {"fillOpacity": 60 if p.stacked else 10,
                                  "stacking": {"mode": "normal" if p.stacked else "none"}}
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": p.title,
            "description": p.description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": p.unit, "custom": custom}, "overrides": []},
            "targets": [{"refId": "A", "expr": p.expr, "legendFormat": p.legend}],
        })
    return {
        "title": "rlsight: goodput",
        "uid": "rlsight-goodput",
        "tags": ["rlsight"],
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
        }]},
        "panels": panels,
    }


def grafana_dashboard_block() -> str:
    """The dashboard JSON as a fenced block, for docs/dashboards.md's generated block."""
    return "```json\n" + json.dumps(grafana_dashboard(), indent=2) + "\n```"
