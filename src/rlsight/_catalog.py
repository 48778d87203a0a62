"""The run's catalog: span groups, presets, buckets and efficiency categories, as resolved at setup.

The registries are per process, so a reader that did not import a library would not know its
groups. ``setup_telemetry`` therefore writes this snapshot into ``manifest.json`` and the report
reads the run's own vocabulary from there, not from whatever the reading process imported.
"""

from __future__ import annotations

from typing import Any

from rlsight.buckets import Bucket
from rlsight.groups import REGISTRY, SpanGroupResolution, registered_groups, registered_presets
from rlsight.spans import efficiency_table

__all__ = ["run_catalog"]


def run_catalog(resolution: SpanGroupResolution | None = None) -> dict[str, Any]:
    """A JSON-ready snapshot of this process's vocabulary and what ``resolution`` enabled."""
    presets = {}
    with REGISTRY.lock:
        for name, (namespace, members) in registered_presets().items():
            groups = sorted(REGISTRY.resolve([name]).enabled)
            presets[name] = {"namespace": namespace, "members": list(members), "groups": groups}
    catalog: dict[str, Any] = {
        "span_groups": {
            name: {
                "namespace": namespace,
                "description": group.description,
                "bucket": group.bucket.value if group.bucket is not None else None,
                "umbrella": group.umbrella,
            }
            for name, (namespace, group) in registered_groups().items()
        },
        "presets": presets,
        "buckets": [b.value for b in Bucket],
        "efficiency_categories": {
            category: {"span": span_name, "bucket": bucket.value if bucket is not None else None}
            for category, (span_name, bucket) in sorted(efficiency_table().items())
        },
    }
    if resolution is not None:
        catalog["enabled_span_groups"] = sorted(resolution.enabled)
        catalog["pending_span_groups"] = list(resolution.pending)
    return catalog
