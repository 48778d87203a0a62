"""``manifest.json``: what a run was, written once by the driver at setup."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rlsight._host import pid_alive
from rlsight._redact import REDACTED, is_content, is_content_key, scrub, scrub_argv
from rlsight.errors import warn_once

if TYPE_CHECKING:
    from rlsight.config import TelemetryConfig

#: Version of the on-disk layout (folders, file naming, manifest keys). Readers check it.
STORE_FORMAT: Final = 1
SUPPORTED_STORE_FORMATS: Final = frozenset({1})


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def write_manifest(
    config: TelemetryConfig, *, started_ns: int, catalog: Mapping[str, Any] | None = None
) -> Path:
    """Write ``<run_dir>/manifest.json`` atomically and return its path.

    ``catalog`` is the run's vocabulary (``rlsight._catalog.run_catalog``): readers take the
    span groups and presets from it, so a report needs no import of the run's libraries.
    """
    run_dir = config.run_path
    run_dir.mkdir(parents=True, exist_ok=True)
    owner = _live_owner(run_dir)
    if owner is not None:
        # A second driver on one run (a process the driver launched that called
        # setup_telemetry): the run stays the first driver's; this one writes spans only.
        warn_once(
            f"manifest-owner:{run_dir}",
            f"rlsight: {run_dir} belongs to the driver with pid {owner} on this host; its "
            "manifest.json is kept. A process the driver launches should call init_worker() "
            "(docs/configuration.md), not setup_telemetry()",
            stacklevel=3,
        )
        return run_dir / "manifest.json"
    # The settings only: a private field (which ones were given) is not the run's config.
    cfg = {k: v for k, v in asdict(config).items() if not k.startswith("_")}
    # The manifest is a plain file anyone with the run folder reads: no secrets in it.
    cfg["resource_attributes"] = {
        k: REDACTED if is_content_key(k) and is_content(v) else v
        for k, v in config.resource_attributes.items()
    }
    if config.otlp_endpoint:
        cfg["otlp_endpoint"] = scrub(config.otlp_endpoint)
    manifest = {
        "store_format": STORE_FORMAT,
        "run_id": config.run_id,
        "started_unix_ns": started_ns,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_ns / 1e9)),
        "algorithm": config.algorithm,
        "config": cfg,
        "versions": {
            name: _version(name)
            for name in ("rlsight", "opentelemetry-sdk", "ray", "vllm", "sglang")
        } | {"python": platform.python_version()},
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": scrub_argv(sys.argv),
    }
    if catalog is not None:
        manifest["catalog"] = dict(catalog)
    path = run_dir / "manifest.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def _live_owner(run_dir: Path) -> int | None:
    """The pid of another live process on this host that wrote ``run_dir``'s manifest."""
    existing = read_manifest(run_dir)
    if existing is None or existing.get("host") != socket.gethostname():
        return None
    pid = existing.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return None
    # A driver that is gone leaves the folder to a restart of the run.
    return pid if pid_alive(pid) else None


def read_manifest(run_dir: Path | str) -> dict[str, Any] | None:
    """The run's manifest, or ``None`` if it has none (a worker-only folder) or it is unreadable."""
    path = Path(run_dir) / "manifest.json"
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):  # ValueError: not JSON, or not text (UnicodeDecodeError)
        return None
    return data if isinstance(data, dict) else None
