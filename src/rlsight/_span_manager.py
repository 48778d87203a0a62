"""The objects span helpers return: the shared no-op, and the span that starts on enter.

:func:`rlsight.spans.span` and its siblings decide whether a span is emitted; what they hand
back lives here: :class:`NoopSpan` (one shared, stateless instance for every disabled
helper) and :class:`LiveSpan`, which cleans the caller's attributes, stamps the wire
vocabulary (``rl.span_group``, ``rl.bucket``, ``thread.id``), starts the span through the
runtime (rlsight's lean path where it applies), makes it current, and on exit records a
failure on it (error status ``"Type: message"``, scrubbed) without touching the exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation import _SPAN_KEY

from rlsight import _current
from rlsight import runtime as _runtime
from rlsight._current import _VAR, attach_span, detach, thread_id
from rlsight._redact import REDACTED, is_content, is_content_key, scrub
from rlsight._semconv import (
    BUCKET,
    CONCURRENT,
    EFFICIENCY_CATEGORY,
    EFFICIENCY_MEASUREMENT,
    LIVE,
    SPAN_GROUP,
    THREAD_ID,
)
from rlsight._stamps import BY_VALUES as _SHARED
from rlsight._stamps import stamps
from rlsight.buckets import BUCKET_OVERRIDE, PER_PROMPT, Bucket
from rlsight.errors import warn_once
from rlsight.groups import GATE, RL

__all__ = ["CONCURRENT_MEASUREMENT", "NOOP", "SPAN_MEASUREMENT", "LiveSpan", "NoopSpan",
           "clean_attributes", "describe", "scrubbed_exception"]

_SCALARS: Final = (str, bool, int, float)
_INVALID: Final = _trace.INVALID_SPAN
_PER_PROMPT: Final = RL.PER_PROMPT
#: ``bucket.value`` by dict: an enum's ``value`` is a Python-level property, ~5x slower.
_WIRE_BUCKET: Final = {b: b.value for b in Bucket}
#: What ``efficiency_span`` passes as a span's own attributes (constants nothing changes):
#: spans given one of these share their site's and thread's dict, as spans given none do
#: (each efficiency span made a dict of its own, cleaned afresh: one more object per span
#: for the store, the roll-up and the garbage collector), named in the key by ``_CONSTANTS``.
SPAN_MEASUREMENT: Final[Mapping[str, Any]] = {EFFICIENCY_MEASUREMENT: "span"}
CONCURRENT_MEASUREMENT: Final[Mapping[str, Any]] = {**SPAN_MEASUREMENT, CONCURRENT: True}
_CONSTANTS: Final = {id(SPAN_MEASUREMENT): "measurement=span",
                     id(CONCURRENT_MEASUREMENT): "measurement=span,concurrent"}


class NoopSpan:
    """What a disabled helper returns: a context manager that does nothing, shared by all."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return _INVALID

    # Three named parameters, not ``*exc``: packing a tuple on every disabled ``with`` costs
    # more than the rest of the call.
    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None

    async def __aenter__(self) -> Span:
        return _INVALID

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


NOOP: Final = NoopSpan()


def clean_attributes(attributes: Mapping[str, Any], stacklevel: int = 4) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        full = key if "." in key else "rl." + key
        if is_content_key(full) and is_content(value):
            out[full] = REDACTED
        elif isinstance(value, _SCALARS):
            out[full] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
            out[full] = tuple(value)
        elif callable(getattr(value, "item", None)) and _scalar_item(value) is not None:
            out[full] = _scalar_item(value)  # numpy / torch scalars
        else:
            warn_once(
                f"span-attr-type:{full}",
                f"rlsight: span attribute {full!r} has type {type(value).__name__}; attributes "
                "must be str, bool, int, float or a list of those (or a 0-d tensor). It is dropped",
                stacklevel=stacklevel,
            )
    return out


def _scalar_item(value: Any) -> str | bool | int | float | None:
    """``value.item()`` when that is a scalar; ``None`` for arrays with several elements."""
    try:
        item = value.item()
    except (TypeError, ValueError, RuntimeError):
        return None
    return item if isinstance(item, _SCALARS) else None


def scrubbed_exception(exc: BaseException) -> dict[str, str]:
    """The message and stack trace OTel would record, with secrets scrubbed (``scrub``)."""
    import traceback

    return {
        "exception.message": scrub(str(exc)),
        "exception.stacktrace": scrub("".join(traceback.format_exception(exc))),
    }


def describe(exc: BaseException) -> str:
    """``"Type: message"``, or just the type when the message itself cannot be built."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


class AsyncFromSync:
    """``async with`` for a span manager whose ``with`` does the work: opening and ending a
    span never awaits, so the async protocol is the sync one."""

    __slots__ = ()

    def __enter__(self) -> Span:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class LiveSpan(AsyncFromSync):
    """An enabled span: started on enter, ended on exit, context attached in between."""

    __slots__ = (
        "_attrs", "_bucket", "_category", "_clean", "_depth", "_group", "_name", "_span", "_token",
    )

    def __init__(
        self,
        group: str,
        name: str,
        attrs: Mapping[str, Any] | None,
        *,
        umbrella: bool = False,
        bucket: Bucket | None = None,
        category: str | None = None,
        clean: bool = True,
    ) -> None:
        self._group = group
        self._clean = clean
        self._name = name
        self._attrs = attrs
        self._category = category
        if umbrella:
            self._bucket = None
            if attrs and ("bucket" in attrs or BUCKET in attrs):
                _warn_umbrella_bucket(group, name)
        elif bucket is not None:
            self._bucket = bucket
        else:
            explicit = _explicit_bucket(attrs, name) if attrs else None
            if explicit is not None:
                # An explicit bucket wins over the group's and over bucket_scope (#9.4).
                self._bucket = explicit
            else:
                meta = GATE.groups.get(group)
                self._bucket = meta.bucket if meta is not None else None
                if self._bucket is not None:
                    self._bucket = BUCKET_OVERRIDE.get() or self._bucket
        self._span: Span | None = None
        self._token: object = None
        self._depth = 0

    def start(self, start_time: int | None = None) -> Span | None:
        """Start the span without attaching it (generator wrappers attach per resume).

        ``start_time`` (ns since the epoch) places a span measured elsewhere (``record_span``).
        """
        rt = _runtime._ACTIVE
        if rt is None:
            return None
        try:
            group, bucket = self._group, self._bucket
            if PER_PROMPT.get():
                if _PER_PROMPT not in GATE.enabled:
                    return None
                # Relabelled for volume gating only: the work is still what its own group
                # says (a reward call is productive), so a fleet that works per prompt (an
                # environment service) shows its utilisation when per_prompt is on.
                group = _PER_PROMPT
            category = self._category
            wire_bucket = None if bucket is None else _WIRE_BUCKET[bucket]
            tid = _current._IDS.native or thread_id()
            given = self._attrs
            if not given:
                constant: str | None = ""
            elif len(given) == 1 and given.get("live") is True:
                constant = LIVE
            elif given is SPAN_MEASUREMENT or given is CONCURRENT_MEASUREMENT:
                constant = _CONSTANTS[id(given)]
            else:
                constant = None
            if (constant is not None
                    and type(group) is str and (category is None or type(category) is str)):
                # Only rlsight's stamps (and ``live=True`` or an efficiency span's measurement,
                # constants), exact scalars: the dict spans of this site share.
                key = (group, tid, wire_bucket, category) if not constant else (
                    group, tid, wire_bucket, category, constant)
                attrs: dict[str, Any] | None = _SHARED.get(key)
                if attrs is None:
                    attrs = stamps(key, self._own_attributes(group, tid, wire_bucket, category))
                shared = True
            else:
                attrs = self._own_attributes(group, tid, wire_bucket, category)
                shared = False
            # Telemetry._start_span, inlined (one call less on every enabled span).
            if start_time is None and rt.clock is not None:
                start_time = rt.clock()
            lean = rt._lean
            span: Span | None = (None if lean is None else
                                 lean.start(self._name, attrs, start_time, shared))
            if span is None:
                span = rt.tracer.start_span(self._name, attributes=attrs, start_time=start_time)
            self._span = span
        except Exception as exc:
            rt.report_internal_error("span-start", exc)
            return None
        return span

    def _own_attributes(self, group: str, tid: int, wire_bucket: str | None,
                        category: str | None) -> dict[str, Any]:
        """The caller's attributes, cleaned, with rlsight's stamps: a dict of this span's own."""
        if not self._attrs:
            attrs: dict[str, Any] = {}
        elif self._clean:
            attrs = clean_attributes(self._attrs, stacklevel=5)  # the caller, past this method
        else:  # cleaned once when a decorator was applied
            attrs = dict(self._attrs)
        attrs[SPAN_GROUP] = group
        attrs[THREAD_ID] = tid
        if wire_bucket is not None:
            attrs[BUCKET] = wire_bucket
        elif BUCKET in attrs:  # an invalid explicit value (warned) or an umbrella's
            del attrs[BUCKET]
        if category is not None:
            attrs[EFFICIENCY_CATEGORY] = category
        return attrs

    def __enter__(self) -> Span:
        if self._span is not None:  # the same object entered again inside its own block
            self._depth += 1
            return self._span
        span = self.start()
        if span is None:
            return _INVALID
        # attach_span(span), inlined for its common case (one call less on every span).
        var = _VAR
        current = None if var is None else var.get()
        if var is not None and (not current or (len(current) == 1 and _SPAN_KEY in current)):
            self._token = var.set(Context({_SPAN_KEY: span}))
        else:
            self._token = attach_span(span)
        return span

    def finish(self, exc: BaseException | None) -> None:
        """Record ``exc`` (an :class:`Exception` only) and end the span."""
        span = self._span
        if span is None:
            return
        try:
            if isinstance(exc, Exception):
                # The exception's own __str__ may raise; that must not replace the user's
                # exception, and the status below still names its type.
                with contextlib.suppress(Exception):
                    span.record_exception(exc, attributes=scrubbed_exception(exc))
                span.set_status(Status(StatusCode.ERROR, scrub(describe(exc))))
        finally:
            rt = _runtime._ACTIVE
            span.end(None if rt is None or rt.clock is None else rt.clock())
        if self._category is not None:
            start, end = getattr(span, "start_time", None), getattr(span, "end_time", None)
            if rt is not None and start is not None and end is not None:
                rt.add_efficiency_seconds(self._category, (end - start) / 1e9)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._depth:
            self._depth -= 1
            return None
        span = self._span
        if span is None:
            return None
        try:
            if exc is None and self._category is None and type(self) is LiveSpan:
                # finish(None), inlined (a subclass may add to finish): most blocks end here.
                rt = _runtime._ACTIVE
                span.end(None if rt is None or rt.clock is None else rt.clock())
            else:
                self.finish(exc)
        finally:
            token, self._token = self._token, None
            self._span = None  # entering the object again starts a new span
            if token is not None:
                # detach(token), inlined for its common case (one call less on every span).
                try:
                    if _VAR is None:
                        raise ValueError
                    _VAR.reset(token)  # type: ignore[arg-type]
                except (ValueError, RuntimeError):
                    detach(token)  # type: ignore[arg-type]  # the API's way, which logs a failure
        return None


def _explicit_bucket(attrs: Mapping[str, Any], name: str) -> Bucket | None:
    """The bucket a caller set with ``bucket=`` (or ``rl.bucket``); warns once if invalid."""
    raw = attrs.get("bucket", attrs.get(BUCKET))
    if raw is None:
        return None
    try:
        return Bucket(raw)
    except ValueError:
        warn_once(
            f"span-bucket-invalid:{raw!r}",
            f"rlsight: span {name!r} has bucket={raw!r}, which is not a bucket; use one of "
            "productive, overhead, idle, wasted (or rlsight.Bucket). The group's bucket is used",
            stacklevel=4,
        )
        return None


def _warn_umbrella_bucket(group: str, name: str) -> None:
    warn_once(
        f"umbrella-bucket:{group}",
        f"rlsight: umbrella span {name!r} (group {group!r}) was given a bucket; umbrella spans "
        "structure the trace and carry none. Open a leaf span with span(...) inside it instead",
        stacklevel=4,
    )
