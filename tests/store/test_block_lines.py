"""Lines read in blocks are the lines a line-at-a-time read gives, whatever the block size.

``store._lines._raw_lines`` reads a file in blocks and cuts them at newlines; the reference
here reads one line at a time with ``readline``, bounded, as the store did before. Both must
give the same numbered lines, the same too-long records, the same CRC and line count, for any
content, line limit, block size and byte range.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.store import _lines
from rlsight.store._lines import LineCursor
from rlsight.store._schema import SkippedRecord


def _reference(path: Path, limit: int, start: int, stop: int | None,
               cursor: LineCursor, skipped: list[SkippedRecord]) -> Iterator[tuple[int, bytes]]:
    """The bounded readline loop: a line over ``limit`` bytes is skipped in small chunks."""
    left = -1 if stop is None else stop - start

    def read(handle, size: int) -> bytes:  # type: ignore[no-untyped-def]
        nonlocal left
        raw = handle.readline(size) if left < 0 else handle.readline(min(size, left))
        if left >= 0:
            left -= len(raw)
        if cursor.crc is not None:
            cursor.crc = zlib.crc32(raw, cursor.crc)
        return raw

    with path.open("rb") as handle:
        handle.seek(start)
        while left:
            raw = read(handle, limit + 1)
            if not raw:
                return
            cursor.line += 1
            if len(raw) > limit:
                size = len(raw)
                while not raw.endswith(b"\n") and left:
                    raw = read(handle, 3)
                    if not raw:
                        break
                    size += len(raw)
                reason = f"line too long ({size:,} bytes; readers accept up to {limit:,})"
                skipped.append(SkippedRecord(str(path), cursor.line, reason))
                continue
            yield cursor.line, raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"  ", b"{}\n", b"x" * 9]),
                        max_size=30).map(b"".join),
       limit=st.integers(1, 12), block=st.integers(1, 16), first_line=st.integers(0, 5),
       start_line=st.integers(0, 8), stop=st.none() | st.integers(0, 200), crc=st.booleans())
def test_block_reads_give_the_lines_a_readline_loop_gives(
        content: bytes, limit: int, block: int, first_line: int, start_line: int, stop: int | None,
        crc: bool, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path_factory.mktemp("lines") / "t.jsonl"
    path.write_bytes(content)
    starts = [0] + [i + 1 for i, b in enumerate(content) if b == 10]
    start = starts[min(start_line, len(starts) - 1)]
    stop = None if stop is None else max(start, min(stop, len(content)))
    want_skipped: list[SkippedRecord] = []
    want_cursor = LineCursor(first_line, 0 if crc else None)
    want = list(_reference(path, limit, start, stop, want_cursor, want_skipped))
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", limit)
    monkeypatch.setattr(_lines, "_READ_BLOCK", block)
    got_skipped: list[SkippedRecord] = []
    got_cursor = LineCursor(first_line, 0 if crc else None)
    got = list(_lines._raw_lines(path, got_skipped, start, stop, got_cursor))
    assert got == want
    assert got_skipped == want_skipped
    assert got_cursor == want_cursor
