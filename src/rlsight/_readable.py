"""Reading an SDK span's attributes on the hot path, without the SDK's per-access copies.

``ReadableSpan.attributes`` wraps them in a new read-only proxy on every access, and a
``get`` through the proxy and ``BoundedAttributes`` costs about ten times a dict's. The
driver's span processors (the step roll-up, the start records) read attributes of every
span, so they read the plain dict the SDK keeps them in instead. A LeanSpan
(:mod:`rlsight._lean`) keeps the attributes rlsight cleaned as a plain ``dict`` (exactly
``dict``: it is how they are told from the SDK's ``BoundedAttributes``) until one is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["attributes_dict", "span_attributes"]


def span_attributes(span: Any) -> Mapping[str, Any]:
    """The span's attributes as the SDK stores them, read without copying (never mutate it).

    Falls back to the public property if a future SDK stores them differently.
    """
    attrs = getattr(span, "_attributes", None)
    if type(attrs) is dict:  # a LeanSpan's, until an attribute is set on it
        return attrs
    if attrs is None:
        return span.attributes or {}
    inner = getattr(attrs, "_dict", None)
    return inner if isinstance(inner, dict) else attrs


def attributes_dict(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A span's attributes as the ``dict`` a row holds: the roll-up's columns read every
    span's with ``dict.get`` in C-level passes, and one other mapping among them (the SDK's
    ``BoundedAttributes`` of every step span) sends all of a step's spans down the slow path.
    The SDK's own storage where it is one (``BoundedAttributes`` keeps a dict, frozen once
    the span ends), else a copy."""
    if type(attributes) is dict or attributes is None:
        return attributes or {}
    inner = getattr(attributes, "_dict", None)
    return inner if type(inner) is dict else dict(attributes)
