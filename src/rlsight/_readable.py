"""Reading an SDK span's attributes on the hot path, without the SDK's per-access copies.

``ReadableSpan.attributes`` wraps them in a new read-only proxy on every access, and a
``get`` through the proxy and ``BoundedAttributes`` costs about ten times a dict's. The
driver's span processors (the step roll-up, the start records) read attributes of every
span, so they read the plain dict the SDK keeps them in instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PlainAttributes", "span_attributes"]


class PlainAttributes(dict[str, Any]):
    """Attributes rlsight already cleaned, kept as a plain dict by a LeanSpan (rlsight._lean).

    ``_dict`` names the dict itself, as it names the storage of the SDK's
    ``BoundedAttributes``, so code that reads that storage directly (the store's encoder, the
    step roll-up's field reader) reads these the same way.
    """

    __slots__ = ()

    @property
    def _dict(self) -> dict[str, Any]:
        return self


def span_attributes(span: Any) -> Mapping[str, Any]:
    """The span's attributes as the SDK stores them, read without copying (never mutate it).

    Falls back to the public property if a future SDK stores them differently.
    """
    attrs = getattr(span, "_attributes", None)
    if type(attrs) is PlainAttributes:  # a LeanSpan's, until an attribute is set on it
        return attrs
    if attrs is None:
        return span.attributes or {}
    inner = getattr(attrs, "_dict", None)
    return inner if isinstance(inner, dict) else attrs
