"""Write a large synthetic run through the store's own span codec (for the report benchmarks).

The run looks like a sync GRPO job: a driver with steps (rollout, generation, refit,
logprob, training, checkpoint every 10 steps, a buffer-starvation wait) and worker ranks in
four groups, each opening per step a dispatched root span (parented to the driver's span
across processes) with nested microbatch, data-plane and wait spans, plus per-prompt spans
in the generation group. Rank 5 of ``policy`` straggles in step 117. Each span is an OTel SDK
``ReadableSpan`` and each line is what the store writer writes for 512 of them
(:func:`rlsight.store._span_codec.encode_spans`), so a reader is measured on the bytes a real
run leaves, with no SDK tracer or writer thread in between to keep a million spans fast.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags

from rlsight.store._span_codec import encode_spans

T0 = 1_700_000_000_000_000_000
SEC = 1_000_000_000
STEP_NS = 10 * SEC
STARTUP_NS = 30 * SEC
GROUPS = ("policy", "generation", "reference", "reward")
_SCOPE = InstrumentationScope("rlsight", "0")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _resource(run_id: str, group: str, rank: int, pid: int) -> Resource:
    return Resource({
        "service.name": f"rlsight-{group}", "service.instance.id": f"{run_id}/{group}/{rank}/{pid}",
        "rl.run.id": run_id, "rl.worker_group": group, "rl.rank": rank, "rl.algorithm": "grpo",
        "rl.devices": 1 if group != "generation" else 2, "process.pid": pid, "host.name": "bench",
    })


class _File:
    """One process's trace file: spans buffered and written as 512-span request lines."""

    def __init__(self, path: Path, resource: Resource) -> None:
        self._fh = path.open("wb")
        self._resource = resource
        self._buf: list[ReadableSpan] = []
        self.count = 0

    def add(self, trace: int, sid: int, pid: int | None, name: str, start: int, end: int, thread: int,
            group: str, bucket: str | None = None, **ints: int) -> None:
        attrs: dict[str, Any] = {"thread.id": thread, "rl.span_group": group}
        if bucket:
            attrs["rl.bucket"] = bucket
        for key, value in ints.items():
            attrs[key.replace("_", ".")] = value
        self._buf.append(ReadableSpan(
            name=name, context=SpanContext(trace, sid, False, _SAMPLED),
            parent=None if pid is None else SpanContext(trace, pid, False, _SAMPLED),
            resource=self._resource, attributes=attrs, instrumentation_scope=_SCOPE,
            start_time=start, end_time=end))
        self.count += 1
        if len(self._buf) >= 512:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self._fh.write(encode_spans(self._buf))
            self._buf.clear()

    def close(self) -> None:
        self.flush()
        self._fh.close()


def write_synthetic_run(run_dir: Path, *, spans: int = 1_000_000, ranks: int = 64, steps: int = 200,
                        prompts: int = 64, seed: int = 0) -> int:
    """Write a run of about ``spans`` spans over ``ranks`` worker ranks; return the exact count."""
    rng = random.Random(seed)
    run_id = "bench"
    (run_dir / "traces").mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(
        {"store_format": 1, "run_id": run_id, "started_unix_ns": T0, "algorithm": "grpo",
         "started_at": "2023-11-14T22:13:20Z", "config": {"run_id": run_id}}))
    next_id = iter(range(1, 1 << 62))
    trace = rng.getrandbits(128)
    driver = _File(run_dir / "traces" / "driver-0-100.jsonl", _resource(run_id, "driver", 0, 100))
    job = next(next_id)
    end_ns = T0 + STARTUP_NS + steps * STEP_NS
    driver.add(trace, job, None, "rl.job", T0, end_ns, 1, "job")
    startup = next(next_id)
    driver.add(trace, startup, job, "rl.startup", T0, T0 + STARTUP_NS, 1, "startup")
    for phase, a, b in (("ray", 0, 8), ("workers", 8, 24), ("initial_fill", 24, 29)):
        driver.add(trace, next(next_id), startup, f"rl.setup.{phase}", T0 + a * SEC, T0 + b * SEC, 1, "setup")
    per_group = max(1, ranks // len(GROUPS))
    workers = [(g, r) for g in GROUPS for r in range(per_group)][:ranks]
    files = {w: _File(run_dir / "traces" / f"{w[0]}-{w[1]}-{200 + i}.jsonl",
                      _resource(run_id, w[0], w[1], 200 + i)) for i, w in enumerate(workers)}
    for fh in files.values():
        fh.add(rng.getrandbits(128), next(next_id), None, "rl.worker.load_model", T0 + 9 * SEC,
               T0 + int((12 + rng.random() * 10) * SEC), 1, "setup")
    driver_per_step = 8
    budget = spans - driver.count - sum(f.count for f in files.values()) - steps * driver_per_step
    per_rank_step = max(4, -(-budget // (steps * len(workers))))
    for step in range(steps):
        s0 = T0 + STARTUP_NS + step * STEP_NS
        sid = next(next_id)
        d = driver.add
        d(trace, sid, job, "rl.step", s0, s0 + STEP_NS, 1, "step", rl_step=step + 1, rl_prompts=prompts)
        rollout = next(next_id)
        d(trace, rollout, sid, "rl.rollout", s0, s0 + 5 * SEC, 1, "rollout")
        gen = next(next_id)
        d(trace, gen, rollout, "rl.generate", s0, s0 + 4 * SEC, 1, "generation", "productive")
        d(trace, next(next_id), rollout, "rl.efficiency.idle.buffer_starvation", s0 + 4 * SEC,
          s0 + 5 * SEC, 1, "efficiency", "idle")
        d(trace, next(next_id), sid, "rl.refit", s0 + 5 * SEC, s0 + 6 * SEC, 1, "refit", "overhead")
        d(trace, next(next_id), sid, "rl.logprob", s0 + 6 * SEC, s0 + 7 * SEC, 1, "logprob", "overhead")
        train = next(next_id)
        d(trace, train, sid, "rl.train", s0 + 7 * SEC, s0 + 9 * SEC + SEC // 2, 1, "training", "productive")
        name, bucket, group = (("rl.checkpoint", "overhead", "checkpoint") if step % 10 == 9
                               else ("rl.metrics.log", None, "data_plane"))
        d(trace, next(next_id), sid, name, s0 + 9 * SEC + SEC // 2, s0 + 9 * SEC + 9 * SEC // 10, 1, group,
          bucket)
        for (wgroup, rank), fh in files.items():
            parent, w0, w1 = (gen, s0, s0 + 4 * SEC) if wgroup == "generation" else (
                train, s0 + 7 * SEC, s0 + 9 * SEC)
            if wgroup == "policy" and rank == 5 and step == 116:
                w1 += 2 * SEC
            root = next(next_id)
            work_group = "generation" if wgroup == "generation" else "training"
            fh.add(trace, root, parent, f"rl.{wgroup}.work", w0, w1, 1, work_group, "productive",
                   rl_batch_size=32)
            children = per_rank_step - 1
            width = (w1 - w0) // max(1, children)
            for c in range(children):
                c0 = w0 + c * width
                if wgroup == "generation" and c % 2:
                    fh.add(trace, next(next_id), root, "rl.env.request", c0, c0 + width, 2, "per_prompt")
                    continue
                kind = c % 5
                nm, bk, gp = (("rl.data_plane.get", "overhead", "data_plane") if kind == 0 else
                              ("rl.efficiency.idle.barrier", "idle", "efficiency") if kind == 4 else
                              ("rl.microbatch", "productive", "training"))
                fh.add(trace, next(next_id), root, nm, c0, c0 + width - width // 10, 1, gp, bk)
    total = driver.count
    driver.close()
    for fh in files.values():
        total += fh.count
        fh.close()
    return total
