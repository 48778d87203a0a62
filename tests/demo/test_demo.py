"""The demo end to end on the session's Ray cluster: it knows its own schedule, so the report
is checked against a known answer.

Three short runs: a sync run with every fault injected (a 2.5x-slow generation rank, a policy
rank that hangs, a killed generation worker, failing environment requests), and a fault-free
sync and async pair of the same settings.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import ray

from _ray_support import RayCluster
from rlsight.analysis import Buckets, RunReport, analyze_run
from rlsight.commands import demo as demo_command
from rlsight.store import MetricPoint, SpanRecord, read_metrics, read_spans
from rlsight.testing import isolated_metric_groups

pytestmark = pytest.mark.ray

STEPS = 4
PROMPTS, GROUP_SIZE = 6, 4  # 2 prompts per generation worker, 4 completions each
DECODE_TPS = (240.0, 240.0, 300.0)
SLOW, SLOWDOWN = 1, 2.5  # generation/1 decodes 2.5x slower
KILLED, KILLED_AT = 2, 4  # generation/2 is killed when step 4 starts
HANG_RANK, HANG_STEP, HANG_S = 1, 2, 0.6
SERVER, CLIENT = 2, 3  # OTLP span kinds


@dataclass
class DemoRun:
    run_dir: Path
    spans: list[SpanRecord]
    points: list[MetricPoint]
    output: str

    def named(self, name: str) -> list[SpanRecord]:
        return [s for s in self.spans if s.name == name]

    def parent(self, span: SpanRecord) -> SpanRecord:
        (parent,) = [s for s in self.spans if s.span_id == span.parent_span_id]
        return parent

    def step_window(self, step: int) -> tuple[int, int]:
        (s,) = [s for s in self.named("rl.step") if s.attributes["rl.step"] == step]
        return s.start_ns, s.end_ns

    def per_step(self, name: str, **attributes: object) -> dict[int, float]:
        """Sum of a metric's points by ``rl.step`` (delta counters may split a step in two)."""
        out: dict[int, float] = defaultdict(float)
        for p in self.points:
            if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items()):
                out[int(p.attributes["rl.step"])] += float(p.value or 0)
        return dict(out)

    @functools.cached_property
    def report(self) -> RunReport:
        return analyze_run(self.run_dir)


@pytest.fixture(scope="module")
def demo_module() -> Iterator[ModuleType]:
    """``rlsight.demo``, imported with the metric registry restored afterwards.

    Importing the demo registers its metric group in this process, where every later test's
    tee would then record it too; the registry is put back as it was (as tests/test_metrics.py
    does around each of its tests).
    """
    with isolated_metric_groups():
        yield importlib.import_module("rlsight.demo")


def _settings(demo: ModuleType, *, train_tps: float = 2_000.0, **changes: object) -> object:
    """Short settings whose costs are known: steps of about a second."""
    costs = demo.Costs(decode_tps=DECODE_TPS, logprob_tps=20_000.0, train_tps=train_tps,
                       param_bytes=20_000_000, env_s_per_completion=0.001)
    base: dict[str, object] = dict(steps=STEPS, prompts_per_step=PROMPTS, group_size=GROUP_SIZE,
                                   validate_every=2, checkpoint_every=3, costs=costs)
    return demo.DemoSettings(**{**base, **changes})


def _run(demo: ModuleType, tmp: pytest.TempPathFactory, name: str, **changes: object) -> DemoRun:
    out = io.StringIO()
    run_dir = demo.run_demo(tmp.mktemp(name) / "run", settings=_settings(demo, **changes), out=out)
    return DemoRun(run_dir, read_spans(run_dir).spans, read_metrics(run_dir).points, out.getvalue())


@pytest.fixture(scope="module")
def faulty(
    demo_module: ModuleType, ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> DemoRun:
    """Sync, with every fault at once, on the already-initialised session cluster."""
    faults = demo_module.parse_faults([
        f"straggler=generation/{SLOW}:{SLOWDOWN}", f"kill=generation/{KILLED}@{KILLED_AT}",
        f"hang=policy/{HANG_RANK}@{HANG_STEP}:{HANG_S}", "env-errors=0.25",
    ])
    return _run(demo_module, tmp_path_factory, "faulty", faults=faults)


#: The sync/async pair trains as long as it generates, so overlapping the two pays, and the
#: producers outrun the trainer far enough for groups to go stale.
PAIR = dict(steps=5, train_tps=200.0, max_staleness=1)


@pytest.fixture(scope="module")
def sync_run(
    demo_module: ModuleType, ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> DemoRun:
    return _run(demo_module, tmp_path_factory, "sync", **PAIR)


@pytest.fixture(scope="module")
def async_run(
    demo_module: ModuleType, ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> DemoRun:
    return _run(demo_module, tmp_path_factory, "async", mode="async", **PAIR)


def _worker(span: SpanRecord) -> tuple[object, int]:
    return span.resource["rl.worker_group"], int(span.resource["rl.rank"])  # type: ignore[arg-type]


# The known schedule -------------------------------------------------------------------------


def test_generation_seconds_follow_tokens_over_decode_rate(faulty: DemoRun) -> None:
    """Per step and worker: time in rl.generation.sample is the engine's tokens / decode rate."""
    checked = 0
    for step in range(1, STEPS + 1):
        lo, hi = faulty.step_window(step)
        for rank, base_rate in enumerate(DECODE_TPS):
            rate = base_rate / (SLOWDOWN if rank == SLOW else 1.0)
            engine = {"rl.engine.name": f"generation/{rank}"}
            tokens = faulty.per_step("rl.engine.generation_tokens", **engine)
            seconds = sum(
                (s.end_ns - s.start_ns) / 1e9 for s in faulty.named("rl.generation.sample")
                if _worker(s) == ("generation", rank) and lo <= s.start_ns < hi
            )
            if rank == KILLED and step >= KILLED_AT:
                assert seconds == 0 and step not in tokens
                continue
            if rank == KILLED and step == KILLED_AT - 1 and step not in tokens:
                continue  # recorded just before the SIGKILL: lost with the process's last 200 ms
            expected = tokens[step] / rate
            # The shaped wait is a sleep, which never returns early: the known part is a floor.
            # Above it come the sampling itself and the wake-up after the sleep, which a loaded
            # machine stretches by tens of milliseconds whatever the step's size.
            assert expected * 0.999 <= seconds <= expected * 1.15 + 0.1, (step, rank, seconds, expected)
            checked += 1
    assert checked >= STEPS * 3 - (STEPS - KILLED_AT + 1) - 1


def test_engine_token_deltas_equal_the_tokens_generated(faulty: DemoRun) -> None:
    """Both readers (in-process registry and scraped /metrics) count exactly what was generated."""
    tokens = [p for p in faulty.points if p.name == "rl.engine.generation_tokens"]
    engines = {p.attributes["rl.engine.name"] for p in tokens}
    assert engines == {"generation/0", "generation/1", "generation/2"}
    scraped = {p.resource["rl.worker_group"] for p in tokens
               if p.attributes["rl.engine.name"] == "generation/1"}
    assert scraped == {"driver"}, "odd ranks are scraped with from_url by the driver"
    engine = faulty.per_step("rl.engine.generation_tokens")
    rollout = faulty.per_step("rl_demo.rollout.tokens")
    validation = faulty.per_step("rl_demo.validation.tokens")
    assert set(validation) == {1, 2, 4}
    killed = faulty.per_step("rl.engine.generation_tokens", **{"rl.engine.name": f"generation/{KILLED}"})
    for step in range(1, STEPS + 1):
        generated = rollout[step] + validation.get(step, 0.0)
        if step == KILLED_AT - 1 and step not in killed:
            # The killed worker recorded this step's deltas just before the SIGKILL; a killed
            # process loses its last 200 ms (docs/store.md), so only its peers' are checked.
            assert engine[step] < generated, step
            continue
        assert engine[step] == generated, step


def test_the_slow_generation_rank_is_less_used_and_named_a_straggler(faulty: DemoRun) -> None:
    report = faulty.report
    usage = {(r.worker_group, r.rank): r.utilisation for r in report.fleets.ranks}
    # Utilisation is busy time / wall: the slow rank is busy 2.5x longer per rollout while
    # its peer, done early, waits for it (the sync step ends with the slowest rank).
    assert usage[("generation", SLOW)] > usage[("generation", 0)]
    named = {(f.worker_group, f.rank, f.name) for f in report.stragglers.findings}
    assert ("generation", SLOW, "rl.generation.sample") in named
    assert not any(f.rank != SLOW and f.name == "rl.generation.sample" for f in report.stragglers.findings)
    assert report.stragglers.checks > 0


# Faults -------------------------------------------------------------------------------------


def test_the_killed_worker_stops_and_the_run_finishes_on_the_others(faulty: DemoRun) -> None:
    lo, _ = faulty.step_window(KILLED_AT)
    killed = [s for s in faulty.spans if _worker(s) == ("generation", KILLED)]
    assert killed and max(s.end_ns for s in killed) < lo
    assert len(faulty.named("rl.step")) == STEPS
    _, hi = faulty.step_window(STEPS)
    samples = faulty.named("rl.generation.sample")
    assert any(_worker(s) == ("generation", 0) and s.start_ns > lo for s in samples)
    assert hi > lo


def test_the_hung_rank_stalls_inside_training_at_its_step(faulty: DemoRun) -> None:
    lo, hi = faulty.step_window(HANG_STEP)
    train = {_worker(s): (s.end_ns - s.start_ns) / 1e9
             for s in faulty.named("rl.train.forward_backward") if lo <= s.start_ns < hi}
    assert train[("policy", HANG_RANK)] >= HANG_S
    assert train[("policy", 1 - HANG_RANK)] < HANG_S


def test_failed_environment_attempts_are_retried_and_wasted(faulty: DemoRun) -> None:
    failures = sum(faulty.per_step("rl_demo.reward.env_failures").values())
    assert failures > 0
    # Client side: one wasted attempt per failure, in rollouts and validation alike.
    wasted = [s for s in faulty.named("rl.reward.env_request") if s.attributes["rl.bucket"] == "wasted"]
    rollout_wasted = [s for s in wasted if faulty.parent(s).name == "rl.reward.score"]
    assert len(rollout_wasted) == failures
    assert all(s.attributes["rl.attempt"] >= 1 for s in wasted)
    retried = [s for s in faulty.named("rl.reward.env_request") if s.attributes["rl.attempt"] > 1]
    assert len(retried) == len(wasted)
    # Server side: the failed request's work is wasted too, so the fleets show it.
    env_wasted = [s for s in faulty.named("rl.env.score") if s.attributes["rl.bucket"] == "wasted"]
    assert len(env_wasted) == len(wasted)
    fleets = {g.worker_group: g for g in faulty.report.fleets.groups}
    assert fleets["env"].wasted > 0 and fleets["generation"].wasted > 0


def test_every_fault_kind_parses_and_bad_ones_name_the_forms(demo_module: ModuleType) -> None:
    faults = demo_module.parse_faults(
        ["straggler=generation/1:2.5", "hang=policy/1@5:20", "kill=generation/1@6", "env-errors=0.1"]
    )
    assert faults.slowdown == {("generation", 1): 2.5}
    assert faults.hangs == {("policy", 1): (5, 20.0)}
    assert faults.kills == {("generation", 1): 6}
    assert faults.env_error_rate == 0.1
    for bad in ("straggler=generation/1", "hang=policy/1@5", "oops=1", "env-errors=1.5", "kill=gen/1@2"):
        with pytest.raises(ValueError, match="expected one of straggler="):
            demo_module.parse_faults([bad])
    with pytest.raises(ValueError, match="generation/5 does not exist"):
        _settings(demo_module, faults=demo_module.parse_faults(["kill=generation/5@2"]))
    with pytest.raises(ValueError, match="only generation workers can be killed"):
        _settings(demo_module, faults=demo_module.parse_faults(["kill=policy/0@2"]))


def test_a_span_group_spec_naming_nothing_is_a_usage_error_before_the_run(
        demo_module: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo registers every group it emits before it starts, so a name nothing owns is a
    typo; left pending, the whole run would record no span and its report would fail at the
    end, after a minute of Ray."""
    from rlsight.demo.run import main as demo_main

    with pytest.raises(SystemExit) as exited:
        demo_main(["--span-groups", "per_stp,per_prompt", "--steps", "1"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--span-groups: 'per_stp' names no span group, preset or namespace" in err
    assert "did you mean 'per_step'?" in err


def test_a_decode_rate_that_is_not_positive_names_the_flag(
        demo_module: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """`--decode-tps 100,0` printed the internal Costs(...) repr instead of the flag at fault."""
    from rlsight.demo.run import main as demo_main

    for rates in ("100,0", "nan", "-5"):
        with pytest.raises(SystemExit) as exited:
            demo_main(["--decode-tps", rates, "--steps", "1"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f"--decode-tps {rates!r}" in err and "Costs(" not in err


# Sync and async -----------------------------------------------------------------------------


def _steps_window_s(run: DemoRun) -> float:
    first, _ = run.step_window(1)
    _, last = run.step_window(run.report.summary.steps)
    return (last - first) / 1e9


def _busy_s(run: DemoRun, group: str) -> float:
    """A fleet's busy seconds per rank, as the report counts them (start-up's are a few ms)."""
    report = run.report
    (fleet,) = [g for g in report.fleets.groups if g.worker_group == group]
    return fleet.utilisation * report.fleets.wall_ns / 1e9


def test_async_keeps_generation_busier_and_policy_less_idle_than_sync(
    sync_run: DemoRun, async_run: DemoRun
) -> None:
    """Per second of the steps, generation is busier; per step, the policy ranks idle less.

    The policy half compares idle seconds per step, not busy shares. A rank's busy time per
    step is its trained tokens / ``train_tps`` (the sampled completions decide the tokens) plus
    what a loaded machine adds; it is not what the controller changes, yet a busy share
    divides it by a step only ~1.3x shorter in async, so a 25% dip in one run's busy time
    flips the comparison. Idle seconds per step are what the schedule changes: in sync they
    contain the whole generation and reward phase; in async that phase runs beside training,
    so a good part of it is gone (not all: the refit bubble and the first step's buffer fill
    still idle the ranks). An async controller that serialises like sync idles the ranks as
    long as sync does, and fails here.
    """
    def generation_share(run: DemoRun) -> float:
        return _busy_s(run, "generation") / _steps_window_s(run)

    assert generation_share(async_run) > generation_share(sync_run)

    def policy_idle_per_step(run: DemoRun) -> float:
        return (_steps_window_s(run) - _busy_s(run, "policy")) / run.report.summary.steps

    rollout_per_step = sum(s.end_ns - s.start_ns for s in sync_run.named("rl.rollout")) / 1e9 / PAIR["steps"]
    assert policy_idle_per_step(async_run) < policy_idle_per_step(sync_run) - rollout_per_step / 4


def test_async_waits_on_the_buffer_and_the_refit_bubble_and_evicts_stale_groups(async_run: DemoRun) -> None:
    names = {s.name for s in async_run.spans}
    assert {"rl.efficiency.idle.buffer_starvation", "rl.efficiency.idle.refit_bubble"} <= names
    assert sum(async_run.per_step("rl_demo.buffer.evicted_groups").values()) > 0
    # discard() charges the evicted groups' earlier generation to waste, in the fleet view.
    discards = async_run.named("rl.discard")
    assert discards and {d.attributes["rl.discard.reason"] for d in discards} == {"stale"}
    tagged = {s.attributes.get("rl.group_id") for s in async_run.named("rl.generation.sample")}
    assert {g for d in discards for g in d.attributes["rl.discard.group_ids"]} <= tagged
    (generation,) = [g for g in async_run.report.fleets.groups if g.worker_group == "generation"]
    assert generation.wasted > 0
    assert set(async_run.per_step("rl_demo.buffer.staleness")) == set(range(1, STEPS + 2))
    assert "evicted" in async_run.output


def test_sync_generation_is_the_largest_phase_of_a_step(faulty: DemoRun) -> None:
    """Generation beats training, reward, refit...; this short run validates every other step
    (the default run every fifth), so validation is left out of the comparison."""
    shares = {c.name: c.attributed_ns for c in faulty.report.top if c.name != "rl.validate"}
    assert max(shares, key=shares.__getitem__) == "rl.rollout.generate"


# One honest trace ---------------------------------------------------------------------------


def test_every_span_of_every_process_is_in_one_trace(faulty: DemoRun, async_run: DemoRun) -> None:
    for run in (faulty, async_run):
        (job,) = run.named("rl.job")
        assert {s.trace_id for s in run.spans} == {job.trace_id}
        assert {_worker(s) for s in run.spans} == {
            ("driver", 0), ("generation", 0), ("generation", 1), ("generation", 2),
            ("policy", 0), ("policy", 1), ("reference", 0), ("env", 0),
        }


def test_worker_spans_nest_under_the_driver_call_that_caused_them(faulty: DemoRun) -> None:
    for worker, caller in [
        ("rl.train.forward_backward", "rl.train.policy"),
        ("rl.train.allreduce", "rl.train.policy"),
        ("rl.logprob.compute", "rl.logprob.reference"),
        ("rl.refit.load_weights", "rl.refit.push_weights"),
        ("rl.validation.generate", "rl.validate"),
        ("rl.checkpoint.write", "rl.checkpoint.save"),
    ]:
        spans = faulty.named(worker)
        assert spans, worker
        assert {faulty.parent(s).name for s in spans} == {caller}, worker
    loads = faulty.named("rl.worker.load_model")
    assert {_worker(s) for s in loads} == {
        ("generation", 0), ("generation", 1), ("generation", 2),
        ("policy", 0), ("policy", 1), ("reference", 0),
    }
    assert {faulty.parent(s).name for s in loads} == {"rl.setup.workers"}
    pids = {s.resource["process.pid"] for s in faulty.spans}
    assert len(pids) == 8 and os.getpid() in pids


def test_the_http_hop_to_the_environment_is_in_the_trace(faulty: DemoRun) -> None:
    """generation worker -> aiohttp client -> env service's server -> its reward span."""
    for score in faulty.named("rl.env.score"):
        server = faulty.parent(score)
        client = faulty.parent(server)
        request = faulty.parent(client)
        assert (server.kind, _worker(server)[0]) == (SERVER, "env")
        assert (client.kind, _worker(client)[0]) == (CLIENT, "generation")
        assert request.name == "rl.reward.env_request"
        for s in (score, server, client, request):
            assert s.attributes["rl.span_group"] == "per_prompt", s.name


def test_validation_generation_is_counted_as_overhead(faulty: DemoRun) -> None:
    by_caller: dict[str, set[object]] = defaultdict(set)
    for s in faulty.named("rl.generation.sample"):
        by_caller[faulty.parent(s).name].add(s.attributes["rl.bucket"])
    assert by_caller == {"rl.validation.generate": {"overhead"}, "rl.rollout.generate": {"productive"}}


def test_the_trainer_scalars_are_teed_with_their_step(faulty: DemoRun) -> None:
    steps = set(range(1, STEPS + 1))
    for name in ("rl_demo.train.loss", "rl_demo.train.kl", "rl_demo.rollout.reward"):
        assert set(faulty.per_step(name)) == steps, name
    assert set(faulty.per_step("rl_demo.validation.reward")) == {1, 2, 4}
    missing = faulty.per_step(
        "rl.metrics.skipped", **{"rl.metric.name": "rl_demo.validation.reward", "rl.metric.reason": "missing"}
    )
    assert missing == {3: 1.0}, "a step without validation is a gap, never a 0"


def _assert_partition(buckets: Buckets) -> None:
    parts = (buckets.productive_ns, buckets.overhead_ns, buckets.idle_ns, buckets.wasted_ns,
             buckets.unattributed_ns)
    assert sum(parts) == buckets.wall_ns > 0


def test_the_report_partitions_wall_time_exactly(faulty: DemoRun, async_run: DemoRun) -> None:
    for run, steps in ((faulty, STEPS), (async_run, PAIR["steps"])):
        report = run.report
        assert report.summary.steps == steps
        _assert_partition(report.summary.buckets)
        for step in report.steps:
            _assert_partition(step.buckets)
            assert step.buckets.productive_ns > 0


def test_checkpoints_are_written_into_the_run_folder(faulty: DemoRun) -> None:
    assert sorted(p.name for p in (faulty.run_dir / "checkpoints").iterdir()) == [
        "step_000003.npz", "step_000004.npz"
    ]


def test_the_progress_display_prints_one_line_per_step(faulty: DemoRun) -> None:
    lines = faulty.output.splitlines()
    assert [line.split()[1] for line in lines] == [f"{s}/{STEPS}" for s in range(1, STEPS + 1)]
    assert all("s/step" in line and "reward" in line and "so far" in line for line in lines)


def test_the_progress_lines_goodput_is_the_reports_per_step_goodput(faulty: DemoRun) -> None:
    """The line quotes last_step_summary(): the report's own rule, step by step (#17)."""
    printed = [int(re.search(r"goodput +(\d+)%", line).group(1))  # type: ignore[union-attr]
               for line in faulty.output.splitlines()]
    reported = [round(100 * s.buckets.fraction("productive")) for s in faulty.report.steps]
    assert len(printed) == len(reported) == STEPS
    assert all(abs(p - r) <= 1 for p, r in zip(printed, reported, strict=True)), (printed, reported)


def test_an_already_initialised_cluster_is_left_running(faulty: DemoRun) -> None:
    assert ray.is_initialized()
    assert ray.cluster_resources()["CPU"] == 2


def test_rlsight_demo_forwards_every_flag_it_is_given(demo_module: ModuleType) -> None:
    """The command keeps no defaults of its own (importing the demo for --help would import Ray)."""
    parser = argparse.ArgumentParser()
    demo_command.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert f"(default {demo_module.DEFAULT_STEPS})" in text
    assert f"(default {','.join(demo_module.DEFAULT_SPAN_GROUPS)})" in text
    demo_parser = demo_module.build_parser()
    forwarded = {a.option_strings[0] for a in demo_parser._actions if a.option_strings} - {"-h"}
    ours = {a.option_strings[0] for a in parser._actions if a.option_strings} - {"-h"}
    assert ours == forwarded


# Network exposure ---------------------------------------------------------------------------


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses of the TCP sockets process ``pid`` listens on (from /proc, as ss reads)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1].split(":")[0])
    return found


def test_ray_listens_on_loopback_only_with_the_single_machine_switch(ray_cluster: RayCluster) -> None:
    """Ray's gRPC servers bind to the node IP; the switch the demo sets makes it 127.0.0.1."""
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    addresses = _listening_addresses(os.getpid())  # this driver's core-worker gRPC server
    assert addresses, "the driver should listen for its core worker"
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert addresses <= loopback, addresses


def test_importing_the_demo_sets_the_switch_unless_the_caller_did(tmp_path: Path) -> None:
    code = ("import os, rlsight.demo, ray._private.ray_constants as c; "
            "print(os.environ['RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'], c.ENABLE_RAY_CLUSTER)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["0", "False"], done.stderr[-2000:]
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["1", "True"], done.stderr[-2000:]
