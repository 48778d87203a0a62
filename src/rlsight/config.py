"""``TelemetryConfig``: every setting declared once, as data, with its env projection.

The driver builds a config (from code, YAML or the environment) and projects it into
``RLSIGHT_*`` environment variables that Ray hands to every worker, which rebuilds the same
config with :meth:`TelemetryConfig.from_env`. The round trip is exact: numbers stay numbers,
lists stay lists. Precedence, highest first: an explicit argument, ``RLSIGHT_<FIELD>``, the
standard ``OTEL_*`` variable where one exists, the default. A config remembers which fields
were *given* (passed in code, in a mapping, or read from a variable) and which were left at
their default, so a default never hides a variable (issue #9).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, cast

from rlsight.errors import ConfigError, warn_once

__all__ = ["SETTINGS", "OtlpProtocol", "Setting", "StoreTransport", "TelemetryConfig"]

OtlpProtocol: TypeAlias = Literal["http/protobuf", "http/json", "grpc"]
#: Every value OpenTelemetry's ``OTEL_EXPORTER_OTLP_PROTOCOL`` accepts.
_PROTOCOLS: Final = ("http/protobuf", "http/json", "grpc")
StoreTransport: TypeAlias = Literal["file", "ray"]
_TRANSPORTS: Final = ("file", "ray")
_Scalar: TypeAlias = str | bool | int | float
_AttrValue: TypeAlias = _Scalar | Sequence[_Scalar]


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration field as the docs and the env projection see it."""

    name: str
    env: str
    kind: Literal[
        "bool", "int", "str", "optional_str", "groups", "protocol", "optional_protocol",
        "attributes", "optional_float", "port", "transport",
    ]
    default: str
    doc: str
    otel_env: tuple[str, ...] = ()
    #: A signal-specific setting's generic one: given in code or by ``RLSIGHT_*``, it keeps
    #: this setting's ``OTEL_*`` variable out (an OTEL_* variable never beats rlsight's own).
    generic: str | None = None


#: The settings table: docs/configuration.md is generated from it, ``to_env``/``from_env`` use it.
SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("enabled", "RLSIGHT_ENABLED", "bool", "true",
            "Master switch. Off: every helper is a no-op and no file is written."),
    Setting("run_id", "RLSIGHT_RUN_ID", "optional_str", "generated",
            "Identifies the run on every process (`rl.run.id`). Generated as "
            "`<UTC time>-<6 hex>` when absent; `SLURM_JOB_ID` is used when set (and is a valid "
            "id). It names a folder: `.`, `..`, `/`, `\\` and control characters are refused."),
    Setting("run_dir", "RLSIGHT_RUN_DIR", "optional_str", "`./rlsight-runs/<run_id>`",
            "Folder of the local store; made absolute at construction so workers with "
            "another working directory write to the same place."),
    Setting("span_groups", "RLSIGHT_SPAN_GROUPS", "groups", "`per_step`",
            "Span groups, presets, namespaces or `all` to emit (comma-separated in the env)."),
    Setting("otlp_endpoint", "RLSIGHT_OTLP_ENDPOINT", "optional_str", "none",
            "Base URL of an OTLP collector (`http://` or `https://`, with a host); spans and "
            "metrics go there as well as to the store.",
            ("OTEL_EXPORTER_OTLP_ENDPOINT",)),
    Setting("otlp_protocol", "RLSIGHT_OTLP_PROTOCOL", "protocol", "`http/protobuf`",
            "`http/protobuf`, `http/json` or `grpc` (grpc needs the `rlsight[grpc]` extra). "
            "The Python SDK has no JSON exporter: `http/json` is sent as `http/protobuf` to the "
            "same URL, with one warning.",
            ("OTEL_EXPORTER_OTLP_PROTOCOL",)),
    Setting("otlp_traces_endpoint", "RLSIGHT_OTLP_TRACES_ENDPOINT", "optional_str",
            "`<otlp_endpoint>/v1/traces`",
            "Full URL for spans only, used as given (no path added); set it alone to send "
            "spans but no metrics.",
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",), generic="otlp_endpoint"),
    Setting("otlp_metrics_endpoint", "RLSIGHT_OTLP_METRICS_ENDPOINT", "optional_str",
            "`<otlp_endpoint>/v1/metrics`",
            "Full URL for metrics only, used as given; set it alone to send metrics but no spans.",
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",), generic="otlp_endpoint"),
    Setting("otlp_traces_protocol", "RLSIGHT_OTLP_TRACES_PROTOCOL", "optional_protocol",
            "`otlp_protocol`", "Protocol of the spans exporter, when it differs.",
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",), generic="otlp_protocol"),
    Setting("otlp_metrics_protocol", "RLSIGHT_OTLP_METRICS_PROTOCOL", "optional_protocol",
            "`otlp_protocol`", "Protocol of the metrics exporter, when it differs.",
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",), generic="otlp_protocol"),
    Setting("local_store", "RLSIGHT_LOCAL_STORE", "bool", "true",
            "Write OTLP/JSON lines to `<run_dir>/traces` and `<run_dir>/metrics`."),
    Setting("store_transport", "RLSIGHT_STORE_TRANSPORT", "transport", "`file`",
            "`file`: each process writes the store on its own node. `ray`: also ship every "
            "batch to a sink actor on the driver's node, so one run folder holds every node's "
            "spans (docs/running-at-scale.md)."),
    Setting("service_name", "RLSIGHT_SERVICE_NAME", "str", "`rlsight`",
            "OpenTelemetry `service.name` of every process of the run.",
            ("OTEL_SERVICE_NAME",)),
    Setting("resource_attributes", "RLSIGHT_RESOURCE_ATTRIBUTES", "attributes", "`{}`",
            "Extra resource attributes (JSON object in the env); they win over detected ones."),
    Setting("engine_native_tracing", "RLSIGHT_ENGINE_NATIVE_TRACING", "bool", "false",
            "Let the inference engine emit its own per-request spans (debugging, very verbose)."),
    Setting("shutdown_timeout_ms", "RLSIGHT_SHUTDOWN_TIMEOUT_MS", "int", "5000",
            "Budget for `shutdown_telemetry`; it returns within it even if a collector hangs. "
            "At most 3600000 (one hour)."),
    Setting("algorithm", "RLSIGHT_ALGORITHM", "optional_str", "none",
            "The RL algorithm (`grpo`, `ppo`, ...), recorded as `rl.algorithm`."),
    Setting("strict", "RLSIGHT_STRICT", "bool", "false",
            "Raise internal telemetry errors instead of logging them once (for tests)."),
    Setting("stall_after_s", "RLSIGHT_STALL_AFTER_S", "optional_float", "none",
            "Stall watchdog (driver): no step ended for this many seconds writes a stall "
            "record to `<run_dir>/stalls/`, warns once and calls the `on_stall` hook."),
    Setting("stall_after_steps", "RLSIGHT_STALL_AFTER_STEPS", "optional_float", "none",
            "Stall watchdog (driver): no step ended for this many median step durations. "
            "With both set, a stall needs both."),
    Setting("prometheus_port", "RLSIGHT_PROMETHEUS_PORT", "port", "none",
            "Serve the driver's metrics at `http://<prometheus_host>:<port>/metrics` through "
            "OpenTelemetry's Prometheus exporter (`rlsight[prometheus]`); `0` picks a free port. "
            "Only the process that calls `setup_telemetry` serves."),
    Setting("prometheus_host", "RLSIGHT_PROMETHEUS_HOST", "str", "`127.0.0.1`",
            "Address the Prometheus endpoint binds; `0.0.0.0` exposes it to every network."),
)
_BY_NAME: Final = {s.name: s for s in SETTINGS}
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


class _Default:
    """The marker a field holds until ``__post_init__`` replaces it with the real default."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


#: What a field is while nobody gave it a value; typed Any so each field keeps its own type.
_UNSET: Final = cast(Any, _Default())


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot name a run folder, or ``None`` if it can.

    The run folder is ``<runs root>/<run_id>``, so an id that is a path step (``.``, ``..``)
    or holds a separator would put the store outside the root (``SLURM_JOB_ID=../../etc``);
    one with control characters would reach terminals raw through ``rlsight runs``.
    """
    if not run_id.strip():
        return "must be non-empty"
    if run_id in (".", "..") or "/" in run_id or "\\" in run_id:
        return "must not be '.', '..' or contain '/' or '\\' (it names a folder under the runs root)"
    if not run_id.isprintable():
        return "must not contain control characters"
    if len(run_id.encode()) > _MAX_RUN_ID_BYTES:
        return f"must be at most {_MAX_RUN_ID_BYTES} bytes (it names a folder)"
    return None


_MAX_RUN_ID_BYTES: Final = 200
#: Largest ``shutdown_timeout_ms``: an hour is already longer than any scheduler grants a
#: job's exit, and a larger value overflows the thread waits it becomes.
MAX_SHUTDOWN_TIMEOUT_MS: Final = 3_600_000


def endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is not an OTLP base URL, or ``None`` if it is one.

    Both protocols take a URL with scheme and host (``http://localhost:4318``,
    ``https://otel.example:4317``); without the check, ``localhost:4318`` or ``ftp://...``
    is accepted and every batch then fails quietly on a background thread.
    """
    from urllib.parse import urlsplit

    hint = "expected a URL such as http://localhost:4318 (http/protobuf) or http://localhost:4317 (grpc)"
    try:
        parts = urlsplit(endpoint.strip())
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc}); {hint}"
    if parts.scheme not in ("http", "https"):
        return f"scheme must be http or https; {hint}"
    if not parts.hostname:
        return f"no host; {hint}"
    if port == 0:
        return f"port 0 is not a collector's port; {hint}"
    return None


def _default_run_id() -> str:
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        problem = run_id_problem(slurm)
        if problem is None:
            return slurm
        warn_once(
            "slurm-run-id",
            f"SLURM_JOB_ID={slurm!r} cannot be a run id ({problem}); rlsight generates one "
            "instead. Set RLSIGHT_RUN_ID to choose it",
            stacklevel=4,
        )
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """How a run is instrumented. Immutable; :meth:`with_changes` returns a modified copy.

    Every field, its env variable and its default are listed in ``docs/configuration.md``
    (generated from :data:`SETTINGS`).

    Raises:
        ConfigError: a field has the wrong type or value; the message names the field, the
            value and what is accepted.
    """

    enabled: bool = _UNSET
    run_id: str | None = _UNSET
    run_dir: str | None = _UNSET
    span_groups: tuple[str, ...] = _UNSET
    otlp_endpoint: str | None = _UNSET
    otlp_protocol: OtlpProtocol = _UNSET
    local_store: bool = _UNSET
    store_transport: StoreTransport = _UNSET
    service_name: str = _UNSET
    resource_attributes: Mapping[str, _AttrValue] = _UNSET
    engine_native_tracing: bool = _UNSET
    shutdown_timeout_ms: int = _UNSET
    algorithm: str | None = _UNSET
    strict: bool = _UNSET
    stall_after_s: float | None = _UNSET
    stall_after_steps: float | None = _UNSET
    prometheus_port: int | None = _UNSET
    prometheus_host: str = _UNSET
    otlp_traces_endpoint: str | None = _UNSET
    otlp_metrics_endpoint: str | None = _UNSET
    otlp_traces_protocol: OtlpProtocol | None = _UNSET
    otlp_metrics_protocol: OtlpProtocol | None = _UNSET
    _given: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = []
        for s in SETTINGS:
            value = getattr(self, s.name)
            if value is _UNSET:
                value = _DEFAULTS[s.name]
                object.__setattr__(self, s.name, value)
            else:
                given.append(s.name)
            checked = _check(s, value)
            if checked is not value:
                object.__setattr__(self, s.name, checked)
        if self.run_id is None:
            object.__setattr__(self, "run_id", _default_run_id())
        run_dir = self.run_dir or os.path.join("rlsight-runs", str(self.run_id))
        object.__setattr__(self, "run_dir", str(Path(run_dir).expanduser().absolute()))
        object.__setattr__(self, "_given", frozenset(given))

    @property
    def given(self) -> frozenset[str]:
        """Names of the fields given a value (in code, a mapping or a variable), not defaulted."""
        return self._given

    @property
    def run_path(self) -> Path:
        """``run_dir`` as a :class:`~pathlib.Path`."""
        return Path(str(self.run_dir))

    def otlp_signal_protocol(self, signal: Literal["traces", "metrics"]) -> OtlpProtocol:
        """The protocol of ``signal``'s exporter: its own setting, else ``otlp_protocol``."""
        own: OtlpProtocol | None = getattr(self, f"otlp_{signal}_protocol")
        return own or self.otlp_protocol

    def otlp_signal_endpoint(self, signal: Literal["traces", "metrics"]) -> str | None:
        """Where an exporter of ``signal`` sends; ``None`` when nowhere.

        A signal-specific endpoint is used as given (OpenTelemetry's rule). Otherwise the
        base endpoint gets ``/v1/<signal>`` over HTTP (the OTLP/HTTP path convention) and is
        used as is over grpc.
        """
        own: str | None = getattr(self, f"otlp_{signal}_endpoint")
        if own:
            return own
        if not self.otlp_endpoint:
            return None
        endpoint = self.otlp_endpoint.rstrip("/")
        return endpoint if self.otlp_signal_protocol(signal) == "grpc" else f"{endpoint}/v1/{signal}"

    def with_changes(self, **changes: Any) -> TelemetryConfig:
        """A copy with ``changes`` applied (validated like the constructor); they count as given."""
        unknown = sorted(set(changes) - set(_BY_NAME))
        if unknown:
            raise TypeError(f"TelemetryConfig.with_changes: unknown fields {unknown}")
        return self._rebuild(changes, self._given | set(changes))

    def with_env_fallbacks(self, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Fill every field that was not given from ``RLSIGHT_<FIELD>``, then from ``OTEL_*``.

        This is what :func:`~rlsight.setup_telemetry` and :func:`~rlsight.ray.ray_runtime_env`
        apply to the config you pass: explicit > ``RLSIGHT_*`` > ``OTEL_*`` > default.

        Raises:
            ConfigError: a variable cannot be parsed; the message names the variable.
        """
        env = os.environ if environ is None else environ
        changes = _from_variables(env, skip=self._given)
        if not changes:
            return self
        return self._rebuild(changes, self._given | set(changes))

    def _rebuild(self, changes: Mapping[str, Any], given: frozenset[str] | set[str]) -> TelemetryConfig:
        """A copy with ``changes``; fields outside ``given`` keep their value but stay defaulted.

        A ``run_dir`` nobody gave follows the (possibly new) ``run_id``; a generated
        ``run_id`` is kept, so every copy of one config names the same run.
        """
        values = {s.name: getattr(self, s.name) for s in SETTINGS}
        values.update(changes)
        if "run_dir" not in given:
            values["run_dir"] = None
        out = TelemetryConfig(**values)
        object.__setattr__(out, "_given", frozenset(given))
        return out

    def to_env(self) -> dict[str, str]:
        """Project the config into ``RLSIGHT_*`` variables (``None`` fields are left out)."""
        out: dict[str, str] = {}
        for s in SETTINGS:
            value = getattr(self, s.name)
            if value is not None:
                out[s.env] = _encode(s, value)
        return out

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Build a config from ``RLSIGHT_*`` variables, then the ``OTEL_*`` fallbacks.

        Raises:
            ConfigError: a variable cannot be parsed; the message names the variable.
        """
        env = os.environ if environ is None else environ
        return cls(**_from_variables(env, skip=frozenset()))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> TelemetryConfig:
        """Build a config from a parsed YAML/JSON section.

        Keys this version does not know (left over from an older config) are ignored with
        one warning that names them, so an old YAML keeps working.
        """
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(k for k in mapping if k not in known)
        if unknown:
            warn_once(
                "config-unknown:" + ",".join(unknown),
                f"TelemetryConfig ignores unknown keys {unknown}; they are not used by this "
                f"version of rlsight (known: {', '.join(sorted(known))})",
                stacklevel=2,
            )
        return cls(**{k: v for k, v in mapping.items() if k in known})


#: The value of each field nobody gave (``run_id``/``run_dir`` are then derived).
_DEFAULTS: Final[dict[str, Any]] = {
    "enabled": True, "run_id": None, "run_dir": None, "span_groups": ("per_step",),
    "otlp_endpoint": None, "otlp_protocol": "http/protobuf", "local_store": True,
    "service_name": "rlsight", "resource_attributes": {}, "engine_native_tracing": False,
    "shutdown_timeout_ms": 5000, "algorithm": None, "strict": False,
    "otlp_traces_endpoint": None, "otlp_metrics_endpoint": None,
    "otlp_traces_protocol": None, "otlp_metrics_protocol": None,
    "stall_after_s": None, "stall_after_steps": None,
    "prometheus_port": None, "prometheus_host": "127.0.0.1", "store_transport": "file",
}


def _from_variables(env: Mapping[str, str], *, skip: frozenset[str]) -> dict[str, Any]:
    """Field values from ``RLSIGHT_*``, then ``OTEL_*`` variables, for fields not in ``skip``.

    Only a field with no ``RLSIGHT_`` variable falls back to ``OTEL_*``: a projected value
    equal to the default (``service_name=rlsight``) is still the driver's choice. A
    signal-specific ``OTEL_*`` variable stays out when its generic setting was given or set
    by ``RLSIGHT_*``, since OTEL_* never beats rlsight's own settings.
    """
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if s.name in skip:
            continue
        raw = env.get(s.env)
        if raw is not None:
            out[s.name] = _from_variable(s, raw, s.env)
    ours = skip | set(out)
    for s in SETTINGS:
        if s.name in ours or (s.generic is not None and s.generic in ours):
            continue
        for var in s.otel_env:
            raw = env.get(var)
            if raw and raw.strip():
                out[s.name] = _from_variable(s, raw.strip(), var)
                break
    return out


def _from_variable(s: Setting, raw: str, var: str) -> Any:
    """The value of field ``s`` that the variable ``var`` sets: an error names the variable
    (where the user set it), not only the field it fills."""
    return _check(s, _decode(s, raw, var), f"{var}={raw!r}")


def _where(s: Setting, value: object, source: str | None, key: str | None = None) -> str:
    """The field (an attribute of it: ``key``) and value an error is about, and the variable
    that set it (``source``), if one did."""
    shown = f"TelemetryConfig.{s.name}{'' if key is None else f'[{key!r}]'}={value!r}"
    return shown if source is None else f"{source} ({shown})"


def _fail(s: Setting, value: object, source: str | None, accepted: str) -> ConfigError:
    return ConfigError(f"{_where(s, value, source)}: expected {accepted}")


#: The fields that hold an OTLP endpoint URL (checked by :func:`endpoint_problem`).
_ENDPOINTS: Final = frozenset({"otlp_endpoint", "otlp_traces_endpoint", "otlp_metrics_endpoint"})


def _problem(s: Setting, value: Any) -> str | None:
    """What is wrong with a value of the right type for ``s``, beyond its type, if anything."""
    if value is None:
        return None
    if s.name == "run_id":
        return run_id_problem(value)
    if s.name in _ENDPOINTS:
        return endpoint_problem(value)
    if s.name == "shutdown_timeout_ms" and value > MAX_SHUTDOWN_TIMEOUT_MS:
        return f"at most {MAX_SHUTDOWN_TIMEOUT_MS} (one hour); it bounds how long shutdown may wait"
    return None


def _check_attr_value(s: Setting, key: str, value: object, source: str | None) -> None:
    scalars = (str, bool, int, float)
    items = value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else (value,)
    if all(isinstance(v, scalars) for v in items):
        # The env projection is JSON, which has no NaN or infinity: refuse them here, at
        # construction, rather than in to_env() while the run launches its workers.
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(f"{_where(s, value, source, key)}: attribute values must be finite")
        return
    raise ConfigError(
        f"{_where(s, value, source, key)}: attribute values must be str, bool, int, float or "
        "a list of those"
    )


def _check(s: Setting, value: Any, source: str | None = None) -> Any:
    """``value`` as the field ``s`` keeps it, else a ``ConfigError`` naming the field, the
    value and what it takes, and the variable that set it (``source``: ``VAR='raw'``)."""
    kind = s.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise _fail(s, value, source, "a bool (true/false)")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(s, value, source, "an int")
        if value <= 0:
            raise _fail(s, value, source, "a positive int")
    elif kind == "str":
        if not isinstance(value, str) or not value:
            raise _fail(s, value, source, "a non-empty str")
    elif kind == "optional_float":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(s, value, source, "a number or None")
        if not math.isfinite(value) or value <= 0:
            raise _fail(s, value, source, "a positive, finite number or None")
        value = float(value)
    elif kind == "optional_str":
        if value is not None and not isinstance(value, str):
            raise _fail(s, value, source, "a str or None")
    elif kind == "port":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value <= 65535):
            raise _fail(s, value, source, "a port number 0-65535 (0 picks a free port) or None")
    elif kind == "protocol" or kind == "optional_protocol":
        if value not in _PROTOCOLS and not (kind == "optional_protocol" and value is None):
            raise _fail(s, value, source, " or ".join(repr(p) for p in _PROTOCOLS))
    elif kind == "transport":
        if value not in _TRANSPORTS:
            raise _fail(s, value, source, " or ".join(repr(t) for t in _TRANSPORTS))
    elif kind == "groups":
        if isinstance(value, str):
            value = tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise _fail(s, value, source, "a list of span group, preset or namespace names")
        # The env projection joins names with commas: a name that is blank or holds a comma
        # would come back as a different spec in every worker.
        if any(not v.strip() or "," in v for v in value):
            raise _fail(s, value, source, "non-empty span group, preset or namespace names without ','")
        value = tuple(v.strip() for v in value)
    elif kind == "attributes":
        if not isinstance(value, Mapping):
            raise _fail(s, value, source, "a mapping of attribute name to value")
        for key, item in value.items():
            if not isinstance(key, str):
                raise _fail(s, value, source, "str attribute names")
            _check_attr_value(s, key, item, source)
        # A private copy with tuples for sequences: the env round trip then compares equal.
        value = {k: v if isinstance(v, (str, bool, int, float)) else tuple(v)
                 for k, v in value.items()}
    problem = _problem(s, value)
    if problem is not None:
        raise ConfigError(f"{_where(s, value, source)}: {problem}")
    return value


def _encode(s: Setting, value: Any) -> str:
    if s.kind == "bool":
        return "true" if value else "false"
    if s.kind in ("int", "optional_float"):
        return repr(value) if isinstance(value, float) else str(value)
    if s.kind == "groups":
        return ",".join(value)
    if s.kind == "attributes":
        return json.dumps(dict(value), sort_keys=True, allow_nan=False)
    return str(value)


def _decode(s: Setting, raw: str, var: str) -> Any:
    if s.kind == "bool":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{var}={raw!r}: expected one of true/false, 1/0, yes/no, on/off")
    if s.kind in ("int", "port"):
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{var}={raw!r}: expected an integer") from None
    if s.kind == "optional_float":
        try:
            return float(raw.strip())
        except ValueError:
            raise ConfigError(f"{var}={raw!r}: expected a number of seconds or steps") from None
    if s.kind == "groups":
        return tuple(v.strip() for v in raw.split(",") if v.strip())
    if s.kind == "attributes":
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: not a JSON object ({exc.msg}); got {raw!r}") from exc
        if not isinstance(parsed, dict):
            raise ConfigError(f"{var}={raw!r}: expected a JSON object")
        for key, item in parsed.items():
            if isinstance(item, float) and not math.isfinite(item):
                raise ConfigError(f"{var}[{key!r}]: non-finite number")
        return parsed
    return raw
