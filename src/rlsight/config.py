"""``TelemetryConfig``: every setting declared once, as data, with its env projection.

The driver builds a config (from code, YAML or the environment) and projects it into
``RLSIGHT_*`` environment variables that Ray hands to every worker, which rebuilds the same
config with :meth:`TelemetryConfig.from_env`. The round trip is exact: numbers stay numbers,
lists stay lists. Precedence, highest first: an explicit argument, ``RLSIGHT_<FIELD>``, the
standard ``OTEL_*`` variable where one exists, the default.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from rlsight.errors import ConfigError, warn_once

__all__ = ["SETTINGS", "OtlpProtocol", "Setting", "StoreTransport", "TelemetryConfig"]

OtlpProtocol: TypeAlias = Literal["http/protobuf", "grpc"]
_PROTOCOLS: Final = ("http/protobuf", "grpc")
StoreTransport: TypeAlias = Literal["file", "ray"]
_TRANSPORTS: Final = ("file", "ray")
_Scalar: TypeAlias = str | bool | int | float
_AttrValue: TypeAlias = _Scalar | Sequence[_Scalar]


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration field as the docs and the env projection see it."""

    name: str
    env: str
    kind: Literal["bool", "int", "str", "optional_str", "groups", "protocol", "transport",
                  "attributes", "optional_float"]
    default: str
    doc: str
    otel_env: tuple[str, ...] = ()


#: The settings table: docs/configuration.md is generated from it, ``to_env``/``from_env`` use it.
SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("enabled", "RLSIGHT_ENABLED", "bool", "true",
            "Master switch. Off: every helper is a no-op and no file is written."),
    Setting("run_id", "RLSIGHT_RUN_ID", "optional_str", "generated",
            "Identifies the run on every process (`rl.run.id`). Generated as "
            "`<UTC time>-<6 hex>` when absent; `SLURM_JOB_ID` is used when set."),
    Setting("run_dir", "RLSIGHT_RUN_DIR", "optional_str", "`./rlsight-runs/<run_id>`",
            "Folder of the local store; made absolute at construction so workers with "
            "another working directory write to the same place."),
    Setting("span_groups", "RLSIGHT_SPAN_GROUPS", "groups", "`per_step`",
            "Span groups, presets, namespaces or `all` to emit (comma-separated in the env)."),
    Setting("otlp_endpoint", "RLSIGHT_OTLP_ENDPOINT", "optional_str", "none",
            "Base URL of an OTLP collector; spans and metrics go there as well as to the store.",
            ("OTEL_EXPORTER_OTLP_ENDPOINT",)),
    Setting("otlp_protocol", "RLSIGHT_OTLP_PROTOCOL", "protocol", "`http/protobuf`",
            "`http/protobuf` or `grpc` (grpc needs the `rlsight[grpc]` extra).",
            ("OTEL_EXPORTER_OTLP_PROTOCOL",)),
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
            "Budget for `shutdown_telemetry`; it returns within it even if a collector hangs."),
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
)
_BY_NAME: Final = {s.name: s for s in SETTINGS}
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def _default_run_id() -> str:
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        return slurm
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

    enabled: bool = True
    run_id: str | None = None
    run_dir: str | None = None
    span_groups: tuple[str, ...] = ("per_step",)
    otlp_endpoint: str | None = None
    otlp_protocol: OtlpProtocol = "http/protobuf"
    local_store: bool = True
    store_transport: StoreTransport = "file"
    service_name: str = "rlsight"
    resource_attributes: Mapping[str, _AttrValue] = field(default_factory=dict)
    engine_native_tracing: bool = False
    shutdown_timeout_ms: int = 5000
    algorithm: str | None = None
    strict: bool = False
    stall_after_s: float | None = None
    stall_after_steps: float | None = None

    def __post_init__(self) -> None:
        for s in SETTINGS:
            value = getattr(self, s.name)
            checked = _check(s, value)
            if checked is not value:
                object.__setattr__(self, s.name, checked)
        if self.run_id is None:
            object.__setattr__(self, "run_id", _default_run_id())
        elif not self.run_id.strip() or "/" in self.run_id:
            raise ConfigError(
                f"TelemetryConfig.run_id={self.run_id!r}: must be non-empty and contain no '/'"
            )
        run_dir = self.run_dir or os.path.join("rlsight-runs", str(self.run_id))
        object.__setattr__(self, "run_dir", str(Path(run_dir).expanduser().absolute()))

    @property
    def run_path(self) -> Path:
        """``run_dir`` as a :class:`~pathlib.Path`."""
        return Path(str(self.run_dir))

    def otlp_signal_endpoint(self, signal: Literal["traces", "metrics"]) -> str | None:
        """Where an exporter of ``signal`` sends: ``<endpoint>/v1/<signal>`` over http/protobuf
        (the OTLP/HTTP path convention), the endpoint itself over grpc; ``None`` without one."""
        if not self.otlp_endpoint:
            return None
        endpoint = self.otlp_endpoint.rstrip("/")
        return f"{endpoint}/v1/{signal}" if self.otlp_protocol == "http/protobuf" else endpoint

    def with_changes(self, **changes: Any) -> TelemetryConfig:
        """A copy with ``changes`` applied (validated like the constructor)."""
        return replace(self, **changes)

    def with_env_fallbacks(self, environ: Mapping[str, str] | None = None) -> TelemetryConfig:
        """Fill fields left at their default from the standard ``OTEL_*`` variables."""
        env = os.environ if environ is None else environ
        changes: dict[str, Any] = {}
        for s in SETTINGS:
            if s.otel_env and getattr(self, s.name) == _FIELD_DEFAULTS[s.name]:
                _fill_from_otel(s, env, changes)
        return replace(self, **changes) if changes else self

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
        kwargs: dict[str, Any] = {}
        for s in SETTINGS:
            raw = env.get(s.env)
            if raw is not None:
                kwargs[s.name] = _decode(s, raw, s.env)
                continue
            # Only a field with no RLSIGHT_ variable falls back to OTEL_*: a projected value
            # equal to the default (service_name=rlsight) is still the driver's choice.
            _fill_from_otel(s, env, kwargs)
        return cls(**kwargs)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> TelemetryConfig:
        """Build a config from a parsed YAML/JSON section.

        Keys this version does not know (left over from an older config) are ignored with
        one warning that names them, so an old YAML keeps working.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in mapping if k not in known)
        if unknown:
            warn_once(
                "config-unknown:" + ",".join(unknown),
                f"TelemetryConfig ignores unknown keys {unknown}; they are not used by this "
                f"version of rlsight (known: {', '.join(sorted(known))})",
                stacklevel=2,
            )
        return cls(**{k: v for k, v in mapping.items() if k in known})


_FIELD_DEFAULTS: Final[dict[str, Any]] = {
    f.name: f.default for f in fields(TelemetryConfig) if f.default is not MISSING
}


def _fill_from_otel(s: Setting, env: Mapping[str, str], into: dict[str, Any]) -> None:
    """Set ``into[s.name]`` from the first non-empty standard ``OTEL_*`` variable of ``s``."""
    for var in s.otel_env:
        raw = env.get(var)
        if raw:
            into[s.name] = _decode(s, raw.strip(), var)
            return


def _fail(s: Setting, value: object, accepted: str) -> ConfigError:
    return ConfigError(f"TelemetryConfig.{s.name}={value!r}: expected {accepted}")


def _check_attr_value(s: Setting, key: str, value: object) -> None:
    scalars = (str, bool, int, float)
    items = value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else (value,)
    if all(isinstance(v, scalars) for v in items):
        # The env projection is JSON, which has no NaN or infinity: refuse them here, at
        # construction, rather than in to_env() while the run launches its workers.
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(
                f"TelemetryConfig.{s.name}[{key!r}]={value!r}: attribute values must be finite"
            )
        return
    raise ConfigError(
        f"TelemetryConfig.{s.name}[{key!r}]={value!r}: attribute values must be str, bool, "
        "int, float or a list of those"
    )


def _check(s: Setting, value: Any) -> Any:
    kind = s.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise _fail(s, value, "a bool (true/false)")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(s, value, "an int")
        if value <= 0:
            raise _fail(s, value, "a positive int")
    elif kind == "str":
        if not isinstance(value, str) or not value:
            raise _fail(s, value, "a non-empty str")
    elif kind == "optional_float":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(s, value, "a number or None")
        if not math.isfinite(value) or value <= 0:
            raise _fail(s, value, "a positive, finite number or None")
        value = float(value)
    elif kind == "optional_str":
        if value is not None and not isinstance(value, str):
            raise _fail(s, value, "a str or None")
    elif kind == "protocol":
        if value not in _PROTOCOLS:
            raise _fail(s, value, " or ".join(repr(p) for p in _PROTOCOLS))
    elif kind == "transport":
        if value not in _TRANSPORTS:
            raise _fail(s, value, " or ".join(repr(t) for t in _TRANSPORTS))
    elif kind == "groups":
        if isinstance(value, str):
            value = tuple(v.strip() for v in value.split(",") if v.strip())
        if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise _fail(s, value, "a list of span group, preset or namespace names")
        # The env projection joins names with commas: a name that is blank or holds a comma
        # would come back as a different spec in every worker.
        if any(not v.strip() or "," in v for v in value):
            raise _fail(s, value, "non-empty span group, preset or namespace names without ','")
        value = tuple(v.strip() for v in value)
    elif kind == "attributes":
        if not isinstance(value, Mapping):
            raise _fail(s, value, "a mapping of attribute name to value")
        for key, item in value.items():
            if not isinstance(key, str):
                raise _fail(s, value, "str attribute names")
            _check_attr_value(s, key, item)
        # A private copy with tuples for sequences: the env round trip then compares equal.
        value = {k: v if isinstance(v, (str, bool, int, float)) else tuple(v)
                 for k, v in value.items()}
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
    if s.kind == "int":
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
