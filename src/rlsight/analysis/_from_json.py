"""Rebuild frozen dataclasses from their ``dataclasses.asdict`` JSON shape.

Kept apart from the report model so the model holds only what a report *is*. The walker knows
dataclasses, ``X | None`` and ``list[X]``, which is all the report's fields use; any other value
is returned as JSON gave it (a ``dict[str, float]`` field needs nothing more).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

__all__ = ["from_json"]


def from_json(tp: Any, value: Any) -> Any:
    """Turn JSON-shaped ``value`` into an instance of type ``tp`` (dataclasses, lists, unions)."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: from_json(hints[f.name], value[f.name])
                     for f in dataclasses.fields(tp) if f.name in value})
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return from_json(inner[0], value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [from_json(item, v) for v in value]
    return value
