"""[tool.rlsight.check] loading: defaults, discovery, overrides and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsight.check import ALL_GUARDS, CheckInputError, load_check_config


def _pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text("[tool.rlsight.check]\n" + body)
    return path


def test_defaults_without_a_pyproject(tmp_path: Path) -> None:
    config = load_check_config(tmp_path)
    assert config.paths == (tmp_path.resolve(),)
    assert config.docs == tmp_path.resolve() / "docs"
    assert config.guards == ALL_GUARDS
    assert config.pyproject is None


def test_nearest_pyproject_above_the_start_is_used(tmp_path: Path) -> None:
    _pyproject(tmp_path, 'paths = ["src"]\n')
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    config = load_check_config(nested)
    assert config.root == tmp_path.resolve()
    assert config.paths == (tmp_path.resolve() / "src",)


def test_pyproject_without_the_section_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert load_check_config(tmp_path).pyproject is None


def test_guards_run_in_canonical_order(tmp_path: Path) -> None:
    config = load_check_config(pyproject=_pyproject(tmp_path, 'guards = ["logger-keys", "span-names"]\n'))
    assert config.guards == ("span-names", "logger-keys")


def test_unknown_guard_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CheckInputError, match=r"unknown guard.*'span-name'.*known guards: span-names"):
        load_check_config(pyproject=_pyproject(tmp_path, 'guards = ["span-name"]\n'))


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CheckInputError, match=r"unknown key.*doc;.*known keys"):
        load_check_config(pyproject=_pyproject(tmp_path, 'doc = "docs"\n'))


def test_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    with pytest.raises(CheckInputError, match="paths = 3"):
        load_check_config(pyproject=_pyproject(tmp_path, "paths = 3\n"))


def test_exclude_glob_matches_a_folder_and_everything_below(tmp_path: Path) -> None:
    config = load_check_config(pyproject=_pyproject(tmp_path, 'exclude = ["src/vendored"]\n'))
    assert config.excluded(tmp_path / "src" / "vendored" / "deep" / "x.py")
    assert not config.excluded(tmp_path / "src" / "vendor.py")


def test_command_line_paths_are_relative_to_the_working_directory(tmp_path: Path) -> None:
    config = load_check_config(pyproject=_pyproject(tmp_path, 'paths = ["src"]\n'))
    other = tmp_path / "elsewhere"
    assert config.with_overrides(paths=["a.py"], cwd=other).paths == (other.resolve() / "a.py",)


def test_helper_modules_always_include_rlsight(tmp_path: Path) -> None:
    config = load_check_config(pyproject=_pyproject(tmp_path, 'helper_modules = ["fw.telemetry"]\n'))
    assert config.helper_modules == ("rlsight", "fw.telemetry")


def test_unparsable_toml_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.rlsight.check\n")
    with pytest.raises(CheckInputError, match="cannot read"):
        load_check_config(tmp_path)


def test_guards_named_says_whether_the_guard_list_was_chosen(tmp_path: Path) -> None:
    """Only a named guard list makes `generated-docs` require a block."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.rlsight.check]\npaths = ['.']\n")
    assert not load_check_config(pyproject=pyproject).guards_named
    assert load_check_config(pyproject=pyproject).with_overrides(guards=["carriers"]).guards_named
    pyproject.write_text("[tool.rlsight.check]\nguards = ['carriers']\n")
    assert load_check_config(pyproject=pyproject).guards_named
