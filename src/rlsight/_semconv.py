"""rlsight's wire vocabulary: every span name, span attribute and resource key it writes.

These strings are the contract between the processes that emit spans, the store on disk,
the analysis that reads it back, ``rlsight check`` and any other tool that reads a run. They
are frozen: a store written today must read the same tomorrow. So each one is spelled here
once, as OpenTelemetry keeps its semantic-convention names, and emitters, readers and the
checker import it; a literal repeated in two places is two chances for them to drift apart.
"""

from __future__ import annotations

from typing import Final

# -- span names ---------------------------------------------------------------------------
#: The run's root span (``job_span()``).
JOB_SPAN: Final = "rl.job"
#: One training step on the controller (``step_span()``); its timeline is the controller's.
STEP_SPAN: Final = "rl.step"
#: The umbrella over everything before the first step (``startup_span()``).
STARTUP_SPAN: Final = "rl.startup"
#: ``setup_span(phase)`` opens ``rl.setup.<phase>``.
SETUP_SPAN_PREFIX: Final = "rl.setup."
#: A worker's model load (``load_model_span()``).
LOAD_MODEL_SPAN: Final = "rl.worker.load_model"
#: A ``discard(...)`` call: rollouts thrown away.
DISCARD_SPAN: Final = "rl.discard"
#: ``efficiency_span("idle/x")`` opens ``rl.efficiency.idle.x``.
EFFICIENCY_SPAN_PREFIX: Final = "rl.efficiency."
#: A ``TimerBridge`` label mapped to a group only becomes ``rl.timer.<label>``.
TIMER_SPAN_PREFIX: Final = "rl.timer."

# -- span attributes ----------------------------------------------------------------------
#: The int step number on ``rl.step`` spans and on teed metric points.
STEP: Final = "rl.step"
#: On an ``rl.step`` span whose step was no whole number (``step_span(3.5)``): the number as
#: given, a float. Such a span has no ``rl.step``, so it never reads as a repeat or a restart.
STEP_VALUE: Final = "rl.step.value"
#: The run's planned number of steps, on ``rl.job`` (``job_span(total_steps=200)``):
#: ``rlsight watch`` says "step 118 of 200" and how long the rest should take.
TOTAL_STEPS: Final = "rl.total_steps"
#: A bucketed span's bucket (``productive | overhead | idle | wasted``).
BUCKET: Final = "rl.bucket"
#: The span group the span was gated on.
SPAN_GROUP: Final = "rl.span_group"
#: Concurrent work: never partitions a timeline.
CONCURRENT: Final = "rl.concurrent"
#: The native thread id; with ``service.instance.id`` it names a timeline.
THREAD_ID: Final = "thread.id"
#: A span opened with ``live=True``: its start is recorded for the live view (docs/live.md).
LIVE: Final = "rl.live"
#: An efficiency span's declared category (``idle/buffer_starvation``).
EFFICIENCY_CATEGORY: Final = "rl.efficiency.category"
#: How efficiency seconds were measured: ``span`` or ``reported``.
EFFICIENCY_MEASUREMENT: Final = "rl.efficiency.measurement"
#: The inference backend on ``rl.worker.load_model``.
BACKEND: Final = "rl.backend"
#: The rollout group a span worked for, matched against ``rl.discard``.
GROUP_ID: Final = "rl.group_id"
#: Sequences in a batch (``batch_size=``).
BATCH_SIZE: Final = "rl.batch_size"
#: Prompts in a batch (``prompts=``).
PROMPTS: Final = "rl.prompts"
#: On ``rl.discard``: the group ids thrown away, why, and how many.
DISCARD_GROUP_IDS: Final = "rl.discard.group_ids"
DISCARD_REASON: Final = "rl.discard.reason"
DISCARD_COUNT: Final = "rl.discard.count"

# -- resource attributes (one set per process) --------------------------------------------
SERVICE_NAME: Final = "service.name"
#: ``<run_id>/<worker_group>/<rank>/<pid>``: unique per process.
SERVICE_INSTANCE_ID: Final = "service.instance.id"
RUN_ID: Final = "rl.run.id"
RANK: Final = "rl.rank"
WORLD_SIZE: Final = "rl.world_size"
WORKER_GROUP: Final = "rl.worker_group"
#: Always ``rl`` (the stage of the post-training pipeline).
STAGE: Final = "rl.stage"
ALGORITHM: Final = "rl.algorithm"
#: Accelerators the process drives (utilisation weights ranks by it).
DEVICES: Final = "rl.devices"
PROCESS_PID: Final = "process.pid"
HOST_NAME: Final = "host.name"
#: The node's addresses (OpenTelemetry's ``host.ip``, a list): rlsight records Ray's node address.
HOST_IP: Final = "host.ip"
