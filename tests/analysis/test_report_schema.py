"""The published JSON Schema of `rlsight report --json`: it is what the model says, real reports
satisfy it (integers are JSON integers, not floats), and docs/cli.md agrees with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _build import RunBuilder, analyze
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import build, runs

from rlsight.analysis._from_json import from_json
from rlsight.analysis.model import RunReport
from rlsight.analysis.schema import SCHEMA_FILE, report_json_schema, report_problems
from rlsight.cli import EXIT_OK, main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _strict_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """Draft 2020-12 where "integer" means a JSON integer: 3.0 is a number, not an integer."""
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


_VALIDATOR = _strict_validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _reading_schema() -> dict[str, Any]:
    """The published schema less the fields the model defaults: what a reader must accept from
    an earlier rlsight that did not write them yet."""
    import dataclasses

    from rlsight.analysis import model

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for name, node in [("RunReport", schema), *schema["$defs"].items()]:
        defaulted = {f.name for f in dataclasses.fields(getattr(model, name))
                     if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
        node["required"] = [k for k in node["required"] if k not in defaulted]
    return schema


_READING = _strict_validator(_reading_schema())


def _errors(document: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _VALIDATOR.iter_errors(document)]


def _rich_run() -> RunBuilder:
    """Startup with phases and model loads, six steps, four policy ranks with one straggler."""
    run = RunBuilder()
    d = run.process()
    job = d.span("rl.job", 0, 100, group="job")
    startup = d.span("rl.startup", 0, 10, parent=job, group="startup")
    d.span("rl.setup.ray", 0, 3, parent=startup, group="setup")
    d.span("rl.setup.workers", 3, 9, parent=startup, group="setup")
    for n in range(6):
        t = 10 + 10 * n
        step = d.step(n + 1, t, t + 10, parent=job)
        d.span("rl.rollout.generate", t, t + 3.5, parent=step, bucket="productive")
        d.span("rl.refit.push_weights", t + 4, t + 5, parent=step, bucket="overhead")
        d.span("rl.efficiency.idle.barrier", t + 5, t + 6, parent=step, bucket="idle")
        d.span("rl.train.policy", t + 6, t + 9.5, parent=step, bucket="productive")
    for rank in range(4):
        w = run.process("policy", rank, devices=2)
        w.span("rl.worker.load_model", 3.5, 7 + rank / 3, group="setup", **{"rl.backend": "dtensor"})
        for n in range(6):
            t = 16 + 10 * n
            slow = 2.5 if (rank, n) == (3, 4) else 0.0
            w.span("rl.train.forward_backward", t, t + 1 + rank / 100 + slow, bucket="productive")
    return run


def _document(run: RunBuilder) -> dict[str, Any]:
    """What `rlsight report --json` prints, parsed as any consumer would."""
    return json.loads(json.dumps(analyze(run).to_dict()))


class TestPublishedSchema:
    def test_the_published_file_is_what_the_report_model_gives(self) -> None:
        """After a model change: python -m rlsight.analysis.schema --write"""
        assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == report_json_schema()

    def test_the_schema_is_a_valid_draft_2020_12_schema(self) -> None:
        jsonschema.Draft202012Validator.check_schema(report_json_schema())

    def test_statistics_are_numbers_and_a_missing_startup_span_is_null(self) -> None:
        """Issue #18: the page said every *_ns field is an integer."""
        defs = report_json_schema()["$defs"]
        assert defs["Stat"]["properties"]["median_ns"] == {"type": "number"}
        assert defs["Straggler"]["properties"]["mad_ns"] == {"type": "number"}
        assert defs["Startup"]["properties"]["startup_span_ns"] == {"type": ["integer", "null"]}
        assert defs["Buckets"]["properties"]["wall_ns"] == {"type": "integer"}


class TestReportsSatisfyIt:
    def test_the_cli_json_of_a_rich_run_validates(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = _rich_run().write(tmp_path / "run1")
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        # Every section the schema describes holds something, so each $def is exercised.
        assert doc["stragglers"]["findings"] and doc["startup"]["load_model_groups"]
        assert doc["step_summary"] is not None and doc["top"] and doc["startup"]["phases"]
        assert _errors(doc) == []

    def test_a_run_without_steps_or_startup_validates_with_its_nulls(self) -> None:
        run = RunBuilder()
        run.process().span("rl.train.policy", 0, 1, bucket="productive")
        doc = _document(run)
        assert doc["step_summary"] is None and doc["startup"]["startup_span_ns"] is None
        assert _errors(doc) == []

    def test_a_float_where_the_schema_says_integer_is_rejected(self) -> None:
        """The validator is strict: a JSON 3.0 is not an integer, so the tests above can fail."""
        doc = _document(_rich_run())
        doc["summary"]["steps"] = float(doc["summary"]["steps"])
        assert any(e.startswith("summary/steps:") for e in _errors(doc))

    @given(runs())
    @settings(max_examples=40, deadline=None)
    def test_every_random_run_validates(self, case: Any) -> None:
        assert _errors(json.loads(json.dumps(analyze(build(*case)).to_dict()))) == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        out += _paths(child, (*at, key))
    return out


def _builds(document: dict[str, Any]) -> bool:
    """What the model's constructors accept, the check aside."""
    try:
        from_json(RunReport, {k: v for k, v in document.items() if k != "schema_version"})
    except Exception:
        return False
    return True


class TestReportProblems:
    """``report_problems`` is the published schema (strict integers) plus the bucket partition
    the model enforces: it passes exactly the documents both accept."""

    _RICH = _document(_rich_run())

    @given(st.data())
    @settings(max_examples=150, deadline=None)
    def test_it_agrees_with_jsonschema_and_the_model_on_damaged_reports(self, data: st.DataObject) -> None:
        doc = json.loads(json.dumps(self._RICH))
        path = data.draw(st.sampled_from(_paths(doc)))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(_JSON)
        problems = report_problems(doc)
        errors = [e.message for e in _READING.iter_errors(doc)]
        assert (problems == []) == (errors == [] and _builds(doc)), (path, problems, errors)

    def test_a_real_report_has_none(self) -> None:
        assert report_problems(self._RICH) == []

    def test_buckets_that_do_not_add_up_are_a_problem(self) -> None:
        """The model refuses them (as a rollup bug); a saved file must be refused before that."""
        doc = json.loads(json.dumps(self._RICH))
        doc["steps"][0]["buckets"]["idle_ns"] += 1
        [problem] = report_problems(doc)
        assert problem.startswith("steps[0].buckets: the buckets sum to")
        assert not _builds(doc)

    def test_a_report_saved_before_a_field_was_added_still_reads(self) -> None:
        """Fields with a model default came after schema_version 1 was published: a baseline
        saved by an earlier rlsight lacks them, and ``rlsight diff`` must still read it."""
        import dataclasses

        from rlsight.analysis.columns import span_columns_from_records
        from rlsight.analysis.live import post_mortem
        from rlsight.store._live import LiveProcess, LiveReadResult

        killed = LiveProcess("p", {"service.instance.id": "p"}, opened_ns=1, heartbeat_s=10.0)
        pm = post_mortem(span_columns_from_records([]), LiveReadResult(processes={"p": killed}))
        doc = json.loads(json.dumps(self._RICH))
        doc["postmortem"] = json.loads(json.dumps(dataclasses.asdict(pm)))
        assert report_problems(doc) == [] and doc["postmortem"]["processes"]
        for proc in doc["postmortem"]["processes"]:
            del proc["silent"], proc["last_heard_unix_ns"], proc["stack"]
        del doc["postmortem"]["stall_records"]
        assert report_problems(doc) == []
        report = RunReport.from_dict(doc)
        assert report.postmortem is not None and report.postmortem.processes[0].silent is False
        del doc["postmortem"]["processes"][0]["clean_shutdown"]  # a field every version wrote
        assert report_problems(doc) == ["postmortem.processes[0]: lacks clean_shutdown"]

    def test_each_problem_names_its_field(self) -> None:
        doc = json.loads(json.dumps(self._RICH))
        doc["summary"]["steps"] = 6.0
        del doc["fleets"]
        assert report_problems(doc) == [
            "lacks fleets", "summary.steps: is 6.0 (a number), expected an integer"]


# -- docs/cli.md's field table agrees with the schema ------------------------------------------

_ROW = re.compile(r"^\| (`[^|]+`) \| ([^|]+) \| [^|]* \|$", re.MULTILINE)
_SCALAR: dict[str, Any] = {
    "int": "integer", "float": "number", "str": "string", "bool": "boolean",
    "int or null": ["integer", "null"], "float or null": ["number", "null"],
    "str or null": ["string", "null"],
}


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in node:  # X | None of an object: the object
            node = next(n for n in node["anyOf"] if n.get("type") != "null")
        elif node.get("type") == "array" and "items" in node:
            node = node["items"]
        else:
            return node


def _field(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema of ``summary.buckets`` / ``steps[].step`` (``[]`` steps into array items)."""
    node: dict[str, Any] = schema
    parts = [p for p in re.split(r"\.|\[\]", path) if p]
    for i, part in enumerate(parts):
        node = _resolve(schema, node) if i else node
        node = node["properties"][part]
    return node


def _doc_rows() -> list[tuple[list[str], str]]:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    section = text[text.index("## The `report --json` document"):]
    section = section[: section.index("\n## ", 5)]
    rows = []
    for cells, types in _ROW.findall(section):
        fields = re.findall(r"`([^`]+)`", cells)
        rows.append((fields, types.strip()))
    return rows


def test_every_scalar_type_in_the_cli_page_matches_the_schema() -> None:
    schema = report_json_schema()
    checked = 0
    for fields, types in _doc_rows():
        if "<" in "".join(fields):
            continue  # step_summary.<bucket>: a pattern, not a path
        parts = [t.strip() for t in types.split(",")]
        if len(parts) == 1 and len(fields) > 1:
            parts = parts * len(fields)
        if len(parts) != len(fields):
            continue
        for path, doc_type in zip(fields, parts, strict=True):
            node = _field(schema, path)
            if doc_type in _SCALAR:
                assert node.get("type") == _SCALAR[doc_type], f"docs/cli.md: {path} is {doc_type}"
                checked += 1
            elif doc_type.startswith("[") and doc_type[1:-1] in _SCALAR:
                assert node.get("type") == "array", f"docs/cli.md: {path} is {doc_type}"
                assert node["items"].get("type") == _SCALAR[doc_type[1:-1]], (
                    f"docs/cli.md: {path} is {doc_type}")
                checked += 1
    assert checked >= 20, "the docs/cli.md table matcher is stale"


def test_every_object_listed_in_the_cli_page_names_exactly_the_schemas_fields() -> None:
    schema = report_json_schema()
    checked = 0
    for fields, types in _doc_rows():
        listed = re.match(r"^`\{([^}]*)\}`", types)
        if len(fields) != 1 or listed is None or "<" in fields[0]:
            continue
        keys = {k.split(":")[0].strip() for k in listed.group(1).split(",")}
        node = _resolve(schema, _field(schema, fields[0]))
        assert keys == set(node["properties"]), f"docs/cli.md: {fields[0]} lists {sorted(keys)}"
        checked += 1
    assert checked >= 10, "the docs/cli.md table matcher is stale"
