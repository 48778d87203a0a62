"""The span-group gate is recognised by what a name resolves to, never by how it is spelled.

``group in <gate>.enabled`` is rlsight's fast path for ``is_span_group_enabled(group)``; the
span-groups guard counts it as using ``group``. The checker must find it under any alias
(an ``as`` import, a re-export, a module constant, a function local) and must not take an
unrelated object that happens to be called ``GATE`` for it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from rlsight.check._collector import collect_facts
from rlsight.check._helpers import GATE
from rlsight.check._project import load_project

# A stand-in for rlsight's own package: its gate module defines the gate object.
_RLSIGHT = {
    "rlsight/__init__.py": "",
    "rlsight/groups.py": "class _Gate:\n    pass\n\n_GATE = _Gate()\n",
    # A look-alike inside rlsight: a module-level object that merely shares the name.
    "rlsight/other.py": "import threading\n\n_GATE = threading.Event()\n",
}


def _gated_groups(tmp_path: Path, sources: dict[str, str]) -> set[str]:
    """Every group the collector saw gated through the gate object, in the checked files."""
    for relpath, text in {**_RLSIGHT, **sources}.items():
        path = tmp_path / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    checked = [(tmp_path / p, p) for p in sources]
    external = [(tmp_path / p, p) for p in _RLSIGHT]
    project = load_project(checked, external, ("rlsight",))
    return {v for g in collect_facts(project).gates if g.group.is_known for v in g.group.values}


def test_gate_constant_names_the_real_gate_object() -> None:
    """GATE is where rlsight's gate lives: the ``_Gate`` instance every emit helper tests."""
    module_name, _, attr = GATE.rpartition(".")
    gate = getattr(importlib.import_module(module_name), attr)
    assert type(gate).__name__ == "_Gate"
    assert hasattr(gate, "enabled")


def test_gate_under_an_import_alias_is_recognised(tmp_path: Path) -> None:
    """``from rlsight.groups import GATE as state; "a" in state.enabled`` gates group a."""
    source = 'from rlsight.groups import GATE as state\n\nif "alpha" in state.enabled:\n    pass\n'
    assert _gated_groups(tmp_path, {"pkg/__init__.py": "", "pkg/mod.py": source}) == {"alpha"}


def test_gate_through_a_reexport_and_a_module_alias_is_recognised(tmp_path: Path) -> None:
    """A gate re-exported by another module, then bound to a constant, is still the gate."""
    sources = {
        "pkg/__init__.py": "",
        "pkg/fast.py": "from rlsight.groups import GATE as G\n",
        "pkg/mod.py": (
            "from pkg.fast import G\n\n_ON = G\n\n"
            'def f():\n    if "beta" not in _ON.enabled:\n        return\n'
        ),
    }
    assert _gated_groups(tmp_path, sources) == {"beta"}


def test_gate_set_bound_to_a_local_is_recognised(tmp_path: Path) -> None:
    """``enabled = GATE.enabled`` then ``"c" in enabled`` (rlsight's span()) gates group c."""
    source = (
        "from rlsight.groups import GATE\n\n"
        'def f():\n    enabled = GATE.enabled\n    return "gamma" in enabled\n'
    )
    assert _gated_groups(tmp_path, {"pkg/__init__.py": "", "pkg/mod.py": source}) == {"gamma"}


def test_look_alikes_named_gate_are_not_the_gate(tmp_path: Path) -> None:
    """Objects spelled ``GATE`` (in rlsight or the project) or a parameter are not gates."""
    sources = {
        "pkg/__init__.py": "",
        # rlsight's other module defines an unrelated GATE; spelling alone must not count.
        "pkg/a.py": 'from rlsight.other import GATE\n\nif "delta" in GATE.enabled:\n    pass\n',
        "pkg/b.py": (
            "class _Thing:\n    enabled = frozenset()\n\n_GATE = _Thing()\n\n"
            'if "epsilon" in GATE.enabled:\n    pass\n'
        ),
        "pkg/c.py": 'def f(enabled):\n    return "zeta" in enabled\n',
        "pkg/d.py": (
            "from rlsight.groups import GATE\n\n"
            'def f(other):\n    enabled = GATE.enabled\n    enabled = other.enabled\n'
            '    return "eta" in enabled\n'
        ),
    }
    assert _gated_groups(tmp_path, sources) == set()
