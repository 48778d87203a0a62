"""rlsight.discard: one rl.discard record per call, analysed into wasted work (issue #9.7)."""

from __future__ import annotations

import pytest

from rlsight import RL, discard, span
from rlsight.analysis import analyze_spans
from rlsight.store import read_spans
from rlsight.testing import Capture, capture_telemetry


def test_discard_records_the_groups_and_the_reason(capture: Capture) -> None:
    discard(["g1", 7], "stale")
    (record,) = [s for s in capture.spans() if s.name == "rl.discard"]
    assert record.attributes["rl.discard.group_ids"] == ("g1", "7")
    assert record.attributes["rl.discard.reason"] == "stale"
    assert record.attributes["rl.span_group"] == "efficiency"
    assert "rl.bucket" not in record.attributes


def test_a_single_id_is_accepted(capture: Capture) -> None:
    discard("g1", "filtered")
    (record,) = [s for s in capture.spans() if s.name == "rl.discard"]
    assert record.attributes["rl.discard.group_ids"] == ("g1",)


@pytest.mark.parametrize("reason", ["", "  ", None])
def test_an_empty_reason_is_an_error(capture: Capture, reason: object) -> None:
    with pytest.raises(ValueError, match="reason"):
        discard(["g1"], reason)  # type: ignore[arg-type]


def test_a_group_id_of_another_type_is_an_error(capture: Capture) -> None:
    with pytest.raises(ValueError, match="group id"):
        discard([1.5], "stale")  # type: ignore[list-item]


def test_discard_with_efficiency_off_emits_nothing(run_dir) -> None:  # type: ignore[no-untyped-def]
    with capture_telemetry(run_dir=run_dir, span_groups=("training",)) as cap:
        discard(["g1"], "stale")
    assert "rl.discard" not in cap.span_names()


def test_tagged_work_and_a_later_discard_give_wasted_seconds(capture: Capture) -> None:
    """End to end in one process: the real helpers, the real store, the analysis."""
    from rlsight import step_span

    with step_span(1):
        with span(RL.GENERATION, "rl.test.generate", group_id="g1"):
            pass
    with step_span(2):
        discard(["g1"], "stale")
    capture.runtime.shutdown()
    report = analyze_spans(read_spans(capture.run_dir).spans)
    (call,) = report.wasted.discarded
    assert call.step == 2 and call.groups_found == 1 and call.work_ns > 0
    assert report.wasted.by_step_ns[1] == call.work_ns
