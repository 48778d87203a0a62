"""Write a large synthetic run straight to the store format, fast (for the report benchmarks).

The run looks like a sync GRPO job: a driver with steps (rollout, generation, refit,
logprob, training, checkpoint every 10 steps, a buffer-starvation wait) and worker ranks in
four groups, each opening per step a dispatched root span (parented to the driver's span
across processes) with nested microbatch, data-plane and wait spans, plus per-prompt spans
in the generation group. Rank 5 of ``policy`` straggles in step 117. Spans are formatted
from string templates, not through the OTel SDK, so a million spans take seconds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

T0 = 1_700_000_000_000_000_000
SEC = 1_000_000_000
STEP_NS = 10 * SEC
STARTUP_NS = 30 * SEC
GROUPS = ("policy", "generation", "reference", "reward")

_SPAN = (
    '{{"traceId":"{trace}","spanId":"{sid:016x}","parentSpanId":"{pid:016x}","name":"{name}",'
    '"kind":1,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":['
    '{{"key":"thread.id","value":{{"intValue":"{thread}"}}}},'
    '{{"key":"rl.span_group","value":{{"stringValue":"{group}"}}}}{extra}]}}'
)
_ROOT = _SPAN.replace(',"parentSpanId":"{pid:016x}"', "")
_BUCKET = ',{{"key":"rl.bucket","value":{{"stringValue":"{}"}}}}'


def _attrs(bucket: str | None = None, **ints: int) -> str:
    out = _BUCKET.format(bucket) if bucket else ""
    for key, value in ints.items():
        out += f',{{"key":"{key.replace("_", ".")}","value":{{"intValue":"{value}"}}}}'
    return out


def _resource(run_id: str, group: str, rank: int, pid: int) -> str:
    attrs = {
        "service.name": f"rlsight-{group}", "service.instance.id": f"{run_id}/{group}/{rank}/{pid}",
        "rl.run.id": run_id, "rl.worker_group": group, "rl.rank": rank, "rl.algorithm": "grpo",
        "rl.devices": 1 if group != "generation" else 2, "process.pid": pid, "host.name": "bench",
    }
    kvs = [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
           for k, v in attrs.items()]
    return json.dumps({"attributes": kvs}, separators=(",", ":"))


class _File:
    """One process's trace file: spans buffered and flushed as 512-span request lines."""

    def __init__(self, path: Path, resource: str) -> None:
        self._fh = path.open("w")
        self._head = '{"resourceSpans":[{"resource":' + resource + ',"scopeSpans":[{"scope":' \
                     '{"name":"rlsight","version":"0"},"spans":['
        self._buf: list[str] = []
        self.count = 0

    def add(self, text: str) -> None:
        self._buf.append(text)
        self.count += 1
        if len(self._buf) >= 512:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self._fh.write(self._head + ",".join(self._buf) + "]}]}]}\n")
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
    trace = f"{rng.getrandbits(128):032x}"
    driver = _File(run_dir / "traces" / "driver-0-100.jsonl", _resource(run_id, "driver", 0, 100))
    job = next(next_id)
    end_ns = T0 + STARTUP_NS + steps * STEP_NS
    driver.add(_ROOT.format(trace=trace, sid=job, name="rl.job", start=T0, end=end_ns, thread=1,
                            group="job", extra=""))
    startup = next(next_id)
    driver.add(_SPAN.format(trace=trace, sid=startup, pid=job, name="rl.startup", start=T0,
                            end=T0 + STARTUP_NS, thread=1, group="startup", extra=""))
    for phase, a, b in (("ray", 0, 8), ("workers", 8, 24), ("initial_fill", 24, 29)):
        driver.add(_SPAN.format(trace=trace, sid=next(next_id), pid=startup, name=f"rl.setup.{phase}",
                                start=T0 + a * SEC, end=T0 + b * SEC, thread=1, group="setup", extra=""))
    per_group = max(1, ranks // len(GROUPS))
    workers = [(g, r) for g in GROUPS for r in range(per_group)][:ranks]
    files = {w: _File(run_dir / "traces" / f"{w[0]}-{w[1]}-{200 + i}.jsonl",
                      _resource(run_id, w[0], w[1], 200 + i)) for i, w in enumerate(workers)}
    for fh in files.values():
        fh.add(_ROOT.format(trace=f"{rng.getrandbits(128):032x}", sid=next(next_id),
                            name="rl.worker.load_model", start=T0 + 9 * SEC,
                            end=T0 + int((12 + rng.random() * 10) * SEC), thread=1, group="setup", extra=""))
    driver_per_step = 8
    budget = spans - driver.count - sum(f.count for f in files.values()) - steps * driver_per_step
    per_rank_step = max(4, -(-budget // (steps * len(workers))))
    for step in range(steps):
        s0 = T0 + STARTUP_NS + step * STEP_NS
        sid = next(next_id)
        d = driver.add
        d(_SPAN.format(trace=trace, sid=sid, pid=job, name="rl.step", start=s0, end=s0 + STEP_NS,
                       thread=1, group="step", extra=_attrs(rl_step=step + 1, rl_prompts=prompts)))
        rollout = next(next_id)
        d(_SPAN.format(trace=trace, sid=rollout, pid=sid, name="rl.rollout", start=s0,
                       end=s0 + 5 * SEC, thread=1, group="rollout", extra=""))
        gen = next(next_id)
        d(_SPAN.format(trace=trace, sid=gen, pid=rollout, name="rl.generate", start=s0,
                       end=s0 + 4 * SEC, thread=1, group="generation", extra=_attrs("productive")))
        d(_SPAN.format(trace=trace, sid=next(next_id), pid=rollout,
                       name="rl.efficiency.idle.buffer_starvation", start=s0 + 4 * SEC,
                       end=s0 + 5 * SEC, thread=1, group="efficiency", extra=_attrs("idle")))
        d(_SPAN.format(trace=trace, sid=next(next_id), pid=sid, name="rl.refit", start=s0 + 5 * SEC,
                       end=s0 + 6 * SEC, thread=1, group="refit", extra=_attrs("overhead")))
        d(_SPAN.format(trace=trace, sid=next(next_id), pid=sid, name="rl.logprob", start=s0 + 6 * SEC,
                       end=s0 + 7 * SEC, thread=1, group="logprob", extra=_attrs("overhead")))
        train = next(next_id)
        d(_SPAN.format(trace=trace, sid=train, pid=sid, name="rl.train", start=s0 + 7 * SEC,
                       end=s0 + 9 * SEC + SEC // 2, thread=1, group="training", extra=_attrs("productive")))
        name, bucket, group = (("rl.checkpoint", "overhead", "checkpoint") if step % 10 == 9
                               else ("rl.metrics.log", None, "data_plane"))
        d(_SPAN.format(trace=trace, sid=next(next_id), pid=sid, name=name, start=s0 + 9 * SEC + SEC // 2,
                       end=s0 + 9 * SEC + 9 * SEC // 10, thread=1, group=group, extra=_attrs(bucket)))
        for (wgroup, rank), fh in files.items():
            parent, w0, w1 = (gen, s0, s0 + 4 * SEC) if wgroup == "generation" else (
                train, s0 + 7 * SEC, s0 + 9 * SEC)
            if wgroup == "policy" and rank == 5 and step == 116:
                w1 += 2 * SEC
            root = next(next_id)
            work_group = "generation" if wgroup == "generation" else "training"
            fh.add(_SPAN.format(trace=trace, sid=root, pid=parent, name=f"rl.{wgroup}.work", start=w0,
                                end=w1, thread=1, group=work_group,
                                extra=_attrs("productive", rl_batch_size=32)))
            children = per_rank_step - 1
            width = (w1 - w0) // max(1, children)
            for c in range(children):
                c0 = w0 + c * width
                if wgroup == "generation" and c % 2:
                    fh.add(_SPAN.format(trace=trace, sid=next(next_id), pid=root, name="rl.env.request",
                                        start=c0, end=c0 + width, thread=2, group="per_prompt",
                                        extra=""))
                    continue
                kind = c % 5
                nm, bk, gp = (("rl.data_plane.get", "overhead", "data_plane") if kind == 0 else
                              ("rl.efficiency.idle.barrier", "idle", "efficiency") if kind == 4 else
                              ("rl.microbatch", "productive", "training"))
                fh.add(_SPAN.format(trace=trace, sid=next(next_id), pid=root, name=nm, start=c0,
                                    end=c0 + width - width // 10, thread=1, group=gp, extra=_attrs(bk)))
    total = driver.count
    driver.close()
    for fh in files.values():
        total += fh.count
        fh.close()
    return total
