"""Where a process runs: its accelerators, SLURM job and Kubernetes pod, as resource attributes.

A slow rank is found in the trace; fixing it needs the machine: which node, which GPUs, which
SLURM job or pod. rlsight reads what the launcher already put in the environment (and, in a
Ray worker, which accelerators Ray assigned), never probes hardware, and adds only what is
present: a process outside SLURM carries no SLURM attribute rather than an empty one.

Names follow OpenTelemetry's semantic conventions where they exist (``hw.*`` of the hardware
conventions, whose GPU metrics are ``hw.gpu.*``; ``k8s.*``); SLURM has none, so its
attributes sit under ``rl.slurm.``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["accelerator_ids", "host_attributes", "pid_alive"]

#: Values of ``CUDA_VISIBLE_DEVICES`` that mean "no device" rather than a device id.
_NO_DEVICE: Final = frozenset({"", "-1", "NoDevFiles", "none", "void"})
_K8S_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

#: (attribute, env vars read in order) of each attribute taken straight from the environment.
SLURM_ENV: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("rl.slurm.job_id", ("SLURM_JOB_ID",)),
    ("rl.slurm.node", ("SLURMD_NODENAME",)),
    ("rl.slurm.procid", ("SLURM_PROCID",)),
)
K8S_ENV: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("k8s.pod.name", ("K8S_POD_NAME", "POD_NAME")),
    ("k8s.pod.uid", ("K8S_POD_UID", "POD_UID")),
    ("k8s.namespace.name", ("K8S_NAMESPACE", "POD_NAMESPACE")),
    ("k8s.node.name", ("K8S_NODE_NAME", "NODE_NAME")),
)


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def ray_node_ip() -> str | None:
    """This node's address as Ray knows it and prints it in its errors (``ip=10.0.0.5``), when
    Ray is loaded and connected in this process (never imported here): the report names a pid
    in such an error only when the process with that pid is known by that address (a pid
    number is per host). ``None`` without a connected Ray: Ray has then settled on no address,
    and finding one could mean a hostname lookup at setup."""
    ray = sys.modules.get("ray")
    try:
        ip = ray.util.get_node_ip_address() if ray is not None and ray.is_initialized() else None
    except Exception:  # a Ray too old or half-imported, no route: the attribute is left out
        return None
    return ip if isinstance(ip, str) and ip else None


def host_attributes(env: Mapping[str, str], namespace_file: Path = _K8S_NAMESPACE_FILE) -> dict[str, Any]:
    """SLURM and Kubernetes attributes of this process, from ``env``; only those present.

    In a pod (``KUBERNETES_SERVICE_HOST`` set) without a downward-API pod name, the pod name
    is ``HOSTNAME``, which Kubernetes sets to it; the namespace falls back to the service
    account's namespace file.
    """
    attrs: dict[str, Any] = {}
    for key, names in SLURM_ENV:
        value = _first(env, names)
        if value is not None:
            attrs[key] = int(value) if key == "rl.slurm.procid" and value.isdigit() else value
    for key, names in K8S_ENV:
        value = _first(env, names)
        if value is not None:
            attrs[key] = value
    if env.get("KUBERNETES_SERVICE_HOST"):
        if "k8s.pod.name" not in attrs and env.get("HOSTNAME"):
            attrs["k8s.pod.name"] = env["HOSTNAME"]
        if "k8s.namespace.name" not in attrs:
            try:
                namespace = namespace_file.read_text(encoding="utf-8").strip()
            except OSError:
                namespace = ""
            if namespace:
                attrs["k8s.namespace.name"] = namespace
    return attrs


def accelerator_ids(env: Mapping[str, str]) -> tuple[str, ...]:
    """The GPUs this process was given: Ray's ``GPU`` assignment in a Ray worker, else
    ``CUDA_VISIBLE_DEVICES``; ``()`` when neither names one.

    Ray is asked only when the process already imported and initialised it (a Ray worker
    always has), so a plain process never pays Ray's import.
    """
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                assigned = ray.get_runtime_context().get_accelerator_ids()
                ids = assigned.get("GPU")
                if ids:
                    return tuple(str(i) for i in ids)
        except Exception:  # an older Ray without get_accelerator_ids: fall back to the env
            pass
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() in _NO_DEVICE:
        return ()
    return tuple(part.strip() for part in raw.split(",") if part.strip() and part.strip() not in _NO_DEVICE)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (signal 0 checks without sending anything).

    A process killed while its parent does not wait on it (a rank under a hung driver) stays a
    zombie: its pid answers signal 0, yet nothing runs, so it counts as not alive.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` is a zombie, by its state in ``/proc`` (false where there is no procfs)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    # The command name in parentheses may hold spaces and ")": the state follows the last one.
    return stat[stat.rfind(")") + 1:].split()[:1] == ["Z"]
