"""Markdown tables generated from rlsight's live registries, for the docs' generated blocks.

Each generator returns the exact text that belongs between
``<!-- rlsight:begin NAME -->`` and ``<!-- rlsight:end NAME -->``. They import rlsight's own
modules (never the checked project's), so a table always describes the installed rlsight.
The drift checker sits above the instrumentation: it imports the modules whose registries
it prints (inside each generator, so ``rlsight check`` without ``--write-docs`` and the
guards that need no table load none of them); nothing of the instrumentation imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from rlsight._doc_tables import METRIC_COLUMNS, markdown_table

__all__ = ["GENERATORS", "generate", "metrics_table"]


_OWN_NAMESPACE: Final = "rl"


def _own_groups() -> set[str]:
    from rlsight.groups import registered_groups

    return {n for n, (ns, _g) in registered_groups().items() if ns == _OWN_NAMESPACE}


def span_groups_table() -> str:
    """Every registered span group: namespace, bucket, kind, the presets that include it."""
    from rlsight.groups import registered_groups, registered_presets, resolve_span_group_spec

    # rlsight's own namespace only: a process that also registered other libraries' groups
    # (a test, a user's trainer) must generate the same table.
    presets = {p: v for p, v in registered_presets().items() if v[0] == _OWN_NAMESPACE}
    members = {p: resolve_span_group_spec([p]).enabled for p in presets}
    rows = []
    for name, (namespace, group) in registered_groups().items():
        if namespace != _OWN_NAMESPACE:
            continue
        kind = "umbrella" if group.umbrella else ("leaf" if group.bucket is not None else "detail")
        bucket = f"`{group.bucket.value}`" if group.bucket is not None else "—"
        if name == "efficiency":
            bucket = "from the category"
        in_presets = ", ".join(f"`{p}`" for p in sorted(presets) if name in members[p]) or "—"
        rows.append([f"`{name}`", f"`{namespace}`", bucket, kind, in_presets, group.description])
    return markdown_table(["group", "namespace", "bucket", "kind", "presets", "description"], rows)


def presets_table() -> str:
    """Every registered preset and the groups it resolves to, plus the ``all`` wildcard."""
    from rlsight.groups import ALL, registered_presets, resolve_span_group_spec

    rows = []
    for name, (namespace, _members) in sorted(registered_presets().items()):
        if namespace != _OWN_NAMESPACE:
            continue
        groups = sorted(g for g in resolve_span_group_spec([name]).enabled if g in _own_groups())
        rows.append([f"`{name}`", f"`{namespace}`", str(len(groups)), ", ".join(f"`{g}`" for g in groups)])
    rows.append([f"`{ALL}`", "reserved", "every", "every group registered when the spec is resolved"])
    return markdown_table(["preset", "namespace", "groups", "members"], rows)


def configuration_table() -> str:
    """Every ``TelemetryConfig`` field: env variable, OTel fallback, type, default, meaning."""
    from rlsight.config import SETTINGS

    types = {
        "bool": "bool",
        "int": "int",
        "str": "str",
        "optional_str": "str or none",
        "groups": "list of names",
        "protocol": "`http/protobuf`, `http/json` or `grpc`",
        "optional_protocol": "protocol or none",
        "attributes": "mapping",
        "port": "int or none",
    }
    rows = [
        [
            f"`{s.name}`",
            f"`{s.env}`",
            ", ".join(f"`{v}`" for v in s.otel_env) or "—",
            types.get(s.kind, s.kind),
            s.default,
            s.doc,
        ]
        for s in SETTINGS
    ]
    return markdown_table(["field", "env var", "OTel fallback", "type", "default", "description"], rows)


def identity_table() -> str:
    """The per-process identity variables and the resource attributes they set."""
    from rlsight._identity import IDENTITY_ENV

    rows = [[f"`{env}`", f"`{attr}`", default, doc] for env, attr, default, doc in IDENTITY_ENV]
    return markdown_table(["env var", "resource attribute", "default", "description"], rows)


def efficiency_categories_table() -> str:
    """rlsight's built-in efficiency categories, with their span name and bucket."""
    from rlsight.spans import BUILTIN_EFFICIENCY_CATEGORIES, BUILTIN_UNBUCKETED_EFFICIENCY_CATEGORIES

    rows = [
        [f"`{c}`", f"`rl.efficiency.{c.replace('/', '.')}`", f"`{c.split('/', 1)[0]}`"]
        for c in sorted(BUILTIN_EFFICIENCY_CATEGORIES)
    ] + [
        [f"`{c}`", f"`rl.efficiency.{c.replace('/', '.')}`", "none (`bucketed=False`)"]
        for c in sorted(BUILTIN_UNBUCKETED_EFFICIENCY_CATEGORIES)
    ]
    return markdown_table(["category", "span", "bucket"], rows)


def metrics_table() -> str:
    """The Markdown table of every metric rlsight itself records (docs/metrics.md).

    It covers the efficiency, startup, GenAI and engine metrics; groups declared with
    :func:`rlsight.metrics.register_metric_group` are listed by
    :func:`rlsight.metrics.metric_groups_table`.
    """
    return markdown_table(METRIC_COLUMNS, _builtin_metric_rows())


def _builtin_metric_rows() -> list[list[str]]:
    from rlsight._semconv import EFFICIENCY_CATEGORY, EFFICIENCY_MEASUREMENT
    from rlsight.engines import ENGINE_SERIES
    from rlsight.metrics import (
        EFFICIENCY_PCT,
        EFFICIENCY_SECONDS,
        GEN_AI_CLIENT_DURATION,
        GEN_AI_SERVER_DURATION,
        GEN_AI_TOKENS,
        SKIPPED,
        SKIPPED_METRIC,
        SKIPPED_REASON,
    )
    from rlsight.step_summary import (
        GOODPUT_CONTRIBUTOR_SECONDS,
        GOODPUT_PCT,
        GOODPUT_SECONDS,
        PROCESS_SECONDS,
    )

    engine_attrs = "`rl.step`, `rl.engine.name`"
    rows = [
        [f"`{EFFICIENCY_SECONDS}`", "counter", "`s`",
         f"`rl.step`, `{EFFICIENCY_CATEGORY}`, `{EFFICIENCY_MEASUREMENT}`",
         "—", "Seconds in each efficiency category during the step (`tee_step_metrics`); "
         "`rl.efficiency.measurement` is `span` or `reported` (`record_efficiency_seconds`)."],
        [f"`{EFFICIENCY_PCT}`", "gauge", "`%`",
         f"`rl.step`, `{EFFICIENCY_CATEGORY}`, `{EFFICIENCY_MEASUREMENT}`, `rl.window`", "—",
         "Share of the window's wall time in the category; `rl.window` says step or run."],
        [f"`{SKIPPED}`", "counter", "`{point}`",
         f"`{SKIPPED_METRIC}`, `{SKIPPED_REASON}`, + the record's", "—",
         "Declared values left out (reason `missing`, `not_a_number`, `not_finite`, "
         "`negative`); never recorded as 0."],
        [f"`{GOODPUT_SECONDS}`", "counter", "`s`", "`rl.step`, `rl.bucket`", "—",
         "Seconds of the driver's step in each bucket (`unattributed` too), as each step ends."],
        [f"`{GOODPUT_PCT}`", "gauge", "`%`", "`rl.step`", "—",
         "The step's productive share of its wall time (`rlsight/goodput_pct`)."],
        [f"`{GOODPUT_CONTRIBUTOR_SECONDS}`", "counter", "`s`",
         "`rl.step`, `rl.bucket`, `rl.contributor`", "—",
         "Seconds of the step a span name or efficiency category decided (idle, overhead, "
         "wasted)."],
        [f"`{PROCESS_SECONDS}`", "counter", "`s`", "`rl.bucket`, `rl.worker_group`, `rl.rank`", "—",
         "Seconds of each process's wall time in each bucket (`unattributed` too), by its own "
         "spans, every 10 s and at flush/shutdown: fleet utilisation."],
        ["`rl.setup.duration`", "histogram", "`s`", "`phase`", "—",
         "Wall time of each startup phase (`setup_span`)."],
        ["`rl.telemetry.dropped_spans`", "counter", "`{span}`",
         "`rl.telemetry.sink`, `rl.telemetry.reason`", "—",
         "Spans an exporter dropped (sink `store` or `otlp`; reason `lag`, `queue_full`, "
         "`export_failed`, `shutdown_timeout`...); see [reliability](reliability.md)."],
        [f"`{GEN_AI_CLIENT_DURATION}`", "histogram", "`s`",
         "`gen_ai.request.model`, `gen_ai.operation.name`, `gen_ai.provider.name`", "—",
         "Duration of one inference call as the caller timed it (`record_inference`)."],
        [f"`{GEN_AI_SERVER_DURATION}`", "histogram", "`s`",
         "`gen_ai.request.model`, `gen_ai.operation.name`, `gen_ai.provider.name`", "—",
         "Duration of one request as the model server timed it "
         "(`record_inference(..., side=\"server\")`)."],
        [f"`{GEN_AI_TOKENS}`", "histogram", "`{token}`",
         "`gen_ai.token.type`, `gen_ai.request.model`, `gen_ai.operation.name`, "
         "`gen_ai.provider.name`", "—",
         "Input and output tokens of one inference call (`record_inference`, client side)."],
    ]
    for spec in ENGINE_SERIES:
        extra = "".join(f", `{a}`" for a in spec.attributes)
        if spec.kind == "counter":
            rows.append([f"`{spec.name}`", "counter", f"`{spec.unit}`", engine_attrs + extra,
                         "—", spec.description + " Per-step delta."])
            continue
        if spec.kind == "gauge":
            rows.append([f"`{spec.name}`", "gauge", f"`{spec.unit}`", engine_attrs + extra,
                         "—", spec.description + f" Level, {spec.aggregate} over engines."])
            continue
        rows += [
            [f"`{spec.name}.count`", "counter", "`1`", engine_attrs + extra, "—",
             f"Observations of: {spec.description[0].lower()}{spec.description[1:]}"],
            [f"`{spec.name}.sum`", "counter", f"`{spec.unit}`", engine_attrs + extra, "—",
             f"Sum of the observations of `{spec.name}`."],
            [f"`{spec.name}.bucket`", "counter", "`1`", engine_attrs + extra + ", `rl.engine.le`",
             "—", "Observations at most `rl.engine.le` (cumulative, as Prometheus buckets)."],
        ]
    return rows


def _panels_table() -> str:
    from rlsight.dashboards import panels_table

    return panels_table()


def _grafana_dashboard_block() -> str:
    from rlsight.dashboards import grafana_dashboard_block

    return grafana_dashboard_block()


#: Block name -> the function returning the block's Markdown.
GENERATORS: Final[dict[str, Callable[[], str]]] = {
    "span-groups": span_groups_table,
    "presets": presets_table,
    "configuration": configuration_table,
    "identity": identity_table,
    "efficiency-categories": efficiency_categories_table,
    "metrics": metrics_table,
    "dashboard-panels": _panels_table,
    "grafana-dashboard": _grafana_dashboard_block,
}


def generate(name: str) -> str:
    """The Markdown for block ``name``.

    Raises:
        KeyError: no generator has that name.
    """
    return GENERATORS[name]()
