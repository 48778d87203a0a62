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

__all__ = ["span_attributes"]


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
