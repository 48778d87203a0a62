"""The gated tracer every HTTP instrumentation in :mod:`rlsight.http` runs on.

OpenTelemetry's HTTP instrumentations take a ``tracer_provider``; rlsight hands them this one,
whatever scope they ask for. Its tracer records on rlsight's own provider while ``per_prompt``
is on (an HTTP hop happens prompts x turns x tool calls times, which is exactly what
``per_step`` must not scale with) and otherwise returns a non-recording span that carries the
parent's context, so a client still injects ``traceparent`` and a server still re-parents the
handler's own spans under the caller. The URL attributes are scrubbed of secrets
(``?api_key=...``, ``?token=...``), as exception messages are: at the span's start, and
whenever something sets one later (ASGI sets the request's attributes again after the start, a
response hook may write the final URL, a handler may write its own).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final

from opentelemetry import trace as _trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TracerProvider,
)
from opentelemetry.util.types import Attributes

from rlsight import runtime as _runtime
from rlsight._redact import scrub
from rlsight._semconv import SPAN_GROUP, THREAD_ID
from rlsight._span_manager import describe, scrubbed_exception
from rlsight.groups import GATE, RL

__all__ = ["PROVIDER", "needs_extra"]

_PER_PROMPT: Final = RL.PER_PROMPT
#: Attributes in which the instrumentations write the request's URL or its query string: an
#: environment service called with ``?api_key=...`` must not leave the key in the store.
_URL_KEYS: Final = frozenset({"http.url", "http.target", "url.full", "url.query"})


class _GatedTracer(Tracer):
    """rlsight's tracer while ``per_prompt`` is on; a pass-through of the parent otherwise."""

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        telemetry = _runtime._ACTIVE
        if telemetry is None or _PER_PROMPT not in GATE.enabled:
            return NonRecordingSpan(_trace.get_current_span(context).get_span_context())
        try:
            attrs: dict[str, Any] = dict(attributes) if attributes else {}
            attrs.update(_scrubbed_urls(attrs))
            attrs[SPAN_GROUP] = _PER_PROMPT
            attrs[THREAD_ID] = threading.get_native_id()
            span = telemetry.tracer.start_span(
                name, context, kind, attrs, links, start_time, record_exception, set_status_on_exception
            )
            _scrub_later_urls(span)
            return span
        except Exception as exc:
            telemetry.report_internal_error("http-span-start", exc)
            return NonRecordingSpan(_trace.get_current_span(context).get_span_context())

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )
        # use_span would record ``str(exc)`` as it is, and a failed request's message names its
        # URL (requests: "Max retries exceeded with url: /score?api_key=..."): recorded here,
        # scrubbed, instead.
        with _trace.use_span(
            span, end_on_exit=end_on_exit, record_exception=False, set_status_on_exception=False
        ) as current:
            try:
                yield current
            except Exception as exc:
                _record_scrubbed(current, exc, record_exception, set_status_on_exception)
                raise


def _record_scrubbed(span: Span, exc: Exception, record: bool, set_status: bool) -> None:
    """What ``use_span`` records of an exception leaving the span, with secrets scrubbed."""
    try:
        if not span.is_recording():
            return
        if record:
            span.record_exception(exc, attributes=scrubbed_exception(exc))
        if set_status:
            span.set_status(Status(StatusCode.ERROR, scrub(describe(exc))))
    except Exception as error:  # telemetry never kills the run: the request's own error goes on
        telemetry = _runtime._ACTIVE
        if telemetry is not None:
            telemetry.report_internal_error("http-span-exception", error)


class _UrlScrubbingAttributes(BoundedAttributes):
    """An HTTP span's attributes, scrubbing a URL attribute whatever sets it after the start.

    ``Span.set_attribute`` and ``set_attributes`` end up here (``__setitem__``, and the SDK's
    ``_set_items`` where it has one), so an instrumentation's late write, a response hook or a
    handler's own ``set_attribute`` cannot put ``?api_key=...`` back on the span.
    """

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _URL_KEYS and isinstance(value, str):
            value = scrub(value)
        super().__setitem__(key, value)

    def _set_items(self, attributes: Mapping[str, Any]) -> None:
        super()._set_items({**attributes, **_scrubbed_urls(attributes)})


def _scrub_later_urls(span: Span) -> None:
    """Make ``span`` scrub the URL attributes set on it from now on.

    The SDK span keeps its attributes in a ``BoundedAttributes``; switching that object to the
    subclass above changes no data, only what a later write does. Any other span (another SDK,
    a non-recording one) is left as it is: its start was scrubbed all the same.
    """
    attributes = getattr(span, "_attributes", None)
    if type(attributes) is BoundedAttributes:
        # An SDK whose attribute map no longer takes the switch keeps the span as it is: the
        # span has started (processors hold it), so failing here would leak it unended.
        with suppress(TypeError):
            attributes.__class__ = _UrlScrubbingAttributes


def _scrubbed_urls(attributes: Mapping[str, Any]) -> dict[str, str]:
    """The URL attributes among ``attributes`` (see :data:`_URL_KEYS`), scrubbed of secrets."""
    return {key: scrub(value) for key in _URL_KEYS.intersection(attributes)
            if isinstance(value := attributes[key], str)}


class _GatedTracerProvider(TracerProvider):
    """Hands the instrumentations the gated tracer, whatever scope they ask for."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> Tracer:
        return _TRACER


_TRACER: Final = _GatedTracer()
PROVIDER: Final = _GatedTracerProvider()


@contextmanager
def needs_extra(extra: str) -> Iterator[None]:
    """An import that fails inside the block raises an ``ImportError`` naming the extra to install.

    The imports stay ordinary ``import`` statements (visible to type checkers and to the import
    graph); only the message changes.
    """
    try:
        yield
    except ImportError as exc:
        missing = exc.name or "a module it imports"
        raise ImportError(f"rlsight.http needs {missing}: pip install 'rlsight[{extra}]' ({exc})") from exc
