"""Span helpers: the gate first, then OpenTelemetry.

Every helper tests its group against the enabled set before it builds a name, an attribute
dict or touches OpenTelemetry; a disabled helper returns one shared, stateless no-op whose
``with`` costs two method calls. Enabled helpers stamp the wire vocabulary: ``rl.span_group``,
``rl.bucket`` (leaf spans), ``thread.id``. Attribute keyword arguments without a dot are put
under ``rl.`` (``batch_size=8`` becomes ``rl.batch_size``); pass dotted keys with
``**{"gen_ai.request.model": m}``.

Telemetry never changes the user's exception: a failing block is recorded on its span (error
status ``"Type: message"``) and re-raised unchanged.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import time
from collections.abc import Callable, Generator, Mapping
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from rlsight import runtime as _runtime
from rlsight._redact import REDACTED_KEYS
from rlsight._resume import attached_agen_function, attached_gen
from rlsight._semconv import (
    EFFICIENCY_SPAN_PREFIX,
    JOB_SPAN,
    LOAD_MODEL_SPAN,
    SETUP_SPAN_PREFIX,
    STARTUP_SPAN,
    STEP,
    STEP_SPAN,
    STEP_VALUE,
    TOTAL_STEPS,
)
from rlsight._span_manager import (
    CONCURRENT_MEASUREMENT,
    NOOP,
    SPAN_MEASUREMENT,
    AsyncFromSync,
    LiveSpan,
    clean_attributes,
)
from rlsight.buckets import PER_PROMPT, Bucket
from rlsight.errors import warn_once
from rlsight.groups import GATE, RL
from rlsight.span_context import SpanContextManager

__all__ = [
    "BUILTIN_EFFICIENCY_CATEGORIES",
    "BUILTIN_UNBUCKETED_EFFICIENCY_CATEGORIES",
    "REDACTED_KEYS",
    "declare_efficiency_categories",
    "declared_efficiency_categories",
    "efficiency_span",
    "job_span",
    "load_model_span",
    "record_efficiency_seconds",
    "record_span",
    "setup_span",
    "span",
    "startup_span",
    "step_span",
    "traced",
    "umbrella_span",
    "umbrella_traced",
]

F = TypeVar("F", bound=Callable[..., Any])

_PER_PROMPT: Final = RL.PER_PROMPT
_EFFICIENCY_GROUP: Final = RL.EFFICIENCY
#: The gate's set of registered groups that are off: the one object for the life of the
#: process (``groups`` updates it in place), bound here so a disabled helper tests it after
#: one global load (benchmarks/bench_gate.py).
_OFF: Final = GATE.off


def _warn_unknown_group(group: str) -> None:
    """A span of a group nothing registered: a typo, or a library not imported here (#9.5)."""
    from rlsight.groups import REGISTRY

    with REGISTRY.lock:
        described = REGISTRY.describe()
    warn_once(
        f"span-unknown-group:{group}",
        f"rlsight: span group {group!r} is not registered in this process, so its spans are "
        f"never emitted; fix the name or register it with register_span_groups ({described})",
        stacklevel=4,
    )


def _warn_efficiency_group(name: str) -> None:
    warn_once(
        "span-efficiency-group",
        f"rlsight: span(RL.EFFICIENCY, {name!r}) records no bucket (the group has none of its "
        "own); use efficiency_span('<bucket>/<reason>', concurrent=...) so the wait is counted",
        stacklevel=3,
    )


def span(group: str, name: str, /, **attributes: Any) -> SpanContextManager:
    """A span of ``group`` named ``name``, as a sync or async context manager.

    Yields the OpenTelemetry span (a non-recording one when the group is off), so
    ``s.set_attribute(...)`` works either way. The span's bucket is, first to last: the one
    passed as ``bucket=`` (a :class:`~rlsight.Bucket` or its name; an invalid value warns
    once), that of an enclosing :func:`~rlsight.buckets.bucket_scope`, its group's. A group
    nothing registered (a typo) warns once and emits nothing.

    Args:
        group: A registered span group (``RL.GENERATION``...).
        name: A literal, lowercase dotted name (``"rl.rollout.generate"``); keep IDs out of
            it, they belong in attributes. ``rlsight check`` reads names from the source.
        **attributes: Scalars or lists of scalars; content keys are redacted (only here:
            ``set_attribute`` on the yielded span writes what it is given). Pass
            ``concurrent=True`` (it becomes ``rl.concurrent``) for work that overlaps other
            work of its timeline, such as an async fan-out: it never partitions wall time.
    """
    # One set test for a registered group that is off; no keyword-only parameters here:
    # each one costs the disabled call ~10 ns.
    if group in _OFF:
        return NOOP
    enabled = GATE.enabled
    if group not in enabled:
        if group not in GATE.groups:
            _warn_unknown_group(group)
        return NOOP
    if _PER_PROMPT not in enabled and PER_PROMPT.get():
        return NOOP
    if group == _EFFICIENCY_GROUP and "bucket" not in attributes:
        _warn_efficiency_group(name)
    return LiveSpan(group, name, attributes)


#: Nanoseconds since the epoch are int64 in OTLP: seconds up to the year 2262.
_LAST_EPOCH_S: Final = 2**63 / 1e9
#: 2001-09-09: no run is older. ``time.perf_counter()`` and ``time.monotonic()`` values count
#: seconds since boot, far below it; passed by mistake they drew a span in 1970 and a run
#: wall of half a million hours.
_FIRST_EPOCH_S: Final = 1e9


def record_span(group: str, name: str, start: float, end: float, /, **attributes: Any) -> None:
    """Record a span of ``group`` whose times were measured elsewhere, after the fact.

    Use it where a framework already timed a phase (``t0 = time.time(); ...; t1 = time.time()``)
    and the code cannot be wrapped in :func:`span`. The span is a child of the span current
    where ``record_span`` is called and gets its group's bucket, exactly as :func:`span` would.

    Args:
        group: A registered span group, as for :func:`span`.
        name: A literal, lowercase dotted name; ``rlsight check`` reads it from the source.
        start: When the work began, in seconds since the epoch (``time.time()``).
        end: When it ended, same clock; a span with ``end < start``, or with times that
            cannot be seconds since the epoch (``time.time_ns()`` or ``time.perf_counter()``
            values), is skipped with one
            warning per name, since it would corrupt the goodput rollup.
        **attributes: As for :func:`span`.
    """
    if group in _OFF:
        return
    enabled = GATE.enabled
    if group not in enabled or (_PER_PROMPT not in enabled and PER_PROMPT.get()):
        return
    if not end >= start:  # also catches NaN
        warn_once(
            f"record-span-backwards:{name}",
            f"rlsight: record_span({group!r}, {name!r}, start={start!r}, end={end!r}): end is before "
            "start; pass time.time() values with start first. The span is skipped",
            stacklevel=2,
        )
        return
    if not (start >= _FIRST_EPOCH_S and end < _LAST_EPOCH_S):
        warn_once(
            f"record-span-range:{name}",
            f"rlsight: record_span({group!r}, {name!r}, start={start!r}, end={end!r}): the times "
            "are not seconds since the epoch; pass time.time() values, not time.time_ns(), "
            "milliseconds or time.perf_counter() / time.monotonic(). The span is skipped",
            stacklevel=2,
        )
        return
    live = LiveSpan(group, name, attributes)
    started = live.start(int(start * 1e9))
    if started is None:
        return
    try:
        started.end(int(end * 1e9))
    except Exception as exc:
        rt = _runtime._ACTIVE
        if rt is not None:
            rt.report_internal_error("record-span-end", exc)


def umbrella_span(group: str, name: str, /, **attributes: Any) -> SpanContextManager:
    """A structural span (job, step, rollout, startup...) that carries no bucket.

    Umbrellas give the trace its shape and count towards the depth of their descendants, but
    never claim wall time themselves: the leaves inside them do.
    """
    if group in _OFF:
        return NOOP
    if group not in GATE.enabled:
        if group not in GATE.groups:
            _warn_unknown_group(group)
        return NOOP
    return LiveSpan(group, name, attributes, umbrella=True)


def job_span(**attributes: Any) -> SpanContextManager:
    """The run's root span, ``rl.job``; open it once in the driver around everything.

    ``total_steps=N`` (recorded as ``rl.total_steps``) lets ``rlsight watch`` say how far the run
    is and how long the rest should take.
    """
    if RL.JOB not in GATE.enabled:
        return NOOP
    for key in ("total_steps", TOTAL_STEPS):  # ``**{"rl.total_steps": "200"}`` is the same
        total = attributes.get(key)
        if total is not None and not (type(total) is int and total >= 1):
            attributes[key] = _total_steps(total)
    return _JobSpan(RL.JOB, JOB_SPAN, attributes, umbrella=True)


def _total_steps(total: object) -> int | None:
    """``total_steps`` as a positive int (``"200"`` from a YAML or a command line included),
    or ``None`` after one warning: only watch's progress line reads it, so it never fails a run."""
    number = None
    if not isinstance(total, bool):
        try:
            number = int(total)  # type: ignore[call-overload]
            if not (number >= 1 and (isinstance(total, str) or number == total)):
                number = None
        except (TypeError, ValueError, OverflowError):
            number = None
    if number is None:
        warn_once(f"job-total-steps:{total!r}",
                  f"rlsight: job_span(total_steps={total!r}) is not a number of steps (a whole "
                  "number >= 1); it is left out, so `rlsight watch` shows no planned length",
                  stacklevel=3)
    return number


class _JobSpan(LiveSpan):
    __slots__ = ()

    def finish(self, exc: BaseException | None) -> None:
        # The run is over: what follows (ray.shutdown, a final upload) is teardown, never a
        # stall, as startup is not one either.
        rt = _runtime._ACTIVE
        if rt is not None and rt.watchdog is not None and self._span is not None:
            rt.watchdog.progress.job_ended()
        super().finish(exc)


def startup_span() -> SpanContextManager:
    """``rl.startup``: the umbrella over everything before step 1 (Ray init, workers, fill)."""
    if RL.STARTUP not in GATE.enabled:
        return NOOP
    return LiveSpan(RL.STARTUP, STARTUP_SPAN, None, umbrella=True)


class _StepSpan(LiveSpan):
    __slots__ = ("_step",)

    def __init__(self, step: int | None, attrs: Mapping[str, Any]) -> None:
        super().__init__(RL.STEP, STEP_SPAN, attrs, umbrella=True)
        self._step = step

    def start(self, start_time: int | None = None) -> Span | None:
        rt = _runtime._ACTIVE
        if rt is not None:
            rt.current_step = self._step
            if rt.watchdog is not None:
                rt.watchdog.progress.started(self._step)
        return super().start(start_time)

    def finish(self, exc: BaseException | None) -> None:
        # The watchdog hears of the end before the span processors run: ending a step can
        # take a while (the driver's goodput roll-up; its first call imports numpy), and that
        # is not the run failing to make progress.
        span = self._span
        rt = _runtime._ACTIVE
        if rt is not None and rt.watchdog is not None and span is not None:
            start = getattr(span, "start_time", None)
            if start is not None:
                rt.watchdog.progress.ended_step((time.time_ns() - start) / 1e9)
        super().finish(exc)


def whole_step(step: Any) -> int | None:
    """``step`` as an int when ``int()`` takes it without dropping a fraction (``5``, ``"5"``,
    ``6.0``, a numpy integer), else ``None`` (``2.5``, ``None``, ``"first"``, ``inf``).

    The one reading of a step number for spans and metrics alike, so one step's span and its
    metric points never disagree on ``rl.step``.
    """
    if type(step) is int:
        return step
    number: int | None
    try:
        number = int(step)
    except Exception:  # None, "first", inf (OverflowError), nan, an __int__ that raises
        return None
    if not isinstance(step, str):
        try:
            whole = bool(number == step)
        except Exception:  # a comparison that fails says nothing against the number
            whole = True
        if not whole:
            return None
    return number


def _step_number(step: Any) -> int | None:
    """``step`` as the int ``rl.step``, or ``None`` (after one warning) when it is no whole
    number: ``2.5``, ``None``, ``"first"``, ``inf``.

    Never an error: a loop whose step is ``samples_seen / batch`` is whole until an epoch's
    partial batch, so a refusal would kill a run mid-way (with telemetry off too), and
    truncating (1, 1.5, 2, 2.5 as 1, 1, 2, 2) would repeat step numbers, which the report reads
    as restarts and counts as wasted time. A step with no number is recorded without
    ``rl.step`` (see :func:`step_span`), which no restart can be read from.
    """
    number = whole_step(step)
    if number is None:
        warn_once(
            "step-span-not-whole",
            f"rlsight: step_span({step!r}): the step is not a whole number, so its rl.step span "
            f"is recorded without rl.step (with rl.step.value where it is a finite number) and "
            "never reads as a restart; pass the loop's integer step counter, e.g. "
            "`with step_span(global_step):` (this warning is shown once)",
            stacklevel=3,
        )
    return number


def step_value(step: Any) -> float | None:
    """A step that is no whole number, as the float ``rl.step.value``: ``None`` where it is no
    finite number (``None``, ``"first"``, ``inf``)."""
    try:
        value = float(step)
    except Exception:
        return None
    return value if math.isfinite(value) else None


def step_span(step: int, /, **attributes: Any) -> SpanContextManager:
    """``rl.step`` with the int attribute ``rl.step``: one training step on the controller.

    Also sets the runtime's current step, which the logging bridge stamps on log records
    (``rl_step``), even when the ``step`` group is off.

    ``step`` is an int, or anything ``int()`` turns into one without dropping a fraction
    (``"5"``, ``6.0``). Anything else (``2.5``, ``None``, ``"first"``) never fails the run:
    one warning, and the block runs under an ``rl.step`` span without ``rl.step`` (the report
    lists it as step -1 and never reads it as a restart), carrying the number as the float
    ``rl.step.value`` where it is a finite one; the current step is then ``None``.
    """
    number = _step_number(step)
    rt = _runtime._ACTIVE
    if RL.STEP not in GATE.enabled:
        if rt is not None:
            rt.current_step = number
        return NOOP
    attributes.pop(STEP, None)  # the step is the argument: never a second, contradicting one
    if number is None:
        attributes.pop("step", None)
        value = step_value(step)
        if value is not None:
            attributes[STEP_VALUE] = value
    else:
        attributes["step"] = number
    return _StepSpan(number, attributes)


def load_model_span(backend: str, /, **attributes: Any) -> SpanContextManager:
    """``rl.worker.load_model``, opened in the worker itself (the driver cannot see inside).

    Args:
        backend: What loads the weights (``"megatron"``, ``"dtensor"``, ``"vllm"``...), recorded
            as ``rl.backend`` so backends can be compared.
    """
    if RL.SETUP not in GATE.enabled:
        return NOOP
    attributes["backend"] = backend
    return LiveSpan(RL.SETUP, LOAD_MODEL_SPAN, attributes, umbrella=True)


class _SetupSpan(AsyncFromSync):
    """``rl.setup.<phase>`` plus the ``rl.setup.duration{phase}`` histogram."""

    __slots__ = ("_inner", "_phase", "_t0")

    def __init__(self, phase: str) -> None:
        self._phase = phase
        self._inner = LiveSpan(RL.SETUP, SETUP_SPAN_PREFIX + phase, None, umbrella=True)
        self._t0 = 0.0

    def __enter__(self) -> Span:
        self._t0 = time.perf_counter()
        return self._inner.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = time.perf_counter() - self._t0
        try:
            self._inner.__exit__(exc_type, exc, tb)
        finally:
            rt = _runtime._ACTIVE
            if rt is not None:
                try:
                    rt.record_setup_duration(self._phase, elapsed)
                except Exception as err:
                    rt.report_internal_error("setup-duration", err)



def setup_span(phase: str) -> SpanContextManager:
    """``rl.setup.<phase>`` under ``rl.startup``, and its duration on ``rl.setup.duration``.

    With the ``setup`` group off it is the shared no-op: neither the span nor the histogram
    point is recorded, so a disabled group costs one set-membership test, as every other.

    Args:
        phase: A short literal (``"ray"``, ``"workers"``, ``"initial_fill"``); it becomes part
            of the span name and the ``phase`` metric attribute, so keep it bounded.
    """
    if RL.SETUP not in GATE.enabled:
        return NOOP
    return _SetupSpan(phase)


# -- efficiency ----------------------------------------------------------------------------

#: Declared efficiency categories. Process-scoped: declared at import, once per process;
#: tests put them back with ``rlsight.testing.isolated_registries``.
_EFFICIENCY: dict[str, tuple[str, Bucket | None]] = {}
_EFFICIENCY_LOCK: Final = threading.Lock()
_BUCKET_NAMES: Final = frozenset(b.value for b in Bucket)


def declare_efficiency_categories(*categories: str, bucketed: bool = True) -> None:
    """Declare the ``<prefix>/<reason>`` categories :func:`efficiency_span` may use.

    Categories are declared up front so docs, dashboards and ``rlsight check`` know the full
    list. A bucketed category's prefix is the bucket its time is counted in
    (``idle/buffer_starvation``). With ``bucketed=False`` the prefix is free (``collector/loop``,
    ``init/total``): the category's seconds are measured and reported on
    ``rl.efficiency.seconds``, but its spans claim no bucket, so they never partition wall
    time. Use that for time that overlaps the controller's own (a background collector's
    loop) or that sums other categories (the whole of initialisation).

    Raises:
        ValueError: a category is not ``<prefix>/<reason>``, or a bucketed one's prefix is not
            a bucket, or an unbucketed one's prefix is a bucket name.
    """
    for category in categories:
        problem = _category_problem(category, bucketed)
        if problem is not None:
            raise ValueError(problem)
        prefix = category.partition("/")[0]
        name = EFFICIENCY_SPAN_PREFIX + category.replace("/", ".")
        with _EFFICIENCY_LOCK:
            _EFFICIENCY[category] = (name, Bucket(prefix) if bucketed else None)


def _category_problem(category: str, bucketed: bool) -> str | None:
    """Why ``category`` cannot be declared with ``bucketed``, or ``None`` when it can."""
    prefix, sep, reason = category.partition("/")
    if not sep or not reason or not prefix or "/" in reason:
        return (f"efficiency category {category!r} must look like '<bucket>/<reason>' with "
                "bucket one of productive, overhead, idle, wasted (e.g. 'idle/buffer_starvation'), "
                "or '<prefix>/<reason>' with bucketed=False")
    if bucketed and prefix not in _BUCKET_NAMES:
        return (f"efficiency category {category!r} must look like '<bucket>/<reason>' with "
                "bucket one of productive, overhead, idle, wasted (e.g. 'idle/buffer_starvation'); "
                "declare it with bucketed=False if its time belongs to no bucket")
    if not bucketed and prefix in _BUCKET_NAMES:
        return (f"efficiency category {category!r} is declared with bucketed=False but its prefix "
                f"is the bucket {prefix!r}; drop bucketed=False or pick another prefix")
    return None


def _warn_undeclared(category: str, skipped: str) -> None:
    """Warn once that an emit site used ``category``, which was never declared, with a fix that
    works: the declaration it needs, or, for a name no declaration accepts, the shape to use."""
    if _category_problem(category, bucketed=True) is None:
        problem = (f"efficiency category {category!r} was never declared; call "
                   f"declare_efficiency_categories({category!r}) at import")
    elif _category_problem(category, bucketed=False) is None:
        problem = (f"efficiency category {category!r} was never declared, and its prefix is no "
                   "bucket (productive, overhead, idle, wasted); call "
                   f"declare_efficiency_categories({category!r}, bucketed=False) at import, or "
                   "name a bucket")
    else:
        problem = (f"{category!r} is not an efficiency category: categories look like "
                   "'<bucket>/<reason>' (e.g. 'idle/buffer_starvation')")
    warn_once(f"efficiency-undeclared:{category}", f"rlsight: {problem}. The {skipped} skipped",
              stacklevel=3)


def efficiency_table() -> dict[str, tuple[str, Bucket | None]]:
    """Category -> (span name, bucket or ``None``), a copy (the run catalog records it)."""
    with _EFFICIENCY_LOCK:
        return dict(_EFFICIENCY)


def snapshot_efficiency() -> Callable[[], None]:
    """A function that puts the declared categories back as they are now (for tests: see
    :func:`rlsight.testing.isolated_registries`; declarations are process-wide by design)."""
    saved = efficiency_table()

    def restore() -> None:
        with _EFFICIENCY_LOCK:
            _EFFICIENCY.clear()
            _EFFICIENCY.update(saved)

    return restore


def declared_efficiency_categories() -> tuple[str, ...]:
    """Every declared category, sorted."""
    with _EFFICIENCY_LOCK:
        return tuple(sorted(_EFFICIENCY))


def efficiency_span(category: str, *, concurrent: bool = False) -> SpanContextManager:
    """Wrap a wait or wasted work: ``efficiency_span("idle/buffer_starvation")``.

    Wrap only the wait itself (the sleep, the blocking get), never the block around it: any
    work inside would be counted as waiting too. The span's time also accumulates into the
    per-step ``rl.efficiency.seconds{category}`` metric, with
    ``rl.efficiency.measurement="span"``.

    Args:
        category: A declared ``<bucket>/<reason>``.
        concurrent: The wait overlaps other work of its thread, as in a background asyncio
            task (a producer paused during weight sync) on the controller's event loop. It
            keeps its bucket and category and still feeds the metric, but is tagged
            ``rl.concurrent`` and never partitions wall time, so it cannot take the
            controller's seconds away from the step's own spans.
    """
    if RL.EFFICIENCY not in GATE.enabled:
        return NOOP
    declared = _EFFICIENCY.get(category)
    if declared is None:
        _warn_undeclared(category, "span is")
        return NOOP
    name, bucket = declared
    return LiveSpan(RL.EFFICIENCY, name, CONCURRENT_MEASUREMENT if concurrent else SPAN_MEASUREMENT,
                     bucket=bucket, category=category)


def record_efficiency_seconds(category: str, seconds: float) -> None:
    """Add efficiency seconds measured elsewhere (a framework's own timer, a log) to the step.

    They join ``rl.efficiency.seconds`` and ``rl.efficiency.pct`` at the next
    :func:`~rlsight.tee_step_metrics`, with ``rl.efficiency.measurement="reported"`` so a
    dashboard can tell them from span-measured seconds. No span is made: reported seconds are
    metrics only and do not enter the trace's goodput partition (wrap the wait in
    :func:`efficiency_span` for that). A no-op without telemetry.

    Args:
        category: A declared category (``declare_efficiency_categories``).
        seconds: Non-negative and finite; anything else is skipped with one warning.
    """
    rt = _runtime._ACTIVE
    if rt is None:
        return
    if category not in _EFFICIENCY:
        _warn_undeclared(category, "seconds are")
        return
    if not (isinstance(seconds, (int, float)) and 0 <= seconds < float("inf")):
        warn_once(
            f"efficiency-seconds:{category}",
            f"rlsight: record_efficiency_seconds({category!r}, {seconds!r}): seconds must be a "
            "finite number >= 0; skipped",
            stacklevel=2,
        )
        return
    rt.add_efficiency_seconds(category, float(seconds), "reported")


#: The categories rlsight declares itself (docs/span-groups.md lists these).
#: ``wasted/lost_worker`` is the report's own: the caller's wait on work a replaced worker lost
#: (``rlsight.analysis.live.lost_work``); declared so that ``rlsight check`` and the docs know it.
BUILTIN_EFFICIENCY_CATEGORIES: Final = (
    "idle/buffer_starvation", "idle/refit_bubble", "idle/generation_wait", "idle/barrier",
    "wasted/stale_discard", "wasted/aborted_rollout", "wasted/recompute", "wasted/lost_worker",
)
#: Built-in categories that claim no bucket: a collector's loop, the whole initialisation.
BUILTIN_UNBUCKETED_EFFICIENCY_CATEGORIES: Final = ("collector/loop", "init/total")
declare_efficiency_categories(*BUILTIN_EFFICIENCY_CATEGORIES)
declare_efficiency_categories(*BUILTIN_UNBUCKETED_EFFICIENCY_CATEGORIES, bucketed=False)


# -- decorators ----------------------------------------------------------------------------

def _wrap(fn: F, group: str, name: str, attrs: Mapping[str, Any], umbrella: bool) -> F:
    # Fixed attributes are validated and redacted once, here; a bad one warns at the
    # decorator's line rather than on every call.
    fixed = clean_attributes(attrs, stacklevel=5)

    def live() -> LiveSpan:
        return LiveSpan(group, name, fixed, umbrella=umbrella, clean=False)

    if group not in GATE.groups:
        # Checked once, when decorating: a wrapper's disabled path stays one set test.
        _warn_unknown_group(group)
    wrapper: Callable[..., Any]
    if inspect.isasyncgenfunction(fn):
        def start(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[Context | None, Callable[[BaseException | None], None] | None]:
            if group not in GATE.enabled:
                return None, None
            span_cm = live()
            started = span_cm.start()
            if started is None:
                return None, None
            return _trace.set_span_in_context(started), span_cm.finish

        wrapper = attached_agen_function(fn, start)
    elif inspect.iscoroutinefunction(fn):
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if group not in GATE.enabled:
                return await fn(*args, **kwargs)
            with live():
                return await fn(*args, **kwargs)
        wrapper = async_wrapper
    elif inspect.isgeneratorfunction(fn):
        def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            gen = fn(*args, **kwargs)
            if group not in GATE.enabled:
                return (yield from gen)
            return (yield from _traced_gen(gen, live()))
        wrapper = gen_wrapper
    else:
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            if group not in GATE.enabled:
                return fn(*args, **kwargs)
            with live():
                return fn(*args, **kwargs)
        wrapper = sync_wrapper
    return cast(F, functools.wraps(fn)(wrapper))


def traced(group: str, /, name: str | None = None, **attributes: Any) -> Callable[[F], F]:
    """Decorate a sync, async, generator or async-generator function with a span per call.

    The name (default: the function's ``__qualname__``) and attributes are fixed when
    decorating; the gate is checked on every call. For generators the span covers the whole
    iteration, and its context is attached around each resume, never across a ``yield``, so
    a consumer that resumes from another task or thread does not inherit it.
    """

    def decorate(fn: F) -> F:
        return _wrap(fn, group, name or fn.__qualname__, attributes, umbrella=False)

    return decorate


def umbrella_traced(group: str, /, name: str | None = None, **attributes: Any) -> Callable[[F], F]:
    """:func:`traced` for umbrella groups: the span structures the trace and has no bucket."""

    def decorate(fn: F) -> F:
        return _wrap(fn, group, name or fn.__qualname__, attributes, umbrella=True)

    return decorate


def _traced_gen(gen: Generator[Any, Any, Any], live: LiveSpan) -> Generator[Any, Any, Any]:
    span = live.start()
    if span is None:
        return (yield from gen)
    error: BaseException | None = None
    try:
        return (yield from attached_gen(gen, _trace.set_span_in_context(span)))
    except BaseException as exc:
        error = exc
        raise
    finally:
        live.finish(error)
