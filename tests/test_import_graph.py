"""The import graph of ``src/rlsight`` flows one way, and every import is an import statement.

Read statically (every ``import`` in every module, function-local and ``TYPE_CHECKING`` ones
included), so the test sees arrows that a lazy import would hide from ``sys.modules``.

- The reading side (``rlsight.analysis``, ``rlsight.render``) never reaches the
  instrumentation registries, even through another module: a report must describe the run
  (its ``manifest.json`` catalog), not whatever the reading process happened to import.
- The commands never import a registry directly (``check`` and ``demo`` reach them through
  the drift checker and the demo program, which exist to read or drive them).
- No module imports by a string (``importlib.import_module``, ``__import__``), which hides an
  arrow from readers and tools, except where the name is the user's.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

import rlsight
from rlsight._rl_groups import NOT_PER_STEP, rl_group_names
from rlsight.groups import registered_groups, registered_presets, resolve_span_group_spec

SRC: Final = Path(rlsight.__file__).parent

#: Modules that hold the process's instrumentation state: the group registry and gate, metric
#: groups, efficiency categories, the active runtime, the run catalog built from them, and the
#: emitters that write to them.
REGISTRIES: Final = frozenset({
    "rlsight.groups", "rlsight.metrics", "rlsight.spans", "rlsight.runtime", "rlsight._catalog",
    "rlsight.engines", "rlsight.propagation", "rlsight.discards", "rlsight.timers", "rlsight.logs",
    "rlsight.http", "rlsight.ray", "rlsight.testing", "rlsight.step_summary",
})
READING_SIDE: Final = ("rlsight.analysis", "rlsight.render")
COMMANDS: Final = "rlsight.commands"

#: module -> why its import by name is genuinely dynamic.
DYNAMIC_IMPORTS: Final = {
    "rlsight.ray": "Ray's worker_process_setup_hook may name the user's own hook as 'pkg.mod.func'",
}
_BY_NAME: Final = frozenset({"import_module", "__import__"})


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in src.rglob("*.py"):
        parts = ["rlsight", *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every rlsight module ``name`` imports, with the packages an import loads on the way."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] != "rlsight":
                continue
            # Importing a.b.c runs a.b's __init__ too (the top package is always loaded).
            for cut in range(2, len(parts) + 1):
                module = ".".join(parts[:cut])
                if module in known:
                    yield module


def _graph(src: Path) -> dict[str, set[str]]:
    known = _modules(src)
    return {name: set(_imports(name, path, known)) for name, path in known.items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _registry(name: str) -> bool:
    return any(_within(name, r) for r in REGISTRIES)


def _reading_side_arrows(graph: dict[str, set[str]]) -> list[str]:
    """'a -> ... -> registry' for every registry reachable from the reading side."""
    found = []
    for start in sorted(m for m in graph if any(_within(m, p) for p in READING_SIDE)):
        paths = {start: [start]}
        stack = [start]
        while stack:
            current = stack.pop()
            for target in sorted(graph[current]):
                if target in paths:
                    continue
                paths[target] = [*paths[current], target]
                if _registry(target):
                    found.append(" -> ".join(paths[target]))
                else:
                    stack.append(target)
    return found


def _string_imports(src: Path) -> list[str]:
    found = []
    for name, path in _modules(src).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in _BY_NAME and name not in DYNAMIC_IMPORTS:
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_reading_side_never_reaches_an_instrumentation_registry() -> None:
    """analysis and render reach no registry, directly or through the store or a helper."""
    assert _reading_side_arrows(_graph(SRC)) == []


def test_commands_import_no_registry_directly() -> None:
    """A subcommand reads runs through analysis/store; it does not import a registry itself."""
    graph = _graph(SRC)
    arrows = [
        f"{m} -> {t}" for m in sorted(graph) if _within(m, COMMANDS) for t in sorted(graph[m]) if _registry(t)
    ]
    assert arrows == []


def test_no_module_imports_by_a_string() -> None:
    """Every import is a statement; the one by-name import is the user's hook, named here."""
    assert _string_imports(SRC) == []


def test_the_dynamic_import_allowance_is_still_needed() -> None:
    """An allowance whose module no longer imports by name is stale: drop it."""
    for name in DYNAMIC_IMPORTS:
        path = _modules(SRC)[name]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert any(getattr(c.func, "attr", getattr(c.func, "id", None)) in _BY_NAME for c in calls), name


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("analysis/volume.py", "from rlsight.groups import RL\n",
         "rlsight.analysis.volume -> rlsight.groups"),
        # Through another module: the store's live reader importing the registry.
        ("store/_live.py", "from rlsight.spans import span\n", "-> rlsight.store._live -> rlsight.spans"),
        ("render/table.py", "def f():\n    from rlsight.metrics import SKIPPED\n",
         "rlsight.render.table -> rlsight.metrics"),
    ],
)
def test_an_arrow_into_a_registry_is_found(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    """The walk catches a direct, a transitive and a function-local arrow (it can fail)."""
    copy = tmp_path / "rlsight"
    for path in SRC.rglob("*.py"):
        target = copy / path.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    broken = copy / module
    broken.write_text(broken.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
    arrows = _reading_side_arrows(_graph(copy))
    assert any(expected in a for a in arrows), arrows


def test_a_string_dispatched_import_is_found(tmp_path: Path) -> None:
    """``importlib.import_module("rlsight.x")`` in any module but the allowed one is reported."""
    (tmp_path / "rlsight").mkdir()
    (tmp_path / "rlsight" / "__init__.py").write_text("")
    cli = "import importlib\nm = importlib.import_module('rlsight.x')\n"
    (tmp_path / "rlsight" / "cli.py").write_text(cli)
    (tmp_path / "rlsight" / "ray.py").write_text("import importlib\nm = importlib.import_module(name)\n")
    assert _string_imports(tmp_path / "rlsight") == ["rlsight.cli:2 importlib.import_module('rlsight.x')"]


def test_the_reading_side_knows_the_same_rl_groups_as_the_registry() -> None:
    """The pure group names the analysis falls back on are exactly what groups.py registers."""
    rl = {name for name, (namespace, _group) in registered_groups().items() if namespace == "rl"}
    assert set(rl_group_names()) == rl
    assert "per_step" in registered_presets()
    per_step = resolve_span_group_spec(["per_step"]).enabled & rl
    assert per_step == rl - NOT_PER_STEP


def test_each_room_in_the_architecture_page_stays_under_its_size() -> None:
    """docs/architecture.md's module table is true: each module exists and is under its size."""
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w/]+\.py)` \| < (\d+) lines \|", page, re.M)
    assert len(rows) >= 10  # the table is there, not renamed away
    over = [
        f"{path}: {n} lines, the page says < {bound}"
        for path, bound in rows
        if (n := len((SRC / path).read_text(encoding="utf-8").splitlines())) >= int(bound)
    ]
    assert over == []
