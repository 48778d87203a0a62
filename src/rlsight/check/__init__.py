"""Drift guards: static checks that the code, its declarations and its docs agree.

The failure modes nothing at runtime can catch (a span the docs do not name, a group nobody
emits, a logger key that silently stopped being produced) are found by reading the sources
with :mod:`ast`; the checked code is never imported. Run it as ``rlsight check`` or::

    from rlsight.check import load_check_config, run_check

    report = run_check(load_check_config())
    print(report.render())

Each guard lives in its own module and reports "found nothing to check" as a violation when
one of its inputs is empty, so a moved file or a stale matcher cannot turn it into a
tautology. See ``docs/check.md``.
"""

from __future__ import annotations

from rlsight.check._model import CheckInputError, GuardResult, Violation
from rlsight.check.config import ALL_GUARDS, CheckConfig, load_check_config
from rlsight.check.runner import SCHEMA_VERSION, CheckReport, run_check

__all__ = [
    "ALL_GUARDS",
    "SCHEMA_VERSION",
    "CheckConfig",
    "CheckInputError",
    "CheckReport",
    "GuardResult",
    "Violation",
    "load_check_config",
    "run_check",
]
