"""``@accepts_trace_context`` outside Ray: the signature it shows, and the context it attaches."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

from rlsight import RL, RlsightWarning, span, umbrella_span
from rlsight.propagation import (
    TRACE_CONTEXT_KWARG,
    accepts_trace_context,
    current_trace_carrier,
    trace_context_kwargs,
)
from rlsight.testing import Capture, capture_telemetry


def _current_ids() -> tuple[int, int]:
    ctx = trace.get_current_span().get_span_context()
    return ctx.trace_id, ctx.span_id


class Worker:
    @accepts_trace_context
    def sync(self, x: int, *, scale: int = 1) -> tuple[int, tuple[int, int]]:
        return x * scale, _current_ids()

    @accepts_trace_context
    async def coro(self, x: int) -> tuple[int, tuple[int, int]]:
        await asyncio.sleep(0)
        return x, _current_ids()

    @accepts_trace_context
    def gen(self, n: int) -> Iterator[tuple[int, tuple[int, int]]]:
        for i in range(n):
            yield i, _current_ids()

    @accepts_trace_context
    async def agen(self, n: int) -> AsyncIterator[tuple[int, tuple[int, int]]]:
        for i in range(n):
            await asyncio.sleep(0)
            yield i, _current_ids()

    @accepts_trace_context
    def takes_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs


@accepts_trace_context
def echo(value: object) -> object:
    return value


# -- what Ray sees -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sync", "coro", "gen", "agen"])
def test_signature_after_unwrap_accepts_the_carrier_keyword(name: str) -> None:
    method = getattr(Worker, name)
    unwrapped = inspect.unwrap(method)
    assert unwrapped is method
    inspect.signature(unwrapped).bind(Worker(), 1, **{TRACE_CONTEXT_KWARG: {}})


def test_carrier_parameter_goes_before_var_keyword() -> None:
    params = list(inspect.signature(Worker.takes_kwargs).parameters.values())
    assert [p.name for p in params] == ["self", TRACE_CONTEXT_KWARG, "kwargs"]
    assert params[1].kind is inspect.Parameter.KEYWORD_ONLY


def test_wrapper_keeps_the_function_kind() -> None:
    assert inspect.iscoroutinefunction(Worker.coro)
    assert inspect.isgeneratorfunction(Worker.gen)
    assert inspect.isasyncgenfunction(Worker.agen)
    assert not inspect.isgeneratorfunction(Worker.sync)


def test_wrapper_keeps_name_doc_and_ray_attributes() -> None:
    def method(self: object) -> None:
        """Docs."""

    method.__ray_num_returns__ = 2  # type: ignore[attr-defined]
    wrapped = accepts_trace_context(method)
    assert (wrapped.__name__, wrapped.__doc__) == ("method", "Docs.")
    assert wrapped.__ray_num_returns__ == 2  # type: ignore[attr-defined]


def test_decorating_twice_is_a_no_op() -> None:
    assert accepts_trace_context(Worker.sync) is Worker.sync


def test_decorating_a_ray_remote_object_names_the_order_to_use() -> None:
    class Remote:
        def remote(self) -> None: ...

    with pytest.raises(TypeError, match=r"below @ray\.remote"):
        accepts_trace_context(Remote())


def test_decorating_a_staticmethod_object_names_the_order_to_use() -> None:
    with pytest.raises(TypeError, match="below @staticmethod"):
        accepts_trace_context(staticmethod(echo))  # type: ignore[arg-type]


# -- what the call sees --------------------------------------------------------------------

def test_the_carrier_keyword_never_reaches_the_function(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent"):
        received = Worker().takes_kwargs(a=1, **trace_context_kwargs())
    assert received == {"a": 1}


def test_a_sync_call_runs_under_the_carrier(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        carrier = current_trace_carrier()
    result, ids = Worker().sync(2, scale=3, **{TRACE_CONTEXT_KWARG: carrier})
    ctx = parent.get_span_context()
    assert (result, ids) == (6, (ctx.trace_id, ctx.span_id))
    assert not trace.get_current_span().get_span_context().is_valid


def test_an_async_call_runs_under_the_carrier(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        carrier = current_trace_carrier()
    _, ids = asyncio.run(Worker().coro(1, **{TRACE_CONTEXT_KWARG: carrier}))
    assert ids == (parent.get_span_context().trace_id, parent.get_span_context().span_id)


def test_a_generator_has_the_carrier_at_each_resume_but_not_between(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        carrier = current_trace_carrier()
    expected = (parent.get_span_context().trace_id, parent.get_span_context().span_id)
    seen_between = []
    inside = []
    for _, ids in Worker().gen(3, **{TRACE_CONTEXT_KWARG: carrier}):
        inside.append(ids)
        seen_between.append(_current_ids())
    assert inside == [expected] * 3
    assert seen_between == [(0, 0)] * 3


def test_an_async_generator_has_the_carrier_at_each_resume_but_not_between(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        carrier = current_trace_carrier()
    expected = (parent.get_span_context().trace_id, parent.get_span_context().span_id)

    async def consume() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        inside, between = [], []
        async for _, ids in Worker().agen(3, **{TRACE_CONTEXT_KWARG: carrier}):
            inside.append(ids)
            between.append(_current_ids())
        return inside, between

    inside, between = asyncio.run(consume())
    assert inside == [expected] * 3
    assert between == [(0, 0)] * 3


def test_a_generator_passes_send_and_throw_through(capture: Capture) -> None:
    @accepts_trace_context
    def accumulate() -> Iterator[int]:
        total = 0
        while True:
            try:
                total += yield total
            except ValueError:
                total = -1

    with span(RL.TRAINING, "rl.test.parent"):
        gen = accumulate(**trace_context_kwargs())
    assert next(gen) == 0
    assert gen.send(5) == 5
    assert gen.throw(ValueError("reset")) == -1
    gen.close()


def test_an_async_generator_passes_asend_and_athrow_through(capture: Capture) -> None:
    @accepts_trace_context
    async def accumulate() -> AsyncIterator[int]:
        total = 0
        while True:
            try:
                total += yield total
            except ValueError:
                total = -1

    async def drive() -> list[int]:
        with span(RL.TRAINING, "rl.test.parent"):
            agen = accumulate(**trace_context_kwargs())
        out = [await agen.asend(None), await agen.asend(5), await agen.athrow(ValueError("reset"))]
        await agen.aclose()
        return out

    assert asyncio.run(drive()) == [0, 5, -1]


def test_without_a_carrier_the_call_keeps_the_callers_context(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        _, ids = Worker().sync(1)
    assert ids == (parent.get_span_context().trace_id, parent.get_span_context().span_id)


def test_with_telemetry_off_a_carrier_is_dropped_and_the_call_runs() -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsightWarning)  # the missing-telemetry warning, tested below
        assert Worker().sync(4, **{TRACE_CONTEXT_KWARG: carrier}) == (4, (0, 0))


def test_spans_inside_the_call_are_children_of_the_callers_span(capture: Capture) -> None:
    @accepts_trace_context
    def train() -> None:
        with span(RL.TRAINING, "rl.test.train"):
            pass

    with umbrella_span(RL.STEP, "rl.test.step") as step:
        carrier = trace_context_kwargs()
    train(**carrier)
    (child,) = [s for s in capture.spans() if s.name == "rl.test.train"]
    assert child.parent is not None and child.parent.span_id == step.get_span_context().span_id


# -- the packed carrier dispatch sends -------------------------------------------------------

def _packed_now() -> bytes:
    """What dispatch_with_trace_context sends for the current span (Ray passes bytes as they are)."""
    from rlsight.propagation import _built_carrier

    built = _built_carrier()
    assert built is not None
    return built[2]


class _Remote:
    """Anything with ``.remote`` is a dispatch target (docs); this one keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def remote(self, *args: Any, **kwargs: Any) -> None:
        self.sent.append((args, kwargs))


def test_dispatch_sends_the_packed_carrier_and_the_callee_joins_the_trace(capture: Capture) -> None:
    from rlsight.propagation import dispatch_with_trace_context

    target = _Remote()
    with umbrella_span(RL.STEP, "rl.test.step") as step:
        dispatch_with_trace_context(target, 3)
        carrier = current_trace_carrier()
    assert carrier is not None
    ((args, kwargs),) = target.sent
    assert kwargs == {TRACE_CONTEXT_KWARG: carrier["traceparent"].encode()}
    # Run later, outside the caller's span, as a Ray worker would.
    assert Worker().sync(*args, **kwargs) == (3, (step.get_span_context().trace_id,
                                                  step.get_span_context().span_id))


def test_the_packed_carrier_is_the_dict_carrier_packed(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent"):
        carrier, packed = current_trace_carrier(), _packed_now()
    assert carrier is not None and packed == carrier["traceparent"].encode()


@pytest.mark.parametrize("method", ["sync", "coro", "gen", "agen"])
def test_a_packed_carrier_parents_every_kind_of_callee_like_the_dict(capture: Capture, method: str) -> None:
    worker = Worker()

    def call(carrier: object) -> tuple[int, int]:
        kwargs = {TRACE_CONTEXT_KWARG: carrier}
        if method == "sync":
            return worker.sync(1, **kwargs)[1]
        if method == "coro":
            return asyncio.run(worker.coro(1, **kwargs))[1]
        if method == "gen":
            return next(iter(worker.gen(1, **kwargs)))[1]

        async def first() -> tuple[int, int]:
            async for _, ids in worker.agen(1, **kwargs):
                return ids
            raise AssertionError("empty")
        return asyncio.run(first())

    with umbrella_span(RL.STEP, "rl.test.step") as step:
        carrier, packed = current_trace_carrier(), _packed_now()
    ids = (step.get_span_context().trace_id, step.get_span_context().span_id)
    assert call(packed) == ids == call(carrier)


def test_a_packed_carrier_keeps_the_tracestate(capture: Capture) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    @accepts_trace_context
    def state() -> list[tuple[str, str]]:
        return list(trace.get_current_span().get_span_context().trace_state.items())

    assert state(**{TRACE_CONTEXT_KWARG: f"{parent},a=1,b=2".encode()}) == [("a", "1"), ("b", "2")]
    assert state(**{TRACE_CONTEXT_KWARG: f"{parent},a=1,b=2".encode()}) == [("a", "1"), ("b", "2")]
    assert state(**{TRACE_CONTEXT_KWARG: parent.encode()}) == []


@pytest.mark.parametrize(
    "packed",
    [b"not-a-traceparent", b"\xff\xfe", b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
     b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01,=bad", b"0" * 2000],
    ids=["garbage", "not-text", "zero-trace", "bad-tracestate", "huge"],
)
def test_a_malformed_packed_carrier_warns_and_runs_as_a_new_root(packed: bytes) -> None:
    with capture_telemetry():
        with span(RL.TRAINING, "rl.test.local_parent"):
            with pytest.warns(RlsightWarning, match="echo received a malformed trace carrier"):
                echo(1, **{TRACE_CONTEXT_KWARG: packed})
            with pytest.warns(RlsightWarning, match="malformed"):
                _, ids = Worker().sync(1, **{TRACE_CONTEXT_KWARG: packed})
    assert ids == (0, 0)


# -- hostile input -------------------------------------------------------------------------

def test_the_malformed_carrier_warning_names_the_callee_and_points_at_the_call(capture: Capture) -> None:
    with pytest.warns(RlsightWarning, match=r"echo received a malformed trace carrier") as seen:
        echo(1, **{TRACE_CONTEXT_KWARG: {"traceparent": "00-zz"}})
    assert seen[0].filename == __file__


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
_hex = st.text("0123456789abcdef", min_size=0, max_size=34)
_traceparents = st.builds(lambda *parts: "-".join(parts), _hex, _hex, _hex, _hex) | st.text(max_size=70)
_carriers = (
    _json
    | st.text("0123456789abcdef-,=a ", max_size=120).map(str.encode)
    | st.fixed_dictionaries({"traceparent": _traceparents | _json})
    | st.fixed_dictionaries(
        {"traceparent": _traceparents, "tracestate": st.text(max_size=1200) | _json}
    )
)


def test_any_carrier_never_fails_a_decorated_call() -> None:
    @settings(max_examples=300, deadline=None)
    @given(carrier=_carriers)
    def call_with(carrier: object) -> None:
        with span(RL.TRAINING, "rl.test.local_parent"):
            assert echo("ok", **{TRACE_CONTEXT_KWARG: carrier}) == "ok"
            assert list(Worker().gen(2, **{TRACE_CONTEXT_KWARG: carrier})) != []

    # One runtime for every example: setting one up per example would dominate the test.
    with capture_telemetry(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsightWarning)
        call_with()


def test_a_carrier_arriving_where_telemetry_is_off_warns_naming_the_fix() -> None:
    """The sign that ray_runtime_env was forgotten: carriers arrive, nothing records (#9.3)."""
    from rlsight.errors import reset_warn_once
    from rlsight.propagation import TRACE_CONTEXT_KWARG
    from rlsight.runtime import active_runtime

    assert active_runtime() is None
    reset_warn_once()

    @accepts_trace_context
    def work() -> int:
        return 1

    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with pytest.warns(RlsightWarning, match="no rlsight telemetry.*ray_runtime_env"):
        assert work(**{TRACE_CONTEXT_KWARG: carrier}) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert work(**{TRACE_CONTEXT_KWARG: carrier}) == 1  # once, not per call
