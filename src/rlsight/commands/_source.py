"""Which run a command reads: a run folder, or one run out of a Collector's file output.

``rlsight report|timeline|diff`` take either a run folder (``traces/``, ``manifest.json``) or
what an OpenTelemetry Collector's file exporter wrote (a file, or a folder of ``*.json`` /
``*.jsonl`` files). The latter is split once into a temporary run folder per run
(:func:`rlsight.store.split_collector_files`), and ``--run-id`` picks one; a single run needs
no flag. What the split skipped or dropped as repeated travels with the result, so the command
reports it like the store reader's own skipped records.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rlsight.errors import StoreError
from rlsight.store import SkippedRecord, read_manifest
from rlsight.store._collector import holds_a_run

if TYPE_CHECKING:
    from rlsight.analysis import RunReport

__all__ = ["AmbiguousRunError", "RunSource", "annotate", "is_run_folder", "open_run"]


class AmbiguousRunError(StoreError):
    """Collector files hold several runs and no ``--run-id`` picked one (a usage error)."""


@dataclass(frozen=True, slots=True)
class RunSource:
    """A run folder to read, and what reading the Collector files already found."""

    folder: Path
    skipped: list[SkippedRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder the store wrote (or one laid out like it)."""
    return path.is_dir() and holds_a_run(path)


#: Keys that tell another rlsight command's ``--json`` document from a report, for the message.
_OTHER_DOCUMENTS: Final = (
    ("now_unix_ns", "rlsight watch --json"),
    ("step_change_pct", "rlsight diff --json"),
    ("runs", "rlsight runs --json"),
    ("guards", "rlsight check --json"),
)


def saved_document(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` when it is one an rlsight command saved (it has a
    ``schema_version``), else ``None``. ``report``, ``timeline`` and ``watch`` use this to name
    the common mistake of passing one where a run is wanted. Bytes go to the JSON parser as
    they are, so a document a shell redirected as UTF-16 still counts."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # JSON lines (Collector output) or not JSON at all
    return doc if isinstance(doc, dict) and "schema_version" in doc else None


def saved_report(path: Path) -> RunReport | None:
    """The report saved in ``path`` with ``rlsight report --json``, or ``None`` when ``path``
    holds no saved rlsight document at all (a run folder, Collector files), for ``rlsight diff``.

    Raises:
        StoreError: ``path`` holds a saved document that is not a report of this version
            (another command's ``--json``, a hand edit, another ``schema_version``); the
            message names the file and what is wrong.
    """
    from rlsight.analysis import RunReport
    from rlsight.analysis.model import SCHEMA_VERSION
    from rlsight.analysis.schema import report_problems

    doc = saved_document(path)
    if doc is None:
        return None
    version = doc["schema_version"]
    problems = report_problems(doc) if version == SCHEMA_VERSION else [
        f"it has schema_version {version!r}, this rlsight reads {SCHEMA_VERSION}"]
    if not problems:
        return RunReport.from_dict(doc)
    other = next((cmd for key, cmd in _OTHER_DOCUMENTS if key in doc and "summary" not in doc), None)
    hint = f"it looks like `{other}` output; " if other else ""
    raise StoreError(f"{path} is not a `rlsight report --json` document: {'; '.join(problems)}; "
                     f"{hint}save one with this rlsight's `rlsight report RUN_DIR --json > FILE`, "
                     "or pass the run folder")


def _label(run_id: str) -> str:
    return run_id or "(no rl.run.id)"


@contextmanager
def open_run(path: Path, run_id: str | None = None) -> Iterator[RunSource]:
    """The run at ``path`` (a run folder or Collector output), selected by ``run_id``.

    Raises:
        StoreError: nothing readable at ``path``, or no run ``run_id`` in it.
        AmbiguousRunError: Collector output with several runs and no ``run_id``.
    """
    if is_run_folder(path):
        manifest = read_manifest(path) or {}
        if run_id is not None and manifest.get("run_id") not in (None, run_id):
            raise StoreError(f"{path} holds run {manifest['run_id']!r}, not {run_id!r}; drop "
                             "--run-id or pass that run's folder")
        yield RunSource(path)
        return
    from rlsight.store import split_collector_files

    with tempfile.TemporaryDirectory(prefix="rlsight-collector-") as tmp:
        split = split_collector_files(path, tmp)
        runs = {r: v for r, v in split.runs.items() if v.spans}
        if run_id is not None:
            if run_id not in runs:
                found = ", ".join(map(_label, sorted(runs))) or "none"
                raise StoreError(f"no spans of run {run_id!r} in the Collector files at {path} "
                                 f"(runs found: {found})")
            chosen = runs[run_id]
        elif len(runs) == 1:
            (chosen,) = runs.values()
        elif not runs:
            if saved_document(path) is not None:
                raise StoreError(f"{path} is a saved `rlsight report --json` document, not a run; "
                                 "pass the run folder it was made from (`rlsight diff` reads "
                                 "saved reports)")
            raise StoreError(f"no spans in the Collector files at {path} ({split.files} file(s), "
                             f"{len(split.skipped)} skipped record(s)); pass a run folder, or "
                             "what a Collector's file exporter wrote")
        else:
            listed = ", ".join(f"{_label(r)} ({runs[r].spans} spans)" for r in sorted(runs))
            raise AmbiguousRunError(f"the Collector files at {path} hold {len(runs)} runs: "
                                    f"{listed}; pick one with --run-id")
        notes = []
        if chosen.duplicate_spans or chosen.duplicate_points:
            notes.append(f"{chosen.duplicate_spans} repeated span(s) and {chosen.duplicate_points} "
                         "repeated metric point(s) of this run in the Collector files ignored "
                         "(a retried export)")
        yield RunSource(chosen.folder, split.skipped, notes)


def annotate(report: RunReport, source: RunSource) -> RunReport:
    """``report`` with what the Collector split skipped and ignored added to its summary and notes."""
    if not source.skipped and not source.notes:
        return report
    from dataclasses import replace

    s = report.summary
    examples = [*s.skipped_examples, *(str(x) for x in source.skipped)][:max(5, len(s.skipped_examples))]
    summary = replace(s, skipped=s.skipped + len(source.skipped), skipped_examples=examples)
    return replace(report, summary=summary, notes=[*report.notes, *source.notes])
