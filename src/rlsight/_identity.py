"""Who a process is: its identity variables and the resource attributes built from them.

A process's identity (worker group, rank, world size, devices) is fixed when its providers
are built, because OpenTelemetry fixes the resource then. It comes from arguments, else from
the ``RLSIGHT_*`` identity variables a launcher or ``rlsight.ray`` sets per process (they are
not part of the run-wide config), else from defaults.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rlsight import _host
from rlsight._semconv import (
    ALGORITHM,
    DEVICES,
    HOST_IP,
    HOST_NAME,
    PROCESS_PID,
    RANK,
    RUN_ID,
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    STAGE,
    WORKER_GROUP,
    WORLD_SIZE,
)
from rlsight.errors import ConfigError

if TYPE_CHECKING:
    from rlsight.config import TelemetryConfig

__all__ = [
    "ENV_DEVICES",
    "ENV_RANK",
    "ENV_WORKER_GROUP",
    "ENV_WORLD_SIZE",
    "IDENTITY_ENV",
    "Identity",
    "env_devices",
    "env_int",
    "resource_attributes",
]

#: Env vars that carry a worker's identity (set by ``rlsight.ray`` or a launcher).
ENV_WORKER_GROUP: Final = "RLSIGHT_WORKER_GROUP"
ENV_RANK: Final = "RLSIGHT_RANK"
ENV_WORLD_SIZE: Final = "RLSIGHT_WORLD_SIZE"
ENV_DEVICES: Final = "RLSIGHT_DEVICES"

#: (env var, resource attribute, default, meaning) of each identity variable; per process,
#: so not part of the run-wide config. docs/configuration.md's identity table comes from here.
IDENTITY_ENV: Final = (
    (ENV_WORKER_GROUP, WORKER_GROUP, "`worker` (`driver` in `setup_telemetry`)",
     "Which fleet the process belongs to; Ray actors default to their class name."),
    (ENV_RANK, RANK, "`0`", "The process's rank within its worker group."),
    (ENV_WORLD_SIZE, WORLD_SIZE, "`1`", "How many ranks the worker group has."),
    (ENV_DEVICES, DEVICES,
     "the GPUs Ray assigned the process, else the ids in `CUDA_VISIBLE_DEVICES`; unset when none "
     "(the analysis counts 1)",
     "Accelerators the process drives; weights its fleet in utilisation."),
)


@dataclass(slots=True)
class Identity:
    """A process's name in the run; mutable only until its providers are built."""

    worker_group: str
    rank: int
    world_size: int
    devices: int | None = None
    resource_attributes: dict[str, Any] = field(default_factory=dict)


def resource_attributes(config: TelemetryConfig, ident: Identity) -> dict[str, Any]:
    """The resource attributes of a process: run, identity, host, accelerators, then overrides.

    The config's ``resource_attributes`` win over detected ones, and the process's own
    (``init_worker(resource_attributes=...)``, ``bind_identity``) win over the config's.
    """
    pid = os.getpid()
    attrs: dict[str, Any] = {
        SERVICE_NAME: config.service_name,
        SERVICE_INSTANCE_ID: f"{config.run_id}/{ident.worker_group}/{ident.rank}/{pid}",
        RUN_ID: config.run_id,
        RANK: ident.rank,
        WORLD_SIZE: ident.world_size,
        WORKER_GROUP: ident.worker_group,
        STAGE: "rl",
        PROCESS_PID: pid,
        HOST_NAME: socket.gethostname(),
    }
    if config.algorithm:
        attrs[ALGORITHM] = config.algorithm
    node_ip = _host.ray_node_ip()
    if node_ip is not None:
        attrs[HOST_IP] = [node_ip]
    attrs.update(_host.host_attributes(os.environ))
    accelerators = _host.accelerator_ids(os.environ)
    if accelerators:
        attrs["hw.type"] = "gpu"
        attrs["hw.id"] = list(accelerators)
    devices = ident.devices if ident.devices is not None else (len(accelerators) or None)
    if devices is not None:
        attrs[DEVICES] = devices
    attrs.update(config.resource_attributes)
    attrs.update(ident.resource_attributes)
    return attrs


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """The integer in ``env[name]``; ``default`` when unset or blank."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected an integer") from None


def env_devices(env: Mapping[str, str] | None = None) -> int | None:
    """``RLSIGHT_DEVICES`` as a positive count; ``None`` when unset (then Ray's GPUs count)."""
    env = os.environ if env is None else env
    if not env.get(ENV_DEVICES):
        return None
    devices = env_int(env, ENV_DEVICES, 1)
    if devices < 1:
        raise ConfigError(
            f"{ENV_DEVICES}={env[ENV_DEVICES]!r}: expected a positive integer (the accelerators "
            "this process drives); unset it for a process without any"
        )
    return devices

