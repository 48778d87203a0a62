"""Start records (<run_dir>/live): written while a long-lived span is open, never per prompt."""

from __future__ import annotations

import time
from pathlib import Path

from rlsight import RL, per_prompt_scope, span, step_span, umbrella_span
from rlsight.analysis._read import read_span_columns
from rlsight.analysis.live import post_mortem
from rlsight.store._live import read_live
from rlsight.testing import capture_telemetry


def _wait_for_starts(run_dir: Path, names: set[str], timeout_s: float = 5.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {s.name for s in read_live(run_dir).starts}
        if names <= seen or time.monotonic() > deadline:
            return seen
        time.sleep(0.02)


def test_an_open_long_lived_span_has_a_start_record_before_it_ends(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), step_span(3), span(RL.REFIT, "rl.refit.push"):
        seen = _wait_for_starts(run_dir, {"rl.step", "rl.refit.push"})
        assert {"rl.step", "rl.refit.push"} <= seen
        live = read_live(run_dir)
        (refit,) = [s for s in live.starts if s.name == "rl.refit.push"]
        (step,) = [s for s in live.starts if s.name == "rl.step"]
        assert refit.parent_span_id == step.span_id and refit.trace_id == step.trace_id
        assert step.step == 3 and refit.group == RL.REFIT
        assert refit.process in live.processes


def test_per_prompt_and_short_kinds_get_no_start_record_but_live_true_does(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), umbrella_span(RL.ROLLOUT, "rl.rollout"):
        with per_prompt_scope():
            prompt = span(RL.GENERATION, "rl.test.per_prompt_generate")
            prompt.__enter__()
        reward = span(RL.REWARD, "rl.test.reward")
        reward.__enter__()
        marked = span(RL.REWARD, "rl.test.reward_live", live=True)
        marked.__enter__()
        _wait_for_starts(run_dir, {"rl.rollout", "rl.test.reward_live"})
        time.sleep(0.15)  # three store intervals: anything queued is written by now
        seen = {s.name for s in read_live(run_dir).starts}
        for cm in (marked, reward, prompt):
            cm.__exit__(None, None, None)
    assert {"rl.rollout", "rl.test.reward_live"} <= seen
    assert "rl.test.per_prompt_generate" not in seen
    assert "rl.test.reward" not in seen


def test_clean_shutdown_is_marked_and_ended_spans_are_not_left_open(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), step_span(1):
        _wait_for_starts(run_dir, {"rl.step"})
    live = read_live(run_dir)
    (proc,) = live.processes.values()
    assert proc.shutdown_ns is not None and proc.shutdown_ns >= proc.opened_ns
    cols, _, _ = read_span_columns(run_dir, workers=1)
    pm = post_mortem(cols, live)
    assert pm is not None and pm.open_spans == 0 and pm.unclean == 0 and pm.processes == []


def test_a_corrupt_live_line_is_skipped_with_its_place_and_the_rest_kept(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), step_span(1):
        _wait_for_starts(run_dir, {"rl.step"})
    (path,) = (run_dir / "live").glob("*.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", '{"record": "start"}', *lines[1:]]) + "\n")
    live = read_live(run_dir)
    assert [s.line for s in live.skipped] == [2, 3]
    assert [s.name for s in live.starts] == ["rl.step"]
    assert all(str(path) in str(s) for s in live.skipped)


def test_a_live_span_is_recorded_once_while_open_and_not_kept_once_it_ends(tmp_path: Path) -> None:
    """Start records of spans still open at a write, each written once; ended spans leave the
    writer's hands at their end (nothing of them is kept or written), other kinds never enter."""
    from opentelemetry.sdk.trace import TracerProvider

    from rlsight.store._live import process_line
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor

    sink = FileSink(tmp_path / "live" / "p.jsonl")
    sink.write(process_line({"service.instance.id": "p"}))
    starts = StartRecordProcessor(sink, interval_s=3600, heartbeat_s=3600)  # writes when told to
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(starts)
    tracer = provider.get_tracer("t")

    def live(name: str, group: str = RL.TRAINING) -> object:
        return tracer.start_span(name, attributes={"rl.span_group": group, "thread.id": 1})

    try:
        open_span = live("rl.open")
        live("rl.ended").end()  # type: ignore[attr-defined]
        live("rl.short", RL.REWARD)  # not a long-lived kind
        assert [s.name for s in starts._open.values()] == ["rl.open"]
        assert starts.write_open() and starts.write_open()  # the second finds nothing new
        assert [s.name for s in read_live(tmp_path).starts] == ["rl.open"]
        open_span.end()  # type: ignore[attr-defined]
        later = live("rl.later")
        assert starts.close()  # what is still open is written on the way out
        live("rl.after_close")
        assert not starts._open
        assert [s.name for s in read_live(tmp_path).starts] == ["rl.open", "rl.later"]
        later.end()  # type: ignore[attr-defined]
    finally:
        sink.close()


def test_the_writer_thread_writes_a_heartbeat_every_interval_and_the_reader_keeps_the_last(
        tmp_path: Path) -> None:
    from rlsight.store._live import process_line
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor

    sink = FileSink(tmp_path / "live" / "p.jsonl")
    beat_sink = FileSink(tmp_path / "heartbeats" / "p.jsonl")
    sink.write(process_line({"service.instance.id": "p"}, heartbeat_s=0.05))
    starts = StartRecordProcessor(sink, interval_s=0.01, heartbeat_s=0.05, heartbeats=beat_sink)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            beats = (tmp_path / "heartbeats" / "p.jsonl").read_text().count('"record":"alive"')
            if beats >= 3:
                break
            time.sleep(0.02)
    finally:
        starts.close()
        sink.close()
        beat_sink.close()
    assert beats >= 3
    assert '"alive"' not in (tmp_path / "live" / "p.jsonl").read_text()  # the start records' file stays small
    (proc,) = read_live(tmp_path).processes.values()
    assert proc.heartbeat_s == 0.05 and not read_live(tmp_path).skipped
    assert proc.alive_ns is not None and proc.alive_ns >= proc.opened_ns + 3 * 50_000_000 * 0.9
    assert proc.last_heard_ns == proc.alive_ns
    assert not proc.silent(proc.alive_ns + 150_000_000)  # three intervals: not yet
    assert proc.silent(proc.alive_ns + 150_000_001)


def test_silence_needs_a_heartbeat_interval_and_no_clean_shutdown() -> None:
    from rlsight.store._live import LiveProcess

    old = LiveProcess("p", {}, opened_ns=0)  # a run written before heartbeats
    assert old.last_heard_ns is None and not old.silent(10**15)
    quiet = LiveProcess("p", {}, opened_ns=5, heartbeat_s=10.0)  # killed before its first beat
    assert quiet.last_heard_ns == 5 and quiet.silent(5 + 30 * 10**9 + 1)
    done = LiveProcess("p", {}, opened_ns=0, heartbeat_s=10.0, alive_ns=7, shutdown_ns=9)
    assert done.last_heard_ns == 9 and not done.silent(10**15)


def test_start_records_read_from_the_open_spans_another_processor_keeps(tmp_path: Path) -> None:
    """With ``open_spans`` (the step roll-up's), the writer files nothing itself: each write
    records the live spans opened there since the last one and still open, once each, in start
    order; spans that ended meanwhile, and other kinds, get none."""
    from opentelemetry.sdk.trace import TracerProvider

    from rlsight.store._live import process_line
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor

    sink = FileSink(tmp_path / "live" / "p.jsonl")
    sink.write(process_line({"service.instance.id": "p"}))
    opened: dict[int, object] = {}
    starts = StartRecordProcessor(sink, interval_s=3600, heartbeat_s=3600,
                                  open_spans=opened)  # type: ignore[arg-type]
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("t")

    def live(name: str, group: str = RL.TRAINING) -> object:
        span = tracer.start_span(name, attributes={"rl.span_group": group, "thread.id": 1})
        opened[span.get_span_context().span_id] = span
        return span

    def end(span: object) -> None:
        span.end()  # type: ignore[attr-defined]
        opened.pop(span.get_span_context().span_id)  # type: ignore[attr-defined]

    def written() -> list[str]:
        return [s.name for s in read_live(tmp_path).starts]

    try:
        first, second = live("rl.first"), live("rl.second")
        end(live("rl.ended"))
        short = live("rl.short", RL.REWARD)  # not a long-lived kind
        assert starts.write_open() and starts.write_open()  # the second finds nothing new
        assert written() == ["rl.first", "rl.second"]
        end(first)
        later = live("rl.later")
        assert starts.close()  # what opened since is written on the way out
        assert written() == ["rl.first", "rl.second", "rl.later"]
        assert starts._seen == {s.get_span_context().span_id  # type: ignore[attr-defined]
                                for s in (second, short, later)}  # ended ones are forgotten
        assert not starts._open  # nothing filed here
    finally:
        sink.close()


def test_where_the_roll_up_runs_start_records_come_from_its_open_spans(run_dir: Path) -> None:
    """The roll-up keeps every open span already: the start-record writer reads those, and is
    not a processor of its own (a span is filed once, not twice)."""
    from rlsight import runtime

    with capture_telemetry(run_dir=run_dir), step_span(1):
        tel = runtime._ACTIVE
        assert tel is not None and tel._rollup is not None and tel._starts is not None
        assert tel._starts._watched is tel._rollup.open_spans
        provider = tel._tracer_provider
        assert provider is not None
        assert tel._starts not in provider._active_span_processor._span_processors
        assert {"rl.step"} <= _wait_for_starts(run_dir, {"rl.step"})


def test_only_the_tail_of_a_heartbeat_file_is_read_and_a_torn_last_line_is_passed_over(
        tmp_path: Path) -> None:
    """A week of heartbeats is ~60k lines: the reader reads the last few KiB, and a process
    killed mid-write leaves a torn last line that must not hide the whole one before it."""
    from rlsight.store._live import HEARTBEAT_FOLDER, last_heartbeat, process_line

    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "p.jsonl").write_bytes(process_line({"service.instance.id": "p"}))
    beats = tmp_path / HEARTBEAT_FOLDER / "p.jsonl"
    beats.parent.mkdir()
    lines = [f'{{"record":"alive","timeUnixNano":"{10**18 + i}"}}\n' for i in range(60_000)]
    beats.write_text("".join(lines) + '{"record":"alive","timeUnix')
    assert last_heartbeat(beats) == 10**18 + 59_999
    (proc,) = read_live(tmp_path).processes.values()
    assert proc.alive_ns == 10**18 + 59_999 and not read_live(tmp_path).skipped
    beats.write_text("garbage\n")
    assert last_heartbeat(beats) is None and last_heartbeat(tmp_path / "nope.jsonl") is None


def test_a_failed_look_at_the_open_spans_does_not_stop_the_heartbeat(tmp_path: Path) -> None:
    """The writer thread outlives whatever one look raises: a dead thread would stop the
    heartbeat, and a running process would read as silent."""
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor

    class Flaky(dict):  # type: ignore[type-arg]
        """Its own ``__iter__`` makes ``dict(flaky)`` go through ``keys()``."""

        failed = False

        def __iter__(self):  # type: ignore[no-untyped-def]
            return super().__iter__()

        def keys(self):  # type: ignore[no-untyped-def]
            if not Flaky.failed:
                Flaky.failed = True
                raise RuntimeError("dictionary changed size during iteration")
            return super().keys()

    errors: list[BaseException] = []
    sink, beat_sink = FileSink(tmp_path / "live.jsonl"), FileSink(tmp_path / "beats.jsonl")
    starts = StartRecordProcessor(sink, interval_s=0.01, heartbeat_s=0.01, heartbeats=beat_sink,
                                  on_error=errors.append, open_spans=Flaky())
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (tmp_path / "beats.jsonl").read_text().count("alive") < 3:
            time.sleep(0.02)
    finally:
        starts.close()
        sink.close()
        beat_sink.close()
    assert Flaky.failed and [str(e) for e in errors][:1] == ["dictionary changed size during iteration"]
    assert (tmp_path / "beats.jsonl").read_text().count("alive") >= 3
