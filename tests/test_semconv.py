"""The wire vocabulary (``rlsight._semconv``): frozen values, spelled in one place.

Stores written by earlier versions, the analysis and other tools read these strings, so a
value never changes; and a second spelling of one in the package is how an emitter and a
reader drift apart, so the package spells each one only in ``_semconv``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlsight import _semconv

#: docs/DESIGN "Wire vocabulary" and "Identity": what every store on disk already holds.
FROZEN = {
    "JOB_SPAN": "rl.job", "STEP_SPAN": "rl.step", "STARTUP_SPAN": "rl.startup",
    "SETUP_SPAN_PREFIX": "rl.setup.", "LOAD_MODEL_SPAN": "rl.worker.load_model",
    "DISCARD_SPAN": "rl.discard", "EFFICIENCY_SPAN_PREFIX": "rl.efficiency.",
    "TIMER_SPAN_PREFIX": "rl.timer.",
    "STEP": "rl.step", "STEP_VALUE": "rl.step.value",
    "TOTAL_STEPS": "rl.total_steps", "BUCKET": "rl.bucket", "SPAN_GROUP": "rl.span_group",
    "CONCURRENT": "rl.concurrent", "THREAD_ID": "thread.id", "LIVE": "rl.live",
    "EFFICIENCY_CATEGORY": "rl.efficiency.category",
    "EFFICIENCY_MEASUREMENT": "rl.efficiency.measurement", "BACKEND": "rl.backend",
    "GROUP_ID": "rl.group_id", "BATCH_SIZE": "rl.batch_size", "PROMPTS": "rl.prompts",
    "DISCARD_GROUP_IDS": "rl.discard.group_ids", "DISCARD_REASON": "rl.discard.reason",
    "DISCARD_COUNT": "rl.discard.count",
    "SERVICE_NAME": "service.name", "SERVICE_INSTANCE_ID": "service.instance.id",
    "RUN_ID": "rl.run.id", "RANK": "rl.rank", "WORLD_SIZE": "rl.world_size",
    "WORKER_GROUP": "rl.worker_group", "STAGE": "rl.stage", "ALGORITHM": "rl.algorithm",
    "DEVICES": "rl.devices", "PROCESS_PID": "process.pid", "HOST_NAME": "host.name", "HOST_IP": "host.ip",
}
_PACKAGE = Path(_semconv.__file__).parent
#: The demo is an example of user code: it writes the documented strings, as users do.
_USER_CODE = ("demo",)
#: Metric names share the ``rl.efficiency.`` namespace; ``metrics.py`` reserves it for them.
_METRIC_NAMESPACES = {"rl.efficiency."}


def test_every_wire_name_keeps_its_frozen_value() -> None:
    declared = {n: getattr(_semconv, n) for n in dir(_semconv) if n.isupper()}
    assert declared == FROZEN


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_package_spells_each_wire_name_only_in_the_vocabulary_module() -> None:
    wire = set(FROZEN.values())
    stray = []
    files = sorted(_PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the scan sees the package, not an empty folder
    for path in files:
        rel = path.relative_to(_PACKAGE)
        if path.name == "_semconv.py" or rel.parts[0] in _USER_CODE:
            continue
        for node in _string_constants(ast.parse(path.read_text(), str(path))):
            allowed = _METRIC_NAMESPACES if rel.name == "metrics.py" else set()
            if node.value in wire - allowed:
                stray.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert stray == [], "import the name from rlsight._semconv instead of spelling it"
