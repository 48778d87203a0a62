"""Setting a process's telemetry up: the driver's ``setup_telemetry``, a worker's ``init_worker``.

The driver resolves the run's config (arguments, then ``RLSIGHT_*``, then ``OTEL_*``, then
defaults), writes the run's ``manifest.json`` and builds its providers at once, so a bad
config is an error at setup. A worker reads the driver's ``RLSIGHT_*`` projection and may
defer its providers until its first span, so a Ray actor can still be named after its class.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsight import groups as _groups
from rlsight._identity import ENV_RANK, ENV_WORKER_GROUP, ENV_WORLD_SIZE, Identity, env_devices, env_int
from rlsight.config import TelemetryConfig
from rlsight.errors import ConfigError, warn_once
from rlsight.runtime import Telemetry, active_runtime, install

if TYPE_CHECKING:
    from rlsight.watchdog import StallHook

__all__ = ["init_worker", "setup_telemetry"]


def setup_telemetry(
    config: TelemetryConfig | None = None,
    *,
    worker_group: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    on_stall: StallHook | None = None,
) -> Telemetry:
    """Set up telemetry in the driver (or any process that owns the run) and return it.

    Builds the tracer and meter providers, writes ``<run_dir>/manifest.json`` and turns on
    the span groups of ``config.span_groups``. Every field ``config`` was not given is read
    from ``RLSIGHT_<FIELD>``, then from its standard ``OTEL_*`` variable, then defaulted
    (explicit > ``RLSIGHT_*`` > ``OTEL_*`` > default); the handle's ``config`` is the result.

    The identity arguments name this process. Left out, each comes from its ``RLSIGHT_*``
    variable (``RLSIGHT_WORKER_GROUP``, ``RLSIGHT_RANK``, ``RLSIGHT_WORLD_SIZE``), so every
    process a torchrun-style launcher starts can call ``setup_telemetry()`` as it is and
    still be told apart; without the variable the default applies. An argument wins over
    its variable.

    Args:
        config: The run's config; ``None`` reads it from the environment.
        worker_group: ``rl.worker_group`` of this process (default ``"driver"``).
        rank: ``rl.rank`` (default 0).
        world_size: ``rl.world_size`` (default 1).
        resource_attributes: Extra resource attributes; they win over detected ones.
        on_stall: Called with a :class:`~rlsight.StallRecord` when the stall watchdog fires
            (``config.stall_after_s`` / ``stall_after_steps``), on the watchdog's thread: dump
            stacks, page someone, or abort the job. What it raises is logged, not propagated.

    Raises:
        TelemetryStateError: telemetry is already set up in this process.
        ConfigError: the config cannot be used (bad endpoint protocol extra, unwritable dir).
    """
    config = config.with_env_fallbacks() if config is not None else TelemetryConfig.from_env()
    env = os.environ
    identity = Identity(
        worker_group or env.get(ENV_WORKER_GROUP) or "driver",
        rank if rank is not None else env_int(env, ENV_RANK, 0),
        world_size if world_size is not None else env_int(env, ENV_WORLD_SIZE, 1),
        env_devices(),
        dict(resource_attributes or {}),
    )
    telemetry = Telemetry(config, identity, deferred=True, driver=True, ship_store=False)
    if not config.enabled:
        return telemetry
    if not config.span_groups:
        warn_once(
            "span-groups-empty",
            "rlsight: span_groups is empty, so no span is emitted (only metrics are recorded); "
            "name groups or a preset ('per_step', 'minimal'), or set enabled=False to turn "
            "telemetry off",
            stacklevel=2,
        )
    if active_runtime() is not None:
        install(telemetry)  # raises the clear error
    if config.store_transport == "ray" and not config.local_store:
        raise ConfigError(
            "TelemetryConfig.store_transport='ray' ships what each process's local store "
            "writes; set local_store=True, or store_transport='file'"
        )
    fresh = config.local_store and not config.run_path.exists()
    if config.local_store:
        from rlsight._catalog import run_catalog
        from rlsight.store._manifest import write_manifest

        try:
            write_manifest(config, started_ns=telemetry.started_ns,
                           catalog=run_catalog(_groups.resolve_span_group_spec(config.span_groups)))
        except OSError as exc:
            raise ConfigError(
                f"TelemetryConfig.run_dir={config.run_dir!r} is not writable ({exc.strerror}); "
                "choose another folder or set local_store=False"
            ) from exc
    try:
        # Not _materialize(): in the driver a store that cannot be opened is a setup error to
        # raise now, not a warning to run on without telemetry.
        telemetry._build_providers()
    except (OSError, ConfigError) as exc:
        if fresh:
            _forget_run_folder(config.run_path)
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"TelemetryConfig.run_dir={config.run_dir!r}: cannot open the local store "
            f"({exc.strerror}: {exc.filename}); choose another folder or set local_store=False"
        ) from exc
    if config.stall_after_s is not None or config.stall_after_steps is not None:
        from rlsight.watchdog import Watchdog

        telemetry.watchdog = Watchdog(config, on_stall)
    elif on_stall is not None:
        warn_once("on-stall-without-threshold",
                  "rlsight: setup_telemetry(on_stall=...) has no effect: set "
                  "TelemetryConfig.stall_after_s or stall_after_steps to turn the watchdog on",
                  stacklevel=2)
    if config.store_transport == "ray":
        from rlsight.store._ray_sink import SinkStarter

        telemetry._sink_starter = SinkStarter(
            str(config.run_id), config.run_path,
            on_error=lambda exc: telemetry.report_internal_error("ray-sink-start", exc),
        )
    return install(telemetry)


def _forget_run_folder(path: Path) -> None:
    """Remove the run folder a failed setup just made (a taken Prometheus port, say), so that
    `rlsight runs` does not list a run that never started; only while it holds nothing but the
    manifest, so nothing a store wrote is ever deleted."""
    with contextlib.suppress(OSError):
        if [p.name for p in path.iterdir()] == ["manifest.json"]:
            (path / "manifest.json").unlink()
            path.rmdir()


def init_worker(
    *,
    worker_group: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    deferred: bool = False,
) -> Telemetry | None:
    """Set up telemetry in a worker process from the driver's ``RLSIGHT_*`` projection.

    Returns ``None`` (and does nothing) when the environment carries no rlsight config or
    says telemetry is off. Calling it again in a process that is already set up returns the
    existing runtime, so a setup hook and an explicit call do not fight.

    Args:
        worker_group: ``rl.worker_group``; default ``$RLSIGHT_WORKER_GROUP`` or ``"worker"``.
        rank: ``rl.rank``; default ``$RLSIGHT_RANK`` or 0.
        world_size: ``rl.world_size``; default ``$RLSIGHT_WORLD_SIZE`` or 1.
        resource_attributes: Extra resource attributes for this process.
        environ: Where to read the projection (default ``os.environ``).
        deferred: Build providers on first use, so :meth:`Telemetry.bind_identity` can
            still name the process (Ray's process setup hook runs before the actor exists).
    """
    env = os.environ if environ is None else environ
    if not any(k.startswith("RLSIGHT_") for k in env):
        return None
    config = TelemetryConfig.from_env(env)
    if not config.enabled:
        return None
    existing = active_runtime()
    if existing is not None:
        if worker_group is not None or rank is not None:
            existing.bind_identity(worker_group=worker_group, rank=rank, world_size=world_size,
                                   resource_attributes=resource_attributes)
        return existing
    identity = Identity(
        worker_group or env.get(ENV_WORKER_GROUP) or "worker",
        rank if rank is not None else env_int(env, ENV_RANK, 0),
        world_size if world_size is not None else env_int(env, ENV_WORLD_SIZE, 1),
        env_devices(env),
        dict(resource_attributes or {}),
    )
    return install(Telemetry(config, identity, deferred=deferred))

