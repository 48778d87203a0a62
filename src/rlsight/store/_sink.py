"""Where encoded store bytes go. Kept apart from encoding so a later sink (a Ray actor on the
driver's node, for multi-node runs without a shared filesystem) can replace the file."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Protocol

__all__ = ["FileSink", "Sink"]

_log = logging.getLogger("rlsight")


class Sink(Protocol):
    """Receives whole OTLP/JSON lines; each ``write`` must land whole or raise."""

    def write(self, data: bytes, records: int = 1) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Appends lines to one file with ``os.write``, so bytes reach the kernel per batch.

    ``O_APPEND`` plus one ``write`` per line keeps a line whole even if a SIGKILL lands
    between batches; a kill inside a write leaves a truncated last line, which the reader
    skips with a warning.

    A run folder deleted or replaced while the run goes (a cleanup script, a user's ``rm``)
    would otherwise swallow every later line into an unlinked file. Before each write the
    sink checks that its path still names the file it holds; if not, it warns once, counts
    the records the lost file held (:attr:`lost`), and starts a new file at the same path.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._identity = (0, 0)
        #: Records written into a file that was then deleted or replaced.
        self.lost = 0
        self._in_file = 0
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        st = os.fstat(self._fd)
        self._identity = (st.st_dev, st.st_ino)
        self._in_file = 0

    def _still_ours(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def write(self, data: bytes, records: int = 1) -> None:
        """Append ``data`` (one line holding ``records`` records) whole, or raise ``OSError``."""
        with self._lock:
            if self._fd is None:
                raise OSError(f"store file {self.path} is closed")
            if not self._still_ours():
                self._replace()
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            self._in_file += records

    def _replace(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        self.lost += self._in_file
        _log.warning(
            "rlsight: store file %s was deleted or replaced while the run was writing it; "
            "%d record(s) it held are lost (counted in the ShutdownReport). Writing goes on "
            "in a new file at the same path; keep the run folder until the run ends",
            self.path, self._in_file,
        )
        self._open()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
