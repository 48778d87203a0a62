"""Static resolution of span names, groups and keys: what the guards can and cannot see."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rlsight.check._collector import collect_facts
from rlsight.check._facts import SpanEmit
from rlsight.check._project import load_project
from rlsight.check._values import Resolved

HEADER = "from rlsight import RL, span\n"


def _emits(tmp_path: Path, source: str, **others: str) -> list[SpanEmit]:
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    files = [(pkg / "mod.py", HEADER + source)] + [(pkg / f"{n}.py", t) for n, t in others.items()]
    for path, text in files:
        path.write_text(text)
    project = load_project([(p, p.name) for p, _ in files], [], ("rlsight",))
    return collect_facts(project).spans


def _name(tmp_path: Path, source: str, **others: str) -> Resolved:
    [emit] = _emits(tmp_path, source, **others)
    return emit.name


def test_literal(tmp_path: Path) -> None:
    assert _name(tmp_path, 'span("g", "a.b")\n').values == {"a.b"}


def test_module_constant(tmp_path: Path) -> None:
    assert _name(tmp_path, 'NAME = "a.b"\nspan("g", NAME)\n').values == {"a.b"}


def test_lowercase_module_variable_is_not_a_constant(tmp_path: Path) -> None:
    assert _name(tmp_path, 'name = "a.b"\nspan("g", name)\n').unknown is not None


def test_constant_bound_twice_is_unknown(tmp_path: Path) -> None:
    assert _name(tmp_path, 'NAME = "a"\nNAME = "b"\nspan("g", NAME)\n').unknown is not None


def test_class_constant(tmp_path: Path) -> None:
    assert _name(tmp_path, 'class N:\n    A = "x.a"\nspan("g", N.A)\n').values == {"x.a"}


def test_self_class_constant_inside_a_method(tmp_path: Path) -> None:
    source = 'class W:\n    NAME = "w.run"\n    def run(self):\n        span("g", self.NAME)\n'
    assert _name(tmp_path, source).values == {"w.run"}


def test_constant_imported_from_another_checked_module(tmp_path: Path) -> None:
    source = 'from pkg.names import N\nspan("g", N.A + ".x")\n'
    assert _name(tmp_path, source, names='class N:\n    A = "n.a"\n').values == {"n.a.x"}


def test_module_alias_attribute(tmp_path: Path) -> None:
    source = 'from pkg import names\nspan("g", names.SPAN)\n'
    assert _name(tmp_path, source, names='SPAN = "m.s"\n').values == {"m.s"}


def test_fstring_of_constants(tmp_path: Path) -> None:
    assert _name(tmp_path, 'P = "rl.sc"\nspan("g", f"{P}.step")\n').values == {"rl.sc.step"}


def test_fstring_with_runtime_value_is_unknown(tmp_path: Path) -> None:
    assert _name(tmp_path, 'def f(i):\n    x = str(i)\n    span("g", f"a.{x}")\n').unknown is not None


def test_prefix_on_a_parameter_is_a_wrapper(tmp_path: Path) -> None:
    assert _name(tmp_path, 'def f(phase):\n    span("g", "rl.setup." + phase)\n').forwarded == "phase"


def test_conditional_expression_gives_both_values(tmp_path: Path) -> None:
    source = 'def f(flag):\n    span("g", "a" if flag else "b")\n'
    assert _name(tmp_path, source).values == {"a", "b"}


def test_local_assigned_in_branches_gives_every_value(tmp_path: Path) -> None:
    source = 'def f(flag):\n    if flag:\n        n = "a"\n    else:\n        n = "b"\n    span("g", n)\n'
    assert _name(tmp_path, source).values == {"a", "b"}


def test_local_assigned_from_a_call_is_unknown(tmp_path: Path) -> None:
    source = 'def f():\n    n = "a"\n    n = str(3)\n    span("g", n)\n'
    assert _name(tmp_path, source).unknown is not None


def test_parameter_is_forwarded_not_unknown(tmp_path: Path) -> None:
    assert _name(tmp_path, 'def wrap(name):\n    return span("g", name)\n').forwarded == "name"


def test_closure_sees_the_enclosing_functions_local(tmp_path: Path) -> None:
    source = 'def f():\n    n = "a.b"\n    def g():\n        span("g", n)\n'
    assert _name(tmp_path, source).values == {"a.b"}


def test_aliased_import_of_the_helper_is_recognised(tmp_path: Path) -> None:
    emits = _emits(tmp_path, 'from rlsight import span as open_span\nopen_span("g", "a")\n')
    assert [e.name.values for e in emits] == [{"a"}]


def test_unrelated_span_method_is_not_a_helper(tmp_path: Path) -> None:
    assert _emits(tmp_path, 'class T:\n    def span(self, a, b): ...\nT().span("g", "a")\n') == []


def test_traced_default_name_is_the_nested_qualname(tmp_path: Path) -> None:
    source = (
        "from rlsight import traced\n"
        "class A:\n    def outer(self):\n        @traced('g')\n        def inner(): ...\n"
    )
    assert _name(tmp_path, source).values == {"A.outer.<locals>.inner"}


def test_rl_group_constant_resolves_through_rlsight_sources(tmp_path: Path) -> None:
    import rlsight

    pkg_dir = Path(rlsight.__file__).parent
    (tmp_path / "user.py").write_text(HEADER + 'span(RL.GENERATION, "x")\n')
    external = [(pkg_dir / n, f"<rlsight>/{n}") for n in ("__init__.py", "groups.py", "_rl_groups.py")]
    project = load_project([(tmp_path / "user.py", "user.py")], external, ("rlsight",))
    [emit] = [e for e in collect_facts(project).spans if not e.module.external]
    assert emit.group.values == {"generation"}


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(value=_TEXT)
def test_any_string_literal_resolves_to_itself(value: str) -> None:
    import ast

    from rlsight.check._project import Project
    from rlsight.check._source import SourceModule

    tree = ast.parse(f"X = {value!r}\n")
    module = SourceModule(Path("m.py"), "m.py", "m", False, tree, ())
    project = Project([module], ("rlsight",))
    assign = tree.body[0]
    assert isinstance(assign, ast.Assign)
    assert project.resolve(module, assign.value, None) == Resolved(values=frozenset({value}))


@given(parts=st.lists(_TEXT, min_size=1, max_size=5))
def test_concatenation_of_literals_resolves_to_the_joined_string(parts: list[str]) -> None:
    import ast

    from rlsight.check._project import Project
    from rlsight.check._source import SourceModule

    tree = ast.parse(" + ".join(repr(p) for p in parts), mode="eval")
    module = SourceModule(Path("m.py"), "m.py", "m", False, ast.parse(""), ())
    resolved = Project([module], ("rlsight",)).resolve(module, tree.body, None)
    assert resolved.values == {"".join(parts)}


def test_a_namespace_package_resolves_its_own_helpers_and_constants(tmp_path: Path) -> None:
    """`src/nspkg` without an `__init__.py`: `from nspkg.telemetry import span` is a re-exported
    helper, and `from nspkg.names import N` a constant, just as in a regular package."""
    pkg = tmp_path / "src" / "nspkg"
    pkg.mkdir(parents=True)
    files = {
        "telemetry.py": "from rlsight import RL, span\n",
        "names.py": 'class N:\n    TRAIN = "ns.train"\n',
        "loop.py": ("from rlsight import RL\nfrom nspkg.telemetry import span\nfrom nspkg.names import N\n"
                    'span(RL.TRAINING, N.TRAIN)\nspan(RL.GENERATION, "ns.generate")\n'),
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    project = load_project([(pkg / n, f"src/nspkg/{n}") for n in files], [], ("rlsight",))
    emits = collect_facts(project).spans
    assert sorted(v for e in emits for v in e.name.values) == ["ns.generate", "ns.train"]


def test_two_namespace_modules_of_one_dotted_path_are_not_guessed_between(tmp_path: Path) -> None:
    """`a/pkg/tel.py` and `b/pkg/tel.py` both answer to `pkg.tel`: neither is followed."""
    files = []
    for root, name in (("a", "x.one"), ("b", "x.two")):
        pkg = tmp_path / root / "pkg"
        pkg.mkdir(parents=True)
        (pkg / "tel.py").write_text(f'from rlsight import RL, span\nNAME = "{name}"\n')
        files.append((pkg / "tel.py", f"{root}/pkg/tel.py"))
    loop = tmp_path / "loop.py"
    loop.write_text("from rlsight import RL\nfrom pkg.tel import span, NAME\nspan(RL.TRAINING, NAME)\n")
    project = load_project([*files, (loop, "loop.py")], [], ("rlsight",))
    assert collect_facts(project).spans == []
    assert project.by_name["a.pkg.tel"].display == "a/pkg/tel.py"
