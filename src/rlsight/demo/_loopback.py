"""Ray's single-machine mode, so the demo's cluster listens on 127.0.0.1 only.

Ray binds its gRPC servers (GCS, raylet, every core worker) to the node's IP address, and a
loopback ``_node_ip_address`` is replaced by the machine's own IP. Ray's own switch for a
single-machine cluster, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (on by default only on Windows
and macOS), makes the node IP 127.0.0.1, and then every one of those servers binds to loopback
(measured with ``ss -ltnp``; docs/demo.md). Ray reads it once, when ``ray`` is first imported,
so the demo's entry points set it before importing Ray.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["LOOPBACK_ENV", "prefer_loopback"]

#: Ray's switch: ``0`` makes a local cluster's node IP 127.0.0.1.
LOOPBACK_ENV: Final = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def prefer_loopback() -> None:
    """Ask Ray for a loopback-only cluster, unless the caller set the variable already."""
    os.environ.setdefault(LOOPBACK_ENV, "0")
