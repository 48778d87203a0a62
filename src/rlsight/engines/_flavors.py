"""Engine flavors: where each vocabulary name is found among one engine's Prometheus series."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from rlsight.engines._vocabulary import FINISH_REASON, SPECS, base_name

__all__ = ["FLAVORS", "EngineFlavor", "Source", "parse_candidate"]


class Source(NamedTuple):
    """One candidate of a flavor's source list: the vocabulary name it feeds, its preference,
    and the label values it is restricted to (``None``: every sample)."""

    series: str
    rank: int
    label: str | None
    values: frozenset[str]


def parse_candidate(series: str, rank: int, candidate: str) -> tuple[str, Source]:
    name, brace, selector = candidate.partition("{")
    if not brace:
        return base_name(name), Source(series, rank, None, frozenset())
    label, eq, values = selector.rstrip("}").partition("=")
    if not eq or not label or not values:
        raise ValueError(
            f"engine series {candidate!r} (for {series}): a selector is written "
            "name{label=value|other}"
        )
    return base_name(name), Source(series, rank, label.strip(), frozenset(values.split("|")))


@dataclass(frozen=True, slots=True)
class EngineFlavor:
    """How one engine names the vocabulary's series.

    Args:
        name: The flavor's name (``vllm``, ``sglang``, or your own).
        sources: Vocabulary name -> the engine's series names, preferred first. Write them as
            the engine exposes them (``vllm:prompt_tokens_total``); a counter's ``_total``
            suffix is optional when matching, and ``:`` matches ``_`` (Ray's sanitised names).
            ``name{label=a|b}`` reads only the samples whose ``label`` is ``a`` or ``b``. The
            first name present in a read is used, so a series exposed under both its old and
            its new name is counted once.
        labels: Engine label -> attribute key kept on the delta (``finished_reason`` ->
            ``rl.engine.finish_reason``). Every other label (model name, engine index) is
            summed over.

    Raises:
        ValueError: A source names a series outside :data:`ENGINE_SERIES`, or lists no names.
    """

    name: str
    sources: Mapping[str, tuple[str, ...]]
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for series, candidates in self.sources.items():
            if series not in SPECS:
                raise ValueError(
                    f"engine flavor {self.name!r} maps unknown series {series!r}; "
                    f"the vocabulary is: {', '.join(SPECS)}"
                )
            if not candidates:
                raise ValueError(
                    f"engine flavor {self.name!r} lists no engine series for {series!r}; "
                    "give at least one name or leave the series out"
                )
            for candidate in candidates:
                parse_candidate(series, 0, candidate)


#: The built-in flavors, read from vLLM 0.33's ``vllm/v1/metrics/loggers.py`` and
#: ``vllm/v1/spec_decode/metrics.py`` and SGLang 0.5's ``python/sglang/srt/metrics/collector.py``.
#: ``:`` and ``_`` match each other, so Ray-sanitised names (``vllm_prompt_tokens_total``,
#: ``sglang_prompt_tokens_total``) are read like the originals.
FLAVORS: Final[Mapping[str, EngineFlavor]] = {
    "vllm": EngineFlavor(
        "vllm",
        {
            "rl.engine.prompt_tokens": ("vllm:prompt_tokens_total",),
            "rl.engine.generation_tokens": ("vllm:generation_tokens_total",),
            # Counts every finished request, aborted and errored ones included (by reason).
            "rl.engine.request.success": ("vllm:request_success_total",),
            "rl.engine.preemptions": ("vllm:num_preemptions_total",),
            "rl.engine.prefix_cache.hits": ("vllm:prefix_cache_hits_total",),
            "rl.engine.prefix_cache.queries": ("vllm:prefix_cache_queries_total",),
            "rl.engine.prompt_length": ("vllm:request_prompt_tokens",),
            "rl.engine.generation_length": ("vllm:request_generation_tokens",),
            "rl.engine.time_to_first_token": ("vllm:time_to_first_token_seconds",),
            "rl.engine.e2e_latency": ("vllm:e2e_request_latency_seconds",),
            "rl.engine.iteration_tokens": ("vllm:iteration_tokens_total",),
            "rl.engine.spec_decode.draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
            "rl.engine.spec_decode.accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
            "rl.engine.requests.running": ("vllm:num_requests_running",),
            "rl.engine.requests.waiting": ("vllm:num_requests_waiting",),
            "rl.engine.kv_cache.usage": ("vllm:kv_cache_usage_perc",),
        },
        {"finished_reason": FINISH_REASON},
    ),
    "sglang": EngineFlavor(
        "sglang",
        {
            # SGLang's token counters move only when a request finishes; its per-iteration
            # counter (split by mode) moves every scheduler step, so it is preferred.
            "rl.engine.prompt_tokens": (
                "sglang:realtime_tokens_total{mode=prefill_compute|prefill_cache}",
                "sglang:prompt_tokens_total"),
            "rl.engine.generation_tokens": (
                "sglang:realtime_tokens_total{mode=decode}", "sglang:generation_tokens_total"),
            # SGLang counts finished requests without a reason label.
            "rl.engine.request.success": ("sglang:num_requests_total",),
            "rl.engine.preemptions": ("sglang:num_retracted_requests_total",),
            "rl.engine.prefix_cache.hits": (
                "sglang:realtime_tokens_total{mode=prefill_cache}", "sglang:cached_tokens_total"),
            # Every prompt token is looked up in SGLang's radix cache, so queries == prompt tokens.
            "rl.engine.prefix_cache.queries": (
                "sglang:realtime_tokens_total{mode=prefill_compute|prefill_cache}",
                "sglang:prompt_tokens_total"),
            "rl.engine.prompt_length": ("sglang:prompt_tokens_histogram",),
            "rl.engine.generation_length": ("sglang:generation_tokens_histogram",),
            "rl.engine.time_to_first_token": ("sglang:time_to_first_token_seconds",),
            "rl.engine.e2e_latency": ("sglang:e2e_request_latency_seconds",),
            "rl.engine.spec_decode.acceptance_rate": ("sglang:spec_accept_rate",),
            "rl.engine.requests.running": ("sglang:num_running_reqs",),
            "rl.engine.requests.waiting": ("sglang:num_queue_reqs",),
            "rl.engine.kv_cache.usage": ("sglang:token_usage",),
        },
    ),
}
