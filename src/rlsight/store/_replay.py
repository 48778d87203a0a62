"""Send a stored run to an OTLP collector, resumably: what `rlsight export` does.

A run whose collector was down (or that never had one) still has every span in its store.
Each store line is one OTLP request, so replaying is sending the lines in order. Progress is
a byte offset per file, kept in ``<run_dir>/export/<destination>.json`` and advanced only after
the collector accepted a line: an interrupted export resumes where it stopped, a finished one
sends nothing again, and lines a still-running process appends later go out on the next run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rlsight.errors import StoreError
from rlsight.store import _lines
from rlsight.store._collector import holds_a_run, not_a_run
from rlsight.store._reader import store_files
from rlsight.store._schema import SkippedRecord

__all__ = ["ExportResult", "export_run"]

_KINDS: Final = ("traces", "metrics")
_ATTEMPTS: Final = 3
_TIMEOUT_S: Final = 10.0


@dataclass
class ExportResult:
    """What one export did. ``error`` is set when the collector stopped it (rerun to resume)."""

    endpoint: str
    protocol: str
    sent_lines: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_KINDS, 0))
    sent_spans: int = 0
    already_sent_lines: int = 0
    skipped: list[SkippedRecord] = field(default_factory=list)
    state_path: Path | None = None
    error: str | None = None


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON parser expects base64: convert in place."""
    if isinstance(node, dict):
        for key in ("traceId", "spanId", "parentSpanId"):
            value = node.get(key)
            if isinstance(value, str) and value:
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
        for value in node.values():
            if isinstance(value, (dict, list)):
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def _to_proto(kind: str, request: Any) -> Any:
    from google.protobuf import json_format  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _hex_ids_to_base64(request)
    message = ExportTraceServiceRequest() if kind == "traces" else ExportMetricsServiceRequest()
    return json_format.ParseDict(request, message, ignore_unknown_fields=True)


def _http_sender(endpoint: str) -> Callable[[str, Any], None]:
    import urllib.request

    base = endpoint.rstrip("/")

    def send(kind: str, message: Any) -> None:
        request = urllib.request.Request(
            f"{base}/v1/{kind}", data=message.SerializeToString(), method="POST",
            headers={"Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            response.read()

    return send


def _grpc_sender(endpoint: str) -> tuple[Callable[[str, Any], None], Callable[[], None]]:
    try:
        import grpc  # type: ignore[import-untyped]
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
            MetricsServiceStub,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
    except ImportError as exc:
        raise StoreError("--protocol grpc needs the gRPC exporter: pip install 'rlsight[grpc]'") from exc
    target = endpoint.split("://", 1)[-1].rstrip("/")
    channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials())
               if endpoint.startswith("https://") else grpc.insecure_channel(target))
    stubs: dict[str, Any] = {
        "traces": TraceServiceStub(channel),  # type: ignore[no-untyped-call]
        "metrics": MetricsServiceStub(channel),  # type: ignore[no-untyped-call]
    }

    def send(kind: str, message: Any) -> None:
        stubs[kind].Export(message, timeout=_TIMEOUT_S)

    return send, channel.close


def _state_path(run_dir: Path, endpoint: str, protocol: str) -> Path:
    digest = hashlib.sha256(f"{protocol} {endpoint.rstrip('/')}".encode()).hexdigest()[:16]
    return run_dir / "export" / f"{digest}.json"


def _load_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) and isinstance(state.get("files"), dict) else {}


def _save_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


def _lines_from(path: Path, offset: int, skipped: list[SkippedRecord]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, offset after the line, line) of each whole line from ``offset`` on.

    A last line without its newline may still be being written: it is left for a later run.
    """
    limit = _lines.MAX_LINE_BYTES
    with path.open("rb") as handle:
        handle.seek(offset)
        lineno = 0
        while True:
            raw = handle.readline(limit + 1)
            if not raw.endswith(b"\n"):
                if len(raw) <= limit:
                    return  # end of file, or a line still being written
                while raw and not raw.endswith(b"\n"):
                    raw = handle.readline(2**20)
                lineno += 1
                skipped.append(SkippedRecord(str(path), lineno, "line too long"))
                continue
            lineno += 1
            yield lineno, handle.tell(), raw


def export_run(
    run_dir: Path | str,
    endpoint: str,
    protocol: str = "http/protobuf",
    *,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Send every line of ``run_dir``'s store not yet sent to ``endpoint``; see the module doc.

    Line numbers in ``skipped`` count from where this export resumed in each file.

    Raises:
        StoreError: ``run_dir`` is not a run folder, its progress cannot be saved, or the
            protocol's client is not installed.
    """
    from rlsight.config import endpoint_problem

    run_dir = Path(run_dir)
    problem = endpoint_problem(endpoint)
    if problem is not None:
        raise StoreError(f"--otlp-endpoint {endpoint!r}: {problem}")
    if run_dir.is_dir() and not holds_a_run(run_dir):  # the runs root, say: nothing to send
        raise not_a_run(run_dir)
    files = {kind: store_files(run_dir, kind) for kind in _KINDS}
    close: Callable[[], None] = lambda: None  # noqa: E731
    if protocol == "grpc":
        send, close = _grpc_sender(endpoint)
    else:
        send = _http_sender(endpoint)
    state_path = _state_path(run_dir, endpoint, protocol)
    try:
        state_path.parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot record export progress in {state_path.parent} ({exc.strerror}); "
                         "export needs a writable run folder") from exc
    state = _load_state(state_path) or {"endpoint": endpoint, "protocol": protocol, "files": {}}
    result = ExportResult(endpoint, protocol, state_path=state_path)
    try:
        for kind in _KINDS:
            for path in files[kind]:
                if not _export_file(run_dir, kind, path, state, state_path, send, result, progress):
                    return result
    finally:
        close()
    return result


def _export_file(
    run_dir: Path, kind: str, path: Path, state: dict[str, Any], state_path: Path,
    send: Callable[[str, Any], None], result: ExportResult, progress: Callable[[int], None] | None,
) -> bool:
    """Send ``path`` from its recorded offset; False when the collector stopped the export."""
    key = str(path.relative_to(run_dir))
    st = path.stat()
    entry = state["files"].get(key) or {}
    offset = int(entry.get("offset", 0))
    if entry.get("inode") != st.st_ino or offset > st.st_size:
        offset = 0  # a new or replaced file: all of it is unsent
    result.already_sent_lines += int(entry.get("lines", 0)) if offset else 0
    lines_done = int(entry.get("lines", 0)) if offset else 0
    parse = _lines.loads()
    for lineno, end, raw in _lines_from(path, offset, result.skipped):
        message = None
        if raw.strip():
            try:
                request = parse(raw)
                spans = sum(len(ss.get("spans", [])) for rs in request.get("resourceSpans", [])
                            for ss in rs.get("scopeSpans", [])) if kind == "traces" else 0
                message = _to_proto(kind, request)
            except _lines.PARSE_ERRORS as exc:
                result.skipped.append(SkippedRecord(str(path), lineno, f"not an OTLP {kind} request ({exc})"))
        if message is not None:
            error = _send_with_retries(send, kind, message)
            if error is not None:
                result.error = error
                return False
            result.sent_lines[kind] += 1
            result.sent_spans += spans
            if progress is not None:
                progress(result.sent_spans)
        lines_done += 1
        state["files"][key] = {"offset": end, "inode": st.st_ino, "lines": lines_done}
        _save_state(state_path, state)
    return True


def _send_with_retries(send: Callable[[str, Any], None], kind: str, message: Any) -> str | None:
    """None once the collector accepted ``message``; the last error after a few attempts."""
    delay = 0.5
    for attempt in range(_ATTEMPTS):
        try:
            send(kind, message)
            return None
        except Exception as exc:  # urllib, grpc and socket errors: all mean "not delivered"
            if attempt == _ATTEMPTS - 1:
                return f"{type(exc).__name__}: {exc}"
            time.sleep(delay)
            delay *= 2
    return None  # pragma: no cover - the loop always returns
