"""The OTLP/JSON traces request as msgspec types: only the fields the store walk reads.

Parsing a line into dicts builds a Python object for every key and value of every span, most
of which no reader looks at (scopes, flags, events, the keys themselves). Decoding into these
types builds one small struct per span holding the fields :func:`rlsight.store._reader.
span_batches` reads, skips everything else in C, and keeps each span's attribute list and
each resource as raw JSON bytes (:class:`msgspec.Raw`), so that the walk decodes an attribute
list once per distinct list rather than once per span.

The types accept only the well-formed shape (ids and names as strings, times as integers or
decimal strings...). A line they refuse is not judged here: the walk parses it again as
plain JSON and applies the generic rules, which either read it the same way or skip it with
the reason. Field names are OTLP/JSON's lowerCamelCase; unknown fields, and fields in any
order, are accepted.

The structs are not tracked by the garbage collector (``gc=False``): they hold strings, raw
bytes and each other, never a cycle, and a million of them are made and dropped per read
(untracked, each is ~10% cheaper to make).

Imported only where msgspec is installed (the ``analysis`` extra).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = ["DECODE_ERRORS", "Request", "Span", "Status", "decoder"]

#: What decoding a line into :class:`Request` may raise besides the store's PARSE_ERRORS.
DECODE_ERRORS: Final = (msgspec.MsgspecError,)


#: An OTLP int64 written as a JSON number.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Status(msgspec.Struct, frozen=True, gc=False):
    code: int | str = 0
    message: str = ""


class Span(msgspec.Struct, frozen=True, rename="camel", gc=False):
    trace_id: str
    span_id: str
    name: str
    start_time_unix_nano: int | str
    end_time_unix_nano: int | str
    parent_span_id: str = ""
    kind: Int64 = 1
    """Validated here (a kind written as a string is left to the plain walk)."""
    status: Status | None = None
    attributes: msgspec.Raw = msgspec.Raw(b"")
    """The attribute list as written (empty when absent)."""


class ScopeSpans(msgspec.Struct, frozen=True, gc=False):
    spans: list[Span] = []


class ResourceSpans(msgspec.Struct, frozen=True, rename="camel", gc=False):
    resource: msgspec.Raw = msgspec.Raw(b"{}")
    scope_spans: list[ScopeSpans] = []


class Request(msgspec.Struct, frozen=True, rename="camel", gc=False):
    resource_spans: list[ResourceSpans]


_DECODER: list[msgspec.json.Decoder[Request]] = []


def decoder() -> msgspec.json.Decoder[Request]:
    """The decoder of a traces request line (one per process: building it compiles the types)."""
    if not _DECODER:
        _DECODER.append(msgspec.json.Decoder(Request))
    return _DECODER[0]
