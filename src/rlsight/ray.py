"""Ray integration: every worker initialised, every actor named, every call in one trace.

* :func:`ray_runtime_env` gives ``ray.init`` a runtime_env that projects the run's config
  into ``RLSIGHT_*`` variables and installs a ``worker_process_setup_hook``, so every actor
  and task process sets up its own telemetry (its own ``process.pid``, ``rl.worker_group``,
  ``rl.rank``) without a line of code in the worker.
* :func:`worker_options` names one actor: ``Policy.options(**worker_options(worker_group=
  "policy", rank=r, world_size=n)).remote()``. Unnamed actors are labelled with their class
  name, bound before the process's first span or metric point, whichever method emits it.
* :func:`traced_actor` and :func:`traced_handle` wire a whole class and a whole handle, so a
  framework gets one trace without touching every call site.

Importing this module does not import Ray: nothing here needs it until a worker runs.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from rlsight import _identity, _setup
from rlsight import runtime as _runtime
from rlsight.config import TelemetryConfig
from rlsight.errors import ConfigError, warn_once
from rlsight.propagation import accepts_trace_context, dispatch_with_trace_context

__all__ = ["ray_runtime_env", "traced_actor", "traced_handle", "worker_options"]

C = TypeVar("C", bound=type)

_HOOK_NAME: Final = "rlsight_worker_setup"


# -- worker initialisation -----------------------------------------------------------------

class _WorkerSetup:
    """The ``worker_process_setup_hook``: set up rlsight, then run the user's own hook.

    A class rather than a closure so Ray can pickle it by reference, and so a second
    :func:`ray_runtime_env` over its own output chains the user's hook, not itself.
    """

    def __init__(self, chained: Callable[[], object] | str | None) -> None:
        self.chained = chained
        # Ray names a callable hook by its __name__ when it exports it.
        self.__name__ = _HOOK_NAME

    def __call__(self) -> None:
        _setup_worker()
        chained = self.chained
        if chained is None:
            return
        if isinstance(chained, str):
            # Ray's own form for a hook given by name: "package.module.function".
            module, _, attr = chained.rpartition(".")
            chained = getattr(importlib.import_module(module), attr)
        chained()

    def __repr__(self) -> str:
        return f"rlsight.ray worker setup (then {self.chained!r})"


def _setup_worker() -> None:
    """Set up this worker's telemetry from the environment; never fail the worker."""
    try:
        telemetry = _setup.init_worker(deferred=True)
    except Exception as exc:
        # Ray ends a worker whose setup hook raises; telemetry must never cost the run a
        # worker, so this is the guard: one warning, and the worker runs without it.
        warn_once(
            "ray-worker-setup",
            f"rlsight: telemetry setup failed in Ray worker pid {os.getpid()} "
            f"({type(exc).__name__}: {exc}); this worker runs without telemetry. Check the "
            "RLSIGHT_* variables of its runtime_env",
        )
        return
    if telemetry is None:
        return
    try:
        if _identity.ENV_WORKER_GROUP in os.environ:
            # Identity is known (worker_options): build providers now, at process start, so
            # the actor's first span does not pay for them inside step 1 (issue #9).
            telemetry._materialize()
        else:
            # Named after its actor class on the first decorated call; until then only the
            # imports can be paid for up front (most of the cost).
            telemetry.preload()
            telemetry.run_state.first_call_hook = _bind_actor_identity
            # An undecorated method (or __init__) may emit first: ask Ray then (issue #18).
            telemetry.run_state.before_materialize = _bind_actor_identity_from_ray
    except Exception as exc:  # the guard: telemetry never costs the run a worker
        warn_once(
            "ray-worker-eager-setup",
            f"rlsight: telemetry could not start in Ray worker pid {os.getpid()} "
            f"({type(exc).__name__}: {exc}); this worker runs without it",
        )


def _bind_actor_identity(args: tuple[Any, ...]) -> None:
    """First decorated call in a worker with no explicit group: name it after its actor class."""
    actor_class = getattr(type(args[0]), "__ray_actor_class__", None) if args else None
    if not isinstance(actor_class, type):
        return  # a task, or a plain function: keep waiting for an actor method
    if _claim_default_identity():
        _bind_default_identity(actor_class.__name__)


def _bind_actor_identity_from_ray() -> None:
    """The process is about to emit its first span or point: name it after its actor's class.

    Ray knows which actor a worker process hosts, whichever method runs; in a task's process
    there is no actor, and the group stays ``worker``.
    """
    if not _naming_pending():
        return  # already named (a decorated call, traced_actor) or named explicitly
    try:
        import ray

        context = ray.get_runtime_context()
        if context.get_actor_id() is None:
            return
        descriptor = context.current_actor._ray_actor_creation_function_descriptor
        class_name = str(descriptor.class_name).rsplit(".", 1)[-1]
    except Exception:  # a Ray without these internals: the first decorated call still names it
        return
    if class_name and _claim_default_identity():
        _bind_default_identity(class_name)


def _naming_pending() -> bool:
    """Whether this worker's group is still to be named after its actor class."""
    telemetry = _runtime.active_runtime()
    return telemetry is not None and telemetry.run_state.first_call_hook is _bind_actor_identity


def _claim_default_identity() -> bool:
    """True once, in a worker whose group is still to be named after its actor class."""
    if not _naming_pending():
        return False
    telemetry = _runtime.active_runtime()
    assert telemetry is not None
    telemetry.run_state.first_call_hook = None
    return True


def _bind_default_identity(worker_group: str) -> None:
    telemetry = _runtime.active_runtime()
    if telemetry is not None:
        telemetry.bind_identity(worker_group=worker_group)


def ray_runtime_env(config: TelemetryConfig, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A runtime_env for ``ray.init`` that sets up rlsight in every Ray worker process.

    It holds the config's ``RLSIGHT_*`` projection in ``env_vars`` and a
    ``worker_process_setup_hook`` that calls ``init_worker(deferred=True)``: each actor and
    task process then exports its own spans, labelled with its own resource attributes,
    into the same run. A worker whose setup fails keeps running without telemetry, after
    one warning.

    Args:
        config: The run's config, as given to ``setup_telemetry`` in the driver (or the
            handle's ``config``: either gives the same projection). Fields it was not given
            are resolved from ``RLSIGHT_*`` and ``OTEL_*`` variables first, exactly as
            ``setup_telemetry`` does, so workers get the driver's effective settings.
        base: Your own runtime_env. Its env vars are kept (the config's ``RLSIGHT_*``
            projection wins over a variable of the same name) and its setup hook, a callable
            or a ``"module.function"`` name, runs right after rlsight's.

    Returns:
        A new dict; ``base`` is not modified. With ``config.enabled`` false it only carries
        the projection (so workers know telemetry is off) and ``base``'s own hook.
    """
    # The settings setup_telemetry resolves, whatever their source: an endpoint given only as
    # OTEL_EXPORTER_OTLP_ENDPOINT in the driver's shell must reach workers on other nodes,
    # which do not inherit that shell (issue #18).
    config = config.with_env_fallbacks()
    out = dict(base or {})
    env_vars = dict(out.get("env_vars") or {})
    env_vars.update(config.to_env())
    out["env_vars"] = env_vars
    if config.enabled:
        chained = out.get("worker_process_setup_hook")
        if isinstance(chained, _WorkerSetup):
            chained = chained.chained
        out["worker_process_setup_hook"] = _WorkerSetup(chained)
    return out


def worker_options(
    *,
    worker_group: str,
    rank: int | None = None,
    world_size: int | None = None,
    devices: int | None = None,
    runtime_env: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``.options(...)`` keyword arguments that give one actor its telemetry identity.

    ``Policy.options(**worker_options(worker_group="policy", rank=1, world_size=4)).remote()``
    sets ``rl.worker_group``, ``rl.rank``, ``rl.world_size`` (and ``rl.devices``) on every span
    the actor's process emits. The identity travels as ``RLSIGHT_*`` env vars of the actor's
    runtime_env, which Ray merges with the job's, so it is known when the process starts.

    Args:
        worker_group: The fleet the actor belongs to (``"policy"``, ``"generation"``...).
        rank: Its rank within the group.
        world_size: The group's size.
        devices: Accelerators the actor drives (``rl.devices``; 1 when not given).
        runtime_env: Your own runtime_env for this actor; its env vars are kept.

    Raises:
        ConfigError: a value is out of range; the message names it.
    """
    if not isinstance(worker_group, str) or not worker_group.strip() or "/" in worker_group:
        raise ConfigError(
            f"worker_options(worker_group={worker_group!r}): expected a non-empty name without '/' "
            "(it is part of service.instance.id)"
        )
    env: dict[str, str] = {_identity.ENV_WORKER_GROUP: worker_group}
    for name, value, var, low in (
        ("rank", rank, _identity.ENV_RANK, 0),
        ("world_size", world_size, _identity.ENV_WORLD_SIZE, 1),
        ("devices", devices, _identity.ENV_DEVICES, 1),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"worker_options({name}={value!r}): expected an int >= {low}")
        env[var] = str(value)
    if rank is not None and world_size is not None and rank >= world_size:
        raise ConfigError(
            f"worker_options(rank={rank}, world_size={world_size}): rank must be below world_size"
        )
    merged = dict(runtime_env or {})
    merged["env_vars"] = {**dict(merged.get("env_vars") or {}), **env}
    return {"runtime_env": merged}


# -- whole classes and handles -------------------------------------------------------------

def traced_actor(cls: C, /) -> C:
    """Apply :func:`~rlsight.accepts_trace_context` to every public method of an actor class.

    Public means a plain function whose name does not start with ``_``, defined on the class
    or inherited; static and class methods and properties are left alone. An actor with no
    explicit ``worker_group`` is named after the class as it is constructed, so spans its
    ``__init__`` opens (a model load) already carry it. Apply it below ``@ray.remote``::

        @ray.remote
        @traced_actor
        class Policy: ...

    Raises:
        TypeError: ``cls`` is not a class (for example it is already a Ray actor class).
    """
    if not isinstance(cls, type):
        raise TypeError(
            f"traced_actor got {cls!r}, not a class; put @traced_actor below @ray.remote so it "
            "decorates the plain class"
        )
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if inspect.isfunction(member):
            setattr(cls, name, accepts_trace_context(member))
    init: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009 - mypy: __init__ on a type
    worker_group = cls.__name__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _claim_default_identity():
            _bind_default_identity(worker_group)
        init(self, *args, **kwargs)

    if inspect.isfunction(init):
        # Keeps __wrapped__: the constructor's signature is unchanged, and Ray validates
        # creation arguments against inspect.unwrap(__init__).
        functools.update_wrapper(__init__, init)
    else:
        # object.__init__ (or a C type's): Ray writes __signature__ on whatever unwrap
        # reaches, which a slot wrapper refuses, so unwrap must stop at this function.
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", __init__)  # noqa: B010 - mypy forbids assigning __init__
    return cls


class _TracedMethod:
    """``handle.method`` seen through :func:`traced_handle`: ``.remote`` sends the carrier."""

    # Named for dispatch_with_trace_context, which dispatches to the wrapped method directly.
    __slots__ = ("_rlsight_untraced",)

    def __init__(self, method: Any) -> None:
        self._rlsight_untraced = method

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """``method.remote(...)`` with the current trace carrier (see dispatch_with_trace_context)."""
        # Forwards whatever method the view wraps; `rlsight check` judges the caller's
        # traced_handle(h).method.remote(...) instead, where the method's name is visible.
        method = self._rlsight_untraced
        return dispatch_with_trace_context(method, *args, **kwargs)  # rlsight: ignore[carriers]

    def options(self, **options: Any) -> _TracedMethod:
        """``method.options(...)``, still sending the carrier."""
        return _TracedMethod(self._rlsight_untraced.options(**options))

    def __repr__(self) -> str:
        return f"traced({self._rlsight_untraced!r})"


class _TracedHandle:
    """An actor handle whose ``.method.remote(...)`` dispatches with the trace carrier."""

    __slots__ = ("_rlsight_handle",)

    def __init__(self, handle: Any) -> None:
        self._rlsight_handle = handle

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._rlsight_handle, name)
        if name.startswith("_") or not hasattr(attr, "remote"):
            return attr
        return _TracedMethod(attr)

    def __reduce__(self) -> tuple[Any, ...]:
        # Passed to another actor, it stays traced there.
        return (traced_handle, (self._rlsight_handle,))

    def __repr__(self) -> str:
        return f"traced_handle({self._rlsight_handle!r})"


def traced_handle(handle: Any, /) -> Any:
    """A view of an actor handle whose ``.method.remote(...)`` carries the current trace.

    ``traced_handle(policy).train.remote(batch)`` is
    ``dispatch_with_trace_context(policy.train, batch)``: the carrier is added, and an
    undecorated method is retried without it (one warning per method). ``.options(...)``
    works as on the handle. Keep the original handle for Ray APIs that take one
    (``ray.kill``, ``ray.get_actor``); the view pickles to a view of the same actor.
    """
    if isinstance(handle, _TracedHandle):
        return handle
    return _TracedHandle(handle)
