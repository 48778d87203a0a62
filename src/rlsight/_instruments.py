"""OTel instruments built once per meter, shared by the metric recorders.

``metrics`` and ``engines`` record through instruments they look up by name on every step.
Asking the SDK meter for them each time costs a lock and a registry lookup, so this cache
builds each instrument once for the meter that is active now and starts over when the meter
changes (a new runtime, or a test's fresh capture). One slot is enough: a process has one
active runtime at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from rlsight._step_series import StepSeries

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, _Gauge

__all__ = ["InstrumentCache"]

_I = TypeVar("_I")


class InstrumentCache:
    """Instruments of the most recently seen meter, keyed by metric name."""

    __slots__ = ("_lock", "_slot", "series")

    def __init__(self) -> None:
        # Reentrant: a memo's builder asks for the instruments it binds.
        self._lock: Final = threading.RLock()
        self._slot: tuple[Meter | None, dict[str, object]] = (None, {})
        #: Step-scoped recording holds ``series.lock``; it prunes these instruments' old steps.
        self.series: Final = StepSeries()

    def counter(self, meter: Meter, name: str, unit: str, description: str) -> Counter:
        """The counter ``name`` on ``meter``, created on first use."""
        return self._get(meter, name, lambda: self._adopt(meter.create_counter(name, unit, description)))

    def gauge(self, meter: Meter, name: str, unit: str, description: str) -> _Gauge:
        """The synchronous gauge ``name`` on ``meter``, created on first use."""
        return self._get(meter, name, lambda: self._adopt(meter.create_gauge(name, unit, description)))

    def histogram(
        self,
        meter: Meter,
        name: str,
        unit: str,
        description: str,
        boundaries: Sequence[float] | None = None,
    ) -> Histogram:
        """The histogram ``name`` on ``meter`` with advised ``boundaries``, made on first use."""
        return self._get(
            meter,
            name,
            lambda: self._adopt(meter.create_histogram(
                name, unit, description, explicit_bucket_boundaries_advisory=boundaries
            )),
        )

    def memo(self, meter: Meter, key: str, create: Callable[[], _I]) -> _I:
        """Whatever ``create()`` builds from ``meter``'s instruments, kept as long as they are.

        Recorders use it to bind a whole group of instruments once (``key`` must not clash
        with a metric name; prefix it, e.g. ``group:trainer``).
        """
        return self._get(meter, key, create)

    def _adopt(self, instrument: _I) -> _I:
        self.series.adopt(instrument)
        return instrument

    def _get(self, meter: Meter, name: str, create: Callable[[], _I]) -> _I:
        owner, instruments = self._slot
        if owner is meter and name in instruments:
            return instruments[name]  # type: ignore[return-value]
        with self._lock:
            owner, instruments = self._slot
            if owner is not meter:
                # Instruments belong to the provider that made them: a new meter starts over.
                instruments = {}
                self._slot = (meter, instruments)
                self.series.forget()
            if name not in instruments:
                instruments[name] = create()
            return instruments[name]  # type: ignore[return-value]
