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

The package is split by job: :mod:`._vocabulary` (the ``rl.engine.*`` names), :mod:`._flavors`
(where each engine exposes them), :mod:`._deltas` (values and delta maths), :mod:`._reader`
(families -> snapshot, the reader), :mod:`._scrape` (the scraping thread), :mod:`._record`
(OTel recording) and :mod:`._env` (native engine tracing). Import from ``rlsight.engines``.
"""

from __future__ import annotations

from rlsight.engines._deltas import (
    EngineDeltas,
    EngineHistogram,
    EngineSeries,
    EngineSnapshot,
    EngineValue,
    SourceSeries,
)
from rlsight.engines._env import native_tracing_env
from rlsight.engines._flavors import FLAVORS, EngineFlavor
from rlsight.engines._reader import EngineMetricsReader, SupportsCollect
from rlsight.engines._record import record_engine_deltas
from rlsight.engines._vocabulary import ENGINE_SERIES, FINISH_REASON, EngineSeriesKind, EngineSeriesSpec

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
