"""Markdown tables generated from rlsight's live registries, for the docs' generated blocks.

Each generator returns the exact text that belongs between
``<!-- rlsight:begin NAME -->`` and ``<!-- rlsight:end NAME -->``. They import rlsight's own
modules (never the checked project's), so a table always describes the installed rlsight.
``GENERATORS`` maps a block name to ``"module:function"`` so that a module owning another
table (metrics, say) can add a row here without this module importing it eagerly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

__all__ = ["GENERATORS", "generate", "markdown_table"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; ``|`` inside cells is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


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
    from rlsight.runtime import IDENTITY_ENV

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


#: Block name -> ``"module:function"`` returning the block's Markdown.
GENERATORS: Final[dict[str, str]] = {
    "span-groups": "rlsight.check.tables:span_groups_table",
    "presets": "rlsight.check.tables:presets_table",
    "configuration": "rlsight.check.tables:configuration_table",
    "identity": "rlsight.check.tables:identity_table",
    "efficiency-categories": "rlsight.check.tables:efficiency_categories_table",
    "metrics": "rlsight.metrics:metrics_table",
    "dashboard-panels": "rlsight.dashboards:panels_table",
    "grafana-dashboard": "rlsight.dashboards:grafana_dashboard_block",
}


def generate(name: str) -> str:
    """The Markdown for block ``name``.

    Raises:
        KeyError: no generator has that name.
    """
    module_name, _, attr = GENERATORS[name].partition(":")
    func: Callable[[], str] = getattr(importlib.import_module(module_name), attr)
    return func()
