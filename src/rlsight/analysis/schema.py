"""The JSON Schema of the ``rlsight report --json`` document, built from the report model.

The model's type hints are the only statement of each field's JSON type (an ``int`` field is
a JSON integer, ``float`` a number, ``X | None`` may be null), so the schema is generated from
them rather than written by hand, and published as ``report.schema.json`` next to this module.
A test checks that the published file is what the model gives and that real reports validate
against it; after changing the model, rewrite the file with::

    python -m rlsight.analysis.schema --write

Every field is required (the report always writes all of them); other properties are allowed,
because adding a field does not change ``schema_version``. Reading is kinder than the published
schema in one way: a field the model gives a default (one added after ``schema_version`` 1 was
published) may be missing, so a baseline report saved by an earlier rlsight still diffs.

:func:`report_problems` checks a document against the same schema before
``RunReport.from_dict`` builds on it, so a saved file that is not a report (another command's
``--json``, a hand edit, a truncated copy) is refused with the field at fault, rather than with
whatever the model's constructors happen to raise.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Final, Union

from rlsight.analysis.model import SCHEMA_VERSION, RunReport

__all__ = ["SCHEMA_FILE", "report_json_schema", "report_problems"]

#: The published schema, shipped inside the package.
SCHEMA_FILE: Final = Path(__file__).with_name("report.schema.json")

_SCALARS: Final[dict[Any, str]] = {int: "integer", float: "number", str: "string", bool: "boolean"}
#: Which Python values each JSON type admits: "integer" is a JSON integer (3.0 is a number),
#: and a bool is neither.
_JSON_TYPES: Final[dict[str, Any]] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}
_BUCKET_PARTS: Final = ("productive_ns", "overhead_ns", "idle_ns", "wasted_ns", "unattributed_ns")


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


def report_problems(document: Any, limit: int = 5) -> list[str]:
    """What keeps ``document`` from being a ``rlsight report --json`` document, at most ``limit``.

    Each problem names the field by its path (``summary.buckets.wall_ns``) and says what it
    holds and what the schema wants; a buckets object whose parts do not add up to its
    ``wall_ns`` is a problem too (the model would refuse it). An empty list means the document
    has the shape :meth:`RunReport.from_dict` needs.
    """
    problems: list[str] = []
    _check(document, _published(), "", problems, limit, _defaulted(RunReport.__name__))
    return problems


@functools.cache
def _defaulted(name: str) -> frozenset[str]:
    """Fields of the model class ``name`` that have a default: an earlier rlsight may lack them."""
    classes: dict[str, type] = {}
    todo: list[Any] = [RunReport]
    while todo:
        tp = todo.pop()
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            if tp.__name__ in classes:
                continue
            classes[tp.__name__] = tp
            todo.extend(typing.get_type_hints(tp).values())
        else:
            todo.extend(typing.get_args(tp))
    cls = classes.get(name)
    if cls is None:
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)


@functools.cache
def _published() -> dict[str, Any]:
    return report_json_schema()


def _check(value: Any, node: dict[str, Any], where: str, problems: list[str], limit: int,
           optional: frozenset[str] = frozenset()) -> None:
    if len(problems) >= limit:
        return
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        before = len(problems)
        _check(value, _published()["$defs"][name], where, problems, limit, _defaulted(name))
        if name == "Buckets" and len(problems) == before:
            parts = [value[k] for k in _BUCKET_PARTS]
            if min(parts) < 0 or sum(parts) != value["wall_ns"]:
                problems.append(f"{where or 'the document'}: the buckets sum to {sum(parts)} ns, "
                                f"wall_ns is {value['wall_ns']} (a negative part or a partition "
                                "that does not add up)")
        return
    if "anyOf" in node:  # only `X | None`, where X is a $ref (see _schema)
        if not any(_fits(value, option) for option in node["anyOf"]):
            first = node["anyOf"][0]
            wanted = _published()["$defs"][first["$ref"].rsplit("/", 1)[1]]["type"]
            if _JSON_TYPES[wanted](value):
                _check(value, first, where, problems, limit)
            else:
                problems.append(f"{where}: is {_shown(value)}, expected {_A[wanted]} or null")
        return
    if "const" in node and value != node["const"]:
        problems.append(f"{where}: is {value!r}, this rlsight reads {node['const']!r}")
        return
    if "type" in node:
        wanted = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(_JSON_TYPES[t](value) for t in wanted):
            problems.append(f"{where or 'the document'}: is {_shown(value)}, expected "
                            f"{' or '.join(_A[t] for t in wanted)}")
            return
    if isinstance(value, dict):
        missing = [key for key in node.get("required", ()) if key not in value and key not in optional]
        if missing:
            more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
            problems.append(f"{where + ': ' if where else ''}lacks {', '.join(missing[:6])}{more}")
        for key, sub in node.get("properties", {}).items():
            if key in value:
                _check(value[key], sub, _join(where, key), problems, limit)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                _check(item, extra, _join(where, str(key)), problems, limit)
    elif isinstance(value, list) and "items" in node:
        for n, item in enumerate(value):
            _check(item, node["items"], f"{where}[{n}]", problems, limit)


def _fits(value: Any, node: dict[str, Any]) -> bool:
    found: list[str] = []
    _check(value, node, "", found, 1)
    return not found


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


_A: Final = {"integer": "an integer", "number": "a number", "string": "a string",
             "boolean": "a boolean", "null": "null", "object": "an object", "array": "an array"}


def _shown(value: Any) -> str:
    kind = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "an integer", float: "a number"}.get(type(value), "a value")
    text = json.dumps(value) if not isinstance(value, dict | list) else ""
    return f"{text} ({kind})" if text and len(text) <= 40 else kind


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
