"""A real OTLP collector for tests: rotel on 127.0.0.1, logging what it receives.

The ``collector`` fixture in ``conftest.py`` starts one per session; tests find what reached
it in its debug log.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Collector:
    http: str
    grpc: str
    log: Path

    def wait_for(self, needle: str, timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log.read_text(errors="replace"):
                return True
            time.sleep(0.1)
        return False


@contextmanager
def running_collector(log_dir: Path) -> Iterator[Collector]:
    """Start rotel (http and grpc receivers, debug log of every item) until the block ends."""
    rotel = pytest.importorskip("rotel")
    agent = Path(rotel.__file__).parent / "rotel-agent"
    http_port, grpc_port = _free_port(), _free_port()
    log = log_dir / "rotel.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(agent), "start", "--otlp-http-endpoint", f"127.0.0.1:{http_port}",
             "--otlp-grpc-endpoint", f"127.0.0.1:{grpc_port}", "--exporter", "blackhole",
             "--debug-log", "traces", "--debug-log", "metrics",
             "--debug-log-verbosity", "detailed"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail(f"rotel did not listen on {http_port}: {log.read_text()}")
        yield Collector(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{grpc_port}", log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
