"""Which rlsight helpers the checker recognises, and what the fixed-span helpers emit.

The drift guards never import the checked code, so they know rlsight's API by name: the
helpers that open spans (and the group and span name a fixed-span helper implies), the
decorators, the declarations, and where the span-group gate object lives. This is the one
list; the loader, the resolver and the collector import it.
"""

from __future__ import annotations

from typing import Final

from rlsight._rl_groups import RL
from rlsight._semconv import DISCARD_SPAN, JOB_SPAN, LOAD_MODEL_SPAN, STARTUP_SPAN, STEP_SPAN

__all__ = [
    "DECORATOR_HELPERS",
    "FIXED_SPANS",
    "GATE",
    "GROUP_AND_NAME_HELPERS",
    "KNOWN_HELPERS",
    "PER_PROMPT",
    "UMBRELLA_HELPERS",
]

#: Helpers that open a span, with the group and name they imply when those are fixed.
FIXED_SPANS: Final[dict[str, tuple[str, str]]] = {
    "job_span": (RL.JOB, JOB_SPAN),
    "step_span": (RL.STEP, STEP_SPAN),
    "startup_span": (RL.STARTUP, STARTUP_SPAN),
    "load_model_span": (RL.SETUP, LOAD_MODEL_SPAN),
    "discard": (RL.EFFICIENCY, DISCARD_SPAN),
}
GROUP_AND_NAME_HELPERS: Final = frozenset({"span", "umbrella_span", "record_span"})
DECORATOR_HELPERS: Final = frozenset({"traced", "umbrella_traced"})
UMBRELLA_HELPERS: Final = frozenset({"umbrella_span", "umbrella_traced"})
KNOWN_HELPERS: Final = frozenset(
    {
        *FIXED_SPANS,
        *GROUP_AND_NAME_HELPERS,
        *DECORATOR_HELPERS,
        "setup_span",
        "efficiency_span",
        "SpanGroup",
        "declare_efficiency_categories",
        "accepts_trace_context",
        "traced_actor",
        "dispatch_with_trace_context",
        "trace_context_kwargs",
        "traced_handle",
        "MetricSpec",
        "is_span_group_enabled",
        "per_prompt_scope",
        "TimerBridge",
    }
)
PER_PROMPT: Final = RL.PER_PROMPT

#: The span-group gate object (``_Gate`` instance) every emit helper tests against. A test
#: ``group in <gate>.enabled`` gates on ``group`` like ``is_span_group_enabled(group)``; the
#: collector recognises it by what an expression resolves to, whatever it is called locally.
GATE: Final = "rlsight.groups.GATE"
