"""The ``rl.engine.*`` vocabulary: every series an engine's counters are recorded under."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = ["ENGINE_SERIES", "FINISH_REASON", "SPECS", "EngineSeriesKind", "EngineSeriesSpec", "base_name"]

EngineSeriesKind: TypeAlias = Literal["counter", "gauge", "histogram"]

#: Attribute that carries an engine's finish reason (``stop``, ``length``, ``abort``).
FINISH_REASON: Final = "rl.engine.finish_reason"


@dataclass(frozen=True, slots=True)
class EngineSeriesSpec:
    """One name of the ``rl.engine.*`` vocabulary, as the docs table shows it.

    Args:
        name: The OTel metric name deltas are recorded under.
        kind: ``counter`` (a running total) or ``histogram`` (explicit buckets).
        unit: UCUM unit of the recorded values.
        description: What one unit of the series counts.
        attributes: Attribute keys a delta of this series may carry besides the step and
            engine name.
        aggregate: How a gauge's values on several engines behind one reader combine:
            ``sum`` (requests running) or ``max`` (KV-cache usage: the fullest engine is the
            one that preempts). Counters and histograms always sum.
    """

    name: str
    kind: EngineSeriesKind
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    aggregate: Literal["sum", "max"] = "sum"


#: The vocabulary every flavor maps onto. Order is the docs table's order.
ENGINE_SERIES: Final[tuple[EngineSeriesSpec, ...]] = (
    EngineSeriesSpec("rl.engine.prompt_tokens", "counter", "{token}",
                     "Prompt (prefill) tokens the engine processed."),
    EngineSeriesSpec("rl.engine.generation_tokens", "counter", "{token}",
                     "Tokens the engine generated."),
    EngineSeriesSpec("rl.engine.request.success", "counter", "{request}",
                     "Requests that finished, aborted and errored ones included, by finish reason "
                     "where the engine reports one.",
                     (FINISH_REASON,)),
    EngineSeriesSpec("rl.engine.preemptions", "counter", "{preemption}",
                     "Requests preempted (vLLM) or retracted (SGLang) to free KV cache."),
    EngineSeriesSpec("rl.engine.prefix_cache.hits", "counter", "{token}",
                     "Prompt tokens served from the prefix cache."),
    EngineSeriesSpec("rl.engine.prefix_cache.queries", "counter", "{token}",
                     "Prompt tokens looked up in the prefix cache (hit rate = hits / queries)."),
    EngineSeriesSpec("rl.engine.prompt_length", "histogram", "{token}",
                     "Prompt length per finished request."),
    EngineSeriesSpec("rl.engine.generation_length", "histogram", "{token}",
                     "Generated length per finished request."),
    EngineSeriesSpec("rl.engine.time_to_first_token", "histogram", "s",
                     "Time from a request's arrival to its first generated token."),
    EngineSeriesSpec("rl.engine.e2e_latency", "histogram", "s",
                     "Time from a request's arrival to its last token, per finished request."),
    EngineSeriesSpec("rl.engine.iteration_tokens", "histogram", "{token}",
                     "Tokens the engine processed per scheduler iteration (batch fill)."),
    EngineSeriesSpec("rl.engine.spec_decode.draft_tokens", "counter", "{token}",
                     "Tokens a speculative-decoding drafter proposed."),
    EngineSeriesSpec("rl.engine.spec_decode.accepted_tokens", "counter", "{token}",
                     "Proposed draft tokens the target model accepted (acceptance = accepted / draft)."),
    EngineSeriesSpec("rl.engine.spec_decode.acceptance_rate", "gauge", "1",
                     "Accepted / proposed draft tokens, as the engine last reported it.", (), "max"),
    EngineSeriesSpec("rl.engine.requests.running", "gauge", "{request}",
                     "Requests in the engine's running batch when the step's read was taken."),
    EngineSeriesSpec("rl.engine.requests.waiting", "gauge", "{request}",
                     "Requests queued, waiting for the running batch, at the step's read."),
    EngineSeriesSpec("rl.engine.kv_cache.usage", "gauge", "1",
                     "Fraction of the KV cache in use at the step's read.", (), "max"),
)
#: Vocabulary name -> its spec.
SPECS: Final = {spec.name: spec for spec in ENGINE_SERIES}


def base_name(name: str) -> str:
    """The matching key of a series name: no ``_total`` suffix, ``:`` read as ``_``."""
    name = name[: -len("_total")] if name.endswith("_total") else name
    return name.replace(":", "_")
