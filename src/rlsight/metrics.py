"""Declared metrics: a trainer's logged scalars teed into OpenTelemetry, step by step.

A trainer already logs a dict of scalars every step (``{"train/loss": 0.41, ...}``). A
:class:`MetricSpec` says which logger key becomes which OTel metric, of which kind and unit;
:func:`register_metric_group` declares a group of them once, at import. After its own logger,
the trainer calls :func:`tee_step_metrics`, which records every registered group's keys with
``rl.step`` and ``rl.window`` attributes, plus the step's efficiency seconds and percentages.

The logger key and the OTel name sit in one row on purpose: the tee reads keys with ``.get``,
so a key the trainer stopped producing would otherwise be indistinguishable from a step that
did not report it. ``rlsight check`` (guard ``logger-keys``) fails when a declared key is
emitted nowhere in the source. At run time a declared key missing from the step's dict is
never recorded as 0, which would draw a dip that never happened: its point is left out (a gap)
and counted on ``rl.metrics.skipped{rl.metric.name, rl.metric.reason="missing"}``. A NaN point
would mark the gap too, but OpenTelemetry's SDK drops non-finite values with a log line, so
rlsight leaves the point out itself and counts it instead.

Recording is a cheap no-op until telemetry is set up (one attribute read), so instrumented
code never has to ask whether telemetry is on.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from rlsight._doc_tables import METRIC_COLUMNS, markdown_table
from rlsight._semconv import EFFICIENCY_CATEGORY, EFFICIENCY_MEASUREMENT, STEP, STEP_VALUE
from rlsight.errors import MetricSpecError, warn_once
from rlsight.runtime import active_runtime
from rlsight.spans import step_value, whole_step

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.util.types import AttributeValue

    from rlsight._instruments import InstrumentCache
    from rlsight.runtime import Telemetry

__all__ = [
    "DOC_BEGIN",
    "DOC_END",
    "EFFICIENCY_PCT",
    "EFFICIENCY_SECONDS",
    "SKIPPED",
    "WINDOW_ATTRIBUTE",
    "MetricKind",
    "MetricSpec",
    "metric_groups_table",
    "record_inference",
    "record_metrics",
    "register_metric_group",
    "registered_metric_groups",
    "tee_step_metrics",
]

MetricKind: TypeAlias = Literal["gauge", "counter", "histogram"]
_KINDS: Final = ("gauge", "counter", "histogram")
#: OpenTelemetry's instrument name and unit syntax. The SDK checks them only when the
#: instrument is made, at the first tee, and a refusal there loses the group's points every
#: step; a spec checks them where the name is written.
_NAME_SYNTAX: Final = re.compile(r"[a-zA-Z][-_./a-zA-Z0-9]{0,254}")
_UNIT_SYNTAX: Final = re.compile(r"[\x00-\x7F]{0,63}")

#: Attribute the tee puts on every point: ``step`` (this step only) or ``run`` (run so far).
WINDOW_ATTRIBUTE: Final = "rl.window"
#: Seconds spent in each efficiency category during the step (counter).
EFFICIENCY_SECONDS: Final = "rl.efficiency.seconds"
#: Share of the window's wall time spent in each efficiency category, in percent (gauge).
EFFICIENCY_PCT: Final = "rl.efficiency.pct"
#: Declared values that were not recorded, by ``rl.metric.name`` and ``rl.metric.reason``
#: (``missing``, ``not_a_number``, ``not_finite``, ``negative``) (counter).
SKIPPED: Final = "rl.metrics.skipped"
_SKIPPED_DOC: Final = "Declared logger values left out, by metric and reason."
#: The attributes of a ``SKIPPED`` point: which declared metric, and why it was left out.
SKIPPED_METRIC: Final = "rl.metric.name"
SKIPPED_REASON: Final = "rl.metric.reason"

#: Marker comments around the generated table in docs/metrics.md.
DOC_BEGIN: Final = "<!-- rlsight:begin metrics -->"
DOC_END: Final = "<!-- rlsight:end metrics -->"

#: GenAI semantic-convention bucket advice (gen_ai.server.request.duration, token usage).
_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)
_TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)
#: The GenAI conventions time a call on the side that timed it: the caller (client) or the
#: model server; token usage is defined for clients only.
GEN_AI_CLIENT_DURATION: Final = "gen_ai.client.operation.duration"
GEN_AI_SERVER_DURATION: Final = "gen_ai.server.request.duration"
GEN_AI_TOKENS: Final = "gen_ai.client.token.usage"
InferenceSide: TypeAlias = Literal["client", "server"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One logged scalar and the OTel metric it becomes.

    Args:
        name: OTel metric name, lowercase dotted (``rl.train.loss``).
        logger_key: The key the trainer's logged dict carries (``train/loss``). Write it as
            a string literal so ``rlsight check`` can match it to the code that emits it.
        kind: ``gauge`` (the value now, e.g. a loss), ``counter`` (an amount added this
            step, never a running total) or ``histogram`` (one observation per step, never negative).
        unit: UCUM unit (``s``, ``By``, ``{token}``, ``1`` for a ratio).
        description: One line for the docs table and for backends.

    Raises:
        MetricSpecError: ``kind`` is not one of the three, ``name``/``logger_key`` is empty, or
            ``name`` or ``unit`` is one OpenTelemetry refuses.
    """

    name: str
    logger_key: str
    kind: MetricKind
    unit: str
    description: str

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise MetricSpecError(
                f"MetricSpec {self.name!r} has kind {self.kind!r}; use one of "
                f"{', '.join(_KINDS)}"
            )
        if not self.name or not self.logger_key:
            raise MetricSpecError(
                f"MetricSpec(name={self.name!r}, logger_key={self.logger_key!r}) needs both "
                "a metric name and a logger key"
            )
        if not _NAME_SYNTAX.fullmatch(self.name):
            raise MetricSpecError(
                f"MetricSpec name {self.name!r} is not a valid OpenTelemetry metric name: an "
                "ASCII letter, then up to 254 letters, digits, '.', '_', '-' or '/' "
                "(write it lowercase dotted, such as 'myrl.train.loss')"
            )
        if not _UNIT_SYNTAX.fullmatch(self.unit):
            raise MetricSpecError(
                f"MetricSpec {self.name!r} has unit {self.unit!r}, which OpenTelemetry refuses: "
                "at most 63 ASCII characters (a UCUM unit such as 's', '1' or '{token}')"
            )


# -- the registry ---------------------------------------------------------------------------

#: Declared metric groups. Process-scoped: declared at import of the module that owns them,
#: once per process; tests put them back with ``rlsight.testing.isolated_registries``.
_GROUPS: dict[str, tuple[MetricSpec, ...]] = {}
_GROUPS_LOCK: Final = threading.Lock()

#: Names rlsight records itself; a declared spec may not reuse them.
_RESERVED_PREFIXES: Final = ("rl.efficiency.", "rl.engine.", "rl.goodput.", "rl.metrics.", "gen_ai.")
_RESERVED_NAMES: Final = frozenset({"rl.setup.duration"})


def register_metric_group(group: str, specs: Iterable[MetricSpec]) -> None:
    """Declare a group of metric specs, once, at import of the module that owns them.

    Registration is pure data: nothing touches OpenTelemetry until a value is recorded, so
    declaring groups costs nothing when telemetry is off.

    Args:
        group: Names the group (``trainer``, ``rl``); every group is recorded by the tee.
        specs: The group's specs; at least one, logger keys and names unique.

    Raises:
        MetricSpecError: the group is already registered, declares no spec, repeats a logger
            key or a metric name, or reuses a name another group or rlsight records.
        ImportError: the installed OpenTelemetry API cannot record a declared kind.
    """
    declared = tuple(specs)
    if not group:
        raise MetricSpecError("register_metric_group needs a non-empty group name")
    if not declared:
        raise MetricSpecError(
            f"metric group {group!r} declares no metric specs; pass at least one MetricSpec"
        )
    for index, spec in enumerate(declared, 1):
        if not isinstance(spec, MetricSpec):
            raise MetricSpecError(
                f"metric group {group!r}: spec #{index} is a {type(spec).__name__}, not a "
                "MetricSpec"
            )
    _reject_duplicates(group, declared, "logger key", lambda s: s.logger_key, "keep one spec per key")
    # OpenTelemetry compares instrument names ignoring case, so names are compared so too.
    _reject_duplicates(group, declared, "metric name", lambda s: s.name, "give each spec its own name",
                       fold=str.lower)
    _require_otel_api({spec.kind for spec in declared}, group)
    with _GROUPS_LOCK:
        if group in _GROUPS:
            raise MetricSpecError(
                f"metric group {group!r} is already registered ({len(_GROUPS[group])} specs); "
                "register each group once, at import of the module that owns it"
            )
        owners = {s.name.lower(): (g, s.name) for g, specs_ in _GROUPS.items() for s in specs_}
        for spec in declared:
            folded = spec.name.lower()
            if folded in _RESERVED_NAMES or folded.startswith(_RESERVED_PREFIXES):
                raise MetricSpecError(
                    f"metric group {group!r} declares {spec.name!r}, a name rlsight records "
                    "itself; choose a name outside rl.efficiency.*, rl.engine.*, rl.goodput.*, "
                    "rl.metrics.*, gen_ai.* and rl.setup.duration"
                )
            if folded in owners:
                owner, name = owners[folded]
                case = (
                    "" if name == spec.name
                    else f" as {name!r} (OpenTelemetry compares metric names ignoring case)"
                )
                raise MetricSpecError(
                    f"metric group {group!r} declares {spec.name!r}, already declared by "
                    f"group {owner!r}{case}; one metric name has one owner"
                )
        _GROUPS[group] = declared


def _reject_duplicates(
    group: str,
    specs: Sequence[MetricSpec],
    what: str,
    field: Callable[[MetricSpec], str],
    fix: str,
    fold: Callable[[str], str] = str,
) -> None:
    first: dict[str, tuple[int, str]] = {}
    for index, spec in enumerate(specs, 1):
        value = field(spec)
        if fold(value) in first:
            at, earlier = first[fold(value)]
            case = (
                "" if earlier == value
                else f", the second as {value!r}: OpenTelemetry compares metric names ignoring case"
            )
            raise MetricSpecError(
                f"metric group {group!r} declares {what} {earlier!r} twice (specs #{at} "
                f"and #{index}{case}); {fix}"
            )
        first[fold(value)] = (index, value)


def _require_otel_api(kinds: set[str], group: str) -> None:
    """Fail at declaration, naming the dependency, if the OTel API cannot record a kind."""
    try:
        from opentelemetry.metrics import Meter
    except ImportError as exc:
        raise ImportError(
            f"metric group {group!r} cannot be recorded: the OpenTelemetry metrics API "
            "(opentelemetry-api) is not importable; pip install 'opentelemetry-api>=1.30' "
            "'opentelemetry-sdk>=1.30'"
        ) from exc
    if "gauge" in kinds and not hasattr(Meter, "create_gauge"):
        from importlib.metadata import version

        raise ImportError(
            f"metric group {group!r} declares a gauge, which needs a synchronous gauge "
            f"(Meter.create_gauge); installed opentelemetry-api {version('opentelemetry-api')} "
            "has none. pip install 'opentelemetry-api>=1.30' 'opentelemetry-sdk>=1.30'"
        )


def snapshot_registry() -> Callable[[], None]:
    """A function that puts the metric-group registry back as it is now (for tests: see
    :func:`rlsight.testing.isolated_registries`; registration is process-wide by design)."""
    with _GROUPS_LOCK:
        saved = dict(_GROUPS)

    def restore() -> None:
        with _GROUPS_LOCK:
            _GROUPS.clear()
            _GROUPS.update(saved)

    return restore


def registered_metric_groups() -> Mapping[str, tuple[MetricSpec, ...]]:
    """Every registered group and its specs, in registration order (a read-only copy)."""
    with _GROUPS_LOCK:
        return MappingProxyType(dict(_GROUPS))


# -- recording --------------------------------------------------------------------------------

_MISSING: Final = object()
_Record: TypeAlias = "Callable[[float, Mapping[str, AttributeValue] | None], None]"
_Bound: TypeAlias = "tuple[tuple[MetricSpec, _Record], ...]"


def _bind(instruments: InstrumentCache, meter: Meter, group: str,
          specs: tuple[MetricSpec, ...]) -> _Bound:
    """Each spec with the bound method that records it (``set``/``add``/``record``).

    Built once per meter and group, so the per-step loop makes one call per key and never
    looks at the instrument's type.
    """

    def build() -> _Bound:
        out: list[tuple[MetricSpec, _Record]] = []
        for spec in specs:
            args = (meter, spec.name, spec.unit, spec.description)
            record: _Record
            if spec.kind == "gauge":
                record = instruments.gauge(*args).set
            elif spec.kind == "counter":
                record = instruments.counter(*args).add
            else:
                record = instruments.histogram(*args).record
            out.append((spec, record))
        return tuple(out)

    return instruments.memo(meter, "group:" + group, build)


def _number(group: str, spec: MetricSpec, raw: object) -> float | None:
    """``raw`` as a float, or ``None`` (warned once per key) when it is not a number."""
    if isinstance(raw, (int, float)):  # bool included: a flag logged as 0/1 is a number
        return float(raw)
    item = getattr(raw, "item", None)
    if callable(item):  # a one-element tensor or array, or a numpy scalar
        try:
            value = item()
        except (ValueError, RuntimeError, TypeError):
            value = None
        if isinstance(value, (int, float)):
            return float(value)
    warn_once(
        f"rlsight.metrics.type:{group}:{spec.logger_key}",
        f"record_metrics: logger key {spec.logger_key!r} (metric {spec.name!r}, group "
        f"{group!r}) has a {type(raw).__name__} value, not a number; it is skipped. Log a "
        "float, an int, or a one-element tensor",
        stacklevel=4,
    )
    return None


def _record_group(
    runtime: Telemetry,
    group: str,
    values: Mapping[str, object],
    attributes: Mapping[str, AttributeValue] | None,
) -> None:
    specs = _GROUPS.get(group)
    if specs is None:
        warn_once(
            f"rlsight.metrics.unknown-group:{group}",
            f"record_metrics: metric group {group!r} is not registered (registered: "
            f"{', '.join(_GROUPS) or 'none'}); call register_metric_group at import. "
            "Nothing is recorded for it",
            stacklevel=3,
        )
        return
    meter, instruments = runtime.meter, runtime.run_state.instruments
    series = instruments.series
    step = attributes.get(STEP) if attributes else None
    # Values are checked first, outside the lock: a value's conversion is the caller's code (a
    # tensor's .item() waits for its device) and must hold up no other thread's recording.
    points: list[tuple[_Record, float]] = []
    skipped: list[tuple[str, str]] = []
    for spec, record in _bind(instruments, meter, group, specs):
        raw = values.get(spec.logger_key, _MISSING)
        if raw is _MISSING:
            skipped.append((spec.name, "missing"))  # never a 0: left out, and the gap counted
            continue
        value = float(raw) if type(raw) is float or type(raw) is int else _number(group, spec, raw)
        if value is None:
            skipped.append((spec.name, "not_a_number"))
        elif not math.isfinite(value) or (spec.kind != "gauge" and value < 0):
            # OpenTelemetry's SDK itself drops a negative histogram measurement with only a log
            # line, so it is left out here, where the gap can be counted and the fix named.
            reason = "not_finite" if not math.isfinite(value) else "negative"
            if reason == "not_finite":
                why = "OpenTelemetry carries only finite values"
            elif spec.kind == "counter":
                why = "a counter only adds"
            else:
                why = ("an OpenTelemetry histogram takes no negative value (declare a signed "
                       "quantity, a reward or an advantage, as a gauge)")
            warn_once(
                f"rlsight.metrics.{reason}:{group}:{spec.logger_key}",
                f"record_metrics: logger key {spec.logger_key!r} (a {spec.kind}, metric "
                f"{spec.name!r}, group {group!r}) got {value!r}; {why}, so the point is left "
                f"out and counted on {SKIPPED}",
                stacklevel=3,
            )
            skipped.append((spec.name, reason))
        else:
            points.append((record, value))
    skips = instruments.counter(meter, SKIPPED, "{point}", _SKIPPED_DOC) if skipped else None
    # Held while recording: the pruning of finished steps never races a point (_step_series).
    with series.lock:
        if step is not None:
            series.saw(step)
        for record, value in points:
            record(value, attributes)
        if skips is not None:
            for name, reason in skipped:
                skips.add(1, {**(attributes or {}), SKIPPED_METRIC: name, SKIPPED_REASON: reason})


def record_metrics(
    group: str,
    values: Mapping[str, object],
    attributes: Mapping[str, AttributeValue] | None = None,
) -> None:
    """Record one group's declared keys from ``values``; a no-op without telemetry.

    Keys in ``values`` that the group does not declare are ignored, so the whole logged
    dict can be passed. A declared key that is missing records no point (never a 0). A
    value that is not a number (a string, ``None``, a tensor of several elements), is not
    finite, or is negative for a counter or a histogram warns once per key and is left out;
    a tensor-like with ``item()`` is accepted. Every value left out is counted on ``rl.metrics.skipped``
    with its metric name and reason, so a gap can be told from a step that never ran.

    Args:
        group: A group declared with :func:`register_metric_group`; an unknown group warns
            once and records nothing.
        values: The logged scalars, by logger key.
        attributes: Attributes for every point (the tee passes ``rl.step`` and
            ``rl.window``).
    """
    runtime = active_runtime()
    if runtime is None:
        return
    try:
        _record_group(runtime, group, values, attributes)
    except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
        runtime.report_internal_error("record_metrics", exc)


def tee_step_metrics(
    step: int,
    values: Mapping[str, object],
    *,
    window: str = "step",
    denominator_s: float | None = None,
) -> None:
    """Record every registered group from one step's logged scalars, plus efficiency.

    Call it right after the trainer's own logger, with the same dict. Each group's points
    carry ``rl.step`` and ``rl.window`` (``window``: ``step`` for values of this step,
    ``run`` for running aggregates).

    Efficiency: the seconds :func:`rlsight.efficiency_span` accumulated since the last call
    are recorded on ``rl.efficiency.seconds{rl.efficiency.category}``, and their share on
    ``rl.efficiency.pct``. With ``denominator_s`` (the step's wall time) the share is of
    this step and marked ``rl.window="step"``; without it the share is of the run so far
    (cumulative category seconds / seconds since setup) and marked ``rl.window="run"``.
    Read the attribute: a run-window share moves slowly and hides a bad step.

    Args:
        step: The step the values belong to.
        values: The logged scalars, by logger key.
        window: ``rl.window`` of the group points.
        denominator_s: Wall seconds of this step, for step-window percentages.
    """
    runtime = active_runtime()
    if runtime is None:
        return
    try:
        meter = runtime.meter
        number = _tee_step(step)
        attributes: dict[str, AttributeValue] = {STEP: number, WINDOW_ATTRIBUTE: window}
        value = step_value(step) if number == -1 else None
        if value is not None and value != -1:
            attributes[STEP_VALUE] = value
        for group in tuple(_GROUPS):
            _record_group(runtime, group, values, attributes)
        _record_efficiency(runtime, meter, number, denominator_s)
    except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
        runtime.report_internal_error("tee_step_metrics", exc)


def _tee_step(step: object) -> int:
    """``rl.step`` of a tee's points: ``step`` read as :func:`rlsight.step_span` reads it, and
    ``-1`` (after one warning) when it is no whole number, as the driver's goodput metrics
    record such a step: one metric's points never mix an int, a str and a float step."""
    number = whole_step(step)
    if number is not None:
        return number
    warn_once(
        "tee-step-not-whole",
        f"tee_step_metrics({step!r}): the step is not a whole number, so its points carry "
        "rl.step=-1 (with rl.step.value where it is a finite number); pass the loop's integer "
        "step counter (this warning is shown once)",
        stacklevel=3,
    )
    return -1


def _record_efficiency(
    runtime: Telemetry, meter: Meter, step: int, denominator_s: float | None
) -> None:
    instruments = runtime.run_state.instruments
    drained = runtime.take_efficiency_measurements()
    run_seconds = runtime.run_state.run_efficiency  # the run window: since setup
    run_seconds.update(drained)
    if denominator_s is not None and not (denominator_s > 0 and math.isfinite(denominator_s)):
        warn_once(
            f"rlsight.metrics.denominator:{denominator_s!r}",
            f"tee_step_metrics: denominator_s={denominator_s!r} is not a positive number of "
            "seconds; efficiency percentages fall back to the run window",
            stacklevel=3,
        )
        denominator_s = None
    if denominator_s is not None:
        pct_window, wall_s = "step", denominator_s
    else:
        pct_window, wall_s = "run", (runtime.now_ns() - runtime.started_ns) / 1e9
    seconds_counter = instruments.counter(
        meter, EFFICIENCY_SECONDS, "s", "Seconds spent in each efficiency category this step."
    )
    pct_gauge = instruments.gauge(
        meter, EFFICIENCY_PCT, "%", "Share of the window's wall time in each efficiency category."
    )
    # Every category seen so far gets a point each step: efficiency spans account for all
    # of this process's time in a category, so a category absent this step truly took 0 s.
    series = instruments.series
    with series.lock:  # the pruning of finished steps never races a point (_step_series)
        series.saw(step)
        for key in sorted(run_seconds):
            category, measurement = key
            seconds = drained.get(key, 0.0)
            attributes: dict[str, str | int] = {
                STEP: step, EFFICIENCY_CATEGORY: category, EFFICIENCY_MEASUREMENT: measurement,
            }
            seconds_counter.add(seconds, attributes)
            share = seconds if pct_window == "step" else run_seconds[key]
            if wall_s > 0:
                pct_gauge.set(100.0 * share / wall_s, {**attributes, WINDOW_ATTRIBUTE: pct_window})


def record_inference(
    duration_s: float,
    input_tokens: int,
    output_tokens: int,
    *,
    model: str,
    operation: str,
    provider: str | None = None,
    side: InferenceSide = "client",
) -> None:
    """Record one inference call the OpenTelemetry GenAI way; a no-op without telemetry.

    The GenAI conventions name the duration after who timed it. ``side="client"`` (the
    default: a driver or rollout worker timing its ``generate`` call) records
    ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` twice
    (``gen_ai.token.type`` ``input`` and ``output``). ``side="server"`` (the model server
    timing a request it served) records ``gen_ai.server.request.duration`` only: the
    conventions define token usage for clients, and a server's tokens are the engine's
    counters (``rl.engine.*``). Every point carries ``gen_ai.request.model`` and
    ``gen_ai.operation.name``. The duration is not optional, because a duration nobody
    passed is a documented metric that is never emitted.

    Args:
        duration_s: Wall seconds of the call, as the caller timed it.
        input_tokens: Prompt tokens of the call.
        output_tokens: Generated tokens of the call.
        model: The model requested (``gen_ai.request.model``).
        operation: ``gen_ai.operation.name``, e.g. ``text_completion`` or ``chat``.
        provider: ``gen_ai.provider.name`` (``vllm``, ``sglang``) when known.
        side: ``"client"`` or ``"server"``: which side of the call measured it.

    Raises:
        ValueError: ``side`` is neither ``"client"`` nor ``"server"`` (a call-site bug,
            raised even without telemetry so it shows in tests).
    """
    if side not in ("client", "server"):
        raise ValueError(f"record_inference(side={side!r}): expected 'client' or 'server'")
    runtime = active_runtime()
    if runtime is None:
        return
    try:
        meter, instruments = runtime.meter, runtime.run_state.instruments
        attributes: dict[str, AttributeValue] = {
            "gen_ai.request.model": model,
            "gen_ai.operation.name": operation,
        }
        if provider is not None:
            attributes["gen_ai.provider.name"] = provider
        if _is_amount(duration_s, "duration_s"):
            if side == "client":
                name, description = GEN_AI_CLIENT_DURATION, "GenAI operation duration."
            else:
                name, description = GEN_AI_SERVER_DURATION, "GenAI server request duration."
            instruments.histogram(meter, name, "s", description, _DURATION_BUCKETS).record(
                float(duration_s), attributes
            )
        if side == "server":
            return
        tokens = instruments.histogram(
            meter, GEN_AI_TOKENS, "{token}", "Tokens used per GenAI request.", _TOKEN_BUCKETS
        )
        for token_type, count, arg in (
            ("input", input_tokens, "input_tokens"), ("output", output_tokens, "output_tokens")
        ):
            if _is_amount(count, arg):
                tokens.record(count, {**attributes, "gen_ai.token.type": token_type})
    except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
        runtime.report_internal_error("record_inference", exc)


def _is_amount(value: object, arg: str) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and (
        math.isfinite(value)
    ):
        return True
    warn_once(
        f"rlsight.metrics.inference:{arg}",
        f"record_inference: {arg}={value!r} is not a non-negative number; that measurement "
        "is skipped",
        stacklevel=3,
    )
    return False


# -- docs ---------------------------------------------------------------------------------------

_TEE_ATTRIBUTES: Final = f"`{STEP}`, `{WINDOW_ATTRIBUTE}` (when teed)"


def metric_groups_table(groups: Mapping[str, Sequence[MetricSpec]] | None = None) -> str:
    """The Markdown table of declared metric groups (default: every registered group).

    Use it to generate the table of your own groups in your docs, between marker comments,
    so it cannot drift from the declarations.
    """
    chosen = registered_metric_groups() if groups is None else groups
    rows = [
        [f"`{spec.name}`", spec.kind, f"`{spec.unit}`", _TEE_ATTRIBUTES, f"`{spec.logger_key}`",
         f"{spec.description} (group `{group}`)"]
        for group, specs in chosen.items()
        for spec in specs
    ]
    return markdown_table(METRIC_COLUMNS, rows)
