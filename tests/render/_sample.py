"""A small run that exercises every section of the report, with hostile strings in it."""

from __future__ import annotations

from _build import SEC, T0, RunBuilder

from rlsight.store import MetricPoint

HOSTILE_SPAN = "<script>alert(1)</script>"
HOSTILE_GROUP = "</script><script>alert(2)</script>"


def sample_run() -> RunBuilder:
    """Driver with 5 steps, a straggling policy rank, a hostile span name and worker group."""
    run = RunBuilder(run_id="run<1>")
    d = run.process()
    job = d.span("rl.job", 0, 60, group="job")
    startup = d.span("rl.startup", 0, 5, parent=job, group="startup")
    d.span("rl.setup.ray", 0, 2, parent=startup, group="setup")
    d.span("rl.setup.workers", 2, 4, parent=startup, group="setup")
    for n in range(5):
        t = 5 + 10 * n
        step = d.step(n + 1, t, t + 10, parent=job, **{"rl.prompts": 8 * (n + 1)})
        gen = d.span(HOSTILE_SPAN, t, t + 6, parent=step, bucket="productive", group="generation")
        d.span("rl.refit", t + 6, t + 7, parent=step, bucket="overhead", group="refit")
        d.span("rl.efficiency.idle.buffer_starvation", t + 7, t + 8, parent=step, bucket="idle",
               group="efficiency")
        for rank in range(3):
            w = run.procs[1 + rank] if len(run.procs) > 1 + rank else run.process("policy", rank, devices=2)
            slow = 3 if (rank == 2 and n == 3) else 0
            w.span("rl.train.policy", t, t + 4 + slow, parent=gen, bucket="productive", group="training")
        for _ in range(n + 1):
            d.span("rl.env.request", t, t + 1, parent=step, group="per_prompt")
    for rank in range(3):
        run.procs[1 + rank].span("rl.worker.load_model", 1, 3 + rank * 0.5, group="setup",
                                 **{"rl.backend": "dtensor"})
    odd = run.process(HOSTILE_GROUP, 0)
    odd.span("rl.data_plane.put", 6, 7, bucket="overhead", group="data_plane")
    return run


def sample_metrics() -> list[MetricPoint]:
    """Generation tokens for each of the sample run's five steps (cumulative points)."""
    return [
        MetricPoint(
            name="rl.engine.generation_tokens", kind="sum", unit="{token}",
            time_ns=T0 + (15 + 10 * n) * SEC, start_time_ns=T0,
            attributes={"rl.step": n + 1, "rl.engine.name": "generation/0"},
            resource={"service.instance.id": "run<1>/generation/0/9"}, value=1000 * (n + 1),
            is_monotonic=True, temporality=2,
        )
        for n in range(5)
    ]
