"""The demo trainer's logged scalars, declared as a metric group so the tee records them.

The driver logs one dict of scalars per step, the way a trainer logs to its tracker; the
keys below are the ones it builds (``"train/loss"`` in the policy worker's result,
``"rollout/reward_mean"`` in the driver). ``tee_step_metrics`` records every declared key
as an OpenTelemetry metric with ``rl.step``. ``val/reward_mean`` exists only on validation
steps (and the ``buffer/*`` keys only in async runs): otherwise the point is left out and
counted on ``rl.metrics.skipped``, never recorded as a 0.
"""

from __future__ import annotations

from typing import Final

from rlsight import MetricSpec, register_metric_group

__all__ = ["DEMO_METRICS", "SPECS"]

#: The metric group's name.
DEMO_METRICS: Final = "rl_demo"

SPECS: Final = (
    MetricSpec("rl_demo.rollout.reward", "rollout/reward_mean", "gauge", "1",
               "Mean environment reward of the step's completions."),
    MetricSpec("rl_demo.rollout.tokens", "rollout/generated_tokens", "counter", "{token}",
               "Tokens generated for the step's rollout."),
    MetricSpec("rl_demo.train.loss", "train/loss", "gauge", "1",
               "GRPO policy-gradient loss."),
    MetricSpec("rl_demo.train.kl", "train/kl", "gauge", "1",
               "KL divergence from the reference policy, per token (k3 estimator)."),
    MetricSpec("rl_demo.train.grad_norm", "train/grad_norm", "gauge", "1",
               "L2 norm of the policy gradient before the optimizer step."),
    MetricSpec("rl_demo.validation.reward", "val/reward_mean", "gauge", "1",
               "Mean reward of greedy completions on the validation prompts."),
    MetricSpec("rl_demo.validation.tokens", "val/generated_tokens", "counter", "{token}",
               "Tokens generated for the step's validation pass."),
    MetricSpec("rl_demo.reward.env_failures", "reward/env_failures", "counter", "{request}",
               "Environment requests of the step's batch that failed and were retried."),
    MetricSpec("rl_demo.buffer.evicted_groups", "buffer/evicted_groups", "counter", "{group}",
               "Async: GRPO groups evicted from the replay buffer as too stale this step."),
    MetricSpec("rl_demo.buffer.staleness", "buffer/staleness", "gauge", "{version}",
               "Async: mean weights versions behind of the groups trained on this step."),
)

register_metric_group(DEMO_METRICS, SPECS)
