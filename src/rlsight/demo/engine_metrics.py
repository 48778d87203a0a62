"""The generation worker's Prometheus series, named as vLLM names them.

A real generation worker runs vLLM, which counts tokens and finished requests in
``prometheus_client`` series (``vllm:generation_tokens_total``...). The demo's numpy sampler
keeps the same series in a registry of its own, so the worker reads them with
:meth:`rlsight.engines.EngineMetricsReader.from_registry` exactly as it would read vLLM's,
and records per-step deltas with :func:`rlsight.engines.record_engine_deltas`.
"""

from __future__ import annotations

from typing import Any, Final

from rlsight.demo.policy import MAX_TOKENS, Rollout

__all__ = ["MODEL_NAME", "VllmStyleMetrics"]

#: The ``model_name`` label vLLM puts on every series; the reader sums over it.
MODEL_NAME: Final = "bigram-16"
_LENGTH_BUCKETS: Final = tuple(float(b) for b in range(1, MAX_TOKENS + 1))


class VllmStyleMetrics:
    """Cumulative token and request series in a private ``prometheus_client`` registry."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry: Any = CollectorRegistry()
        labels = ["model_name"]
        self._prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=self.registry
        )
        self._generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", labels, registry=self.registry
        )
        self._success = Counter(
            "vllm:request_success", "Finished requests.", [*labels, "finished_reason"],
            registry=self.registry,
        )
        self._prompt_length = Histogram(
            "vllm:request_prompt_tokens", "Prompt tokens per request.", labels,
            buckets=(1.0, 2.0, 4.0), registry=self.registry,
        )
        self._generation_length = Histogram(
            "vllm:request_generation_tokens", "Generated tokens per request.", labels,
            buckets=_LENGTH_BUCKETS, registry=self.registry,
        )

    def observe(self, rollout: Rollout) -> None:
        """Count one batch of finished requests (each prompt is one token long)."""
        lengths = [int(n) for n in rollout.lengths]
        stopped = rollout.stopped
        self._prompt_tokens.labels(MODEL_NAME).inc(len(lengths))
        self._generation_tokens.labels(MODEL_NAME).inc(sum(lengths))
        for length, stop in zip(lengths, stopped, strict=True):
            self._success.labels(MODEL_NAME, "stop" if stop else "length").inc()
            self._prompt_length.labels(MODEL_NAME).observe(1)
            self._generation_length.labels(MODEL_NAME).observe(length)
