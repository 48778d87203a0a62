"""The processes an error message names by pid: only where the pid (and its node) is the run's."""

from __future__ import annotations

import dataclasses

import pytest
from _build import RunBuilder

_TASK_ERROR = ("RayTaskError(ValueError): ray::Reward.score() (pid=4242, ip=10.0.0.9, actor_id=ab12)\n"
               "ValueError: bad reward")
_ACTOR_DIED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: Policy\n"
               "\tactor_id: ab12\n\tpid: 4242\n\tname: policy-0\n\tnamespace: rl\n\tip: 10.0.0.9\n")


def _named(run: RunBuilder, tmp_path, message: str, **policy_resource) -> list[str]:
    from rlsight.analysis import analyze_run

    d = run.process(**{"host.name": "head"})
    policy = run.process("policy", 0, pid=4242, **{"host.name": "node-a", **policy_resource})
    job = d.span("rl.job", 0, 3, group="job", status=2)
    d.spans[d.spans.index(job.record)] = dataclasses.replace(job.record, status_message=message)
    step = d.step(1, 0, 2, parent=job)
    policy.span("rl.train.policy", 0, 1, parent=step, bucket="productive")
    error = analyze_run(run.write(tmp_path / "run")).postmortem.job_error
    assert error.named_pids == ([4242] if error.named_processes else [])
    return error.named_processes


@pytest.mark.parametrize("message", [_TASK_ERROR, _ACTOR_DIED])
def test_a_pid_on_another_node_is_not_the_runs_process_with_that_pid(run: RunBuilder, tmp_path, message):
    """Review: a task that raised on node 10.0.0.9 with pid 4242 read 'pid 4242 is policy/0',
    the run's only pid 4242, which ran on node-a (a pid number is per host)."""
    assert _named(run, tmp_path, message) == []


@pytest.mark.parametrize("message", [_TASK_ERROR, _ACTOR_DIED])
def test_a_pid_whose_node_is_the_processs_address_is_named(run: RunBuilder, tmp_path, message):
    assert _named(run, tmp_path, message, **{"host.ip": ["10.0.0.9"]}) == ["policy/0"]
    assert _named(RunBuilder(), tmp_path / "b", message, **{"host.name": "10.0.0.9"}) == ["policy/0"]


def test_a_pid_without_a_node_is_named_by_pid_alone(run: RunBuilder, tmp_path):
    assert _named(run, tmp_path, "The actor died unexpectedly.\n\tclass_name: Policy\n\tpid: 4242\n") == [
        "policy/0"]
