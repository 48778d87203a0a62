"""Logs that point into the trace: :func:`instrument_logging`.

A failure is usually found twice: as a red span in the trace and as an ERROR line in a
worker's log. Without a shared key the two are matched by timestamp and guesswork. The bridge
stamps every :class:`logging.LogRecord` with the ids of the span current where it was logged
(and the run's current step), so a log line leads to its span; and it copies ERROR (and
above) records logged inside a recording span onto that span as ``log`` events, so a span
leads to its log line.

It works through :func:`logging.setLogRecordFactory`, so it stamps records of every logger
and reads the context of the thread that logs, whatever handlers and formatters the program
configured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from opentelemetry import trace as _trace

from rlsight import runtime as _runtime

__all__ = ["LOG_EVENT", "instrument_logging", "uninstrument_logging"]

#: Name of the span event an ERROR record becomes.
LOG_EVENT: Final = "log"

_LOCK: Final = threading.Lock()
#: The log-record factory the bridge wrapped, put back by ``uninstrument_logging``. Process-
#: scoped because the factory is: ``logging.setLogRecordFactory`` is one per process, and the
#: bridge outlives runs (it reads the active runtime per record).
_previous: Callable[..., logging.LogRecord] | None = None


def _stamping_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    # Formatting two ids costs more than the rest of the stamp; consecutive records mostly
    # come from the same span, so the last span's hex ids are kept (one tuple, swapped whole).
    last: tuple[int, int, str, str] = (0, 0, "", "")

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        nonlocal last
        record = previous(*args, **kwargs)
        span = _trace.get_current_span()
        ctx = span.get_span_context()
        if ctx.is_valid:
            cached = last
            if cached[0] != ctx.span_id or cached[1] != ctx.trace_id:
                cached = last = (ctx.span_id, ctx.trace_id, f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
            record.trace_id = cached[2]
            record.span_id = cached[3]
        else:
            record.trace_id = record.span_id = ""
        rt = _runtime._ACTIVE
        record.rl_step = rt.current_step if rt is not None else None
        if record.levelno >= logging.ERROR and span.is_recording():
            _add_event(span, record)
        return record

    factory.__rlsight_previous__ = previous  # type: ignore[attr-defined]
    return factory


def _add_event(span: _trace.Span, record: logging.LogRecord) -> None:
    # The event goes to the store and the collector: scrub its text the way an exception
    # recorded on a span is scrubbed (docs/reliability.md), so `api_key=...` stays in the log.
    from rlsight._redact import scrub

    try:
        attributes: dict[str, str | int] = {
            "log.severity": record.levelname,
            "log.logger": record.name,
            "log.message": scrub(record.getMessage()),
            "code.filepath": record.pathname,
            "code.lineno": record.lineno,
        }
        if record.exc_info and record.exc_info[0] is not None:
            attributes["exception.type"] = record.exc_info[0].__name__
            attributes["exception.message"] = scrub(str(record.exc_info[1]))
        span.add_event(LOG_EVENT, attributes)
    except Exception as exc:  # a message whose args do not format must not break logging
        rt = _runtime._ACTIVE
        if rt is not None:
            rt.report_internal_error("log-event", exc)


def instrument_logging() -> None:
    """Stamp every log record with its trace and step; copy ERROR records onto their span.

    Each :class:`logging.LogRecord` created from now on carries ``trace_id`` (32 hex digits),
    ``span_id`` (16 hex digits), both ``""`` outside any span, and ``rl_step`` (the step
    :func:`~rlsight.step_span` last opened in this process, or ``None``), so a format such as
    ``"%(levelname)s [trace=%(trace_id)s span=%(span_id)s step=%(rl_step)s] %(message)s"``
    works for every logger. A record at ERROR or above logged while a recording span is
    current becomes a ``log`` event on that span with ``log.severity``, ``log.logger``,
    ``log.message``, ``code.filepath``, ``code.lineno`` and, when it carries an exception,
    ``exception.type`` and ``exception.message``.

    Call it once per process (with ``setup_telemetry`` in the driver, ``init_worker`` or an
    actor's ``__init__`` in workers); calling it again does nothing. It keeps whatever record
    factory was installed before and wraps it.
    """
    global _previous
    with _LOCK:
        if _previous is not None:
            return
        _previous = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_stamping_factory(_previous))


def uninstrument_logging() -> None:
    """Undo :func:`instrument_logging`: records are created by the factory it wrapped.

    When another factory was installed on top of rlsight's since, that one is kept and
    rlsight's stays inside it (removing it would drop the other's wrapper too).
    """
    global _previous
    with _LOCK:
        previous = _previous
        if previous is None:
            return
        installed_over = getattr(logging.getLogRecordFactory(), "__rlsight_previous__", None)
        if installed_over is not None and installed_over is previous:
            logging.setLogRecordFactory(previous)
            _previous = None
