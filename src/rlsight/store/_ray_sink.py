"""The Ray store transport: every process's store lines also reach the driver's run folder.

With ``store_transport="ray"`` each process keeps writing its own files (the local store is
the copy nothing can take away) and also *ships* every line it writes to one sink actor, a
detached, named Ray actor pinned to the driver's node, which appends the lines to the
driver's run folder. A multi-node run without a shared filesystem then has every span in
one folder, and ``rlsight report`` on the driver's node sees the whole run.

Shipping is never on a training step's path. :meth:`StoreShipper.offer` appends to a bounded
queue and returns; a daemon thread sends the batches as actor calls and waits for them
with a timeout. A full queue, a full sink inbox (``max_pending_calls``), a sink that does not
answer within :data:`SHIP_TIMEOUT_S`, or a dead sink each cost a counted drop from the
shipping path, never a blocked step, and never a line of the process's own files.

Live-file lines (start records, heartbeats, the shutdown line) queue apart from span batches
(:class:`ShipQueue`): a worker flooding spans must not push out the heartbeats that show the
driver's ``rlsight watch`` it is alive. They ride in the call of the next span batch, a
heartbeat still waiting is replaced by the next one, and a refused call keeps them queued.

Each batch carries the sender's name and a sequence number; the sink writes a
(sender, kind, sequence) once, so a call that is retried does not duplicate lines. A process
that writes into the driver's run folder itself (on the driver's node, or over a shared
filesystem: its run folder holds the driver's ``manifest.json``) ships nothing.
"""

from __future__ import annotations

import collections
import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from rlsight.store._live import HEARTBEAT_FOLDER, LIVE_FOLDER
from rlsight.store._sink import FileSink

__all__ = [
    "INBOX_CALLS",
    "LIVE_BATCHES",
    "QUEUE_BATCHES",
    "SHIP_TIMEOUT_S",
    "SINK_NAMESPACE",
    "ShipQueue",
    "ShippingSink",
    "SinkStarter",
    "StoreShipper",
    "StoreSinkActor",
    "sink_name",
]

#: Ray namespace and name of a run's sink actor (one per run id).
SINK_NAMESPACE: Final = "rlsight"
#: Calls the sink may have queued before a sender's call is refused (its bounded inbox).
INBOX_CALLS: Final = 256
#: Batches a process buffers while its calls are in flight; beyond, the oldest is dropped.
QUEUE_BATCHES: Final = 1024
#: Live-file writes a process buffers apart from span batches (one every heartbeat period,
#: 10 s: over 40 minutes of a sink that cannot be reached); beyond, the oldest is dropped.
LIVE_BATCHES: Final = 256
#: The store kinds of the live view (``<run_dir>/live/`` start records and shutdown lines,
#: ``<run_dir>/heartbeats/``), queued apart from span batches.
_LIVE_KINDS: Final = frozenset({LIVE_FOLDER, HEARTBEAT_FOLDER})
#: Longest a live-file write waits for a span batch to ride with before it is sent alone
#: (a busy worker's heartbeats then cost no call of their own; `watch` allows 30 s).
_LIVE_HOLD_S: Final = 1.0
#: Calls one process keeps in flight before it waits for the oldest.
_IN_FLIGHT: Final = 8
#: Longest a shipping thread waits for the sink to take one batch before counting it lost.
SHIP_TIMEOUT_S: Final = 2.0
#: The driver's sink stops once no line arrived for this long (a worker ships within ~0.1 s)...
_QUIET_S: Final = 0.3
#: ... or after this long, whichever comes first.
_DRAIN_S: Final = 2.0
#: How often a process without a sink (not created yet, or dead) looks it up again.
_RESOLVE_EVERY_S: Final = 1.0


_KIND: Final = re.compile(r"[a-z][a-z_]*")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]+")


#: Sequence numbers the sink remembers per sender and kind to refuse a batch delivered twice.
#: A sender has at most a few calls in flight and sends each kind's batches in order, so a
#: number this far behind the newest is never a first delivery.
SEEN_KEPT: Final = 4096


class _Seen:
    """The sequence numbers of one sender's kind already written: the last :data:`SEEN_KEPT`,
    and a floor at or below which every number counts as written (a set of every number ever
    seen grew by ~120 MiB a day per sender and kind)."""

    __slots__ = ("floor", "order", "recent")

    def __init__(self) -> None:
        self.floor = -1
        self.recent: set[int] = set()
        self.order: collections.deque[int] = collections.deque()

    def __contains__(self, seq: int) -> bool:
        return seq <= self.floor or seq in self.recent

    def add(self, seq: int) -> None:
        self.recent.add(seq)
        self.order.append(seq)
        if len(self.order) > SEEN_KEPT:
            old = self.order.popleft()
            self.recent.discard(old)
            self.floor = max(self.floor, old)


#: Files the sink keeps open at once. Each sender writes four (traces, metrics, live,
#: heartbeats): a thousand workers would pass the usual limit of 1,024 open files, so the
#: least recently written is closed and opened again (appending) when its sender next ships.
SINK_OPEN_FILES: Final = 256


def sink_name(run_id: str) -> str:
    """The named actor of run ``run_id``'s sink."""
    return f"rlsight-store-sink-{run_id}"


class StoreSinkActor:
    """The sink: appends shipped lines to ``<run_dir>/<kind>/<sender>.jsonl`` on its node.

    Run as a Ray actor (``num_cpus=0``, so it never takes a slot the run needs). Calls are
    processed one at a time in arrival order, so each sender's file keeps its batch order.
    """

    def __init__(self, run_dir: str) -> None:
        self._run_dir = Path(run_dir)
        #: Open files, least recently written first (at most :data:`SINK_OPEN_FILES`).
        self._sinks: collections.OrderedDict[tuple[str, str], FileSink] = collections.OrderedDict()
        self._seen: dict[tuple[str, str], _Seen] = collections.defaultdict(_Seen)
        self.lines = 0

    def append(self, sender: str, kind: str, seq: int, data: bytes) -> bool:
        """Write one shipped batch once; False when (sender, kind, seq) was already written.

        ``kind`` is the store folder (``traces``, ``metrics``, or a record kind added later);
        ``sender`` becomes a file name, with anything but ``[A-Za-z0-9_.-]`` replaced.
        """
        if not _KIND.fullmatch(kind):
            raise ValueError(f"store kind {kind!r} is not a folder name like 'traces' or 'metrics'")
        seen = self._seen[(sender, kind)]
        if seq in seen:
            return False
        key = (sender, kind)
        sink = self._sinks.get(key)
        if sink is None:
            while len(self._sinks) >= SINK_OPEN_FILES:
                self._sinks.popitem(last=False)[1].close()
            name = _UNSAFE.sub("_", sender).lstrip(".") or "sender"
            sink = self._sinks[key] = FileSink(self._run_dir / kind / f"{name}.jsonl")
        else:
            self._sinks.move_to_end(key)
        sink.write(data)
        seen.add(seq)
        self.lines += 1
        return True

    def append_all(self, sender: str, batches: list[tuple[str, int, bytes]]) -> int:
        """Write each (kind, seq, data) of one call (a span batch and the live lines that rode
        with it) as :meth:`append` does; how many were new."""
        return sum(self.append(sender, kind, seq, data) for kind, seq, data in batches)

    def written(self) -> int:
        """Lines written so far (a barrier: it answers after every earlier call)."""
        return self.lines

    def close(self) -> None:
        """Close every file (the driver calls it before it kills the sink)."""
        for sink in self._sinks.values():
            sink.close()
        self._sinks.clear()


def _start_sink(run_id: str, run_dir: str) -> Any:
    """Create (or find) the run's sink on this process's node; Ray must be initialised."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    actor = ray.remote(StoreSinkActor).options(
        name=sink_name(run_id), namespace=SINK_NAMESPACE, lifetime="detached",
        get_if_exists=True, num_cpus=0, max_pending_calls=INBOX_CALLS,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
    )
    return actor.remote(run_dir)


class SinkStarter:
    """In the driver: start the sink as soon as Ray is initialised, stop it at shutdown.

    ``setup_telemetry`` usually runs before ``ray.init`` (its config feeds
    ``ray_runtime_env``), so the sink cannot always be created during setup. A daemon thread
    looks for an initialised Ray every 50 ms and creates the sink then; workers that ship
    before it exists keep their batches queued and look it up again.
    """

    def __init__(self, run_id: str, run_dir: Path, on_error: Callable[[BaseException], None]) -> None:
        self._run_id = run_id
        self._run_dir = str(run_dir)
        self._on_error = on_error
        self._stop = threading.Event()
        self.actor: Any = None
        self._thread = threading.Thread(target=self._run, name="rlsight-ray-sink-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ray = _ray_if_initialised()
            if ray is not None:
                try:
                    self.actor = _start_sink(self._run_id, self._run_dir)
                except Exception as exc:  # Ray refused: the run goes on with node-local stores
                    self._on_error(exc)
                return
            self._stop.wait(0.05)

    def stop(self, timeout_s: float) -> None:
        """Let the sink take what workers are still shipping, within ``timeout_s``, then end it.

        Workers ship within about 0.1 s of a span's end, so the sink waits until no line
        arrived for :data:`_QUIET_S` (at most :data:`_DRAIN_S`): spans that ended just before
        the driver's shutdown still reach its folder. Later ones stay in the workers' files.
        """
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._thread.join(timeout_s)
        actor = self.actor
        ray = _ray_if_initialised()
        if actor is None or ray is None:
            return
        drain_until = min(deadline, time.monotonic() + _DRAIN_S)
        last = -1
        with contextlib.suppress(Exception):
            while time.monotonic() < drain_until:
                lines = ray.get(actor.written.remote(), timeout=max(0.1, drain_until - time.monotonic()))
                if lines == last:
                    break
                last = lines
                time.sleep(_QUIET_S)
        timeout_s = max(0.1, deadline - time.monotonic())
        # A sink that is already gone has nothing to close; a Ray that is shutting down
        # takes the actor with it.
        with contextlib.suppress(Exception):
            ray.get(actor.close.remote(), timeout=max(0.1, timeout_s))
        with contextlib.suppress(Exception):
            ray.kill(actor)


def _ray_if_initialised() -> Any:
    """The ``ray`` module if this process imported it and is connected, else ``None``.

    Never imports Ray: a process that has not imported it cannot have initialised it.
    """
    import sys

    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except AttributeError:  # a partially imported ray
        return None


class ShipQueue:
    """What a process has yet to ship, in two queues: span and metric batches (at most
    :data:`QUEUE_BATCHES`; beyond, the oldest is dropped and its spans counted in
    ``dropped["queue_full"]``) and live-file writes (at most :data:`LIVE_BATCHES`), so that a
    flood of spans never drops a heartbeat, a start record or the shutdown line.

    Not thread-safe: the shipper holds its lock around each call.
    """

    def __init__(self, dropped: collections.Counter[str]) -> None:
        self._batches: collections.deque[tuple[str, int, bytes, int]] = collections.deque()
        self._live: collections.deque[tuple[str, int, bytes]] = collections.deque()
        self._live_since = 0.0  # when the oldest live write waiting was queued
        self._first_live: int | None = None  # seq of the first live write (the process line)
        self._seq = 0
        self._dropped = dropped

    def put(self, kind: str, data: bytes, spans: int) -> None:
        """Queue one store write. A heartbeat replaces the heartbeats still waiting (the newest
        says all they say: only a heartbeat file's last line is read)."""
        self._seq += 1
        if kind not in _LIVE_KINDS:
            if len(self._batches) >= QUEUE_BATCHES:
                self._dropped["queue_full"] += self._batches.popleft()[3]
            self._batches.append((kind, self._seq, data, spans))
            return
        if kind == HEARTBEAT_FOLDER:
            self._live = collections.deque(item for item in self._live if item[0] != HEARTBEAT_FOLDER)
        elif self._first_live is None:
            self._first_live = self._seq  # the live file's process line: every later line needs it
        if len(self._live) >= LIVE_BATCHES:
            self._drop_oldest_live()
        if not self._live:
            self._live_since = time.monotonic()
        self._live.append((kind, self._seq, data))

    def _drop_oldest_live(self) -> None:
        """Make room (a sink out of reach for long): the oldest live write, but never the live
        file's process line, without which the sink's copy of the file reads as nothing."""
        for i, item in enumerate(self._live):
            if item[1] != self._first_live:
                del self._live[i]
                return

    def take(self, hold_live_s: float = 0.0) -> tuple[list[tuple[str, int, bytes]], int]:
        """The next call's (kind, seq, data) batches and their span count: the oldest span or
        metric batch, with every live write waiting; ``[]`` when nothing waits, or when only
        heartbeats do, none of them for ``hold_live_s`` yet (they wait for a batch to ride with;
        a start record or shutdown line goes at once, since the driver may be about to stop
        its sink)."""
        if (not self._batches and time.monotonic() - self._live_since < hold_live_s
                and all(item[0] == HEARTBEAT_FOLDER for item in self._live)):
            return [], 0
        calls: list[tuple[str, int, bytes]] = list(self._live)
        self._live.clear()
        spans = 0
        if self._batches:
            kind, seq, data, spans = self._batches.popleft()
            calls.append((kind, seq, data))
        return calls, spans

    def keep_live(self, calls: list[tuple[str, int, bytes]]) -> bool:
        """Queue again, ahead of newer ones, the live writes of a call that was refused;
        whether the call carried a span or metric batch too."""
        live = [call for call in calls if call[0] in _LIVE_KINDS]
        if live and not self._live:
            self._live_since = time.monotonic()
        self._live.extendleft(reversed(live))
        while len(self._live) > LIVE_BATCHES:
            self._drop_oldest_live()
        return len(live) < len(calls)

    def clear(self) -> int:
        """Empty both queues; the spans that were waiting."""
        spans = sum(item[3] for item in self._batches)
        self._batches.clear()
        self._live.clear()
        return spans


class StoreShipper:
    """In a process: ship each store line to the run's sink, off the step's path.

    Args:
        run_id: The run whose sink to look up.
        run_dir: This process's own run folder. If it holds the driver's ``manifest.json``
            for this run, the process already writes the driver's folder (it is on the
            driver's node, or the nodes share a filesystem): shipping would write every line
            twice, so nothing is shipped.
        sender: This process's name in the sink's file names (unique per process).
    """

    def __init__(self, run_id: str, run_dir: Path, sender: str) -> None:
        from rlsight.store._manifest import read_manifest

        self._name = sink_name(run_id)
        manifest = read_manifest(run_dir) or {}
        #: True when this process writes the driver's run folder itself.
        self.same_folder = manifest.get("run_id") == run_id
        self.sender = f"{sender}-{socket.gethostname()}"
        self.dropped: collections.Counter[str] = collections.Counter()
        self._queue = ShipQueue(self.dropped)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sink: Any = None
        self._next_lookup = 0.0
        self._pending: list[tuple[Any, int]] = []
        self.shipped = 0
        self._thread = threading.Thread(target=self._run, name="rlsight-ray-ship", daemon=True)
        self._thread.start()

    def offer(self, kind: str, data: bytes, spans: int) -> None:
        """Queue one store write for the sink; never blocks (a full queue drops the oldest,
        :class:`ShipQueue`)."""
        if self.same_folder:
            return
        with self._lock:
            if self._stop.is_set():
                self.dropped["after_shutdown"] += spans
                return
            self._queue.put(kind, data, spans)
        self._wake.set()

    def _lookup(self, ray: Any) -> Any:
        now = time.monotonic()
        if now < self._next_lookup:
            return None
        self._next_lookup = now + _RESOLVE_EVERY_S
        try:
            return ray.get_actor(self._name, namespace=SINK_NAMESPACE)
        except ValueError:  # not created yet, or gone: keep the queue and look again later
            return None

    def _settle(self, ray: Any, wait_s: float) -> None:
        """Collect finished calls; after ``wait_s`` the oldest unfinished one counts as lost."""
        if not self._pending:
            return
        refs = [ref for ref, _ in self._pending]
        ready, _ = ray.wait(refs, num_returns=len(refs) if wait_s == 0 else 1, timeout=wait_s)
        done = set(ready)
        if not done and wait_s > 0:
            _, spans = self._pending.pop(0)
            self.dropped["timeout"] += spans  # the sink is slow: never wait longer for it
            return
        kept = []
        for ref, spans in self._pending:
            if ref not in done:
                kept.append((ref, spans))
                continue
            try:
                ray.get(ref, timeout=0)
                self.shipped += spans
            except Exception:  # the sink died with this call: look it up again later
                self.dropped["sink_dead"] += spans
                self._sink = None
        self._pending = kept

    def _send(self, ray: Any, deadline: float | None = None) -> None:
        """Send what is queued, the oldest first; with ``deadline`` (shutdown), stop there: a
        sink that takes calls but never answers would otherwise hold each 8th call for
        :data:`SHIP_TIMEOUT_S` (a thousand queued batches: half an hour)."""
        while not self.same_folder:
            if deadline is not None and time.monotonic() >= deadline:
                return
            if self._sink is None:
                self._sink = self._lookup(ray)
                if self._sink is None:
                    return
            with self._lock:  # live lines alone go after a while, or now at shutdown
                calls, spans = self._queue.take(0.0 if self._stop.is_set() else _LIVE_HOLD_S)
            if not calls:
                return
            try:
                ref = self._sink.append_all.remote(self.sender, calls)
            except Exception as exc:  # a full inbox refuses the call at once
                reason = "inbox_full" if type(exc).__name__ == "PendingCallsLimitExceeded" else "sink_dead"
                self.dropped[reason] += spans
                if reason == "sink_dead":
                    self._sink = None
                with self._lock:
                    carried_batch = self._queue.keep_live(calls)
                if not carried_batch:
                    return  # live lines only: they wait for the next wake
                continue
            self._pending.append((ref, spans))
            self._settle(ray, 0)
            if len(self._pending) >= _IN_FLIGHT:
                left = SHIP_TIMEOUT_S if deadline is None else deadline - time.monotonic()
                self._settle(ray, max(0.0, min(SHIP_TIMEOUT_S, left)))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.2)
            self._wake.clear()
            ray = _ray_if_initialised()
            if ray is None:
                continue
            try:
                self._send(ray)
                self._settle(ray, 0)
            except Exception:  # the shipping thread must outlive a Ray hiccup
                self._sink = None
                continue

    def close(self, timeout_s: float) -> None:
        """Ship what is queued within ``timeout_s``; count what is left as dropped."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        ray = _ray_if_initialised()
        if ray is not None and not self._thread.is_alive():
            try:
                self._send(ray, deadline)
                while self._pending and time.monotonic() < deadline:
                    self._settle(ray, min(SHIP_TIMEOUT_S, max(0.0, deadline - time.monotonic())))
            except Exception:  # what did not reach the sink is counted below
                pass
        with self._lock:
            left = self._queue.clear() + sum(spans for _, spans in self._pending)
            self._pending = []
        if left:
            self.dropped["shutdown_timeout"] += left


class ShippingSink:
    """A :class:`~rlsight.store._sink.Sink` that writes locally, then ships the same bytes.

    For record kinds written straight to a sink rather than through the span writer (start
    records, ``live/``): the local file first, whatever happens to the transport.
    """

    def __init__(self, sink: FileSink, shipper: StoreShipper, kind: str) -> None:
        self._sink = sink
        self._shipper = shipper
        self._kind = kind

    def write(self, data: bytes, records: int = 1) -> None:
        self._sink.write(data, records)
        self._shipper.offer(self._kind, data, 0)

    def close(self) -> None:
        self._sink.close()
