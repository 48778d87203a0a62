"""The state instrumentation helpers keep between calls, owned by the run's runtime.

Caches and flags that belong to one run (built trace carriers, parsed remote spans, the
methods Ray refused a carrier for, the run-window efficiency seconds, the instruments of the
run's meter, ``rlsight.ray``'s identity hooks) live on :class:`~rlsight.runtime.Telemetry` as
its ``run_state``, not in module globals: a new ``setup_telemetry`` (or a test's capture)
starts with all of them empty, and a shutdown drops them with the runtime. Each helper reaches
it through the active runtime it already reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlsight._instruments import InstrumentCache

if TYPE_CHECKING:
    from opentelemetry.trace import NonRecordingSpan

__all__ = ["RunState"]


@dataclass(slots=True, eq=False)
class RunState:
    """One runtime's helper state; see the module docstring for why it is not global."""

    #: Carriers :func:`rlsight.current_trace_carrier` built, by span id: (trace id, carrier,
    #: the same carrier packed as bytes for a Ray call).
    carriers: dict[int, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    #: Remote parents parsed from carriers, by (traceparent, tracestate), or by the packed bytes.
    remote_spans: dict[tuple[str, str | None] | bytes, NonRecordingSpan] = field(default_factory=dict)
    #: ``Class.method`` names Ray refused the carrier keyword for (they are then called without).
    undecorated: set[str] = field(default_factory=set)
    #: Whether the driver has looked at Ray's job runtime_env yet (to warn when workers would
    #: get no telemetry); looked at again while Ray is not initialised.
    ray_env_checked: bool = False
    #: Set by ``rlsight.ray`` in a worker whose group was not given: the first decorated call
    #: names the process after its actor class, then clears it.
    first_call_hook: Callable[[tuple[Any, ...]], None] | None = None
    #: Set by ``rlsight.ray`` in a worker: called (under the runtime's lock) just before a
    #: deferred runtime builds its providers, the last chance to name the process. It must not
    #: raise.
    before_materialize: Callable[[], None] | None = None
    #: Efficiency seconds over the run, by (category, measurement), for ``rl.window="run"``.
    run_efficiency: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The instruments of the runtime's meter that ``metrics`` and ``engines`` record through.
    instruments: InstrumentCache = field(default_factory=InstrumentCache)
