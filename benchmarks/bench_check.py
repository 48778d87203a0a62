"""What ``rlsight check`` costs next to just parsing the same files.

The check reads sources with ``ast`` and never imports them, so its floor is reading and
parsing every file. The table compares a full run of every guard (parse, index, collect
facts, read the docs, regenerate the docs' tables from the live registries) with that floor,
on rlsight's own tree and on the large-framework fixture of the tests. A ratio near 1 means
the guards themselves are cheap next to parsing; the absolute figure says whether it fits in
a pre-commit hook.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _harness import compare, emit_json, parse_args, ratio_table

from rlsight.check import load_check_config, run_check
from rlsight.check._source import python_files

REPO = Path(__file__).resolve().parents[1]
BIGRL = REPO / "tests" / "check" / "fixtures" / "bigrl" / "pyproject.toml"


def _parse_only(paths: list[Path]) -> object:
    return [ast.parse(p.read_text(encoding="utf-8")) for p in paths]


def main() -> None:
    args = parse_args()
    rounds = 3 if args.quick else 9
    own = load_check_config(pyproject=REPO / "pyproject.toml")
    big = load_check_config(pyproject=BIGRL)
    own_files = [f for p in own.paths for f in python_files(p)]
    big_files = [f for p in big.paths for f in python_files(p)]
    results = compare(
        {
            f"parse rlsight tree ({len(own_files)} files)": lambda: _parse_only(own_files),
            "rlsight check on rlsight": lambda: run_check(own),
            f"parse bigrl fixture ({len(big_files)} files)": lambda: _parse_only(big_files),
            "rlsight check on bigrl (+ rlsight's sources)": lambda: run_check(big),
        },
        number=1,
        rounds=rounds,
        loop_overhead=False,
    )
    names = list(results)
    doc = ratio_table(
        "rlsight check vs ast.parse of the same files",
        results,
        [("check / parse (rlsight)", names[1], names[0]), ("check / parse (bigrl)", names[3], names[2])],
    )
    if args.json:
        emit_json(doc)


if __name__ == "__main__":
    main()
