"""rlsight.logs: records carry trace, span and step; ERROR records inside a span become its events."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from rlsight import RL, span, step_span
from rlsight.logs import LOG_EVENT, instrument_logging, uninstrument_logging
from rlsight.testing import Capture

FORMAT = "%(levelname)s trace=%(trace_id)s span=%(span_id)s step=%(rl_step)s %(message)s"


@pytest.fixture
def log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through a handler with the documented format; the bridge installed."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger("rlsight.test.logs")
    logger.addHandler(handler)
    logger.propagate = False
    instrument_logging()
    yield logger, out
    uninstrument_logging()
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


def test_a_record_carries_the_ids_of_its_span_and_the_step(
    capture: Capture, log: tuple[logging.Logger, io.StringIO]
) -> None:
    logger, out = log
    with step_span(7), span(RL.TRAINING, "rl.train.policy") as s:
        logger.warning("loss spiked")
    ctx = s.get_span_context()
    assert out.getvalue() == f"WARNING trace={ctx.trace_id:032x} span={ctx.span_id:016x} step=7 loss spiked\n"


def test_consecutive_records_in_different_spans_carry_their_own_span(
    capture: Capture, log: tuple[logging.Logger, io.StringIO]
) -> None:
    logger, out = log
    ids = []
    with step_span(1):  # one trace: only the span id tells the records apart
        for name in ("rl.train.policy", "rl.train.optimizer_step"):
            with span(RL.TRAINING, name) as s:
                logger.warning("in %s", name)
                ids.append(f"{s.get_span_context().span_id:016x}")
    logged = [line.split()[2].removeprefix("span=") for line in out.getvalue().splitlines()]
    assert logged == ids and ids[0] != ids[1]


def test_outside_any_span_the_fields_are_empty_and_formats_still_work(
    log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = log
    logger.info("no telemetry")
    logger.setLevel(logging.INFO)
    logger.info("no telemetry")
    assert out.getvalue() == "INFO trace= span= step=None no telemetry\n"


def test_an_error_inside_a_span_becomes_an_event_on_it(
    capture: Capture, log: tuple[logging.Logger, io.StringIO]
) -> None:
    logger, _ = log
    with span(RL.REWARD, "rl.reward.score"):
        logger.warning("not an event")
        try:
            raise ValueError("bad reward")
        except ValueError:
            logger.exception("scoring failed for %d prompts", 3)
    (recorded,) = capture.spans()
    (event,) = recorded.events
    assert event.name == LOG_EVENT
    assert event.attributes is not None
    assert dict(event.attributes) | {"code.lineno": 0} == {
        "log.severity": "ERROR",
        "log.logger": "rlsight.test.logs",
        "log.message": "scoring failed for 3 prompts",
        "code.filepath": __file__,
        "code.lineno": 0,
        "exception.type": "ValueError",
        "exception.message": "bad reward",
    }


def test_secrets_in_an_error_log_are_scrubbed_on_the_span_not_in_the_log(
    capture: Capture, log: tuple[logging.Logger, io.StringIO]
) -> None:
    """The event reached the store with api_key=... and hf_... in clear (reviewer r1)."""
    logger, out = log
    with span(RL.REWARD, "rl.reward.score"):
        try:
            raise RuntimeError("auth failed for hf_abcdefghijklmnopqrstuvwxyz")
        except RuntimeError:
            logger.exception("reward server refused api_key=sk-abcdefghijklmnopqrstuvwx")
    (recorded,) = capture.spans()
    attrs = dict(recorded.events[0].attributes or {})
    assert "sk-abc" not in str(attrs["log.message"]) and "api_key=" in str(attrs["log.message"])
    assert "hf_abc" not in str(attrs["exception.message"])
    assert "api_key=sk-abcdefghijklmnopqrstuvwx" in out.getvalue()  # your own log is untouched


def test_a_disabled_span_gets_no_event_and_logging_still_works(
    log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = log
    with span(RL.REWARD, "rl.reward.score"):
        logger.error("no telemetry, still logged")
    assert out.getvalue().endswith("still logged\n")


def test_instrumenting_twice_wraps_once_and_uninstrument_restores() -> None:
    """Whatever factory was installed before (Ray installs its own) comes back."""
    before = logging.getLogRecordFactory()
    instrument_logging()
    wrapped = logging.getLogRecordFactory()
    assert wrapped is not before
    instrument_logging()
    assert logging.getLogRecordFactory() is wrapped
    uninstrument_logging()
    assert logging.getLogRecordFactory() is before
