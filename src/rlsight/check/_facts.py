"""The facts the guards judge, gathered in one pass over the project (:mod:`._collector`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsight.check._source import SourceModule
from rlsight.check._values import Resolved

__all__ = [
    "CarrierDispatch",
    "CarrierMethod",
    "CategoryDeclaration",
    "CategoryUse",
    "Facts",
    "GroupDeclaration",
    "GroupGate",
    "KeyDeclaration",
    "KeyEmit",
    "SpanEmit",
]


@dataclass(frozen=True, slots=True)
class SpanEmit:
    """A call that opens a span (or a decorator that does, per call)."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    helper: str
    group: Resolved
    name: Resolved
    in_per_prompt_scope: bool = False
    per_prompt_gate: int | None = None

    @property
    def path(self) -> str:
        """The module's display path."""
        return self.module.display


@dataclass(frozen=True, slots=True)
class GroupDeclaration:
    """A ``SpanGroup(...)`` definition."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    name: Resolved
    umbrella: bool


@dataclass(frozen=True, slots=True)
class GroupGate:
    """An ``is_span_group_enabled(group)`` test: code gated on a group uses it."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    group: Resolved


@dataclass(frozen=True, slots=True)
class CategoryDeclaration:
    """One category passed to ``declare_efficiency_categories``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    category: Resolved


@dataclass(frozen=True, slots=True)
class CategoryUse:
    """The category of an ``efficiency_span(...)`` call."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    category: Resolved


@dataclass(frozen=True, slots=True)
class CarrierMethod:
    """A function or method that accepts a trace carrier (``@accepts_trace_context``)."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    name: str
    qualname: str
    via: str


@dataclass(frozen=True, slots=True)
class CarrierDispatch:
    """A call that sends a trace carrier to the method named ``target``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    target: str
    via: str


@dataclass(frozen=True, slots=True)
class KeyDeclaration:
    """The ``logger_key`` of a ``MetricSpec(...)``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    key: Resolved


@dataclass(frozen=True, slots=True)
class KeyEmit:
    """A key produced into a dict: a dict-display key, ``d[k] = ...`` or ``dict(k=...)``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    key: str


@dataclass(slots=True)
class Facts:
    """Everything the guards judge, from one pass over the project."""

    spans: list[SpanEmit] = field(default_factory=list)
    groups: list[GroupDeclaration] = field(default_factory=list)
    gates: list[GroupGate] = field(default_factory=list)
    categories_declared: list[CategoryDeclaration] = field(default_factory=list)
    categories_used: list[CategoryUse] = field(default_factory=list)
    carrier_methods: list[CarrierMethod] = field(default_factory=list)
    dispatches: list[CarrierDispatch] = field(default_factory=list)
    keys_declared: list[KeyDeclaration] = field(default_factory=list)
    keys_emitted: list[KeyEmit] = field(default_factory=list)
