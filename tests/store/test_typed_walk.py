"""The typed decode (msgspec structs) reads every line exactly as the plain JSON walk does.

``store._reader.file_span_batches`` decodes a line into typed structs first and walks it as
plain JSON only when the types refuse it. These tests hold the two to the same answer, on
well-formed OTLP in any key order and with any int64 spelling, and on lines that are wrong in
every place a reader looks: the same batches, the same columns, the same skipped lines.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.analysis._read import read_span_columns
from rlsight.store import _reader
from rlsight.store._lines import int64, int64_column, int64s
from rlsight.store._schema import SkippedRecord

_ODD = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
        | st.text(max_size=4))
_INT64 = st.integers(-(2**63), 2**63 - 1)
_HEX = st.text("0123456789abcdef", min_size=16, max_size=16)


def _mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good``, and now and then a value of the wrong kind (so most lines stay readable)."""
    return st.integers(0, 15).flatmap(lambda k: _ODD if k == 0 else good)


def _int_field(draw: st.DrawFn, value: int) -> Any:
    """An int64 as OTLP writes it (a decimal string), as a number, or something wrong."""
    return draw(_mostly(st.sampled_from([str(value), value, str(value), f" {value}", f"+{value}"])))


@st.composite
def _any_value(draw: st.DrawFn) -> Any:
    good = st.one_of(
        st.text(max_size=6).map(lambda s: {"stringValue": s}),
        _INT64.map(lambda i: {"intValue": str(i)}),
        _INT64.map(lambda i: {"intValue": i}),
        st.floats(allow_nan=False).map(lambda f: {"doubleValue": f}),
        st.booleans().map(lambda b: {"boolValue": b}),
        st.lists(st.text(max_size=3).map(lambda s: {"stringValue": s}), max_size=2).map(
            lambda v: {"arrayValue": {"values": v}}),
        st.just({}),
    )
    return draw(_mostly(good) | st.dictionaries(st.sampled_from(["stringValue", "intValue", "x"]), _ODD,
                                                 max_size=2))


@st.composite
def _span(draw: st.DrawFn) -> dict[str, Any]:
    keys = ["thread.id", "rl.bucket", "rl.span_group", "rl.step", "rl.group_id", "rl.batch_size",
            "rl.concurrent", "user.key"]
    start = draw(st.integers(0, 2**62))
    span: dict[str, Any] = {
        "traceId": draw(_mostly(st.sampled_from(["0" * 31 + "1", "0" * 31 + "2"]))),
        "spanId": draw(_mostly(_HEX)),
        "name": draw(_mostly(st.sampled_from(["rl.step", "work", "rl.worker.load_model", "rl.discard"]))),
        "startTimeUnixNano": _int_field(draw, start),
        "endTimeUnixNano": _int_field(draw, start + draw(st.integers(0, 10**9))),
        "attributes": draw(_mostly(st.lists(st.builds(lambda k, v: {"key": k, "value": v},
                                                      st.sampled_from(keys), _any_value()), max_size=4))),
    }
    status = st.fixed_dictionaries({}, optional={"code": _mostly(st.integers(0, 2)),
                                                 "message": _mostly(st.text(max_size=3))})
    for key, value in (("parentSpanId", _mostly(_HEX | st.just(""))), ("kind", _mostly(st.integers(0, 5))),
                       ("status", _mostly(status)),
                       ("events", st.lists(_ODD, max_size=2)), ("flags", _ODD)):
        if draw(st.booleans()):
            span[key] = draw(value)
    if draw(st.integers(0, 9)) == 0:  # now and then a required field goes missing
        del span[draw(st.sampled_from(sorted(span)))]
    return span


@st.composite
def _line(draw: st.DrawFn) -> str:
    resource = {"attributes": [{"key": "service.instance.id", "value": {"stringValue": "r/driver/0/1"}},
                               {"key": "rl.rank", "value": {"intValue": "0"}}]}
    # Spans that repeat an attribute list: the typed walk shares one map between them.
    spans = draw(st.lists(_span(), max_size=5))
    spans += [dict(s, spanId=f"{i:016x}") for i, s in enumerate(spans[:2])]
    request: Any = {"resourceSpans": [{"resource": draw(_mostly(st.just(resource))),
                                       "scopeSpans": [{"scope": {"name": "rlsight"}, "spans": spans}]}]}
    seed = draw(st.integers(0, 2**32))
    return json.dumps(_shuffled(request, random.Random(seed)))


def _shuffled(value: Any, rng: random.Random) -> Any:
    """``value`` with every object's keys in another order (OTLP/JSON leaves it free)."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _batches(path: Path, typed: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the walk yields for ``path``, each batch with its attributes spread per span."""
    with monkeypatch.context() as m:
        if not typed:
            m.setattr(_reader, "_typed_walk", lambda: None)
        out: list[Any] = []
        for item in _reader.file_span_batches(path):
            if isinstance(item, SkippedRecord):
                out.append(item)
            else:
                fields = {f: getattr(item, f) for f in item.__slots__ if not f.startswith("attribute_")}
                out.append((fields, item.attributes))
        return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line(), min_size=1, max_size=4))
def test_the_typed_walk_yields_what_the_plain_walk_yields(
        lines: list[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same batches (ids, times, statuses, each span's attributes) and same skipped lines."""
    run_dir = tmp_path_factory.mktemp("walk")
    (run_dir / "traces").mkdir()
    path = run_dir / "traces" / "p-0-1.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    assert _batches(path, True, monkeypatch) == _batches(path, False, monkeypatch)
    typed = read_span_columns(run_dir, workers=1, cache=False)
    with monkeypatch.context() as m:
        m.setattr(_reader, "_typed_walk", lambda: None)
        plain = read_span_columns(run_dir, workers=1, cache=False)
    assert typed[1] == plain[1] and typed[2] == plain[2]
    assert _comparable(typed[0]) == _comparable(plain[0])


def _comparable(cols: Any) -> dict[str, Any]:
    out = {}
    for name in cols.__slots__:
        value = getattr(cols, name)
        out[name] = value.tolist() if hasattr(value, "tolist") else value
    out["batch_size"] = [repr(v) for v in out["batch_size"]]  # NaN != NaN
    out["prompts"] = [repr(v) for v in out["prompts"]]
    return out


@pytest.mark.parametrize("kind", [3, "3", " 3", "x", 2**63, -(2**63) - 1, True, 1.5, None])
def test_a_span_kind_is_read_or_refused_as_the_plain_walk_does(
        kind: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed decode checks ``kind`` itself (an int64 number); any other spelling is the
    plain walk's to read or skip, so both give one answer."""
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "w", "kind": kind,
            "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + "\n")
    assert _batches(path, True, monkeypatch) == _batches(path, False, monkeypatch)


def test_spans_repeating_an_attribute_list_share_one_map(tmp_path: Path) -> None:
    """The typed walk reads a repeated attribute list once: one map, indexed by each span."""
    assert _reader._typed_walk() is not None  # msgspec is installed with the analysis extra
    attrs = [{"key": "rl.bucket", "value": {"stringValue": "productive"}}]
    spans = [{"traceId": "0" * 31 + "1", "spanId": f"{i:016x}", "name": "work", "startTimeUnixNano": "1",
              "endTimeUnixNano": "2", "attributes": attrs if i < 3 else []} for i in range(4)]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    (batch,) = list(_reader.file_span_batches(path))
    assert not isinstance(batch, SkippedRecord)
    assert batch.attribute_set == [0, 0, 0, 1]
    assert batch.attribute_sets == [{"rl.bucket": {"stringValue": "productive"}}, {}]
    records = _reader.span_records(batch)
    assert records[0].attributes == {"rl.bucket": "productive"}
    assert records[0].attributes is not records[1].attributes  # each record owns its dict


_DIGITS = "0123456789"


def _or_refused(read: Callable[[], list[int]]) -> list[int] | None:
    """What a reading gives, or None where it refuses the values (both sides must agree on which)."""
    try:
        return read()
    except ValueError:
        return None


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.text(_DIGITS + " +-_,.e[]\n\u0661", max_size=6),
    st.integers(0, 10**19).map(lambda i: f"{i:019d}"),
), min_size=1, max_size=6))
def test_int64s_reads_a_column_as_int64_reads_each_value(values: list[str]) -> None:
    """The column conversion (one JSON array through msgspec) agrees with int64 value by value."""
    assert _or_refused(lambda: int64s(values)) == _or_refused(lambda: [int64(v) for v in values])


@st.composite
def _nearly_digits(draw: st.DrawFn) -> str:
    """19 digits with one character swapped for one just outside "0"-"9", or a non-ASCII digit."""
    digits = list(f"{draw(st.integers(0, 10**18)):019d}")
    digits[draw(st.integers(0, 18))] = draw(st.sampled_from("/: +-\u0661\uff10"))
    return "".join(digits)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(st.one_of(
    st.integers(0, 10**19 - 1).map(lambda i: f"{i:019d}"),  # the store's own times
    st.integers(9 * 10**18, 10**19 - 1).map(str),  # around the int64 limit
    _nearly_digits(),
    st.integers(0, 2**62).map(lambda i: f"{i:020d}"),  # one digit more or less
    st.integers(0, 10**18 - 1).map(lambda i: f"{i:018d}"),
    st.integers(-(2**64), 2**64).map(str),
    st.integers(0, 2**62),
    st.booleans(),
), min_size=1, max_size=6))
def test_int64_column_reads_a_column_as_int64_reads_each_value(values: list[Any]) -> None:
    """The timestamp column's digit reading (numpy, no int per value) agrees with int64."""
    expected = _or_refused(lambda: [int64(v) for v in values])
    assert _or_refused(lambda: int64_column(values).tolist()) == expected


def test_a_fault_only_in_a_field_no_reader_uses_does_not_cost_the_line(tmp_path: Path) -> None:
    """docs/store.md: bytes that are not UTF-8 inside a span event; the span is still read."""
    (tmp_path / "traces").mkdir()
    span = (b'{"traceId":"00000000000000000000000000000001","spanId":"0000000000000001","name":"w",'
            b'"startTimeUnixNano":"1","endTimeUnixNano":"2","events":["\xff"]}')
    (tmp_path / "traces" / "p-0-1.jsonl").write_bytes(
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + b"]}]}]}\n")
    result = _reader.read_spans(tmp_path)
    assert [s.name for s in result.spans] == ["w"] and result.skipped == []


def test_int64_column_without_numpy_reads_value_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core install (no numpy) reads the same column through int64s."""
    from rlsight.store import _lines

    monkeypatch.setattr(_lines, "_DIGIT_TOOLS", [None])
    assert int64_column(["1700000000000000001", "2"]).tolist() == [1700000000000000001, 2]
    with pytest.raises(ValueError, match="outside the int64 range"):
        int64_column(["9999999999999999999"])


def test_a_block_with_one_unreadable_line_loses_that_line_only(tmp_path: Path) -> None:
    """Lines are read in blocks; a value the analysis reads that is not OTLP (an ``intValue``
    of ``"x"``) skips its own line, and the lines around it keep their numbers and spans."""
    def line(thread: str, sid: int) -> str:
        span = {"traceId": "0" * 31 + "1", "spanId": f"{sid:016x}", "name": "w",
                "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "thread.id", "value": {"intValue": thread}}]}
        spans = [span, dict(span, spanId=f"{sid + 1:016x}")]
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})

    (tmp_path / "traces").mkdir()
    path = tmp_path / "traces" / "p-0-1.jsonl"
    path.write_text("".join(line(t, 2 * i) + "\n" for i, t in enumerate(["7", "x", "9"])))
    cols, skipped, _ = read_span_columns(tmp_path, workers=1, cache=False)
    assert [(s.line, "not an OTLP traces request" in s.reason) for s in skipped] == [(2, True)]
    assert cols.source_line.tolist() == [1, 1, 3, 3] and cols.source_slot.tolist() == [0, 1, 0, 1]
    assert cols.thread.tolist() == [7, 7, 9, 9] and cols.span_id.tolist() == [0, 1, 4, 5]
