"""Running a generator with an OpenTelemetry context attached around each resume.

A generator's body runs only while its consumer resumes it, possibly from another task or
thread, so a context must be attached for each resume and detached before the value is
handed out, never held across a ``yield``. Both ``traced`` (spans) and
``accepts_trace_context`` (carriers) need exactly that, so it lives here once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from types import TracebackType
from typing import Any, TypeAlias

from opentelemetry import context as _context
from opentelemetry.context import Context

__all__ = ["AgenStart", "AttachedContext", "attached_agen_function", "attached_gen"]


class AttachedContext:
    """Attach ``ctx`` on enter and detach it on exit; reusable, a no-op for ``None``."""

    __slots__ = ("_ctx", "_token")

    def __init__(self, ctx: Context | None) -> None:
        self._ctx = ctx
        self._token: object = None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._token = _context.attach(self._ctx)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            _context.detach(token)  # type: ignore[arg-type]


def attached_gen(gen: Generator[Any, Any, Any], ctx: Context) -> Generator[Any, Any, Any]:
    """Re-yield ``gen`` with ``ctx`` attached around each resume.

    ``send``, ``throw`` and ``close`` reach ``gen`` as they would through ``yield from``,
    and ``gen``'s return value is returned.
    """
    scope = AttachedContext(ctx)
    send: Any = None
    throw: BaseException | None = None
    while True:
        with scope:
            try:
                item = gen.throw(throw) if throw is not None else gen.send(send)
            except StopIteration as stop:
                return stop.value
        throw = None
        try:
            send = yield item
        except GeneratorExit:
            with scope:
                gen.close()
            raise
        except BaseException as exc:  # forwarded into the generator, as `yield from` does
            throw = exc


#: Called once per call of an async-generator wrapper, with its arguments (it may pop keyword
#: arguments meant for the wrapper): the context to attach around each resume, and what to
#: call with the exception that ended the generator (``None`` when it finished normally).
AgenStart: TypeAlias = Callable[
    [tuple[Any, ...], dict[str, Any]],
    tuple[Context | None, Callable[[BaseException | None], None] | None],
]


def attached_agen_function(
    fn: Callable[..., AsyncGenerator[Any, Any]], start: AgenStart
) -> Callable[..., AsyncGenerator[Any, Any]]:
    """An async-generator function that runs ``fn``'s generator with a context per resume.

    The forwarding loop lives in the returned function itself: Ray and ``inspect`` must see an
    async generator function, and ``async for`` over ``fn``'s generator would drop
    ``asend()`` values and throw ``athrow()``/``aclose()`` at the wrapper instead of it.
    """

    async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        ctx, finish = start(args, kwargs)
        agen = fn(*args, **kwargs)
        scope = AttachedContext(ctx)
        error: BaseException | None = None
        try:
            send: Any = None
            throw: BaseException | None = None
            while True:
                with scope:
                    try:
                        item = await (agen.athrow(throw) if throw is not None else agen.asend(send))
                    except StopAsyncIteration:
                        return
                throw = None
                try:
                    send = yield item
                except GeneratorExit:
                    raise
                except BaseException as exc:  # forwarded into the generator, like `yield from`
                    throw = exc
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                with scope:
                    await agen.aclose()
            finally:
                if finish is not None:
                    finish(error)

    return agen_wrapper
