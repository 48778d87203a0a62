"""The JSON Schema of the ``rlsight report --json`` document, built from the report model.

The model's type hints are the only statement of each field's JSON type (an ``int`` field is
a JSON integer, ``float`` a number, ``X | None`` may be null), so the schema is generated from
them rather than written by hand, and published as ``report.schema.json`` next to this module.
A test checks that the published file is what the model gives and that real reports validate
against it; after changing the model, rewrite the file with::

    python -m rlsight.analysis.schema --write

Every field is required (the report always writes all of them); other properties are allowed,
because adding a field does not change ``schema_version``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Final, Union

from rlsight.analysis.model import SCHEMA_VERSION, RunReport

__all__ = ["SCHEMA_FILE", "report_json_schema"]

#: The published schema, shipped inside the package.
SCHEMA_FILE: Final = Path(__file__).with_name("report.schema.json")

_SCALARS: Final[dict[Any, str]] = {int: "integer", float: "number", str: "string", bool: "boolean"}


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every ``rlsight report --json`` document satisfies."""
    defs: dict[str, Any] = {}
    root = _object_schema(RunReport, defs)
    root["properties"] = {"schema_version": {"const": SCHEMA_VERSION}, **root["properties"]}
    root["required"] = ["schema_version", *root["required"]]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rlsight report --json",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("``", "`")
    return {
        "description": " ".join(doc.split()),
        "type": "object",
        "properties": {f.name: _schema(hints[f.name], defs) for f in fields},
        "required": [f.name for f in fields],
    }


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: a recursive model would otherwise loop
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"report model type {tp!r}: only `X | None` unions are supported")
        schema = _schema(inner[0], defs)
        if "type" in schema:
            return {**schema, "type": [schema["type"], "null"]}
        return {"anyOf": [schema, {"type": "null"}]}
    if origin is list:
        return {"type": "array", "items": _schema(args[0], defs)}
    if origin is dict and args[0] is str:
        return {"type": "object", "additionalProperties": _schema(args[1], defs)}
    raise TypeError(f"report model type {tp!r} has no JSON Schema mapping; add one here")


def _render() -> str:
    return json.dumps(report_json_schema(), indent=2) + "\n"


def _main(argv: list[str]) -> int:
    if argv == ["--write"]:
        SCHEMA_FILE.write_text(_render(), encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}", file=sys.stderr)
        return 0
    if argv:
        print("usage: python -m rlsight.analysis.schema [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(_render())
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
