"""The names of rlsight's own span groups (the ``rl`` namespace), and which are in ``per_step``.

Group names are wire vocabulary: they travel as ``rl.span_group`` and key the volume table of
a report. They sit here, apart from the group registry in :mod:`rlsight.groups`, so that the
reading side (the store, the analysis) can name them without importing the registry: what
a *run* registered comes from its ``manifest.json`` catalog, never from the reader's imports.
:mod:`rlsight.groups` registers these names (with descriptions and buckets) at import.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NOT_PER_STEP", "RL", "rl_group_names"]


class RL:
    """The ``rl`` namespace's span groups, as constants so call sites stay greppable."""

    JOB: Final = "job"
    STEP: Final = "step"
    STARTUP: Final = "startup"
    SETUP: Final = "setup"
    ROLLOUT: Final = "rollout"
    GENERATION: Final = "generation"
    REWARD: Final = "reward"
    LOGPROB: Final = "logprob"
    TRAINING: Final = "training"
    OPTIMIZER: Final = "optimizer"
    REFIT: Final = "refit"
    CHECKPOINT: Final = "checkpoint"
    VALIDATION: Final = "validation"
    DATA_PLANE: Final = "data_plane"
    EFFICIENCY: Final = "efficiency"
    PER_PROMPT: Final = "per_prompt"
    ENGINE: Final = "engine"


#: The ``rl`` groups the ``per_step`` preset leaves out: per-prompt volume scales with the
#: dataset, and an engine's own per-request spans are a debugging tool.
NOT_PER_STEP: Final = frozenset({RL.PER_PROMPT, RL.ENGINE})


def rl_group_names() -> tuple[str, ...]:
    """Every ``rl`` group name, in declaration order."""
    return tuple(v for k, v in vars(RL).items() if k.isupper() and isinstance(v, str))
