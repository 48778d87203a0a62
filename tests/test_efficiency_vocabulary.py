"""The efficiency vocabulary in full: unbucketed categories, the measurement attribute, reported seconds."""

from __future__ import annotations

import pytest

from rlsight import (
    RlsightWarning,
    declare_efficiency_categories,
    efficiency_span,
    record_efficiency_seconds,
    step_span,
    tee_step_metrics,
)
from rlsight.testing import Capture


def _efficiency_points(capture: Capture) -> dict[tuple[str, str], float]:
    return {
        (str(p.attributes["rl.efficiency.category"]), str(p.attributes["rl.efficiency.measurement"])):
            float(p.value or 0.0)
        for p in capture.metrics()
        if p.name == "rl.efficiency.seconds"
    }


class TestUnbucketedCategories:
    def test_a_collector_loop_span_is_measured_but_claims_no_bucket(self, capture: Capture) -> None:
        with efficiency_span("collector/loop"):
            pass
        (recorded,) = capture.spans()
        assert recorded.name == "rl.efficiency.collector.loop"
        assert recorded.attributes is not None
        assert "rl.bucket" not in recorded.attributes
        assert recorded.attributes["rl.efficiency.category"] == "collector/loop"
        assert recorded.attributes["rl.efficiency.measurement"] == "span"
        assert set(capture.runtime.take_efficiency_seconds()) == {"collector/loop"}

    def test_init_total_is_declared(self, capture: Capture) -> None:
        with efficiency_span("init/total"):
            pass
        assert capture.span_names() == ["rl.efficiency.init.total"]

    def test_a_bucketed_span_says_it_was_measured_by_a_span(self, capture: Capture) -> None:
        with efficiency_span("idle/barrier"):
            pass
        (recorded,) = capture.spans()
        assert recorded.attributes is not None
        assert recorded.attributes["rl.bucket"] == "idle"
        assert recorded.attributes["rl.efficiency.measurement"] == "span"

    def test_an_unbucketed_category_may_not_borrow_a_bucket_prefix(self) -> None:
        with pytest.raises(ValueError, match="drop bucketed=False"):
            declare_efficiency_categories("idle/poll", bucketed=False)

    def test_a_free_prefix_needs_bucketed_false(self) -> None:
        with pytest.raises(ValueError, match="bucketed=False"):
            declare_efficiency_categories("collector/drain")


class TestReportedSeconds:
    def test_reported_seconds_join_the_step_with_their_measurement(self, capture: Capture) -> None:
        with step_span(1):
            with efficiency_span("idle/barrier"):
                pass
            record_efficiency_seconds("idle/barrier", 2.5)
            record_efficiency_seconds("init/total", 40.0)
        tee_step_metrics(1, {}, denominator_s=10.0)
        points = _efficiency_points(capture)
        assert points[("idle/barrier", "reported")] == 2.5
        assert points[("init/total", "reported")] == 40.0
        assert ("idle/barrier", "span") in points
        assert capture.span_names() == ["rl.efficiency.idle.barrier", "rl.step"]  # no span made

    def test_an_undeclared_category_is_skipped_with_a_warning(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="never declared"):
            record_efficiency_seconds("idle/coffee", 1.0)
        assert capture.runtime.take_efficiency_seconds() == {}

    @pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf")])
    def test_seconds_that_are_not_a_duration_are_skipped(self, capture: Capture, seconds: float) -> None:
        with pytest.warns(RlsightWarning, match="finite number >= 0"):
            record_efficiency_seconds("idle/barrier", seconds)
        assert capture.runtime.take_efficiency_seconds() == {}

    def test_without_telemetry_it_does_nothing(self) -> None:
        record_efficiency_seconds("idle/barrier", 1.0)


class TestAnUnusableCategoryAtTheEmitSite:
    """A typo at an emit site warns and skips (telemetry never kills the run); the warning's
    fix must be one that works: declaring a category that is not `<prefix>/<reason>` raises."""

    @pytest.mark.parametrize("category", ["buffer_starvation", "idle/", "/wait", "idle/a/b"])
    @pytest.mark.parametrize("emit", ["span", "seconds"])
    def test_a_malformed_category_is_named_as_one_not_sent_to_declare(
            self, capture: Capture, category: str, emit: str) -> None:
        with pytest.warns(RlsightWarning) as caught:
            if emit == "span":
                with efficiency_span(category):
                    pass
            else:
                record_efficiency_seconds(category, 1.0)
        [message] = [str(w.message) for w in caught]
        assert f"{category!r} is not an efficiency category" in message
        assert "'<bucket>/<reason>'" in message and "declare_efficiency_categories" not in message
        assert not capture.spans()
        with pytest.raises(ValueError):
            declare_efficiency_categories(category)

    def test_a_prefix_that_is_no_bucket_is_told_to_declare_it_unbucketed(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match=r"declare_efficiency_categories\('busy/x', bucketed=False\)"):
            with efficiency_span("busy/x"):
                pass

    def test_a_well_formed_undeclared_category_is_told_to_declare_it(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match=r"call declare_efficiency_categories\('idle/typo'\) at"):
            with efficiency_span("idle/typo"):
                pass


def test_the_reports_lost_work_span_is_a_declared_category() -> None:
    """Review: the report's own rl.efficiency.wasted.lost_worker spans had no declared category,
    so `rlsight check` and span-groups.md's list did not know them."""
    from rlsight import declared_efficiency_categories
    from rlsight._semconv import EFFICIENCY_SPAN_PREFIX
    from rlsight.analysis.live import LOST_WORK_SPAN

    assert LOST_WORK_SPAN == EFFICIENCY_SPAN_PREFIX + "wasted.lost_worker"
    assert "wasted/lost_worker" in declared_efficiency_categories()
