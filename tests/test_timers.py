"""record_span and TimerBridge: spans from timers the framework already has, dict filled as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight import RL, RlsightWarning, TimerBridge, record_span, step_span
from rlsight.store import read_spans
from rlsight.testing import Capture, capture_telemetry


@contextmanager
def verl_marked_timer(name: str, timing_raw: dict[str, float], color: str | None = None) -> Iterator[None]:
    """verl's marked_timer, as it behaves: accumulate the block's seconds under ``name``."""
    t0 = time.perf_counter()
    yield
    timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - t0


class NemoTimer:
    """NeMo-RL's Timer shape: ``time(label)`` appends each measurement to a list per label."""

    def __init__(self) -> None:
        self.elapsed: dict[str, list[float]] = {}

    @contextmanager
    def time(self, label: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.elapsed.setdefault(label, []).append(time.perf_counter() - t0)


BRIDGE_TABLE = {"gen": RL.GENERATION, "update_actor": (RL.TRAINING, "rl.train.policy")}


class TestRecordSpan:
    def test_a_span_timed_elsewhere_lands_with_its_times_under_the_current_span(
        self, capture: Capture
    ) -> None:
        with step_span(1) as step:
            record_span(RL.GENERATION, "rl.rollout.generate", 1_700_000_000.5, 1_700_000_002.5, prompts=8)
        (recorded,) = [s for s in capture.spans() if s.name == "rl.rollout.generate"]
        expected = (1_700_000_000_500_000_000, 1_700_000_002_500_000_000)
        assert (recorded.start_time, recorded.end_time) == expected
        assert recorded.parent is not None and recorded.parent.span_id == step.get_span_context().span_id
        assert recorded.attributes is not None
        assert recorded.attributes["rl.bucket"] == "productive"
        assert recorded.attributes["rl.prompts"] == 8

    def test_an_end_before_the_start_is_skipped_with_a_warning(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="end is before start"):
            record_span(RL.GENERATION, "rl.rollout.generate", 5.0, 4.0)
        assert capture.span_names() == []

    @pytest.mark.parametrize("scale", [1e9, 1e3], ids=["time_ns", "milliseconds"])
    def test_times_not_in_seconds_are_skipped_with_a_warning(self, capture: Capture, scale: float) -> None:
        # As int64 nanoseconds they overflowed the store and the busy-time rollup, which then
        # dropped the span and logged an internal error instead of naming the mistake.
        start = 1_700_000_000 * scale
        with pytest.warns(RlsightWarning, match=r"not seconds since the epoch.*time\.time\(\)"):
            record_span(RL.GENERATION, "rl.rollout.generate", start, start + 2 * scale)
        assert capture.span_names() == []

    @pytest.mark.parametrize("clock", [time.perf_counter, time.monotonic])
    def test_times_of_a_clock_since_boot_are_skipped_with_a_warning(
        self, capture: Capture, clock: object
    ) -> None:
        # They used to be recorded as a span in 1970: the report's run wall became half a
        # million hours and its goodput 0%.
        start = clock()  # type: ignore[operator]
        with pytest.warns(RlsightWarning, match=r"not seconds since the epoch.*perf_counter"):
            record_span(RL.GENERATION, "rl.rollout.generate", start, start + 1)
        assert capture.span_names() == []

    def test_a_phase_that_ended_seconds_ago_costs_no_other_span(self, run_dir: Path) -> None:
        """The store judged its writer's lag by the end time of the oldest span waiting: a
        span recorded with an end 5 s in the past read as a writer 5 s behind, and the spans
        ending after it (the step's own) were dropped as ``lag``."""
        from rlsight import TelemetryConfig, setup_telemetry, span

        telemetry = setup_telemetry(TelemetryConfig(run_dir=str(run_dir)))
        try:
            with step_span(1):
                now = time.time()
                record_span(RL.REWARD, "rl.reward.score", now - 10, now - 5)
                for _ in range(20):
                    with span(RL.TRAINING, "rl.train.policy"):
                        pass
        finally:
            report = telemetry.shutdown()
        assert report.dropped == {}
        names = sorted(s.name for s in read_spans(run_dir).spans)
        assert names == ["rl.reward.score", "rl.step"] + ["rl.train.policy"] * 20

    def test_a_disabled_group_records_nothing(self) -> None:
        with capture_telemetry(span_groups=("per_step",)) as cap:
            record_span(RL.PER_PROMPT, "rl.rollout.generate", 1.0, 2.0)
            assert cap.span_names() == []

    def test_without_telemetry_it_does_nothing(self) -> None:
        record_span(RL.GENERATION, "rl.rollout.generate", 1.0, 2.0)


class TestTimerBridge:
    def test_time_fills_the_dict_and_the_store_at_once(self, run_dir: Path) -> None:
        bridge = TimerBridge(BRIDGE_TABLE)
        timing_raw: dict[str, float] = {}
        with capture_telemetry(run_dir=run_dir) as cap:
            with step_span(1):
                for _ in range(2):
                    with bridge.time("gen", timing_raw):
                        time.sleep(0.01)
                with bridge.time("update_actor", timing_raw):
                    time.sleep(0.01)
            gens = [s for s in cap.spans() if s.name == "rl.timer.gen"]
        stored = read_spans(run_dir).spans
        assert set(timing_raw) == {"gen", "update_actor"}
        assert timing_raw["gen"] >= 0.02
        assert len(gens) == 2
        groups = {s.name: s.attributes["rl.span_group"] for s in stored}
        assert groups == {"rl.step": "step", "rl.timer.gen": "generation", "rl.train.policy": "training"}
        assert sum(s.name == "rl.timer.gen" for s in stored) == 2
        span_seconds = sum((s.end_time or 0) - (s.start_time or 0) for s in gens) / 1e9
        assert span_seconds == pytest.approx(timing_raw["gen"], abs=0.005)

    def test_wrap_keeps_the_frameworks_own_timer_filling_its_dict(self, capture: Capture) -> None:
        bridge = TimerBridge(BRIDGE_TABLE)
        marked_timer = bridge.wrap(verl_marked_timer)
        timing_raw: dict[str, float] = {}
        with marked_timer("gen", timing_raw, color="red"):
            time.sleep(0.005)
        with marked_timer("gen", timing_raw):
            pass
        assert list(timing_raw) == ["gen"] and timing_raw["gen"] >= 0.005
        assert capture.span_names().count("rl.timer.gen") == 2

    def test_wrap_finds_a_label_passed_by_keyword(self, capture: Capture) -> None:
        """`marked_timer(name="gen", timing_raw=t)` is a call the framework may make: the
        wrapper must not refuse it (a TypeError in the trainer's own timing line)."""
        marked_timer = TimerBridge(BRIDGE_TABLE).wrap(verl_marked_timer)
        timing_raw: dict[str, float] = {}
        with marked_timer(name="gen", timing_raw=timing_raw):  # type: ignore[call-arg]
            pass
        timer = NemoTimer()
        timer.time = TimerBridge(BRIDGE_TABLE).wrap(timer.time)  # type: ignore[method-assign]
        with timer.time(label="update_actor"):  # type: ignore[call-arg]
            pass
        assert "gen" in timing_raw and len(timer.elapsed["update_actor"]) == 1
        assert capture.span_names() == ["rl.timer.gen", "rl.train.policy"]

    def test_a_call_the_timer_itself_refuses_fails_as_it_would_unwrapped(self, capture: Capture) -> None:
        marked_timer = TimerBridge(BRIDGE_TABLE).wrap(verl_marked_timer)
        with pytest.raises(TypeError) as wrapped:
            marked_timer()  # type: ignore[call-arg]
        with pytest.raises(TypeError) as plain:
            verl_marked_timer()  # type: ignore[call-arg]
        assert str(wrapped.value) == str(plain.value)
        assert capture.span_names() == []

    def test_wrap_of_a_timer_method(self, capture: Capture) -> None:
        timer = NemoTimer()
        timer.time = TimerBridge(BRIDGE_TABLE).wrap(timer.time)  # type: ignore[method-assign]
        with timer.time("update_actor"):
            pass
        assert len(timer.elapsed["update_actor"]) == 1
        assert capture.span_names() == ["rl.train.policy"]

    def test_an_unmapped_label_is_timed_reported_once_and_opens_no_span(self, capture: Capture) -> None:
        bridge = TimerBridge(BRIDGE_TABLE)
        timing_raw: dict[str, float] = {}
        with pytest.warns(RlsightWarning, match="'old_log_prob' is not in the TimerBridge table") as seen:
            for _ in range(3):
                with bridge.time("old_log_prob", timing_raw):
                    pass
        assert len(seen) == 1
        assert "old_log_prob" in timing_raw
        assert capture.span_names() == []

    def test_an_exception_reaches_the_caller_and_marks_the_span(self, capture: Capture) -> None:
        bridge = TimerBridge(BRIDGE_TABLE)
        timing_raw: dict[str, float] = {}
        marked_timer = bridge.wrap(verl_marked_timer)
        with pytest.raises(KeyError), bridge.time("gen", timing_raw):
            raise KeyError("boom")
        with pytest.raises(ValueError), marked_timer("gen", timing_raw):
            raise ValueError("boom")
        assert "gen" in timing_raw
        assert [s.status.status_code.name for s in capture.spans()] == ["ERROR", "ERROR"]

    def test_without_telemetry_the_dict_still_fills(self) -> None:
        timing_raw: dict[str, float] = {}
        with TimerBridge(BRIDGE_TABLE).time("gen", timing_raw):
            pass
        assert "gen" in timing_raw

    def test_a_bad_table_entry_says_what_to_give(self) -> None:
        with pytest.raises(TypeError, match=r"a \(group, span_name\) pair"):
            TimerBridge({"gen": 3})  # type: ignore[dict-item]

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.sampled_from(["gen", "update_actor", "reward"]), max_size=8))
    def test_the_dict_is_what_the_plain_timer_gives(self, labels: list[str]) -> None:
        """Same keys, same number of measurements per label, bridged or not."""
        bridged: dict[str, float] = {}
        plain: dict[str, float] = {}
        bridge = TimerBridge({"gen": RL.GENERATION, "update_actor": RL.TRAINING, "reward": RL.REWARD})
        marked_timer = bridge.wrap(verl_marked_timer)
        counts: dict[str, int] = {}
        for label in labels:
            with marked_timer(label, bridged), verl_marked_timer(label, plain):
                counts[label] = counts.get(label, 0) + 1
        assert list(bridged) == list(plain)


def test_the_docs_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/timers.md: its one runnable block prints the two lines the page quotes."""
    import re
    import subprocess
    import sys

    page = (Path(__file__).resolve().parents[1] / "docs" / "timers.md").read_text()
    blocks = re.findall(r"(<!-- not run: [^>]+ -->\s*)?```python\n(.*?)```", page, re.DOTALL)
    (code,) = [code for marker, code in blocks if not marker]
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout.splitlines()
    quoted = re.search(r"prints `(.*?)` and\n`(.*?)`", page)
    assert quoted is not None
    assert printed == [quoted.group(1), quoted.group(2)]


def test_async_with_is_refused_with_a_type_error_that_names_the_fix() -> None:
    import asyncio

    bridge = TimerBridge({"gen": RL.GENERATION})

    async def wrong() -> None:
        async with bridge.time("gen", {}):
            pass

    with pytest.raises(TypeError, match=r"bridge.time\('gen', ...\) is a plain context manager: write `with"):
        asyncio.run(wrong())
