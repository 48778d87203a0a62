"""Span volume per group per step and the per_step-scales-with-prompts flag."""

from __future__ import annotations

from _build import RunBuilder, analyze


def _run(run: RunBuilder, prompts: list[int], *, record_prompts: bool = True,
         leaky: bool = True) -> RunBuilder:
    """Per step: one training span, one per_prompt span per prompt, and (leaky) one
    data_plane span per 4 prompts: a per_step group whose volume follows prompts."""
    d = run.process()
    for n, p in enumerate(prompts):
        attrs = {"rl.prompts": p} if record_prompts else {}
        step = d.step(n, 10 * n, 10 * n + 10, **attrs)
        d.span("train", 10 * n, 10 * n + 1, parent=step, bucket="productive")
        for _i in range(p):
            d.span("rl.env.request", 10 * n + 1, 10 * n + 2, parent=step, group="per_prompt")
        for _i in range(p // 4 if leaky else 1):
            d.span("rl.data_plane.put", 10 * n + 2, 10 * n + 3, parent=step, bucket="overhead",
                   group="data_plane")
    return run


def _groups(report):
    return {g.group: g for g in report.volume.groups}


def test_counts_spans_per_group_per_step(run: RunBuilder):
    groups = _groups(analyze(_run(run, [8, 16, 32])))
    assert groups["per_prompt"].per_step == [8, 16, 32]
    assert groups["training"].per_step == [1, 1, 1] and groups["training"].flat
    assert groups["step"].per_step == [1, 1, 1]


def test_a_per_step_group_that_scales_with_prompts_is_flagged(run: RunBuilder):
    report = analyze(_run(run, [8, 16, 32]))
    groups = _groups(report)
    assert report.volume.prompt_signal == "rl.prompts"
    assert groups["data_plane"].scales_with_prompts and groups["data_plane"].flagged
    assert groups["per_prompt"].scales_with_prompts and not groups["per_prompt"].flagged
    assert not groups["training"].scales_with_prompts and not groups["training"].flagged


def test_per_prompt_span_counts_stand_in_for_prompts(run: RunBuilder):
    report = analyze(_run(run, [8, 16, 32], record_prompts=False))
    assert report.volume.prompt_signal == "per_prompt spans"
    assert report.volume.prompts_per_step == [8.0, 16.0, 32.0]
    assert _groups(report)["data_plane"].flagged


def test_constant_prompts_give_no_verdict(run: RunBuilder):
    """Nothing varies, so nothing can be told apart: None, never a false alarm."""
    groups = _groups(analyze(_run(run, [16, 16, 16])))
    assert groups["data_plane"].scales_with_prompts is None and not groups["data_plane"].flagged


def test_a_fixed_handful_per_step_is_not_flagged(run: RunBuilder):
    groups = _groups(analyze(_run(run, [8, 16, 32], leaky=False)))
    assert groups["data_plane"].flat and not groups["data_plane"].flagged


def test_groups_this_process_does_not_know_are_never_flagged(run: RunBuilder):
    report = analyze(_run(run, [8, 16, 32]), per_step={"training": True})
    data_plane = _groups(report)["data_plane"]
    assert data_plane.in_per_step is None and data_plane.scales_with_prompts
    assert not data_plane.flagged


def test_spans_outside_steps_are_counted_apart(run: RunBuilder):
    d = run.process()
    d.span("rl.setup.ray", 0, 1, group="setup")
    d.step(1, 2, 3)
    setup = _groups(analyze(run))["setup"]
    assert (setup.spans, setup.outside_steps, setup.per_step) == (1, 1, [0])
