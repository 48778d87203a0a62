"""The report data model: its invariant guard and its JSON round trip."""

from __future__ import annotations

import json

import pytest
from _build import RunBuilder, analyze

from rlsight.analysis import SCHEMA_VERSION, Buckets, RunReport


def test_buckets_refuse_parts_that_do_not_add_up_to_the_wall():
    with pytest.raises(ValueError, match="does not add up"):
        Buckets(productive_ns=5, overhead_ns=1, idle_ns=0, wasted_ns=0, unattributed_ns=3, wall_ns=10)


def test_buckets_refuse_a_negative_part():
    with pytest.raises(ValueError, match="does not add up"):
        Buckets(productive_ns=11, overhead_ns=0, idle_ns=0, wasted_ns=0, unattributed_ns=-1, wall_ns=10)


def _report(run: RunBuilder) -> RunReport:
    d = run.process()
    d.span("rl.setup.ray", 0, 1, group="setup")
    step = d.step(1, 1, 11)
    d.span("train", 1, 9, parent=step, bucket="productive")
    for rank in range(3):
        run.process("policy", rank, devices=2).span("train", 1, 4 + 3 * (rank == 2), bucket="productive")
    return analyze(run)


def test_the_json_document_carries_the_schema_version(run: RunBuilder):
    doc = _report(run).to_dict()
    assert doc["schema_version"] == SCHEMA_VERSION
    json.dumps(doc, allow_nan=False)


def test_a_report_survives_a_json_round_trip(run: RunBuilder):
    report = _report(run)
    again = RunReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report


def test_from_dict_rejects_another_schema_version(run: RunBuilder):
    doc = _report(run).to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="schema_version"):
        RunReport.from_dict(doc)
