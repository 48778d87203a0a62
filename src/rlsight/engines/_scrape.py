"""Scraping a ``/metrics`` endpoint in a daemon thread, against a deadline."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlsight.engines._reader import Family

__all__ = ["Scraper"]


class _Fetch:
    """One scrape running in a daemon thread; the caller reads ``body`` or ``error``.

    The body is read a chunk at a time against the scrape's deadline, so a server that
    dribbles bytes (each arriving within the socket timeout) cannot keep the thread alive:
    it gives up at the deadline, at most one socket timeout late.
    """

    __slots__ = ("body", "error")

    def __init__(self) -> None:
        self.body: str | None = None
        self.error: Exception | None = None

    def run(self, url: str, timeout_s: float, max_bytes: int) -> None:
        deadline = time.monotonic() + timeout_s
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=timeout_s) as response:
                chunks: list[bytes] = []
                size = 0
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the body did not arrive within timeout_s={timeout_s}")
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        raise ValueError(f"response is larger than max_bytes={max_bytes}")
            self.body = b"".join(chunks).decode("utf-8")
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                exc.close()  # it holds the response's socket, which the caller never reads
            self.error = exc


class Scraper:
    """Scrapes one URL, at most one request in flight.

    A scrape the caller stopped waiting for may still be finishing (up to one socket timeout
    past its deadline); while it does, the next read fails at once instead of starting a
    second thread, so a stalled engine costs one thread, not one per step.
    """

    __slots__ = ("_lock", "_thread", "max_bytes", "timeout_s", "url")

    def __init__(self, url: str, timeout_s: float, max_bytes: int) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Iterable[Family]:
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError as exc:
            raise ImportError(
                "EngineMetricsReader.from_url needs prometheus-client: pip install 'rlsight[engines]'"
            ) from exc
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise TimeoutError(
                    "the previous scrape has not finished yet (the server is slow or stalled)"
                )
            fetch = _Fetch()
            thread = threading.Thread(
                target=fetch.run, args=(self.url, self.timeout_s, self.max_bytes),
                name="rlsight-engine-scrape", daemon=True,
            )
            self._thread = thread
            thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"no answer within timeout_s={self.timeout_s}")
        if fetch.error is not None:
            raise fetch.error
        if fetch.body is None:
            raise RuntimeError("the scrape thread ended without a body or an error")
        return list(text_string_to_metric_families(fetch.body))
