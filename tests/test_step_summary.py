"""The driver's online per-step goodput: last_step_summary, rl.goodput.* and agreement with
``rlsight report --json`` for the same run."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

import rlsight
from rlsight import RL, Bucket
from rlsight.cli import EXIT_OK, main
from rlsight.store import read_metrics

BUCKETS = ("productive", "overhead", "idle", "wasted", "unattributed")


def _config(run_dir: Path, **changes: object) -> rlsight.TelemetryConfig:
    return rlsight.TelemetryConfig(run_dir=str(run_dir), strict=True, span_groups=("all",),
                                   **changes)  # type: ignore[arg-type]


async def _fan_out() -> None:
    async def one(i: int) -> None:
        with rlsight.span(RL.REWARD, "rl.reward.score", concurrent=True):
            await asyncio.sleep(0.004 * (i + 1))
        with rlsight.span(RL.REWARD, "rl.reward.post"):
            await asyncio.sleep(0.002)
    await asyncio.gather(*(one(i) for i in range(3)))


def _step_body(step: int) -> None:
    """Nested buckets, a deeper overhead inside productive work, an efficiency wait, a
    validation scope, async fan-out on the same thread, work on another thread and gaps."""
    with rlsight.span(RL.GENERATION, "rl.rollout.generate"):
        time.sleep(0.01)
        with rlsight.span(RL.REFIT, "rl.refit.push_weights"):
            time.sleep(0.004)
        time.sleep(0.003)
    with rlsight.efficiency_span("idle/buffer_starvation"):
        time.sleep(0.006 + 0.002 * step)
    time.sleep(0.003)  # unattributed
    with rlsight.bucket_scope(Bucket.OVERHEAD), rlsight.span(RL.GENERATION, "rl.validate.generate"):
        time.sleep(0.004)
    asyncio.run(_fan_out())
    other = threading.Thread(target=lambda: _other_thread_work())
    other.start()
    other.join()
    if step % 2:
        with rlsight.efficiency_span("wasted/stale_discard"):
            time.sleep(0.003)


def _other_thread_work() -> None:
    with rlsight.span(RL.TRAINING, "rl.train.policy"):
        time.sleep(0.005)


def _run(run_dir: Path, steps: int = 4) -> list[dict[str, float]]:
    summaries = []
    rlsight.setup_telemetry(_config(run_dir))
    try:
        with rlsight.job_span():
            with rlsight.span(RL.CHECKPOINT, "rl.checkpoint.save"):
                time.sleep(0.003)
            for step in range(1, steps + 1):
                with rlsight.step_span(step):
                    _step_body(step)
                summaries.append(rlsight.last_step_summary())
    finally:
        rlsight.shutdown_telemetry()
    return summaries


@pytest.fixture(scope="module")
def online_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, float]]]:
    run_dir = tmp_path_factory.mktemp("online") / "run"
    return run_dir, _run(run_dir)


class TestAgreementWithReport:
    def test_every_steps_buckets_equal_report_json(self, online_run, capsys):
        """The online rollup and `rlsight report --json` give the same seconds per step."""
        run_dir, summaries = online_run
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK
        steps = json.loads(capsys.readouterr().out)["steps"]
        assert [s["step"] for s in steps] == [1, 2, 3, 4]
        for online, offline in zip(summaries, steps, strict=True):
            b = offline["buckets"]
            assert online["rlsight/step"] == offline["step"]
            assert online["rlsight/wall_s"] == b["wall_ns"] / 1e9
            for bucket in BUCKETS:
                assert online[f"rlsight/{bucket}_s"] == b[f"{bucket}_ns"] / 1e9, bucket
            assert online["rlsight/goodput_pct"] == pytest.approx(100 * b["productive_ns"] / b["wall_ns"])

    def test_the_workload_fills_every_bucket(self, online_run):
        """Guards the test above against passing on an all-zero partition."""
        _, summaries = online_run
        for bucket in BUCKETS:
            assert all(s[f"rlsight/{bucket}_s"] > 0 for s in summaries if bucket != "wasted")
        assert [s["rlsight/wasted_s"] > 0 for s in summaries] == [True, False, True, False]

    def test_contributors_are_named_by_category_and_span(self, online_run):
        _, summaries = online_run
        first = summaries[0]
        assert first["rlsight/idle/buffer_starvation_s"] > 0.006
        assert first["rlsight/overhead/rl.refit.push_weights_s"] >= 0.004
        assert first["rlsight/overhead/rl.validate.generate_s"] >= 0.004
        assert first["rlsight/wasted/stale_discard_s"] >= 0.003
        assert "rlsight/wasted/stale_discard_s" not in summaries[1]

    def test_one_step_contributors_equal_the_reports_top_lines(self, tmp_path, capsys):
        """With a single step the report's top contributors are that step's."""
        run_dir = tmp_path / "one"
        (summary,) = _run(run_dir, steps=1)
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK
        top = json.loads(capsys.readouterr().out)["top"]
        offline = {c["name"]: c["attributed_ns"] / 1e9 for c in top if c["bucket"] in ("idle", "overhead")}
        assert offline["rl.efficiency.idle.buffer_starvation"] == summary["rlsight/idle/buffer_starvation_s"]
        assert offline["rl.refit.push_weights"] == summary["rlsight/overhead/rl.refit.push_weights_s"]

    def test_the_goodput_metrics_reach_the_store_per_step(self, online_run):
        run_dir, summaries = online_run
        points = [p for p in read_metrics(run_dir).points if p.name == "rl.goodput.seconds"]
        got = {(int(p.attributes["rl.step"]), p.attributes["rl.bucket"]): p.value for p in points}
        for s in summaries:
            for bucket in BUCKETS:
                assert got[(int(s["rlsight/step"]), bucket)] == pytest.approx(s[f"rlsight/{bucket}_s"])


class TestLastStepSummary:
    def test_empty_without_telemetry_or_before_the_first_step(self, tmp_path):
        assert rlsight.last_step_summary() == {}
        with rlsight.setup_telemetry(_config(tmp_path / "r")):
            assert rlsight.last_step_summary() == {}

    def test_is_a_copy_that_the_caller_may_change(self, tmp_path):
        with rlsight.setup_telemetry(_config(tmp_path / "r")):
            with rlsight.step_span(7):
                time.sleep(0.001)
            summary = rlsight.last_step_summary()
            summary["extra"] = 1.0
            assert "extra" not in rlsight.last_step_summary()
            assert summary["rlsight/step"] == 7.0

    def test_values_are_floats_and_buckets_add_up_to_wall(self, online_run):
        _, summaries = online_run
        for s in summaries:
            assert all(type(v) is float for v in s.values())
            assert sum(s[f"rlsight/{b}_s"] for b in BUCKETS) == pytest.approx(s["rlsight/wall_s"])

    def test_a_worker_rolls_nothing_up(self, tmp_path, monkeypatch):
        """Only the process that called setup_telemetry computes summaries."""
        env = _config(tmp_path / "w").to_env()
        worker = rlsight.init_worker(environ=env)
        assert worker is not None
        try:
            with rlsight.step_span(1):
                time.sleep(0.001)
            assert rlsight.last_step_summary() == {}
        finally:
            rlsight.shutdown_telemetry()

    def test_what_it_keeps_is_bounded_by_the_open_steps(self, tmp_path):
        """A window's cut releases every row no open step reads; an open step keeps its own."""
        from rlsight._step_rollup import StepRollupProcessor

        with rlsight.setup_telemetry(_config(tmp_path / "r")) as t:
            proc = next(p for p in t._tracer_provider._active_span_processor._span_processors
                        if isinstance(p, StepRollupProcessor))
            for step in range(3):
                with rlsight.step_span(step):
                    for _ in range(20):
                        with rlsight.span(RL.TRAINING, "rl.train.policy"):
                            pass
                with rlsight.span(RL.TRAINING, "rl.train.policy"):
                    pass
            assert proc._open_steps == {}
            proc.cut()
            assert proc._rows == []
            with rlsight.step_span(3):
                for _ in range(5):
                    with rlsight.span(RL.TRAINING, "rl.train.policy"):
                        pass
                proc.cut()
                assert len(proc._rows) == 5 * 7, "the open step's rows stay, and only those"
            proc.cut()
            assert proc._rows == []

    def test_a_span_that_started_before_the_processor_is_filed_as_it_ends(self, tmp_path):
        """A span the roll-up never saw start (it was open when the processor was added)
        ends like any other: its row is filed and nothing raises."""
        from rlsight._step_rollup import StepRollupProcessor

        with rlsight.setup_telemetry(_config(tmp_path / "r")) as t:
            proc = next(p for p in t._tracer_provider._active_span_processor._span_processors
                        if isinstance(p, StepRollupProcessor))
            with rlsight.span(RL.TRAINING, "rl.train.policy") as span:
                proc._open.clear()  # as if it had started before the processor was added
            assert proc._rows[-7:][3] == span.get_span_context().span_id
            assert proc._open == {}

    def test_a_span_set_after_its_start_is_filed_with_its_attributes_as_a_dict(self, tmp_path):
        """A span no longer plain (an attribute set on it; every step span) ends through
        on_end: its row holds the SDK's dict of its attributes, which the columns read in
        their C-level passes, not the BoundedAttributes around it."""
        from rlsight._step_rollup import StepRollupProcessor

        with rlsight.setup_telemetry(_config(tmp_path / "r")) as t:
            proc = next(p for p in t._tracer_provider._active_span_processor._span_processors
                        if isinstance(p, StepRollupProcessor))
            with rlsight.span(RL.TRAINING, "rl.train.policy") as span:
                span.set_attribute("rl.batch_size", 8)
            attrs = proc._rows[-1]
            assert type(attrs) is dict and attrs["rl.batch_size"] == 8
            assert attrs is span._attributes._dict  # type: ignore[attr-defined]


# -- property: random span trees with explicit times -------------------------------------------

_T0 = 1_700_000_000_000_000_000
_BUCKET_CHOICES = (None, "productive", "overhead", "idle", "wasted")
_node = st.tuples(st.integers(0, 90), st.integers(1, 60), st.sampled_from(_BUCKET_CHOICES),
                  st.booleans())


class _Spec:
    def __init__(self, name, parent, start, end, depth, attrs):  # type: ignore[no-untyped-def]
        self.name, self.parent, self.start, self.end = name, parent, start, end
        self.depth, self.attrs, self.span = depth, attrs, None


def _tree(specs, parent, lo, hi, nodes, depth, thread):  # type: ignore[no-untyped-def]
    """Children of ``parent`` inside ``[lo, hi]``; siblings may overlap (concurrent tasks)."""
    for offset, length, bucket, concurrent in nodes:
        start = min(hi, lo + offset)
        end = min(hi, start + length)
        attrs = {"thread.id": thread, **({"rl.bucket": bucket} if bucket else {}),
                 **({"rl.concurrent": True} if concurrent else {})}
        spec = _Spec(f"rl.prop.d{depth}", parent, start, end, depth, attrs)
        specs.append(spec)
        if depth < 3:
            _tree(specs, spec, start, end, nodes[: len(nodes) // 2], depth + 1, thread)


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.lists(_node, min_size=1, max_size=6), min_size=1, max_size=3),
       free=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 150),
                               st.sampled_from(_BUCKET_CHOICES)), max_size=4))
def test_online_equals_offline_on_random_trees(tmp_path_factory, steps, free):
    """Random nesting, equal-depth overlap, concurrent spans, another thread, and job-level
    spans that straddle step boundaries (started and ended in time order, as a run would):
    every step's online buckets equal the report's."""
    run_dir = tmp_path_factory.mktemp("prop") / "run"
    end_of_run = 100 * len(steps) + 600
    job = _Spec("rl.job", None, 0, end_of_run, 0, {"thread.id": 1})
    specs = [job]
    for offset, length, bucket in free:
        specs.append(_Spec("rl.prop.free", job, offset, offset + length, 1,
                           {"thread.id": 1, **({"rl.bucket": bucket} if bucket else {})}))
    step_specs = []
    for n, nodes in enumerate(steps):
        lo, hi = 100 * n + 10, 100 * n + 100
        step = _Spec("rl.step", job, lo, hi, 1, {"thread.id": 1, "rl.step": n})
        specs.append(step)
        step_specs.append(step)
        _tree(specs, step, lo, hi, nodes, 2, 1)
        _tree(specs, step, lo, hi, nodes[:1], 2, 2)  # another thread: not the step's timeline
    # Real time order: ends before starts at one instant (a zero-length span's end after its
    # start), parents start first, children end first.
    events = sorted([(sp.start, 1, sp.depth, i) for i, sp in enumerate(specs)]
                    + [(sp.end, 2 if sp.end == sp.start else 0, -sp.depth, i)
                       for i, sp in enumerate(specs)])
    online = {}
    telemetry = rlsight.setup_telemetry(_config(run_dir))
    try:
        tracer = telemetry.tracer
        for t, kind, _, i in events:
            sp = specs[i]
            if kind == 1:
                context = trace.set_span_in_context(sp.parent.span) if sp.parent else None
                sp.span = tracer.start_span(sp.name, context=context, attributes=sp.attrs,
                                            start_time=_T0 + t)
            else:
                sp.span.end(end_time=_T0 + t)
                if sp in step_specs:
                    online[sp.attrs["rl.step"]] = rlsight.last_step_summary()
    finally:
        rlsight.shutdown_telemetry()
    from rlsight.analysis import analyze_run

    report = analyze_run(run_dir)
    assert [r.step for r in report.steps] == sorted(online)
    for row in report.steps:
        for bucket in BUCKETS:
            assert online[row.step][f"rlsight/{bucket}_s"] == row.buckets.get(bucket) / 1e9, bucket


def test_capture_telemetry_rolls_steps_up_like_the_driver():
    """Users test their trainer's logging with rlsight.testing, without a run folder."""
    from rlsight.testing import FakeClock, capture_telemetry

    clock = FakeClock()
    with capture_telemetry(clock=clock):
        with rlsight.step_span(3):
            clock.advance(0.75)
            with rlsight.efficiency_span("idle/barrier"):
                clock.advance(0.25)
        summary = rlsight.last_step_summary()
    assert summary["rlsight/step"] == 3.0
    assert summary["rlsight/wall_s"] == 1.0
    assert summary["rlsight/idle/barrier_s"] == summary["rlsight/idle_s"] == 0.25


# -- discard(): what online and the report agree on, and exactly what differs -------------------


def _discarding_run(run_dir: Path) -> list[dict[str, float]]:
    """Step 1 generates groups a and b on the driver's thread and discards a in the same step;
    step 2 discards b, which step 1 generated; step 3 discards nothing."""
    summaries = []
    rlsight.setup_telemetry(_config(run_dir))
    try:
        with rlsight.job_span():
            with rlsight.step_span(1):
                for gid in ("a", "b"):
                    with rlsight.span(RL.GENERATION, "rl.rollout.generate", group_id=gid):
                        time.sleep(0.01)
                rlsight.discard(["a"], "filtered")
                with rlsight.efficiency_span("idle/buffer_starvation"):
                    time.sleep(0.003)
            summaries.append(rlsight.last_step_summary())
            with rlsight.step_span(2):
                rlsight.discard(["b"], "stale")
                with rlsight.span(RL.TRAINING, "rl.train.policy"):
                    time.sleep(0.005)
            summaries.append(rlsight.last_step_summary())
            with rlsight.step_span(3):
                with rlsight.span(RL.TRAINING, "rl.train.policy"):
                    time.sleep(0.005)
            summaries.append(rlsight.last_step_summary())
    finally:
        rlsight.shutdown_telemetry()
    return summaries


def test_discards_online_charge_the_same_step_and_differ_exactly_by_later_ones(tmp_path):
    """A discard in the step that ran the work is charged online as in the report. A discard
    in a later step cannot change a dict already handed over: the report moves that work to
    wasted in the step that ran it, online keeps it productive there; nothing else differs."""
    from rlsight.analysis import analyze_run

    run_dir = tmp_path / "run"
    online = _discarding_run(run_dir)
    report = analyze_run(run_dir)
    offline = {r.step: {b: r.buckets.get(b) / 1e9 for b in BUCKETS} for r in report.steps}
    later = {d.reason: d.work_ns / 1e9 for d in report.wasted.discarded}
    assert later["filtered"] >= 0.01 and later["stale"] >= 0.01
    first = online[0]
    # Group a (discarded in step 1): wasted online as in the report.
    assert first["rlsight/wasted_s"] == pytest.approx(later["filtered"], abs=1e-9)
    # Group b (discarded in step 2): productive online in step 1, wasted in the report's step 1.
    assert offline[1]["wasted"] == pytest.approx(first["rlsight/wasted_s"] + later["stale"], abs=1e-9)
    assert offline[1]["productive"] == pytest.approx(first["rlsight/productive_s"] - later["stale"],
                                                     abs=1e-9)
    for bucket in ("idle", "overhead", "unattributed"):
        assert offline[1][bucket] == first[f"rlsight/{bucket}_s"], bucket
    for summary in online[1:]:
        step = int(summary["rlsight/step"])
        for bucket in BUCKETS:
            assert summary[f"rlsight/{bucket}_s"] == offline[step][bucket], (step, bucket)


def test_spans_whose_attributes_are_not_the_sdks_bounded_ones_are_read_all_the_same():
    """The fields are read straight from the SDK's span objects; a span that keeps its
    attributes another way (a plain dict, none) goes through the public properties."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    from rlsight._step_rollup import live_spans
    from rlsight.analysis.columns import BUCKET_CODES
    from rlsight.analysis.online import live_columns

    def made(span_id: int, attributes: dict[str, object] | None) -> ReadableSpan:
        return ReadableSpan(name="rl.train.policy", context=SpanContext(1, span_id, False),
                            parent=SpanContext(1, 9, False), attributes=attributes,
                            start_time=10 * span_id, end_time=None)

    spans = live_spans([made(1, {"rl.bucket": "idle"}), made(2, None)], 99, {})
    assert spans.rows == [10, None, 1, 1, 9, "rl.train.policy", {"rl.bucket": "idle"},
                          20, None, 1, 2, 9, "rl.train.policy", {}]
    cols = live_columns(spans)
    assert cols.bucket.tolist() == [BUCKET_CODES["idle"], -1] and cols.end.tolist() == [99, 99]


def test_without_numpy_the_run_goes_on_and_the_driver_says_why_once(tmp_path):
    """numpy comes with the analysis extra; a driver without it still sets up and runs, with
    one warning naming the extra, and last_step_summary() stays empty."""
    import subprocess
    import sys

    program = f"""
import sys, warnings
sys.modules["numpy"] = None  # as if the analysis extra were not installed
warnings.simplefilter("always")
import rlsight
with warnings.catch_warnings(record=True) as caught:
    rlsight.setup_telemetry(rlsight.TelemetryConfig(run_dir={str(tmp_path / "run")!r}))
    for step in range(2):
        with rlsight.step_span(step):
            with rlsight.span(rlsight.RL.TRAINING, "rl.train.policy"):
                pass
    assert rlsight.last_step_summary() == {{}}
    rlsight.flush_telemetry()
    report = rlsight.shutdown_telemetry()
messages = [str(w.message) for w in caught if "numpy" in str(w.message)]
assert len(messages) == 1 and "rlsight[analysis]" in messages[0], messages
assert not report.internal_errors, report.internal_errors
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
