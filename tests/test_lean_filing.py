"""A LeanSpan files itself in the step roll-up's open spans and rows in place
(``rlsight._lean.Filing``), with no call into the processor: what the roll-up holds must be
exactly what its own ``on_start``/``on_end`` (the SDK path, foreign spans) would have filed.

The same random program of span starts and ends (out of order, nested, step spans, spans
that stop being plain, foreign spans, a window cut, a processor added midway) runs twice
through the real runtime, once with the lean starter and once through ``tracer.start_span``,
with the ids and the clock made deterministic; after every operation the roll-up's open spans,
rows, open steps and last step summary must be the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import SpanProcessor

import rlsight
from rlsight import TelemetryConfig
from rlsight._lean import LeanSpan
from rlsight._step_rollup import StepRollupProcessor
from test_lean_spans import _deterministic_telemetry

# An operation: (kind, a, b). start: a = parent choice (0: the current context's none), b =
# name choice; end / touch: a = which open span; foreign: a span of the user's tracer.
_op = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 6), st.integers(0, 3)),
    st.tuples(st.just("end"), st.integers(0, 6), st.just(0)),
    st.tuples(st.just("touch"), st.integers(0, 6), st.just(0)),
    st.tuples(st.just("foreign"), st.integers(0, 6), st.just(0)),
    st.tuples(st.just("cut"), st.just(0), st.just(0)),
    st.tuples(st.just("add processor"), st.just(0), st.just(0)),
)
_NAMES = ("rl.step", "rl.train.policy", "rl.rollout.generate", "rl.step")


class _Recorder(SpanProcessor):
    """A processor that is not rlsight's: the lean route then ends spans the SDK's way."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    def on_end(self, span: Any) -> None:
        self.ended.append(span.name)


def _state(proc: StepRollupProcessor, telemetry: Any) -> tuple[Any, ...]:
    rows = list(proc._rows)
    rows[6::7] = [dict(attrs) for attrs in rows[6::7]]  # a plain dict or the SDK's own
    return (rows, proc._first, proc._window_from, sorted(proc._open),
            sorted(sp.name for sp in proc._open.values()), dict(proc._open_steps),
            dict(telemetry.last_step_summary))


def _run(run_dir: Path, lean: bool, ops: list[tuple[str, int, int]],
         monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    tel, provider, starter = _deterministic_telemetry(run_dir, "filing-test", monkeypatch,
                                                      local_store=False)
    states = []
    try:
        tracer = tel.tracer
        user = provider.get_tracer("user.code")
        proc = tel._rollup
        assert proc is not None
        proc.shutdown()  # no window cut but the program's own
        opened: list[Any] = []
        steps = 0
        for kind, a, b in ops:
            pick = opened[a % len(opened)] if opened else None
            if kind in ("start", "foreign"):
                name = "user.work" if kind == "foreign" else _NAMES[b]
                attrs: dict[str, Any] = {"thread.id": 1, "rl.bucket": "productive"}
                if name == "rl.step":
                    attrs = {"thread.id": 1, "rl.step": steps}
                    steps += 1
                parent = pick if a and pick is not None else trace.INVALID_SPAN
                with trace.use_span(parent, end_on_exit=False):
                    if kind == "foreign":
                        sp = user.start_span(name, attributes=attrs)
                    elif lean:
                        sp = starter.start(name, attrs, None)
                        assert type(sp) is LeanSpan
                    else:
                        sp = tracer.start_span(name, attributes=attrs)
                opened.append(sp)
            elif kind == "end" and pick is not None:
                opened.remove(pick)
                pick.end()
            elif kind == "touch" and pick is not None:
                pick.set_attribute("rl.extra", 1)  # no longer plain: it ends through on_end
            elif kind == "cut":
                proc._cut_at(sdk_trace.time_ns())  # type: ignore[attr-defined]
            elif kind == "add processor":
                provider.add_span_processor(_Recorder())
            states.append(_state(proc, tel))
        for sp in reversed(opened):
            sp.end()
        states.append(_state(proc, tel))
    finally:
        rlsight.shutdown_telemetry()
    return states


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=30))
def test_lean_spans_file_what_the_processors_own_methods_file(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        sdk = _run(tmp_path_factory.mktemp("sdk"), False, ops, monkeypatch)
    with pytest.MonkeyPatch.context() as monkeypatch:
        lean = _run(tmp_path_factory.mktemp("lean"), True, ops, monkeypatch)
    assert lean == sdk


def test_a_step_span_starts_through_the_processor_and_a_plain_span_does_not(tmp_path: Path) -> None:
    """The route files a plain span in place and sends a step span (the one name the roll-up
    does more for) through ``on_start``: the step is registered, its roll-up runs at its end."""
    with rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"],
                                                 strict=True, local_store=False)) as tel:
        proc = tel._rollup
        assert proc is not None
        calls: list[str] = []
        real = StepRollupProcessor.on_start

        def counting(self: StepRollupProcessor, span: Any, parent_context: Any = None) -> None:
            calls.append(span.name)
            real(self, span, parent_context)

        StepRollupProcessor.on_start = counting  # type: ignore[method-assign]
        try:
            with rlsight.step_span(0) as step:
                with rlsight.span(rlsight.RL.TRAINING, "rl.train.policy") as work:
                    assert work.get_span_context().span_id in proc._open
                assert proc._open_steps == {step.get_span_context().span_id: 0}
        finally:
            StepRollupProcessor.on_start = real  # type: ignore[method-assign]
        assert calls == ["rl.step"]
        assert proc._open_steps == {} and proc._open == {}
        assert rlsight.last_step_summary()["rlsight/productive_s"] > 0


def test_threads_filing_at_once_lose_no_row_and_leave_no_span_open(tmp_path: Path) -> None:
    """Four threads start and end nested spans flat out: every span's row is filed whole,
    once, and none stays among the open spans (each filing step is one operation under the
    GIL; no lock is taken)."""
    import sys
    import threading

    per_thread = 3_000
    with rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=["all"],
                                                 strict=True, local_store=False)) as tel:
        proc = tel._rollup
        assert proc is not None
        proc.shutdown()  # the rows stay: every one is counted below
        ids: list[list[int]] = [[] for _ in range(4)]

        def work(mine: list[int]) -> None:
            for _ in range(per_thread // 2):
                with rlsight.span(rlsight.RL.TRAINING, "rl.train.policy") as outer:
                    with rlsight.span(rlsight.RL.REFIT, "rl.refit.push_weights") as inner:
                        pass
                mine += [outer.get_span_context().span_id, inner.get_span_context().span_id]

        threads = [threading.Thread(target=work, args=(mine,)) for mine in ids]
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads taking turns within a span's filing
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(switch)
        rows = list(proc._rows)
        assert proc._open == {}
    filed = rows[3::7]
    assert len(rows) == 4 * per_thread * 7
    assert sorted(filed) == sorted(sid for mine in ids for sid in mine)
    assert all(type(name) is str for name in rows[5::7]), "a row was torn"
