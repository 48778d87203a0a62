"""Span groups: who may emit what, the presets that name sets of them, and the fast gate.

A span group is a name owned by a namespace (``rl`` here, or a user library), with a
description and an optional goodput bucket. Config names groups, presets, namespaces or the
reserved wildcard ``all`` in a *spec*. Resolving a spec gives the enabled groups plus the
names nothing owns yet (*pending*): the registry is per process while a spec is job-wide, so a
name may belong to a library this process has not imported. Pending names warn once and are
re-resolved whenever a namespace registers; they are never fatal.

Every emit helper asks :func:`is_span_group_enabled` (one ``in`` test on a frozenset) before it
builds a name, an attribute dict or touches OpenTelemetry, so a disabled group costs about as
much as a ``dict.get``.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from rlsight._rl_groups import NOT_PER_STEP, RL
from rlsight.buckets import Bucket
from rlsight.errors import SpanGroupError, warn_once

__all__ = [
    "ALL",
    "RL",
    "SpanGroup",
    "SpanGroupResolution",
    "is_span_group_enabled",
    "register_span_groups",
    "registered_groups",
    "registered_presets",
    "resolve_span_group_spec",
    "set_span_group_spec",
]

#: The reserved wildcard: every group registered when the spec is (re-)resolved.
ALL: Final = "all"


@dataclass(frozen=True, slots=True)
class SpanGroup:
    """One span group.

    Args:
        name: Lowercase identifier used in specs and in ``rl.span_group``.
        description: One line for the docs table: what the group's spans cover.
        bucket: Goodput bucket of the group's leaf spans; ``None`` for groups whose spans
            do not partition wall time (umbrellas, per-prompt detail, engine spans).
        umbrella: The group's spans structure the trace (job, step, startup...) and carry no
            bucket; emit them with ``umbrella_span`` so a reader sees that at the call site.
    """

    name: str
    description: str
    bucket: Bucket | None = None
    umbrella: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum() or self.name != self.name.lower():
            raise SpanGroupError(
                f"span group name {self.name!r} is invalid; use lowercase letters, digits and '_'"
            )
        if self.name == ALL:
            raise SpanGroupError(f"span group name {ALL!r} is reserved for the wildcard")
        if self.bucket is not None and not isinstance(self.bucket, Bucket):
            try:
                object.__setattr__(self, "bucket", Bucket(self.bucket))
            except ValueError:
                raise SpanGroupError(
                    f"span group {self.name!r} has bucket {self.bucket!r}; use one of "
                    f"{', '.join(b.value for b in Bucket)} (or rlsight.Bucket), or None"
                ) from None
        if self.umbrella and self.bucket is not None:
            raise SpanGroupError(
                f"span group {self.name!r} is an umbrella and has bucket {self.bucket.value!r}; "
                "umbrella spans structure the trace and carry no bucket: drop one of the two"
            )


@dataclass(frozen=True, slots=True)
class SpanGroupResolution:
    """What a spec resolved to: ``enabled`` groups and ``pending`` names nothing owns yet."""

    enabled: frozenset[str]
    pending: tuple[str, ...] = ()
    spec: tuple[str, ...] = field(default=())


class _Gate:
    """The state every emit helper reads; attributes, not a dict, for the cheapest lookup."""

    __slots__ = ("active", "enabled", "groups", "off")

    def __init__(self) -> None:
        # What emit helpers test against: empty unless a runtime is active.
        self.enabled: frozenset[str] = frozenset()
        # Registered groups that are off: ``span()`` returns its no-op after this one test,
        # and only a name in neither set (never registered: a typo) reaches the warning.
        # One set for the life of the process, updated in place and never rebound, so span
        # helpers bind it once as a module global: a disabled ``span()`` then tests it with
        # one global load instead of a global load plus an attribute load.
        self.off: set[str] = set()
        self.active = False
        # name -> group, for the bucket and umbrella flag on the enabled path.
        self.groups: dict[str, SpanGroup] = {}


#: Process-scoped: the mirror of the active runtime's groups that every emit helper reads,
#: kept a module attribute so a disabled span costs one lookup (benchmarks/bench_gate.py).
#: Only the runtime turns it on and off (``_activate``/``_deactivate``).
GATE: Final = _Gate()


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owner: dict[str, str] = {}  # group name -> namespace
        self.presets: dict[str, tuple[str, tuple[str, ...]]] = {}  # preset -> (namespace, members)
        self.namespaces: dict[str, list[str]] = {}
        self.spec: tuple[str, ...] = ("per_step",)
        self.resolution = SpanGroupResolution(frozenset(), (), self.spec)

    def resolve(self, spec: Iterable[str]) -> SpanGroupResolution:
        names = tuple(s.strip() for s in spec if s and s.strip())
        enabled: set[str] = set()
        pending: list[str] = []
        for name in names:
            expanded = self._expand(name, set())
            if expanded is None:
                if name not in pending:
                    pending.append(name)
            else:
                enabled |= expanded
        return SpanGroupResolution(frozenset(enabled), tuple(pending), names)

    def _expand(self, name: str, seen: set[str]) -> set[str] | None:
        if name == ALL:
            return set(GATE.groups)
        if name in GATE.groups:
            return {name}
        if name in self.presets:
            if name in seen:
                return set()
            seen.add(name)
            out: set[str] = set()
            for member in self.presets[name][1]:
                out |= self._expand(member, seen) or set()
            return out
        if name in self.namespaces:
            return set(self.namespaces[name])
        return None

    def describe(self) -> str:
        return (
            "registered groups: " + (", ".join(sorted(GATE.groups)) or "none")
            + "; presets: " + ", ".join(sorted([*self.presets, ALL]))
            + "; namespaces: " + (", ".join(sorted(self.namespaces)) or "none")
        )

    def did_you_mean(self, name: str) -> str:
        """`` (did you mean 'per_step'?)`` for the registered name nearest a pending one, or
        an empty string: a pending name is most often a typo of one of them."""
        known = sorted({*GATE.groups, *self.presets, ALL, *self.namespaces})
        match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        return f" (did you mean {match[0]!r}?)" if match else ""

    def publish(self) -> None:
        self.resolution = self.resolve(self.spec)
        enabled = self.resolution.enabled if GATE.active else frozenset()
        # ``off`` first, in place: groups turning off join it before ``enabled`` drops them
        # (in both sets for a moment: off wins), groups turning on leave it before ``enabled``
        # gains them (in neither set for a moment: the unknown-group path finds them in the
        # registry and returns the no-op without a warning).
        now_off = set(GATE.groups).difference(enabled)
        GATE.off.update(now_off)
        GATE.off.intersection_update(now_off)
        GATE.enabled = enabled


#: Process-scoped: libraries register their groups at import, once per process. Tests put it
#: back with ``rlsight.testing.isolated_registries`` (``snapshot_registry``).
REGISTRY: Final = _Registry()


def register_span_groups(
    namespace: str,
    groups: Iterable[SpanGroup],
    presets: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """Declare the span groups (and presets) a library emits, under its own namespace.

    Call it at import time of the module that owns the emit sites, so the groups exist in
    every process that can emit them. Registering the identical definition twice is a no-op
    (a module imported under two names, a test reloading it); a *different* definition of a
    name another namespace owns is an error. The active spec is re-resolved afterwards, so a
    name that was pending becomes enabled without further calls.

    Args:
        namespace: Owner name, e.g. ``"rl"`` or your package name; may itself appear in a spec.
        groups: The groups.
        presets: Preset name -> member group or preset names.

    Raises:
        SpanGroupError: a name is reserved, owned by another namespace or defined differently,
            or a preset names nothing.
    """
    groups = list(groups)
    if not namespace or not namespace.replace("_", "").replace(".", "").isalnum():
        raise SpanGroupError(f"namespace {namespace!r} is invalid; use letters, digits, '_' or '.'")
    if namespace == ALL:
        raise SpanGroupError(f"namespace {ALL!r} is reserved for the wildcard")
    preset_members = {k: tuple(v) for k, v in (presets or {}).items()}
    with REGISTRY.lock:
        for group in groups:
            if not isinstance(group, SpanGroup):
                raise SpanGroupError(
                    f"register_span_groups({namespace!r}): expected SpanGroup, got {group!r}"
                )
            owner = REGISTRY.owner.get(group.name)
            if owner is not None and (owner != namespace or GATE.groups[group.name] != group):
                raise SpanGroupError(
                    f"span group {group.name!r} is already registered by namespace {owner!r}"
                    + (" with a different definition" if owner == namespace else "")
                    + f"; namespace {namespace!r} must pick another name"
                )
        # A spec names groups, presets and namespaces alike, so one name must mean one thing:
        # a group called like a preset would silently replace the preset in every spec.
        namespaces = set(REGISTRY.namespaces) | {namespace}
        if namespace not in REGISTRY.namespaces and (
            namespace in GATE.groups or namespace in REGISTRY.presets
        ):
            raise SpanGroupError(
                f"namespace {namespace!r} has the name of a registered span group or preset; "
                "a spec could not tell them apart: pick another namespace"
            )
        for group in groups:
            if group.name in namespaces or group.name in REGISTRY.presets:
                raise SpanGroupError(
                    f"span group {group.name!r} of namespace {namespace!r} has the name of a "
                    "namespace or preset; a spec could not tell them apart: pick another name"
                )
        known = set(GATE.groups) | {g.name for g in groups} | set(REGISTRY.presets) | set(preset_members)
        for preset, members in preset_members.items():
            if (
                preset == ALL or preset in GATE.groups or preset in {g.name for g in groups}
                or preset in namespaces
            ):
                raise SpanGroupError(
                    f"preset {preset!r} clashes with a group, a namespace or the wildcard"
                )
            prev = REGISTRY.presets.get(preset)
            if prev is not None and prev != (namespace, members):
                raise SpanGroupError(
                    f"preset {preset!r} is already registered by namespace {prev[0]!r}"
                )
            unknown = [m for m in members if m not in known]
            if not members or unknown:
                raise SpanGroupError(
                    f"preset {preset!r} of namespace {namespace!r} "
                    + (f"names unknown groups {unknown}" if unknown else "is empty")
                    + "; list registered group or preset names"
                )
        names = REGISTRY.namespaces.setdefault(namespace, [])
        for group in groups:
            if group.name not in REGISTRY.owner:
                REGISTRY.owner[group.name] = namespace
                GATE.groups[group.name] = group
                names.append(group.name)
        for preset, members in preset_members.items():
            REGISTRY.presets[preset] = (namespace, members)
        REGISTRY.publish()


def resolve_span_group_spec(spec: Iterable[str]) -> SpanGroupResolution:
    """Resolve ``spec`` against the live registry without changing what is enabled."""
    with REGISTRY.lock:
        return REGISTRY.resolve(spec)


def set_span_group_spec(spec: Iterable[str] | str) -> SpanGroupResolution:
    """Make ``spec`` the process's span-group selection and return what it resolved to.

    A name nothing owns (a typo, or a group of a library not imported here) warns once,
    naming the registered groups, presets and namespaces, and stays pending: it is enabled
    the moment a namespace registers it. The selection takes effect for emit helpers while
    telemetry is set up; before that every group is off.

    Args:
        spec: Group, preset or namespace names, or ``"all"``; a comma-separated string is
            accepted for env-var convenience.
    """
    if isinstance(spec, str):
        spec = spec.split(",")
    with REGISTRY.lock:
        REGISTRY.spec = tuple(s.strip() for s in spec if s and s.strip())
        REGISTRY.publish()
        resolution = REGISTRY.resolution
        described = REGISTRY.describe()
        guesses = {name: REGISTRY.did_you_mean(name) for name in resolution.pending}
    for name in resolution.pending:
        warn_once(
            f"pending-span-group:{name}",
            f"span group spec names {name!r}{guesses[name]}, which no group, preset or namespace "
            f"registered in this process owns; it stays pending until one registers it ({described})",
            stacklevel=2,
        )
    return resolution


def is_span_group_enabled(group: str) -> bool:
    """Whether spans of ``group`` are emitted now: telemetry is set up and the spec enables it.

    Check it at a call site before building anything expensive for a span (per-prompt
    attribute dicts, formatted names); the span helpers check it themselves too.
    """
    return group in GATE.enabled


def registered_groups() -> Mapping[str, tuple[str, SpanGroup]]:
    """Every registered group: name -> (namespace, group), in registration order."""
    with REGISTRY.lock:
        return {name: (REGISTRY.owner[name], g) for name, g in GATE.groups.items()}


def registered_presets() -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """Every registered preset: name -> (namespace, member names)."""
    with REGISTRY.lock:
        return dict(REGISTRY.presets)


def _activate(spec: Iterable[str]) -> SpanGroupResolution:
    """Turn the gate on with ``spec`` (runtime setup)."""
    GATE.active = True
    return set_span_group_spec(list(spec))


def after_fork() -> None:
    """Replace the registry lock in a forked child (another thread may have held it)."""
    REGISTRY.lock = threading.RLock()


def current_spec() -> tuple[str, ...]:
    """The spec set last (``set_span_group_spec`` or a runtime's setup), pending names included."""
    with REGISTRY.lock:
        return REGISTRY.spec


def snapshot_registry() -> Callable[[], None]:
    """A function that puts the registry (groups, presets, namespaces, spec) back as it is now.

    The registry is process-wide by design (libraries declare their groups at import), so a
    test that registers groups restores it through :func:`rlsight.testing.isolated_registries`.
    """
    with REGISTRY.lock:
        owner, presets = dict(REGISTRY.owner), dict(REGISTRY.presets)
        namespaces = {k: list(v) for k, v in REGISTRY.namespaces.items()}
        spec, groups = REGISTRY.spec, dict(GATE.groups)

    def restore() -> None:
        with REGISTRY.lock:
            REGISTRY.owner, REGISTRY.presets = dict(owner), dict(presets)
            REGISTRY.namespaces = {k: list(v) for k, v in namespaces.items()}
            REGISTRY.spec = spec
            GATE.groups = dict(groups)
            REGISTRY.publish()

    return restore


def _deactivate() -> None:
    """Turn every group off (runtime shutdown); the registry and spec stay."""
    with REGISTRY.lock:
        GATE.active = False
        REGISTRY.publish()


_P, _O = Bucket.PRODUCTIVE, Bucket.OVERHEAD
_RL_GROUPS: Final = (
    SpanGroup(RL.JOB, "the run's root span, rl.job", umbrella=True),
    SpanGroup(RL.STEP, "one training step, rl.step, on the controller", umbrella=True),
    SpanGroup(RL.STARTUP, "everything before the first step, rl.startup", umbrella=True),
    SpanGroup(RL.SETUP, "startup phases rl.setup.<phase> and worker model loads", umbrella=True),
    SpanGroup(RL.ROLLOUT, "a rollout: generation plus reward for one batch", umbrella=True),
    SpanGroup(RL.GENERATION, "generating completions with the inference engine", _P),
    SpanGroup(RL.REWARD, "scoring completions (reward models, environments)", _P),
    SpanGroup(RL.LOGPROB, "reference and old-policy log-probabilities", _O),
    SpanGroup(RL.TRAINING, "forward/backward passes of policy or value training", _P),
    SpanGroup(RL.OPTIMIZER, "optimizer steps and gradient synchronisation", _P),
    SpanGroup(RL.REFIT, "pushing new policy weights to the generation engines", _O),
    SpanGroup(RL.CHECKPOINT, "saving and loading checkpoints", _O),
    SpanGroup(RL.VALIDATION, "validation passes", _O),
    SpanGroup(RL.DATA_PLANE, "moving batches between actors (put/get/clear)", _O),
    SpanGroup(RL.EFFICIENCY, "declared waits and waste, bucket from the category prefix"),
    SpanGroup(RL.PER_PROMPT, "spans emitted once per prompt (volume scales with data)"),
    SpanGroup(RL.ENGINE, "the inference engine's own per-request spans"),
)
_PER_STEP: Final = tuple(g.name for g in _RL_GROUPS if g.name not in NOT_PER_STEP)
_MINIMAL: Final = (RL.JOB, RL.STEP, RL.STARTUP, RL.SETUP, RL.EFFICIENCY)

# ``default`` is the reference instrumentation's name for its everyday preset (docs/migrating.md);
# a spec carried over from it resolves to per_step instead of warning that it names nothing.
register_span_groups(
    "rl", _RL_GROUPS, presets={"per_step": _PER_STEP, "minimal": _MINIMAL, "default": ("per_step",)}
)
