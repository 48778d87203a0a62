"""Inference-engine counters as per-step deltas, on one ``rl.engine.*`` vocabulary.

vLLM and SGLang expose cumulative Prometheus series (tokens, request outcomes, sequence-length
and time-to-first-token histograms, prefix-cache hits). A trainer wants what happened *during a
step*, so a reader takes a :class:`EngineSnapshot` before and after and :meth:`delta` subtracts
them. Three rules keep the numbers honest (a fake zero draws a dip that never happened):

- A counter that went down was reset (the engine restarted); its delta is the new value, since
  the restarted counter counted up from zero. Never negative; it warns once per series, and a
  histogram whose buckets decrease along ``le`` is left out of its read.
- A read that fails (the collector raises, the server stalls past the timeout, a mapped series
  has a type the flavor does not expect) gives ``None``; a delta against ``None`` is ``{}``, so
  no step is ever measured against a stale baseline.
- A series the engine does not expose is absent from the delta, not zero.

Each :class:`EngineFlavor` lists, per vocabulary name, the engine's series names in order of
preference, so a series with a better source (SGLang's per-iteration token counter before its
on-finish totals) is read from the best one present and counted once. Gauges (running and
waiting requests, KV-cache usage) are levels: a step's value is the level at its closing read.

Two sources share one code path: :meth:`EngineMetricsReader.from_registry` reads a
``prometheus_client`` registry in-process (what vLLM's own snapshot reader does) and
:meth:`EngineMetricsReader.from_url` scrapes a server's ``/metrics`` text in a daemon thread
with a deadline, so a stalled engine never stalls the step.
"""

from __future__ import annotations

import http.client
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, Protocol, TypeAlias

from rlsight._instruments import InstrumentCache
from rlsight._semconv import RUN_ID, STAGE, STEP, WORKER_GROUP
from rlsight.config import TelemetryConfig
from rlsight.errors import warn_once
from rlsight.groups import RL, is_span_group_enabled
from rlsight.runtime import active_runtime

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "ENGINE_SERIES",
    "FINISH_REASON",
    "FLAVORS",
    "EngineDeltas",
    "EngineFlavor",
    "EngineHistogram",
    "EngineMetricsReader",
    "EngineSeries",
    "EngineSeriesKind",
    "EngineSeriesSpec",
    "EngineSnapshot",
    "EngineValue",
    "SourceSeries",
    "SupportsCollect",
    "native_tracing_env",
    "record_engine_deltas",
]

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
_SPECS: Final = {spec.name: spec for spec in ENGINE_SERIES}


def _base_name(name: str) -> str:
    """The matching key of a series name: no ``_total`` suffix, ``:`` read as ``_``."""
    name = name[: -len("_total")] if name.endswith("_total") else name
    return name.replace(":", "_")


class _Source(NamedTuple):
    """One candidate of a flavor's source list: the vocabulary name it feeds, its preference,
    and the label values it is restricted to (``None``: every sample)."""

    series: str
    rank: int
    label: str | None
    values: frozenset[str]


def _parse_candidate(series: str, rank: int, candidate: str) -> tuple[str, _Source]:
    name, brace, selector = candidate.partition("{")
    if not brace:
        return _base_name(name), _Source(series, rank, None, frozenset())
    label, eq, values = selector.rstrip("}").partition("=")
    if not eq or not label or not values:
        raise ValueError(
            f"engine series {candidate!r} (for {series}): a selector is written "
            "name{label=value|other}"
        )
    return _base_name(name), _Source(series, rank, label.strip(), frozenset(values.split("|")))


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
            if series not in _SPECS:
                raise ValueError(
                    f"engine flavor {self.name!r} maps unknown series {series!r}; "
                    f"the vocabulary is: {', '.join(_SPECS)}"
                )
            if not candidates:
                raise ValueError(
                    f"engine flavor {self.name!r} lists no engine series for {series!r}; "
                    "give at least one name or leave the series out"
                )
            for candidate in candidates:
                _parse_candidate(series, 0, candidate)


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


class EngineSeries(NamedTuple):
    """Key of one delta: a vocabulary name plus its kept attributes (sorted pairs)."""

    name: str
    attributes: tuple[tuple[str, str], ...] = ()


class SourceSeries(NamedTuple):
    """Key of one snapshot value: the delta key, the engine series read, all its labels."""

    series: EngineSeries
    source: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class EngineHistogram:
    """A histogram's state: bucket counts (not cumulative), sum and count.

    ``counts`` has one entry per bound plus a last one for observations above every bound
    (OTel's explicit-bucket layout); ``counts[i]`` counts values ``<= bounds[i]`` and above
    the bound before it.
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float


EngineValue: TypeAlias = float | EngineHistogram
EngineDeltas: TypeAlias = dict[EngineSeries, EngineValue]


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Cumulative values of one read, per engine series (labels kept, nothing summed yet)."""

    values: Mapping[SourceSeries, EngineValue]


class _Sample(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...


class _Family(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def samples(self) -> Sequence[_Sample]: ...


class SupportsCollect(Protocol):
    """Anything with ``collect()`` yielding metric families, e.g. a ``CollectorRegistry``."""

    def collect(self) -> Iterable[_Family]: ...


class _ReadError(Exception):
    """A read produced data the flavor cannot map; the snapshot is dropped."""


class _Index:
    """A flavor turned into a lookup from family name to the sources it may feed."""

    __slots__ = ("by_family", "labels")

    def __init__(self, flavor: EngineFlavor) -> None:
        self.labels: Final = dict(flavor.labels)
        # One engine series may feed two vocabulary names (SGLang's prompt tokens are also
        # its prefix-cache queries).
        self.by_family: Final[dict[str, list[_Source]]] = {}
        for series, candidates in flavor.sources.items():
            for rank, candidate in enumerate(candidates):
                family, source = _parse_candidate(series, rank, candidate)
                self.by_family.setdefault(family, []).append(source)


def _selected(source: _Source, labels: Mapping[str, str]) -> bool:
    return source.label is None or labels.get(source.label) in source.values


def _build_snapshot(families: Iterable[_Family], index: _Index) -> tuple[EngineSnapshot, bool]:
    """The snapshot, and whether any of the flavor's families was exposed at all (a family
    with no samples yet counts: an idle engine has not labelled its counters)."""
    chosen: dict[str, tuple[_Source, _Family]] = {}
    exposed = False
    for family in families:
        sources = index.by_family.get(_base_name(family.name), ())
        exposed = exposed or bool(sources)
        for source in sources:
            if source.label is not None and not any(_selected(source, x.labels) for x in family.samples):
                continue  # a selector that matches nothing here leaves the next candidate a chance
            best = chosen.get(source.series)
            if best is None or source.rank < best[0].rank:
                chosen[source.series] = (source, family)
    values: dict[SourceSeries, EngineValue] = {}
    for series, (source, family) in chosen.items():
        kind = _SPECS[series].kind
        if family.type != kind:
            raise _ReadError(
                f"engine series {family.name!r} (for {series}) has type {family.type!r}, "
                f"expected {kind!r}"
            )
        if kind == "histogram":
            _read_histogram(series, family, index, values)
        else:
            _read_scalar(series, source, family, index, values)
    return EngineSnapshot(values), exposed


def _split_labels(
    series: str, labels: Mapping[str, str], index: _Index
) -> tuple[EngineSeries, tuple[tuple[str, str], ...]]:
    kept = tuple(sorted((index.labels[k], v) for k, v in labels.items() if k in index.labels))
    return EngineSeries(series, kept), tuple(sorted(labels.items()))


def _read_scalar(
    series: str, source: _Source, family: _Family, index: _Index, out: dict[SourceSeries, EngineValue]
) -> None:
    counter = family.type == "counter"
    for sample in family.samples:
        if counter and not sample.name.endswith("_total"):
            continue  # _created timestamps
        if math.isnan(sample.value) or not _selected(source, sample.labels):
            continue  # a NaN value is broken, so leave it out
        if counter and sample.value < 0:
            warn_once(
                f"rlsight.engines.negative:{family.name}",
                f"engine counter {family.name!r}{dict(sample.labels)} is negative "
                f"({sample.value}); a counter only counts up, so the sample is left out",
                stacklevel=5,
            )
            continue
        key, labels = _split_labels(series, sample.labels, index)
        out[SourceSeries(key, family.name, labels)] = float(sample.value)


def _read_histogram(
    series: str, family: _Family, index: _Index, out: dict[SourceSeries, EngineValue]
) -> None:
    buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    counts: dict[tuple[tuple[str, str], ...], float] = {}
    for sample in family.samples:
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        if sample.name.endswith("_bucket"):
            buckets.setdefault(labels, []).append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            sums[labels] = sample.value
        elif sample.name.endswith("_count"):
            counts[labels] = sample.value
    for labels, cumulative in buckets.items():
        cumulative.sort()
        if not cumulative or cumulative[-1][0] != math.inf:
            raise _ReadError(f"histogram {family.name!r}{dict(labels)} has no +Inf bucket")
        bounds = tuple(le for le, _ in cumulative[:-1])
        per_bucket = tuple(
            c - (cumulative[i - 1][1] if i else 0.0) for i, (_, c) in enumerate(cumulative)
        )
        if any(c < 0 or math.isnan(c) for c in per_bucket):
            # Cumulative bucket counts that go down along ``le`` are not a histogram; leave
            # this one out of the read, so the next read counts it from zero like a reset.
            warn_once(
                f"rlsight.engines.non_monotonic:{family.name}",
                f"engine histogram {family.name!r}{dict(labels)} has cumulative bucket counts "
                "that decrease along le; it is left out of this read and counted as reset",
                stacklevel=5,
            )
            continue
        total = counts.get(labels, cumulative[-1][1])
        key, all_labels = _split_labels(series, dict(labels), index)
        out[SourceSeries(key, family.name, all_labels)] = EngineHistogram(
            bounds, per_bucket, sums.get(labels, math.nan), total
        )


def _warn_reset(key: SourceSeries, before: float, after: float) -> None:
    warn_once(
        f"rlsight.engines.reset:{key.source}",
        f"engine series {key.source!r} went down ({before:g} -> {after:g}): treated as a reset "
        "(the engine restarted), so this step's delta is the new value, never negative",
        stacklevel=5,
    )


def _value_delta(key: SourceSeries, before: EngineValue | None, after: EngineValue) -> EngineValue:
    if _SPECS[key.series.name].kind == "gauge":
        return after  # a gauge is a level, read when the step ends; nothing to subtract
    if isinstance(after, EngineHistogram):
        if not isinstance(before, EngineHistogram) or before.bounds != after.bounds:
            return after  # new series or re-bucketed: it counted up from zero
        if after.count < before.count or any(
            a < b for a, b in zip(after.counts, before.counts, strict=True)
        ):
            _warn_reset(key, before.count, after.count)
            return after
        return EngineHistogram(
            after.bounds,
            tuple(a - b for a, b in zip(after.counts, before.counts, strict=True)),
            after.sum - before.sum,
            after.count - before.count,
        )
    if not isinstance(before, float):
        return after  # new series: it counted from zero
    if after < before:
        _warn_reset(key, before, after)
        return after
    return after - before


def _add(spec: EngineSeriesSpec, total: EngineValue, more: EngineValue) -> EngineValue | None:
    if isinstance(total, EngineHistogram):
        if not isinstance(more, EngineHistogram) or total.bounds != more.bounds:
            return None
        return EngineHistogram(
            total.bounds,
            tuple(a + b for a, b in zip(total.counts, more.counts, strict=True)),
            total.sum + more.sum,
            total.count + more.count,
        )
    if isinstance(more, EngineHistogram):
        return None
    if spec.kind == "gauge" and spec.aggregate == "max":
        return max(total, more)
    return total + more


def _snapshot_delta(prev: EngineSnapshot | None, cur: EngineSnapshot | None) -> EngineDeltas:
    if prev is None or cur is None:
        return {}
    out: EngineDeltas = {}
    unmergeable: set[EngineSeries] = set()
    for key, value in cur.values.items():
        change = _value_delta(key, prev.values.get(key), value)
        total = out.get(key.series)
        merged = change if total is None else _add(_SPECS[key.series.name], total, change)
        if merged is None:
            unmergeable.add(key.series)
        else:
            out[key.series] = merged
    for series in unmergeable:
        # Two engines behind one reader bucket the same histogram differently: no sum of
        # them is right, so leave the series out rather than invent one.
        del out[series]
        warn_once(
            f"rlsight.engines.unmergeable:{series.name}",
            f"engine series {series.name} has different histogram buckets on different "
            "engines behind one reader; it is left out of the deltas. Read each engine with "
            "its own EngineMetricsReader to keep it",
            stacklevel=3,
        )
    return out


class EngineMetricsReader:
    """Reads one engine's cumulative series and turns them into per-step deltas.

    Build it with :meth:`from_registry` or :meth:`from_url`. Either call :meth:`snapshot`
    at both ends of a step and pass the two to :meth:`delta`, or call :meth:`read_delta`
    once per step and let the reader keep the baseline::

        reader = EngineMetricsReader.from_url("http://127.0.0.1:8000/metrics", flavor="vllm")
        reader.read_delta()                     # sets the baseline; returns {}
        for step in range(1, steps + 1):
            train_one_step()
            record_engine_deltas(step, reader.read_delta(), engine="generation/0")
    """

    __slots__ = ("_baseline", "_collect", "_index", "flavor", "source")

    def __init__(
        self,
        collect: Callable[[], Iterable[_Family]],
        *,
        flavor: str | EngineFlavor,
        source: str,
    ) -> None:
        """Use :meth:`from_registry` or :meth:`from_url`; this takes any family source.

        Args:
            collect: Returns the engine's metric families; it may raise, and a raise makes
                that read fail.
            flavor: A name from :data:`FLAVORS` or your own :class:`EngineFlavor`.
            source: Where the families come from, for warnings.

        Raises:
            ValueError: ``flavor`` names no built-in flavor.
        """
        if isinstance(flavor, str):
            if flavor not in FLAVORS:
                raise ValueError(
                    f"unknown engine flavor {flavor!r}; built-in flavors: "
                    f"{', '.join(FLAVORS)}, or pass an EngineFlavor"
                )
            flavor = FLAVORS[flavor]
        self.flavor: Final = flavor
        self.source: Final = source
        self._collect: Final = collect
        self._index: Final = _Index(flavor)
        self._baseline: EngineSnapshot | None = None

    @classmethod
    def from_registry(
        cls, registry: SupportsCollect, *, flavor: str | EngineFlavor = "vllm"
    ) -> EngineMetricsReader:
        """Read a ``prometheus_client`` registry in this process (the engine runs here).

        Args:
            registry: The registry the engine registers into (``prometheus_client.REGISTRY``
                for vLLM and SGLang), or anything with a ``collect()`` method.
            flavor: Which engine's names to look for.
        """
        source = f"registry {type(registry).__name__}@{id(registry):x}"
        return cls(registry.collect, flavor=flavor, source=source)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        flavor: str | EngineFlavor = "vllm",
        timeout_s: float = 2.0,
        max_bytes: int = 32 * 1024 * 1024,
    ) -> EngineMetricsReader:
        """Scrape a running server's Prometheus text endpoint (``http://host:port/metrics``).

        The request runs in a daemon thread and the caller waits at most ``timeout_s``, so a
        server that accepts the connection and never answers costs the step ``timeout_s``
        and a ``None`` snapshot, never a hang. Proxies from the environment are not used:
        engine endpoints are cluster-internal, and a proxy hop would add a second thing to
        time out.

        Args:
            url: The metrics endpoint.
            flavor: Which engine's names to look for.
            timeout_s: Deadline of one scrape, connection included.
            max_bytes: Largest body accepted; a larger one fails the read.
        """
        return cls(_Scraper(url, timeout_s, max_bytes), flavor=flavor, source=url)

    def snapshot(self) -> EngineSnapshot | None:
        """Read the engine's cumulative series now; ``None`` if the read failed.

        A failure warns once per source and kind of failure, and the run goes on: the
        caller's next :meth:`delta` against ``None`` is ``{}``. A read that finds none of the
        flavor's series (stats off, wrong flavor) warns once too, and gives an empty snapshot.
        """
        try:
            snapshot, exposed = _build_snapshot(self._collect(), self._index)
        except Exception as exc:
            # The families come from code we do not own (an engine's collectors, a remote
            # server), and vLLM's own snapshot reader raises AssertionError on a metric type
            # it does not know: any failure must cost this read, never the training step.
            warn_once(
                f"rlsight.engines.read:{self.source}:{type(exc).__name__}",
                f"reading engine metrics from {self.source} failed "
                f"({type(exc).__name__}: {exc}); the engine deltas of this step are skipped "
                "and the next read starts a new baseline",
                stacklevel=2,
            )
            return None
        if not exposed:
            warn_once(
                f"rlsight.engines.empty:{self.source}:{self.flavor.name}",
                f"reading engine metrics from {self.source} found none of the {self.flavor.name} "
                "series, so every engine delta is empty. vLLM's offline LLM(...) keeps no stats "
                "unless built with disable_log_stats=False; a vLLM or SGLang server needs its "
                "metrics enabled (SGLang: --enable-metrics); or the flavor is the wrong one",
                stacklevel=2,
            )
        return snapshot

    @staticmethod
    def delta(prev: EngineSnapshot | None, cur: EngineSnapshot | None) -> EngineDeltas:
        """What happened between two snapshots, summed over engine labels not kept.

        Returns ``{}`` when either snapshot is ``None`` (a failed read). A counter or
        histogram that went down was reset, and its delta is its new value. A series only
        in ``cur`` counts from zero; a series only in ``prev`` is left out.
        """
        return _snapshot_delta(prev, cur)

    def read_delta(self) -> EngineDeltas:
        """Snapshot now, return the delta since the last call, and keep now as the baseline.

        The first call, and the call after a failed read, return ``{}``: there is no
        baseline to measure against, and a stale one would fold two steps into one.
        """
        cur = self.snapshot()
        prev, self._baseline = self._baseline, cur
        return _snapshot_delta(prev, cur)


class _Fetch:
    """One scrape running in a daemon thread; the caller reads ``body`` or ``error``.

    The body is read a chunk at a time against the scrape's deadline, so a server that
    dribbles bytes (each arriving within the socket timeout) cannot keep the thread alive:
    it gives up at the deadline, at most one socket timeout late.
    """

    __slots__ = ("body", "error")

    def __init__(self) -> None:
        self.body: str | None = None
        self.error: Exception | None = None

    def run(self, url: str, timeout_s: float, max_bytes: int) -> None:
        deadline = time.monotonic() + timeout_s
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=timeout_s) as response:
                chunks: list[bytes] = []
                size = 0
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the body did not arrive within timeout_s={timeout_s}")
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        raise ValueError(f"response is larger than max_bytes={max_bytes}")
            self.body = b"".join(chunks).decode("utf-8")
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                exc.close()  # it holds the response's socket, which the caller never reads
            self.error = exc


class _Scraper:
    """Scrapes one URL, at most one request in flight.

    A scrape the caller stopped waiting for may still be finishing (up to one socket timeout
    past its deadline); while it does, the next read fails at once instead of starting a
    second thread, so a stalled engine costs one thread, not one per step.
    """

    __slots__ = ("_lock", "_thread", "max_bytes", "timeout_s", "url")

    def __init__(self, url: str, timeout_s: float, max_bytes: int) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Iterable[_Family]:
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError as exc:
            raise ImportError(
                "EngineMetricsReader.from_url needs prometheus-client: pip install 'rlsight[engines]'"
            ) from exc
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise TimeoutError(
                    "the previous scrape has not finished yet (the server is slow or stalled)"
                )
            fetch = _Fetch()
            thread = threading.Thread(
                target=fetch.run, args=(self.url, self.timeout_s, self.max_bytes),
                name="rlsight-engine-scrape", daemon=True,
            )
            self._thread = thread
            thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"no answer within timeout_s={self.timeout_s}")
        if fetch.error is not None:
            raise fetch.error
        if fetch.body is None:
            raise RuntimeError("the scrape thread ended without a body or an error")
        return list(text_string_to_metric_families(fetch.body))


_INSTRUMENTS: Final = InstrumentCache()
_HISTOGRAM_PARTS: Final = {
    spec.name: (spec.name + ".count", spec.name + ".sum", spec.name + ".bucket")
    for spec in ENGINE_SERIES
    if spec.kind == "histogram"
}


def record_engine_deltas(
    step: int, deltas: Mapping[EngineSeries, EngineValue], *, engine: str
) -> None:
    """Record one step's engine deltas as OTel metrics; a no-op without telemetry.

    A counter delta is added to the counter of its vocabulary name; a gauge's level is set
    on the gauge of its vocabulary name. A histogram delta is
    recorded as three counters, ``<name>.count``, ``<name>.sum`` and ``<name>.bucket`` (one
    point per bucket, cumulative, with the upper bound in ``rl.engine.le`` as Prometheus
    writes it), because the OTel API records single observations, not pre-counted buckets.
    Every point carries ``rl.step`` and ``rl.engine.name``.

    Args:
        step: The training step the deltas belong to.
        deltas: From :meth:`EngineMetricsReader.delta` or :meth:`~EngineMetricsReader.read_delta`.
        engine: Names the engine or engine group (``generation/0``), as ``rl.engine.name``.
    """
    runtime = active_runtime()
    if not deltas or runtime is None:
        return
    try:
        _record_engine_deltas(runtime.meter, step, deltas, engine)
    except Exception as exc:  # a metrics failure must not end the training step
        runtime.report_internal_error("record_engine_deltas", exc)


def _record_engine_deltas(
    meter: Meter, step: int, deltas: Mapping[EngineSeries, EngineValue], engine: str
) -> None:
    base: dict[str, AttributeValue] = {STEP: step, "rl.engine.name": engine}
    for series, value in deltas.items():
        spec = _SPECS.get(series.name)
        if spec is None:
            warn_once(
                f"engine-series-unknown:{series.name}",
                f"rlsight: engine series {series.name!r} is not in the rl.engine vocabulary "
                f"({', '.join(sorted(_SPECS))}); it is not recorded",
                stacklevel=4,
            )
            continue
        attributes = {**base, **dict(series.attributes)}
        if spec.kind == "gauge" and not isinstance(value, EngineHistogram):
            _INSTRUMENTS.gauge(meter, spec.name, spec.unit, spec.description).set(value, attributes)
            continue
        if not isinstance(value, EngineHistogram):
            counter = _INSTRUMENTS.counter(meter, spec.name, spec.unit, spec.description)
            counter.add(value, attributes)
            continue
        count_name, sum_name, bucket_name = _HISTOGRAM_PARTS[spec.name]
        _INSTRUMENTS.counter(meter, count_name, "1", f"Observations of {spec.name}.").add(
            value.count, attributes
        )
        if not math.isnan(value.sum):
            _INSTRUMENTS.counter(meter, sum_name, spec.unit, f"Sum of {spec.name}.").add(
                value.sum, attributes
            )
        buckets = _INSTRUMENTS.counter(
            meter, bucket_name, "1", f"Observations of {spec.name} at most rl.engine.le."
        )
        running = 0.0
        for bound, count in zip((*value.bounds, math.inf), value.counts, strict=True):
            running += count
            buckets.add(running, {**attributes, "rl.engine.le": _format_le(bound)})


def _format_le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


def native_tracing_env(
    config: TelemetryConfig | None = None,
    *,
    service_name: str = "vllm",
    worker_group: str = "generation",
) -> dict[str, str]:
    """Environment for an inference engine process so its own spans join the run.

    Empty unless the run asks for it: ``engine_native_tracing`` is on, the ``engine`` span
    group is enabled and an OTLP endpoint is configured. Native engine tracing is one span
    per request, a debugging tool for a few steps, so both switches must be on.

    The protocol is set through ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` explicitly: vLLM reads
    only that variable, never the generic ``OTEL_EXPORTER_OTLP_PROTOCOL``, and defaults to
    gRPC, so an http/protobuf run would otherwise have the engine speak gRPC at an HTTP port.
    Put the result in the engine's own environment only, never the job-wide one: vLLM workers
    start tracing whenever the endpoint variable is present.

    Args:
        config: The run's config (default: the active runtime's).
        service_name: ``service.name`` of the engine's spans.
        worker_group: ``rl.worker_group`` resource attribute for the engine's spans.
    """
    if config is None:
        rt = active_runtime()
        if rt is None:
            return {}
        config = rt.config
    endpoint = config.otlp_signal_endpoint("traces")
    if not (config.engine_native_tracing and endpoint and is_span_group_enabled(RL.ENGINE)):
        return {}
    attributes = {RUN_ID: config.run_id, WORKER_GROUP: worker_group, STAGE: "rl"}
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": config.otlp_protocol,
        "OTEL_SERVICE_NAME": service_name,
        "OTEL_RESOURCE_ATTRIBUTES": ",".join(f"{k}={v}" for k, v in attributes.items()),
    }
