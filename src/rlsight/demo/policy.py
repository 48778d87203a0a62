"""The demo's model: a bigram policy over 16 tokens, trained with GRPO in a few lines of numpy.

Small enough to run in milliseconds on a CPU, real enough that every phase of a GRPO step
does actual work: the generation worker samples completions, the environment scores them,
the policy worker computes reference log-probabilities and takes a policy-gradient step with
Adam, and the new weights are pushed back to the generation worker.

The task: starting from a prompt token, count upwards (``3 -> 4 -> 5 ...``, wrapping from 15
to 1). Token 0 ends a completion. A completion's reward is the share of its tokens that
continue the count, so the mean reward rises as the policy learns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EOS",
    "MAX_TOKENS",
    "VOCAB",
    "Adam",
    "Rollout",
    "TrainStats",
    "count_up_reward",
    "group_advantages",
    "init_weights",
    "policy_gradient",
    "sample",
    "token_logprobs",
]

VOCAB: Final = 16
#: Ends a completion.
EOS: Final = 0
#: Longest completion.
MAX_TOKENS: Final = 8

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Mask = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Rollout:
    """Sampled completions: one row per completion.

    Attributes:
        prompts: The start token of each completion, shape ``(n,)``.
        tokens: Generated tokens, shape ``(n, MAX_TOKENS)``; after an EOS the row is EOS.
        mask: Which generated positions are real (up to and including the EOS).
    """

    prompts: I64
    tokens: I64
    mask: Mask

    @property
    def lengths(self) -> I64:
        """Generated tokens per completion (the EOS included)."""
        return np.asarray(self.mask.sum(axis=1), dtype=np.int64)

    @property
    def stopped(self) -> Mask:
        """Completions that ended with EOS (vLLM's finish reason ``stop``; else ``length``)."""
        return np.asarray(((self.tokens == EOS) & self.mask).any(axis=1), dtype=np.bool_)


@dataclass(frozen=True, slots=True)
class TrainStats:
    """What one policy-gradient step measured."""

    loss: float
    kl: float
    grad_norm: float


def init_weights(seed: int) -> F64:
    """Bigram logits, ``weights[prev, next]``: small random values, the same for one seed."""
    return np.random.default_rng(seed).normal(0.0, 0.1, size=(VOCAB, VOCAB))


def _softmax(logits: F64) -> F64:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True))


def sample(weights: F64, prompts: I64, rng: np.random.Generator, *, greedy: bool = False) -> Rollout:
    """Sample one completion per prompt, token by token, until EOS or ``MAX_TOKENS``."""
    n = len(prompts)
    tokens = np.full((n, MAX_TOKENS), EOS, dtype=np.int64)
    mask = np.zeros((n, MAX_TOKENS), dtype=np.bool_)
    prev = prompts.astype(np.int64)
    alive = np.ones(n, dtype=np.bool_)
    for t in range(MAX_TOKENS):
        probs = _softmax(weights[prev])
        if greedy:
            nxt = probs.argmax(axis=1)
        else:
            nxt = (probs.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(max=VOCAB - 1)
        tokens[:, t] = np.where(alive, nxt, EOS)
        mask[:, t] = alive
        alive &= nxt != EOS
        prev = np.where(alive, nxt, prev)
    return Rollout(prompts.astype(np.int64), tokens, mask)


def count_up_reward(prompt: int, completion: list[int]) -> float:
    """Share of ``MAX_TOKENS`` positions that continue the count from ``prompt``.

    Plain Python on purpose: the environment service scores with it and needs no numpy.
    """
    prev, hits = prompt, 0
    for token in completion:
        if token == EOS:
            break
        if token == prev % (VOCAB - 1) + 1:
            hits += 1
        prev = token
    return hits / MAX_TOKENS


def group_advantages(rewards: F64, group_size: int) -> F64:
    """GRPO's advantage: each reward relative to its prompt's group (mean 0, unit spread)."""
    groups = rewards.reshape(-1, group_size)
    centred = groups - groups.mean(axis=1, keepdims=True)
    return np.asarray((centred / (groups.std(axis=1, keepdims=True) + 1e-6)).reshape(-1))


def _transitions(rollout: Rollout) -> tuple[I64, I64, Mask]:
    """``(prev, next, mask)`` for every generated position."""
    prev = np.concatenate([rollout.prompts[:, None], rollout.tokens[:, :-1]], axis=1)
    return prev, rollout.tokens, rollout.mask


def token_logprobs(weights: F64, rollout: Rollout) -> F64:
    """Log-probability of each generated token under ``weights`` (0 where masked)."""
    prev, nxt, mask = _transitions(rollout)
    logits = weights[prev]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, nxt[..., None], axis=-1)[..., 0]
    return np.asarray(np.where(mask, picked, 0.0))


def policy_gradient(
    weights: F64, rollout: Rollout, advantages: F64, reference_logprobs: F64
) -> tuple[F64, TrainStats]:
    """The gradient of GRPO's policy loss ``-mean(advantage * log p(completion))``.

    The KL to the reference policy is measured (k3 estimator, per token) and reported, not
    optimised: a zero KL coefficient, as many GRPO recipes use.
    """
    prev, nxt, mask = _transitions(rollout)
    logprobs = token_logprobs(weights, rollout)
    n = len(advantages)
    loss = float(-(advantages * logprobs.sum(axis=1)).mean())
    log_ratio = np.where(mask, reference_logprobs - logprobs, 0.0)
    kl = float((np.exp(log_ratio) - log_ratio - 1.0).sum() / max(1, int(mask.sum())))
    # d(-a * log softmax(W[s])[t]) / dW[s] = -a * (onehot(t) - softmax(W[s]))
    coef = np.where(mask, -advantages[:, None] / n, 0.0)
    grad = np.zeros_like(weights)
    np.add.at(grad, prev.reshape(-1), -coef.reshape(-1, 1) * _softmax(weights[prev]).reshape(-1, VOCAB))
    np.add.at(grad, (prev.reshape(-1), nxt.reshape(-1)), coef.reshape(-1))
    return grad, TrainStats(loss=loss, kl=kl, grad_norm=float(np.linalg.norm(grad)))


class Adam:
    """Adam over one weight array (the optimizer state a checkpoint would hold)."""

    def __init__(self, shape: tuple[int, ...], *, lr: float = 0.2) -> None:
        self.lr = lr
        self.steps = 0
        self.m: F64 = np.zeros(shape)
        self.v: F64 = np.zeros(shape)

    def step(self, weights: F64, grad: F64) -> F64:
        """The updated weights; the moments are kept for the next step."""
        b1, b2 = 0.9, 0.999
        self.steps += 1
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad * grad
        m_hat = self.m / (1 - b1**self.steps)
        v_hat = self.v / (1 - b2**self.steps)
        return np.asarray(weights - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8))
