"""The one way every store reader walks a file: bounded lines, numbered, never fatal.

A store file is written by a process that may be killed mid-line, filled by a runaway writer
or edited by hand. Whatever it holds, a reader must return every good record and name each
bad one with ``file:line``; it must not raise and must not grow without bound. So a line is
read at most :data:`MAX_LINE_BYTES` at a time (a longer one is skipped in bounded chunks), a
parse error of any kind (bad JSON, nesting deep enough to exhaust the parser's recursion, an
integer OTLP cannot hold) skips that record alone, and integers are checked against the
int64 range OTLP gives them before they reach a fixed-width column.
"""

from __future__ import annotations

import json
import zlib
from array import array
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final

from rlsight.store._schema import SkippedRecord

__all__ = [
    "MAX_LINE_BYTES",
    "PARSE_ERRORS",
    "LineCursor",
    "int64",
    "int64_column",
    "int64s",
    "json_lines",
    "last_line_end",
    "loads",
    "numbered_json",
    "numbered_lines",
    "parse_line",
]

#: Longest store line a reader accepts. rlsight's own lines are one batch of at most 4096
#: spans with attributes capped in length (a few MiB); a longer line is not one of ours.
MAX_LINE_BYTES: Final = 64 * 2**20
_SKIP_CHUNK: Final = 2**20
#: Bytes read at a time: a few of a busy run's lines (hundreds of KiB each), few enough to
#: stay in the CPU's cache while they are checksummed and cut.
_READ_BLOCK: Final = 2**20
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

#: What parsing or converting one record may raise; each skips that record, never the file.
PARSE_ERRORS: Final = (
    KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, OverflowError,
)


def int64(raw: object) -> int:
    """``raw`` (an int or OTLP's decimal string) as an int within OTLP's int64 range.

    Raises:
        ValueError: not an integer, or outside the int64 range (no column could hold it).
    """
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"not an integer: {raw!r:.40}")
    value = int(raw)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"integer {str(raw)[:40]} is outside the int64 range")
    return value


def int64s(values: list[Any]) -> list[int]:
    """:func:`int64` of every value, as one column: the same answers, several times faster.

    A store holds one timestamp pair per span, so this runs a million times per large run. A
    column of ints is only range-checked, by its extremes; a column of decimal strings is
    read as one JSON array by msgspec where it is installed (:func:`_json_ints`), else
    converted in C (``map(int, ...)``) and range-checked once.

    Raises:
        ValueError: a value is not an integer, or one is outside the int64 range.
    """
    kinds = set(map(type, values))
    if kinds == {str}:
        fast = _json_ints(values)
        if fast is not None:
            return fast
    if not kinds <= {str, int}:  # a bool, a float, a list...: int64 names the culprit
        return [int64(v) for v in values]
    out = values if kinds == {int} else list(map(int, values))
    if out and not (min(out) >= _INT64_MIN and max(out) <= _INT64_MAX):
        return [int64(v) for v in values]
    return out


def int64_column(values: Sequence[Any]) -> array[int]:
    """:func:`int64s` of ``values`` as an ``array('q')``: the same answers and errors.

    The column a store's timestamps make: decimal strings of 19 digits (every time between
    2001 and 2286 in nanoseconds). Those are read as digits by numpy in a few vectorised
    steps, without a Python int per value; any other column goes through :func:`int64s`.

    Raises:
        ValueError: as :func:`int64s`.
    """
    fast = _nineteen_digits(values)
    return fast if fast is not None else array("q", int64s(list(values)))


_DIGIT_TOOLS: list[Any] = []
_NINETEEN: Final = 19


def _nineteen_digits(values: Sequence[Any]) -> array[int] | None:
    """``values`` read as int64s when every one is a string of exactly 19 ASCII digits within
    the int64 range (then ``int()`` reads each to the same value); None otherwise, or
    without numpy."""
    if not _DIGIT_TOOLS:
        _DIGIT_TOOLS.append(_digit_tools())
    tools = _DIGIT_TOOLS[0]
    if tools is None or not values:
        return None
    np, powers = tools
    try:
        if set(map(len, values)) != {_NINETEEN}:
            return None
        text = "".join(values).encode("ascii")
    except (TypeError, UnicodeEncodeError):  # not all strings, or not all ASCII
        return None
    if len(text) != _NINETEEN * len(values):
        return None
    digits = np.frombuffer(text, dtype=np.uint8).reshape(len(values), _NINETEEN) - 48
    if int(digits.max()) > 9:  # a byte below "0" wraps round to a large one
        return None
    numbers = digits @ powers  # uint64: 19 digits are below 2**64
    if int(numbers.max()) > _INT64_MAX:
        return None
    out = array("q")
    out.frombytes(numbers.astype(np.int64).tobytes())
    return out


def _digit_tools() -> tuple[Any, Any] | None:
    """numpy and the powers of ten of 19 digits; None without numpy (looked for once)."""
    try:
        import numpy as np
    except ImportError:  # the core install converts value by value
        return None
    return np, 10 ** np.arange(_NINETEEN - 1, -1, -1, dtype=np.uint64)


_INTS_DECODER: list[Any] = []


def _json_ints(values: list[str]) -> list[int] | None:
    """``[int64(v) for v in values]`` computed by msgspec, which reads the strings joined
    into one JSON array of int64s in C; None without msgspec, or when the array does not
    read as exactly one int64 per string (then :func:`int64` judges each value).

    Every JSON integer (whitespace around it included) is a string ``int()`` reads to the same
    value; whatever else a string holds (a sign ``+``, ``_``, leading zeros, an exponent,
    a comma, nothing) makes the array malformed, not an integer, or of another length.
    """
    if not _INTS_DECODER:
        try:
            import msgspec
        except ImportError:  # the core install converts value by value
            _INTS_DECODER.append(None)
        else:
            item = Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]
            _INTS_DECODER.append(msgspec.json.Decoder(list[item]).decode)
    decode = _INTS_DECODER[0]
    if decode is None:
        return None
    try:
        out: list[int] = decode("[" + ",".join(values) + "]")
    except ValueError:  # msgspec's errors are ValueErrors
        return None
    return out if len(out) == len(values) else None


def loads() -> Callable[[bytes], Any]:
    """The JSON parser every reader uses: orjson where installed, else the standard library.

    One parser for every reader keeps them agreeing on what a line is: orjson refuses nesting
    deeper than 1024, the standard library whatever exceeds its recursion limit.
    """
    try:
        import orjson
    except ImportError:  # the core install reads with the standard library
        return json.loads
    return orjson.loads


@dataclass(slots=True)
class LineCursor:
    """Where a bounded read of a file stands: the last line number read (blank or not) and,
    when ``crc`` starts as an int, the CRC-32 of every byte read, continued from it."""

    line: int = 0
    crc: int | None = None


def _raw_lines(
    path: Path, skipped: list[SkippedRecord], start: int = 0, stop: int | None = None,
    cursor: LineCursor | None = None,
) -> Iterator[tuple[int, bytes]]:
    """The lines of ``path`` from byte ``start`` (a line start, after line ``cursor.line``) up
    to byte ``stop`` (default: the end), each with its number.

    The file is read in blocks of :data:`_READ_BLOCK` and cut at each newline found (a C
    search): a buffered ``readline`` looks at every byte in a Python-level loop of C calls
    and costs more than the parse on a busy run's lines of hundreds of KiB. A line longer
    than :data:`MAX_LINE_BYTES` is counted but not held, so a runaway writer's file does not
    take the reader's memory with it. ``cursor.crc`` covers every byte read, so a consumer
    that stops early has it cover the blocks read so far.
    """
    cursor = cursor or LineCursor()
    try:
        handle = path.open("rb", buffering=0)
    except OSError as exc:
        skipped.append(SkippedRecord(str(path), 0, f"cannot open: {exc.strerror}"))
        return
    limit, block_size = MAX_LINE_BYTES, _READ_BLOCK  # read per call, so a test can lower them
    left = -1 if stop is None else stop - start  # -1: no bound
    pieces: list[bytes] = []  # the line begun in an earlier block, unless it is too long
    size = 0  # bytes of that line so far
    name = str(path)

    def too_long(length: int) -> SkippedRecord:
        return SkippedRecord(
            name, cursor.line, f"line too long ({length:,} bytes; readers accept up to {limit:,})")

    with handle:
        if start:
            handle.seek(start)
        while left:
            block = handle.read(block_size if left < 0 else min(block_size, left))
            if not block:
                break
            if left > 0:
                left -= len(block)
            if cursor.crc is not None:
                cursor.crc = zlib.crc32(block, cursor.crc)
            at = 0
            while (newline := block.find(b"\n", at)) >= 0:
                cursor.line += 1
                length = size + newline + 1 - at
                if length > limit:
                    skipped.append(too_long(length))
                else:
                    piece = block[at:newline + 1]
                    yield cursor.line, b"".join((*pieces, piece)) if pieces else piece
                pieces.clear()
                size = 0
                at = newline + 1
            if at < len(block):
                size += len(block) - at
                if size <= limit:
                    pieces.append(block[at:])
                else:
                    pieces.clear()
    if size:  # a last line without its newline
        cursor.line += 1
        if size > limit:
            skipped.append(too_long(size))
        else:
            yield cursor.line, b"".join(pieces)


def numbered_lines(
    path: Path, start: int = 0, stop: int | None = None, cursor: LineCursor | None = None,
    only: Collection[int] | None = None,
) -> Iterator[tuple[int, bytes] | SkippedRecord]:
    """Each non-blank line of ``path`` as bytes, numbered from 1, or the :class:`SkippedRecord`
    of a line too long to read, in file order: :func:`numbered_json` before parsing, for a
    reader that parses a line its own way first (and falls back on :func:`parse_line`)."""
    bad: list[SkippedRecord] = []
    last = max(only, default=0) if only is not None else None
    for number, raw in _raw_lines(path, bad, start, stop, cursor):
        yield from bad
        bad.clear()
        if last is not None and number > last:
            return
        if raw.isspace() or not raw or (only is not None and number not in only):
            continue  # isspace: strip() would copy the line to learn the same
        yield number, raw
    yield from bad


def parse_line(
    parse: Callable[[bytes], Any], path: Path, number: int, raw: bytes,
) -> tuple[int, Any] | SkippedRecord:
    """Line ``number`` of ``path`` parsed with ``parse`` (see :func:`loads`), or the
    :class:`SkippedRecord` saying why it does not parse (a last line without its newline as
    ``truncated line``: a process killed mid-write)."""
    try:
        return number, parse(raw)
    except RecursionError:
        return SkippedRecord(str(path), number, "not JSON (nested too deep)")
    except ValueError as exc:  # JSONDecodeError, orjson's error and UnicodeDecodeError
        what = "truncated line" if not raw.endswith(b"\n") else "not JSON"
        return SkippedRecord(str(path), number, f"{what} ({str(exc)[:200]})")


def numbered_json(
    path: Path, start: int = 0, stop: int | None = None, cursor: LineCursor | None = None,
    only: Collection[int] | None = None,
) -> Iterator[tuple[int, Any] | SkippedRecord]:
    """Each non-blank line of ``path`` parsed (see :func:`loads`) and numbered from 1, or the
    :class:`SkippedRecord` saying why that line was not, in file order.

    A line that does not parse is skipped (see :func:`parse_line`) and the walk goes on.
    ``start``/``stop`` read only the bytes between (``start`` at a line start, after line
    ``cursor.line``), as if the file ended at ``stop``; ``cursor`` follows the read (see
    :class:`LineCursor`). With ``only``, lines whose number is not in it are passed over
    unparsed, and the read stops after the last of them.
    """
    parse = loads()
    for item in numbered_lines(path, start, stop, cursor, only):
        yield item if isinstance(item, SkippedRecord) else parse_line(parse, path, *item)


def last_line_end(path: Path, start: int, stop: int) -> int:
    """Offset just after the last newline in bytes [start, stop) of ``path``, or ``start`` if
    there is none: what lies beyond may be a line still being written."""
    pos = stop
    with path.open("rb") as handle:
        while pos > start:
            size = min(_SKIP_CHUNK, pos - start)
            handle.seek(pos - size)
            newline = handle.read(size).rfind(b"\n")
            if newline >= 0:
                return pos - size + newline + 1
            pos -= size
    return start


def json_lines(path: Path, skipped: list[SkippedRecord]) -> Iterator[tuple[int, Any]]:
    """:func:`numbered_json` for readers of one record kind: skips go to ``skipped``."""
    for item in numbered_json(path):
        if isinstance(item, SkippedRecord):
            skipped.append(item)
        else:
            yield item
