"""Reading an engine: metric families -> a snapshot, and the public reader that keeps a baseline."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Protocol

from rlsight.engines._deltas import (
    EngineDeltas,
    EngineHistogram,
    EngineSeries,
    EngineSnapshot,
    EngineValue,
    SourceSeries,
    snapshot_delta,
)
from rlsight.engines._flavors import FLAVORS, EngineFlavor, Source, parse_candidate
from rlsight.engines._scrape import Scraper
from rlsight.engines._vocabulary import SPECS, base_name
from rlsight.errors import warn_once

__all__ = ["EngineMetricsReader", "Family", "Sample", "SupportsCollect"]


class Sample(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...


class Family(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def samples(self) -> Sequence[Sample]: ...


class SupportsCollect(Protocol):
    """Anything with ``collect()`` yielding metric families, e.g. a ``CollectorRegistry``."""

    def collect(self) -> Iterable[Family]: ...


class _ReadError(Exception):
    """A read produced data the flavor cannot map; the snapshot is dropped."""


class _Index:
    """A flavor turned into a lookup from family name to the sources it may feed."""

    __slots__ = ("by_family", "labels")

    def __init__(self, flavor: EngineFlavor) -> None:
        self.labels: Final = dict(flavor.labels)
        # One engine series may feed two vocabulary names (SGLang's prompt tokens are also
        # its prefix-cache queries).
        self.by_family: Final[dict[str, list[Source]]] = {}
        for series, candidates in flavor.sources.items():
            for rank, candidate in enumerate(candidates):
                family, source = parse_candidate(series, rank, candidate)
                self.by_family.setdefault(family, []).append(source)


def _selected(source: Source, labels: Mapping[str, str]) -> bool:
    return source.label is None or labels.get(source.label) in source.values


def _build_snapshot(families: Iterable[Family], index: _Index) -> tuple[EngineSnapshot, bool]:
    """The snapshot, and whether any of the flavor's families was exposed at all (a family
    with no samples yet counts: an idle engine has not labelled its counters)."""
    chosen: dict[str, tuple[Source, Family]] = {}
    exposed = False
    for family in families:
        sources = index.by_family.get(base_name(family.name), ())
        exposed = exposed or bool(sources)
        for source in sources:
            if source.label is not None and not any(_selected(source, x.labels) for x in family.samples):
                continue  # a selector that matches nothing here leaves the next candidate a chance
            best = chosen.get(source.series)
            if best is None or source.rank < best[0].rank:
                chosen[source.series] = (source, family)
    values: dict[SourceSeries, EngineValue] = {}
    for series, (source, family) in chosen.items():
        kind = SPECS[series].kind
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
    series: str, source: Source, family: Family, index: _Index, out: dict[SourceSeries, EngineValue]
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
    series: str, family: Family, index: _Index, out: dict[SourceSeries, EngineValue]
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
        collect: Callable[[], Iterable[Family]],
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
        return cls(Scraper(url, timeout_s, max_bytes), flavor=flavor, source=url)

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
        return snapshot_delta(prev, cur)

    def read_delta(self) -> EngineDeltas:
        """Snapshot now, return the delta since the last call, and keep now as the baseline.

        The first call, and the call after a failed read, return ``{}``: there is no
        baseline to measure against, and a stale one would fold two steps into one.
        """
        cur = self.snapshot()
        prev, self._baseline = self._baseline, cur
        return snapshot_delta(prev, cur)
