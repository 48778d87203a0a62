"""The analysis result: plain, frozen dataclasses that serialise to JSON and back.

Everything ``rlsight report`` prints comes from a :class:`RunReport`, and ``--json`` is
``RunReport.to_dict()``. Keeping the result a plain data model (no numpy, no handles to the
spans) is what lets two runs be compared later (``rlsight diff A B``): load two JSON documents
with :meth:`RunReport.from_dict` and compare field by field.

Durations and timestamps are integer nanoseconds (fields end in ``_ns``), so the identity
``productive + overhead + idle + wasted + unattributed == wall`` holds exactly, and
:class:`Buckets` refuses to be built when it does not. Fractions are floats in ``[0, 1]``,
percentages floats in ``[0, 100]``. ``docs/goodput.md`` defines every field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final

from rlsight._semconv import EFFICIENCY_SPAN_PREFIX
from rlsight.analysis._from_json import from_json

__all__ = [
    "BUCKET_NAMES",
    "SCHEMA_VERSION",
    "Buckets",
    "Contributor",
    "Discarded",
    "Engine",
    "EngineStep",
    "ErrorSpan",
    "FleetGroup",
    "Fleets",
    "GroupVolume",
    "InsufficientEvidence",
    "LoadModel",
    "LoadModelGroup",
    "OpenSpan",
    "PhaseTotal",
    "PostMortem",
    "ProcessState",
    "RankPair",
    "RankUsage",
    "RunReport",
    "RunSummary",
    "SetupPhase",
    "SpanStat",
    "SpanStepStat",
    "Startup",
    "Stat",
    "StepRollup",
    "StepSummary",
    "Straggler",
    "Stragglers",
    "Timeline",
    "Volume",
    "Wasted",
    "WastedName",
    "span_label",
]

#: Version of the ``--json`` document. Bump on any change a consumer could notice.
SCHEMA_VERSION: Final = 1

#: Bucket names in priority order (productive wins an equal-depth overlap, idle loses).
BUCKET_NAMES: Final = ("productive", "wasted", "overhead", "idle")


def span_label(name: str) -> str:
    """A span name as reports and step summaries show it: efficiency spans by their category
    (``rl.efficiency.idle.buffer_starvation`` -> ``idle/buffer_starvation``), as declared."""
    if name.startswith(EFFICIENCY_SPAN_PREFIX):
        bucket, _, reason = name[len(EFFICIENCY_SPAN_PREFIX):].partition(".")
        if reason:
            return f"{bucket}/{reason}"
    return name


@dataclass(frozen=True, slots=True)
class Timeline:
    """One thread of one process: where spans run one after another (or nested)."""

    process: str
    """The process's ``service.instance.id``."""
    thread: int
    """The span's ``thread.id`` attribute."""

    def __str__(self) -> str:
        return f"{self.process}#{self.thread}"


@dataclass(frozen=True, slots=True)
class Buckets:
    """Wall time split into the four buckets plus what no bucketed span covered.

    Raises:
        ValueError: a part is negative or the parts do not add up to ``wall_ns``; both mean
            a bug in the rollup, never bad input.
    """

    productive_ns: int
    overhead_ns: int
    idle_ns: int
    wasted_ns: int
    unattributed_ns: int
    wall_ns: int

    def __post_init__(self) -> None:
        parts = (self.productive_ns, self.overhead_ns, self.idle_ns, self.wasted_ns,
                 self.unattributed_ns)
        if min(parts) < 0 or sum(parts) != self.wall_ns:
            raise ValueError(
                f"bucket partition does not add up: {parts} sum to {sum(parts)} ns, wall is "
                f"{self.wall_ns} ns; this is a bug in rlsight.analysis, please report it"
            )

    def get(self, bucket: str) -> int:
        """Nanoseconds of ``bucket`` (one of the four names or ``"unattributed"``)."""
        return int(getattr(self, f"{bucket}_ns"))

    def fraction(self, bucket: str) -> float:
        """``bucket``'s share of the wall, 0.0 for an empty wall."""
        return self.get(bucket) / self.wall_ns if self.wall_ns else 0.0


@dataclass(frozen=True, slots=True)
class StepRollup:
    """One ``rl.step`` span: its wall time partitioned on its own (controller) timeline."""

    index: int
    """Position among all step spans in start order; unique even when step numbers repeat."""
    step: int
    """The span's ``rl.step`` attribute."""
    timeline: Timeline
    start_unix_ns: int
    buckets: Buckets
    superseded: bool
    """A later step reused this step number (a restart): this attempt's work was lost."""
    wasted_fleet_ns: int
    """Wasted-bucket time on every timeline (all ranks) attributed to this step."""
    spans: int
    """Spans attributed to this step (trace ancestry, else time; see docs/goodput.md)."""


@dataclass(frozen=True, slots=True)
class Stat:
    """Median and 90th percentile (linear interpolation) of a per-step quantity."""

    median_ns: float
    p90_ns: float


@dataclass(frozen=True, slots=True)
class StepSummary:
    """Distributions over all steps of each bucket, unattributed time and wall time."""

    productive: Stat
    overhead: Stat
    idle: Stat
    wasted: Stat
    unattributed: Stat
    wall: Stat


@dataclass(frozen=True, slots=True)
class Contributor:
    """Time inside steps where spans of this name decided the controller's bucket."""

    name: str
    bucket: str
    attributed_ns: int
    steps_present: int


@dataclass(frozen=True, slots=True)
class SetupPhase:
    """One ``rl.setup.<phase>`` span before the first step (a bar of the startup waterfall)."""

    phase: str
    start_offset_ns: int
    """Start relative to the run's start."""
    duration_ns: int


@dataclass(frozen=True, slots=True)
class PhaseTotal:
    """All spans of one setup phase: summed durations, in order of first start."""

    phase: str
    duration_ns: int
    spans: int


@dataclass(frozen=True, slots=True)
class LoadModel:
    """The longest ``rl.worker.load_model`` span of one rank."""

    worker_group: str
    rank: int
    start_offset_ns: int
    """Start relative to the run's start."""
    duration_ns: int
    backend: str | None


@dataclass(frozen=True, slots=True)
class LoadModelGroup:
    """Model loads of one worker group: the slowest rank decides when the group is ready."""

    worker_group: str
    ranks: int
    max_ns: int
    max_rank: int
    median_ns: float


@dataclass(frozen=True, slots=True)
class Startup:
    """Time before the first step, and the phases that explain it."""

    wall_ns: int
    startup_span_ns: int | None
    """Duration of the ``rl.startup`` span, if one was recorded."""
    phases: list[SetupPhase]
    phase_totals: list[PhaseTotal]
    unaccounted_ns: int
    """Startup wall time no ``rl.setup.*`` span covered."""
    load_model: list[LoadModel]
    load_model_groups: list[LoadModelGroup]


@dataclass(frozen=True, slots=True)
class RankUsage:
    """One rank of a worker group over the whole run."""

    worker_group: str
    rank: int
    devices: int
    timelines: int
    buckets: Buckets
    """Run wall split by the best bucket on any of the rank's timelines at each instant."""
    utilisation: float
    """(productive + overhead + wasted) / run wall: the union of its busy intervals."""


@dataclass(frozen=True, slots=True)
class FleetGroup:
    """A worker group: device-weighted means over its ranks (fractions of run wall)."""

    worker_group: str
    ranks: int
    devices: int
    utilisation: float
    productive: float
    overhead: float
    wasted: float
    idle: float
    unattributed: float


@dataclass(frozen=True, slots=True)
class Fleets:
    """Per worker group and per rank utilisation."""

    wall_ns: int
    groups: list[FleetGroup]
    ranks: list[RankUsage]


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank whose span took more than ``k`` MADs longer than its group's median in a step."""

    step_index: int
    step: int
    worker_group: str
    rank: int
    name: str
    duration_ns: int
    median_ns: float
    mad_ns: float
    """Median absolute deviation, floored at 5% of the median and 1 µs (see docs/goodput.md)."""
    excess_mads: float


@dataclass(frozen=True, slots=True)
class InsufficientEvidence:
    """A (worker group, span name) whose steps could not be judged, and why."""

    worker_group: str
    name: str
    reason: str
    steps: int


@dataclass(frozen=True, slots=True)
class RankPair:
    """What a two-rank fleet can tell about one span name: which rank is slower, by how much.

    Two ranks give no straggler verdict (either could be the odd one), but the slower one
    and the gap are facts.
    """

    worker_group: str
    name: str
    steps: int
    """Steps where both ranks ran the span with equal workloads."""
    slower_rank: int
    """The rank whose time exceeds its peer's in the median step-by-step comparison."""
    faster_rank: int
    slower_steps: int
    """Steps in which ``slower_rank`` took longer."""
    median_gap_ns: float
    """Median over steps of (slower rank's time - faster rank's time); >= 0 (single steps may differ)."""
    median_gap_pct: float
    """That gap as a percentage of the faster rank's median time."""


@dataclass(frozen=True, slots=True)
class Stragglers:
    """Straggler findings and the comparisons that had too little evidence."""

    k: float
    checks: int
    """(step, span name, worker group) comparisons with enough evidence."""
    findings: list[Straggler]
    insufficient: list[InsufficientEvidence]
    pairs: list[RankPair] = field(default_factory=list)
    """Two-rank fleets: the slower rank and the gap, where no verdict is possible."""


@dataclass(frozen=True, slots=True)
class GroupVolume:
    """Span count of one span group, per step."""

    group: str
    in_per_step: bool | None
    """Whether the run's ``per_step`` preset has the group; ``None`` if its catalog lacks it."""
    spans: int
    outside_steps: int
    per_step: list[int]
    flat: bool
    scales_with_prompts: bool | None
    """``None`` when there is no usable prompts-per-step signal."""
    correlation: float | None
    flagged: bool
    """In ``per_step`` yet scales with prompts: it breaks the per_step cost contract."""


@dataclass(frozen=True, slots=True)
class Volume:
    """Spans per group per step and the prompts-per-step signal they are compared with."""

    prompt_signal: str
    """``rl.prompts`` (attribute on rl.step), ``per_prompt spans`` or ``none``."""
    prompts_per_step: list[float | None]
    groups: list[GroupVolume]


@dataclass(frozen=True, slots=True)
class WastedName:
    """Wasted-bucket spans of one name, all timelines, all steps."""

    name: str
    spans: int
    total_ns: int


@dataclass(frozen=True, slots=True)
class Discarded:
    """One :func:`rlsight.discard` call: earlier work charged to waste where it was dropped."""

    step_index: int
    """Row of the step that discarded the work (-1 outside every step)."""
    step: int
    """That step's ``rl.step`` number (-1 outside every step)."""
    reason: str
    groups: int
    """Group ids the call named."""
    groups_found: int
    """Of those, how many had work tagged ``rl.group_id`` in the store."""
    work_ns: int
    """Partition time of that work (every timeline) moved from productive/overhead to wasted."""


@dataclass(frozen=True, slots=True)
class Wasted:
    """Work that was thrown away: wasted-bucket spans, discarded groups, restarted steps."""

    restarts: int
    """Times the step number went backwards (or repeated) between consecutive steps."""
    superseded_steps: list[int]
    """Indexes of step attempts a later step re-ran."""
    superseded_wall_ns: int
    by_step_ns: list[int]
    """Wasted-bucket time on all timelines, per step index; discarded work counts in the
    step that discarded it, not the step that produced it."""
    by_name: list[WastedName]
    discarded: list[Discarded] = field(default_factory=list)
    """Every ``rlsight.discard`` call, in time order."""


@dataclass(frozen=True, slots=True)
class SpanStat:
    """All spans of one name: total and self time (time not inside a same-thread child)."""

    name: str
    count: int
    total_ns: int
    self_ns: int
    errors: int


@dataclass(frozen=True, slots=True)
class SpanStepStat:
    """Seconds per step of one span name: the union of its spans in each step, all timelines."""

    name: str
    group: str | None
    """The name's ``rl.span_group`` (``None`` if its spans carry none)."""
    steps_present: int
    """Steps with at least one span of this name; the stats are over these steps."""
    median_ns: float
    p90_ns: float
    total_ns: int
    """Sum over the steps (ranks running in parallel count once)."""


@dataclass(frozen=True, slots=True)
class EngineStep:
    """Generation tokens the engines reported for one step, and the rate over its wall."""

    step_index: int
    step: int
    tokens: float
    tokens_per_s: float


@dataclass(frozen=True, slots=True)
class Engine:
    """Engine throughput per step, and the run's request outcomes, from the run's metrics.

    ``preemptions`` is ``None`` when no engine reported the series (not 0: an engine that
    does not count preemptions did not have none). ``finished`` counts successful requests
    per ``rl.engine.finish_reason`` over the run.
    """

    metric: str
    steps: list[EngineStep]
    preemptions: float | None = None
    finished: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OpenSpan:
    """A span that started (its start record is in the store) and has not ended (yet)."""

    name: str
    group: str | None
    trace_id: str
    span_id: str
    parent_span_id: str | None
    thread: int
    start_unix_ns: int
    age_ns: int
    """From its start to the moment of the view (now, or the last record of a dead run)."""
    chain: list[str]
    """Names of its open ancestors, outermost first (``rl.job``, ``rl.step 118``...)."""
    step: int | None
    median_ns: float | None
    """Median duration of finished spans of the same name; ``None`` when none finished."""
    threshold_ns: float
    """Age beyond which it counts as stalled (see docs/live.md)."""
    stalled: bool
    chain_ranks: list[str] = field(default_factory=list)
    """``group/rank`` of the process of each of ``chain``, in the same order: where the chain
    crosses from an actor into the driver that dispatched to it."""


@dataclass(frozen=True, slots=True)
class ErrorSpan:
    """A span that ended with an error status (an exception escaped it): where the run went wrong."""

    name: str
    process: str
    worker_group: str
    rank: int
    end_unix_ns: int
    message: str | None = None
    """Its status message (the exception's type and text, scrubbed of secrets when written)."""
    named_pids: list[int] = field(default_factory=list)
    """The pids the message names (Ray's ``ActorDiedError`` lists the dead actor's ``pid: N``,
    its ``RayTaskError`` the raising task's ``pid=N``) that exactly one process of the run had,
    in the message's order."""
    named_processes: list[str] = field(default_factory=list)
    """``group/rank`` of each of those processes."""


@dataclass(frozen=True, slots=True)
class ProcessState:
    """One process of the run: what it has open, whether it shut down cleanly, its last span."""

    process: str
    """``service.instance.id``."""
    worker_group: str
    rank: int
    pid: int | None
    host: str | None
    clean_shutdown: bool
    """The process called ``shutdown_telemetry`` (or exited normally with telemetry set up)."""
    open: list[OpenSpan]
    """Spans it started and never ended, in start order."""
    innermost: OpenSpan | None
    """The open span it is in right now: a stalled one first, else the latest started."""
    stalled: bool
    last_span: str | None
    """Name of the last span it finished."""
    last_end_unix_ns: int | None
    waiting_on: list[str] = field(default_factory=list)
    """``group/rank`` of other processes with an open span started from its innermost one
    (the actors a driver waits on)."""
    alive: bool | None = None
    """Whether its pid still runs (``rlsight watch``, same host only); ``None`` when unknown."""
    stack: str | None = None
    """Its Python stack from ``py-spy dump`` (``rlsight watch --stacks``), else ``None``."""
    silent: bool = False
    """No heartbeat for three of its intervals (30 s by default) and no clean shutdown: killed,
    frozen, or its node is gone."""
    last_heard_unix_ns: int | None = None
    """Its last heartbeat (every 10 s while its telemetry runs), opening or shutdown; ``None``
    for a run written by an rlsight before heartbeats."""
    replaced_by_pid: int | None = None
    """The pid of a later process of the same worker group and rank (Ray restarted the actor);
    its open spans are aged to that process's start, when it was dead at the latest."""


@dataclass(frozen=True, slots=True)
class PostMortem:
    """What the run left open: processes without a clean shutdown and spans never ended."""

    as_of_unix_ns: int
    """The last moment the store saw (ages are measured to it)."""
    open_spans: int
    processes: list[ProcessState]
    """Processes with an open span or without a clean shutdown, open ones first."""
    unclean: int
    """Processes that wrote no clean-shutdown record (killed, crashed, or never shut down)."""
    stall_records: list[str] = field(default_factory=list)
    """Stall records the watchdog wrote (``<run_dir>/stalls/*.json``), oldest first."""
    errors: int = 0
    """Spans that ended with an error status."""
    last_error: ErrorSpan | None = None
    """The latest of them."""
    job_error: ErrorSpan | None = None
    """The run's last ``rl.job``, when it ended with an error status: the driver raised out of
    the job, and the run failed rather than finished."""
    failed_step: int | None = None
    """The step the job failed in: the job process's last ``rl.step`` when it ended with an
    error status (or an errored step open when the job ended); ``None`` when the job did not
    fail or failed between steps."""
    start_records: bool = True
    """Whether the run folder has start records (``live/``). Without them (Collector files) the
    open spans and shutdowns are unknown; the error fields, read from the finished spans, are
    still filled in, so a failed run still reads failed."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The whole run in one line: wall, steps, goodput and where the numbers came from."""

    run_id: str | None
    algorithm: str | None
    start_unix_ns: int
    end_unix_ns: int
    buckets: Buckets
    """The run wall partitioned on the controller timelines (superseded steps count wasted)."""
    goodput_pct: float
    """100 * productive / run wall."""
    step_goodput_pct: float
    """100 * productive / wall, summed over the steps only (startup and gaps excluded)."""
    steps: int
    controller_timelines: list[Timeline]
    spans: int
    processes: int
    timelines: int
    files: int
    skipped: int
    skipped_examples: list[str]
    span_groups: list[str] | None = None
    """The span-group spec the run was configured with (its manifest); ``None`` if unknown."""


@dataclass(frozen=True, slots=True)
class RunReport:
    """Everything ``rlsight report`` knows about one run."""

    summary: RunSummary
    steps: list[StepRollup]
    step_summary: StepSummary | None
    top: list[Contributor]
    startup: Startup
    fleets: Fleets
    stragglers: Stragglers
    volume: Volume
    wasted: Wasted
    top_spans: list[SpanStat]
    engine: Engine | None
    notes: list[str] = field(default_factory=list)
    postmortem: PostMortem | None = None
    """``None`` for a run written before start records existed (no ``live/`` folder)."""
    span_steps: list[SpanStepStat] = field(default_factory=list)
    """Seconds per step of each span name (what ``rlsight diff`` compares)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: this report as plain dicts, with ``schema_version``."""
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        """Rebuild a report from :meth:`to_dict` output (for comparing two runs).

        Raises:
            ValueError: the document's ``schema_version`` is not :data:`SCHEMA_VERSION`, or it
                does not have the report's shape (the message names the fields at fault).
        """
        from rlsight.analysis.schema import report_problems

        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"report document has schema_version {version!r}, this rlsight reads "
                f"{SCHEMA_VERSION}; regenerate it with this version's `rlsight report --json`"
            )
        problems = report_problems(data)
        if problems:
            raise ValueError(f"not a report document: {'; '.join(problems)}")
        body = {k: v for k, v in data.items() if k != "schema_version"}
        return from_json(cls, body)  # type: ignore[no-any-return]
