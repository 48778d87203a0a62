"""Where encoded store bytes go. Kept apart from encoding so a later sink (a Ray actor on the
driver's node, for multi-node runs without a shared filesystem) can replace the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

__all__ = ["FileSink", "Sink"]


class Sink(Protocol):
    """Receives whole OTLP/JSON lines; each ``write`` must land whole or raise."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Appends lines to one file with ``os.write``, so bytes reach the kernel per batch.

    ``O_APPEND`` plus one ``write`` per line keeps a line whole even if a SIGKILL lands
    between batches; a kill inside a write leaves a truncated last line, which the reader
    skips with a warning.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._fd is None:
                raise OSError(f"store file {self.path} is closed")
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
