"""Trace context across process boundaries: Ray actor calls, tasks, threads and collectors.

Ray does not carry OpenTelemetry context across an actor or task call, so without help every
span a worker opens starts a trace of its own. The two halves are wired by hand:

* the caller sends the W3C trace context as one extra keyword argument:
  :func:`dispatch_with_trace_context` or ``handle.method.remote(..., **trace_context_kwargs())``.
  Both send it packed as bytes (the ``traceparent``, then ``,tracestate`` when there is one):
  Ray passes bytes through without serialising them, which a dict costs it on both sides of
  every call;
* the callee is decorated with :func:`accepts_trace_context`, which pops that keyword and
  attaches the context for the duration of the call. It reads the packed form and the
  ``{"traceparent": ..., "tracestate": ...}`` dict alike (what :func:`current_trace_carrier`
  returns, and what older callers send).

The carrier of a span is built once and reused while the span is current, so a fan-out to 64
actors injects once, not 64 times. A carrier that cannot be read never fails the call: the
callee warns once and the call runs as a new root. With telemetry off nothing is sent, so
a disabled run passes no extra keyword at all.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Generator
from typing import Any, Final, Protocol, TypeAlias, TypeVar, cast

from opentelemetry import context as _context
from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rlsight import runtime as _runtime
from rlsight._resume import AttachedContext, attached_agen_function, attached_gen
from rlsight.errors import warn_once

__all__ = [
    "TRACE_CONTEXT_KWARG",
    "TraceCarrier",
    "accepts_trace_context",
    "attach_trace_carrier",
    "current_trace_carrier",
    "dispatch_with_trace_context",
    "trace_context_kwargs",
]

F = TypeVar("F", bound=Callable[..., Any])

#: A W3C trace-context carrier: ``{"traceparent": ..., "tracestate": ...}``. Treat it as
#: read-only: the same dict is handed to every call made while its span is current.
TraceCarrier: TypeAlias = dict[str, str]

#: Between the traceparent and the tracestate of a packed carrier; a traceparent has no comma.
_PACKED_SEPARATOR: Final = ","

#: The keyword argument that carries the context into a decorated callee. Private-looking on
#: purpose (like Ray's own ``_ray_trace_ctx``): it must never collide with a user's argument.
TRACE_CONTEXT_KWARG: Final = "_rlsight_trace_ctx"

_MARK: Final = "__rlsight_accepts_trace_context__"
_PROPAGATOR: Final = TraceContextTextMapPropagator()

# Built carriers are cached on the runtime (run_state.carriers), by span id. Cleared when full
# rather than kept in LRU order: a step opens a bounded number of spans, and a rebuild costs
# one inject.
_CARRIER_CACHE_LIMIT: Final = 1024

# Parsed remote spans are cached on the runtime (run_state.remote_spans), by (traceparent,
# tracestate): an actor called repeatedly with the same carrier (one step's fan-out, a stream)
# parses it once.
_REMOTE_CACHE_LIMIT: Final = 256

# W3C Trace Context level 1 (https://www.w3.org/TR/trace-context/). A future version may
# append fields after the flags; version 00 may not, and version ff is forbidden.
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACEPARENT_MAX: Final = 512
_TRACESTATE_MAX: Final = 512  # the length W3C asks vendors to propagate; more is "huge"
_TRACESTATE_MEMBERS_MAX: Final = 32
_TRACESTATE_MEMBER: Final = re.compile(
    r"([a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=([\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e])"
)
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16

# -- caller side ---------------------------------------------------------------------------

def current_trace_carrier() -> TraceCarrier | None:
    """The carrier of the current span, or ``None`` when telemetry is off or no span is open.

    Hand it to work that runs later or elsewhere and outlives the caller's ``with`` block: a
    long-lived thread, a trajectory collector, a queue consumer. That worker re-attaches it
    per unit of work with :func:`attach_trace_carrier`, so its spans join the caller's trace.

    The carrier is built once per span and the same dict is returned while that span is
    current; do not modify it.
    """
    built = _built_carrier()
    return None if built is None else built[1]


def _built_carrier() -> tuple[int, TraceCarrier, bytes] | None:
    """(trace id, carrier, carrier packed) of the current span, built once per span."""
    runtime = _runtime._ACTIVE
    if runtime is None:
        return None
    context = _trace.get_current_span().get_span_context()
    span_id = context.span_id
    carriers = runtime.run_state.carriers
    cached = carriers.get(span_id)
    if cached is not None and cached[0] == context.trace_id:
        return cached
    if not context.is_valid:
        return None
    carrier: TraceCarrier = {}
    _PROPAGATOR.inject(carrier)
    parent = carrier.get("traceparent", "")
    state = carrier.get("tracestate")
    packed = (parent + _PACKED_SEPARATOR + state if state else parent).encode()
    if len(carriers) >= _CARRIER_CACHE_LIMIT:
        carriers.clear()
    built = carriers[span_id] = (context.trace_id, carrier, packed)
    return built


def trace_context_kwargs() -> dict[str, bytes]:
    """Keyword arguments that carry the current trace into a decorated Ray method or task.

    Spread them into the call: ``handle.train.remote(batch, **trace_context_kwargs())``. When
    telemetry is off, or no span is open, this is ``{}``: a disabled run passes nothing, and a
    callee that is not decorated is never sent an argument it would reject.

    The one value is the current span's carrier packed as bytes, ``traceparent`` then
    ``,tracestate`` when there is one (``b"00-<trace id>-<span id>-01"``), the form
    :func:`dispatch_with_trace_context` sends: Ray passes bytes through as they are, where a
    dict costs it a serialisation on each side of the call. For the carrier as a dict, use
    :func:`current_trace_carrier`.
    """
    built = _built_carrier()
    if built is None:
        return {}
    _check_ray_runtime_env()
    return {TRACE_CONTEXT_KWARG: built[2]}


def _check_ray_runtime_env() -> None:
    """Warn once when the driver sends carriers into a Ray job without rlsight's runtime_env.

    Without ``ray.init(runtime_env=ray_runtime_env(config))`` workers never set up telemetry:
    the carriers arrive, every worker span is lost, and nothing else says so (issue #9). It
    looks once per run (``run_state.ray_env_checked``), again while Ray is not initialised.
    """
    runtime = _runtime._ACTIVE
    if runtime is None or runtime.run_state.ray_env_checked:
        return
    runtime.run_state.ray_env_checked = True
    ray = sys.modules.get("ray")
    if ray is None:
        return
    try:
        if not ray.is_initialized():
            runtime.run_state.ray_env_checked = False  # Ray may start later: look again then
            return
        context = ray.get_runtime_context()
        if getattr(getattr(context, "worker", None), "mode", None) != ray.SCRIPT_MODE:
            return  # a worker: its own runtime_env is the driver's business
        env_vars = context.runtime_env.get("env_vars") or {}
    except (AttributeError, RuntimeError):
        return
    if not any(str(k).startswith("RLSIGHT_") for k in env_vars):
        warn_once(
            "ray-runtime-env-missing",
            "rlsight: trace carriers are sent to Ray workers, but this Ray job was started "
            "without rlsight's runtime_env, so workers never set up telemetry and their spans "
            "are lost. Start Ray with ray.init(runtime_env=rlsight.ray.ray_runtime_env(config)) "
            "(or merge it into your own runtime_env with ray_runtime_env(config, base=...))",
            stacklevel=4,
        )


class _SupportsRemote(Protocol):
    """What dispatch needs: a Ray actor method, its ``.options(...)``, or a remote function."""

    def remote(self, *args: Any, **kwargs: Any) -> Any: ...


def dispatch_with_trace_context(method: _SupportsRemote, /, *args: Any, **kwargs: Any) -> Any:
    """Call ``method.remote(*args, **kwargs)`` with the current trace carrier added.

    ``method`` is anything with a ``.remote``: ``handle.method``, ``handle.method.options(...)``
    or a ``@ray.remote`` function. Returns what ``.remote`` returns (an ``ObjectRef``, or an
    ``ObjectRefGenerator`` for a streaming method).

    The carrier travels packed as bytes, as :func:`trace_context_kwargs` sends it: the form
    Ray passes through without serialising it.

    Ray validates arguments against the callee's signature when ``.remote`` is called, and
    raises ``TypeError: got an unexpected keyword argument '_rlsight_trace_ctx'`` for a
    callee that is not decorated with :func:`accepts_trace_context`. Then the call is
    retried once without the carrier, a warning names the method (once per method), and later
    calls to it skip the carrier. Its spans start a trace of their own until it is decorated.

    Raises:
        TypeError: the arguments do not fit the callee, carrier aside (Ray's own error).
    """
    # A traced_handle's method would add the carrier itself: dispatch to what it wraps.
    method = getattr(method, "_rlsight_untraced", method)
    built = _built_carrier()
    if built is None or TRACE_CONTEXT_KWARG in kwargs:
        return method.remote(*args, **kwargs)
    _check_ray_runtime_env()
    runtime = _runtime._ACTIVE
    # Methods known to refuse the carrier (Ray's signature check), by "Class.method" name.
    undecorated = runtime.run_state.undecorated if runtime is not None else set()
    if undecorated and _method_name(method) in undecorated:
        return method.remote(*args, **kwargs)
    kwargs[TRACE_CONTEXT_KWARG] = built[2]
    try:
        return method.remote(*args, **kwargs)
    except TypeError as exc:
        if repr(TRACE_CONTEXT_KWARG) not in str(exc):
            raise
    del kwargs[TRACE_CONTEXT_KWARG]
    name = _method_name(method)
    undecorated.add(name)
    warn_once(
        f"undecorated-dispatch:{name}",
        f"rlsight: {name} does not accept a trace carrier (Ray rejected the "
        f"{TRACE_CONTEXT_KWARG!r} keyword); it was called without one and its spans start a new "
        "trace. Decorate it with @rlsight.accepts_trace_context (or its class with "
        "@rlsight.ray.traced_actor)",
        stacklevel=2,
    )
    return method.remote(*args, **kwargs)


def _method_name(method: Any) -> str:
    """``Class.method`` for an actor method, ``module.function`` for a task, else a qualname."""
    target = getattr(method, "_actor_method", method)  # handle.method.options(...) wraps it
    name = getattr(target, "_method_name", None)
    if isinstance(name, str):
        actor = getattr(target, "_actor", None)
        descriptor = getattr(actor, "_ray_actor_creation_function_descriptor", None)
        cls = getattr(descriptor, "class_name", None)
        return f"{cls}.{name}" if isinstance(cls, str) and cls else name
    name = getattr(target, "_function_name", None)  # a @ray.remote function
    if isinstance(name, str):
        return name
    return str(getattr(target, "__qualname__", type(target).__qualname__))


# -- callee side ---------------------------------------------------------------------------

def _describe(value: object) -> str:
    if isinstance(value, str):
        return repr(value[:60] + "...") if len(value) > 60 else repr(value)
    return type(value).__name__


def _malformed(where: str, reason: str, depth: int) -> Context:
    warn_once(
        f"malformed-carrier:{where}",
        f"rlsight: {where} received a malformed trace carrier ({reason}); the call runs as a new "
        "root span. Send carriers built by trace_context_kwargs() or current_trace_carrier()",
        stacklevel=depth + 2,
    )
    return _trace.set_span_in_context(_trace.INVALID_SPAN)


def _carrier_context(carrier: object, where: str, depth: int) -> Context | None:
    """The context to attach for ``carrier``; ``None`` when it carries no trace at all.

    ``carrier`` is a dict, or the bytes :func:`dispatch_with_trace_context` packs it into.
    ``depth`` counts the frames between the caller's line and this function, so a warning
    points at that line.

    Parsed here rather than by the OpenTelemetry propagator: the carrier crossed a process
    boundary and may hold anything, and the propagator assumes string values and logs once
    per call on a bad ``tracestate``, where this warns once per callee and starts a new root.
    """
    if isinstance(carrier, bytes):
        return _packed_context(carrier, where, depth + 1)
    if not isinstance(carrier, dict):
        return _malformed(where, f"expected a dict or packed bytes, got {_describe(carrier)}", depth)
    if not carrier:
        return None
    try:
        parent = carrier.get("traceparent")
        state = carrier.get("tracestate")
    except Exception as exc:  # a key with a hostile __eq__: untrusted input, the call must run
        return _malformed(where, f"unreadable ({type(exc).__name__})", depth)
    if parent is None:
        return None  # W3C: without traceparent there is no context (tracestate is ignored)
    if not isinstance(parent, str):
        return _malformed(where, f"traceparent is {_describe(parent)}, not a str", depth)
    if state is not None and not isinstance(state, str):
        return _malformed(where, f"tracestate is {_describe(state)}, not a str", depth)
    return _remote_context((parent, state), parent, state, where, depth + 1)


def _packed_context(packed: bytes, where: str, depth: int) -> Context | None:
    """:func:`_carrier_context` for a carrier packed as ``traceparent[,tracestate]`` bytes."""
    if not packed:
        return None
    runtime = _runtime._ACTIVE
    span = runtime.run_state.remote_spans.get(packed) if runtime is not None else None
    if span is not None:  # one step's fan-out, a stream: parsed once
        return _trace.set_span_in_context(span)
    if len(packed) > _TRACEPARENT_MAX + 1 + _TRACESTATE_MAX:
        return _malformed(where, f"packed carrier of {len(packed)} bytes", depth)
    try:
        text = packed.decode()
    except UnicodeDecodeError:
        return _malformed(where, f"packed carrier {_describe(repr(packed))} is not text", depth)
    parent, separator, state = text.partition(_PACKED_SEPARATOR)
    return _remote_context(packed, parent, state if separator else None, where, depth + 1)


def _remote_context(
    key: tuple[str, str | None] | bytes, parent: str, state: str | None, where: str, depth: int
) -> Context:
    """The context of the remote span ``parent``/``state``, parsed once per ``key``."""
    runtime = _runtime._ACTIVE
    remote_spans = runtime.run_state.remote_spans if runtime is not None else {}
    span = remote_spans.get(key)
    if span is None:
        parsed = _parse(parent, state)
        if isinstance(parsed, str):
            return _malformed(where, parsed, depth)
        span = parsed
        if len(remote_spans) >= _REMOTE_CACHE_LIMIT:
            remote_spans.clear()
        remote_spans[key] = span
    return _trace.set_span_in_context(span)


def _parse(parent: str, state: str | None) -> NonRecordingSpan | str:
    """The remote span of a W3C carrier, or the reason it is malformed."""
    if len(parent) > _TRACEPARENT_MAX:
        return f"traceparent of {len(parent)} characters"
    match = _TRACEPARENT.fullmatch(parent.strip())
    if match is None:
        return f"traceparent {_describe(parent)} is not W3C"
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return f"traceparent {_describe(parent)} has an invalid version"
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return f"traceparent {_describe(parent)} has an all-zero id"
    pairs: list[tuple[str, str]] = []
    if state is not None:
        if len(state) > _TRACESTATE_MAX:
            return f"tracestate of {len(state)} characters (at most {_TRACESTATE_MAX})"
        seen: set[str] = set()
        for raw in state.split(","):
            member = raw.strip(" \t")
            if not member:
                continue
            m = _TRACESTATE_MEMBER.fullmatch(member)
            if m is None or m.group(1) in seen:
                return f"tracestate member {_describe(member)} is invalid or repeated"
            seen.add(m.group(1))
            pairs.append((m.group(1), m.group(2)))
        if len(pairs) > _TRACESTATE_MEMBERS_MAX:
            return f"tracestate has {len(pairs)} members (at most {_TRACESTATE_MEMBERS_MAX})"
    return NonRecordingSpan(SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16)),
        trace_state=TraceState(pairs) if pairs else None,
    ))


_NO_SCOPE: Final = AttachedContext(None)


def attach_trace_carrier(carrier: TraceCarrier | None, /) -> AttachedContext:
    """Make ``carrier`` the current trace context for a ``with`` block.

    A long-lived worker (a thread, a trajectory collector) receives a carrier once, from
    :func:`current_trace_carrier`, and enters this around each unit of work, so every span
    it opens there joins the caller's trace::

        with attach_trace_carrier(carrier):
            with span(RL.ROLLOUT, "rl.rollout.collect"):
                ...

    ``None`` or an empty carrier does nothing, and so does any carrier while telemetry is
    off. A malformed one warns once and the block runs as a new root; it never raises.
    """
    if carrier is None or _runtime._ACTIVE is None:
        return _NO_SCOPE
    return AttachedContext(_carrier_context(carrier, "attach_trace_carrier", 2))


def _with_carrier_parameter(fn: Callable[..., Any]) -> inspect.Signature:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"accepts_trace_context cannot read the signature of {fn!r} ({exc}); decorate a "
            "plain function or method"
        ) from exc
    params = list(signature.parameters.values())
    carrier = inspect.Parameter(TRACE_CONTEXT_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params.insert(len(params) - 1, carrier)
    else:
        params.append(carrier)
    return signature.replace(parameters=params)


def accepts_trace_context(fn: F, /) -> F:
    """Let a Ray actor method or ``@ray.remote`` function join its caller's trace.

    Works on sync, async, generator and async-generator functions. The wrapper pops the
    carrier keyword (:data:`TRACE_CONTEXT_KWARG`) and attaches its context for the call; a
    generator gets it around each resume, never across a ``yield``, because the consumer may
    resume it from another context. Called without a carrier (telemetry off, a local call),
    the function runs unchanged.

    Ray checks a call's arguments against the signature of ``inspect.unwrap(method)``, and
    ``functools.wraps`` points that at the undecorated function, which has no carrier
    parameter: every call would raise ``TypeError``. So the wrapper advertises the keyword on
    its ``__signature__`` and drops ``__wrapped__``. Apply it below ``@ray.remote``::

        @ray.remote
        class Policy:
            @accepts_trace_context
            def train(self, batch): ...

    Raises:
        TypeError: ``fn`` is already a Ray remote function or actor class (decorate the
            function before ``@ray.remote`` wraps it), or its signature cannot be read.
    """
    if getattr(fn, _MARK, False):
        return fn
    if hasattr(fn, "remote"):
        raise TypeError(
            f"accepts_trace_context got {fn!r}, which Ray already wrapped; put "
            "@accepts_trace_context below @ray.remote so it decorates the plain function"
        )
    if isinstance(fn, (staticmethod, classmethod)):
        raise TypeError(
            f"accepts_trace_context got a {type(fn).__name__}; put it below "
            f"@{type(fn).__name__} so it decorates the function"
        )
    signature = _with_carrier_parameter(fn)
    where = str(getattr(fn, "__qualname__", fn))
    wrapper = _wrapper_for(fn, where)
    functools.update_wrapper(wrapper, fn)
    # Ray reads the signature (and streaming-ness) of inspect.unwrap(method): stop it here.
    delattr(wrapper, "__wrapped__")
    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    setattr(wrapper, _MARK, True)
    return cast(F, wrapper)


def _enter(carrier: object, where: str, args: tuple[Any, ...]) -> Context | None:
    """Run the first-call hook; the context to attach for ``carrier``, if any."""
    runtime = _runtime._ACTIVE
    if runtime is not None:
        hook = runtime.run_state.first_call_hook
        if hook is not None:
            hook(args)
    if carrier is None:
        return None
    if runtime is None:
        # A caller with telemetry on sent this; here nothing records it (issue #9).
        warn_once(
            "carrier-without-telemetry",
            f"rlsight: {where} received a trace carrier in process {os.getpid()}, which has no "
            "rlsight telemetry set up, so its spans are lost. Start Ray with "
            "ray.init(runtime_env=rlsight.ray.ray_runtime_env(config)), or call "
            "rlsight.init_worker() in processes you launch yourself",
            stacklevel=4,
        )
        return None
    return _carrier_context(carrier, where, 3)


def _wrapper_for(fn: Callable[..., Any], where: str) -> Callable[..., Any]:
    key = TRACE_CONTEXT_KWARG
    if inspect.isasyncgenfunction(fn):
        def start(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[Context | None, Callable[[BaseException | None], None] | None]:
            return _enter(kwargs.pop(key, None), where, args), None

        return attached_agen_function(fn, start)
    if inspect.iscoroutinefunction(fn):
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = _enter(kwargs.pop(key, None), where, args)
            if ctx is None:
                return await fn(*args, **kwargs)
            token = _context.attach(ctx)
            try:
                return await fn(*args, **kwargs)
            finally:
                _context.detach(token)
        return async_wrapper
    if inspect.isgeneratorfunction(fn):
        def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            ctx = _enter(kwargs.pop(key, None), where, args)
            gen = fn(*args, **kwargs)
            if ctx is None:
                return (yield from gen)
            return (yield from attached_gen(gen, ctx))
        return gen_wrapper

    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = _enter(kwargs.pop(key, None), where, args)
        if ctx is None:
            return fn(*args, **kwargs)
        token = _context.attach(ctx)
        try:
            return fn(*args, **kwargs)
        finally:
            _context.detach(token)
    return sync_wrapper

