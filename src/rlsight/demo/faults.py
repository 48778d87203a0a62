"""Faults the demo injects on demand (``--inject``), so each diagnosis has a live subject.

=====================================  ===================================================
``straggler=generation/1:2.5``          generation worker 1 decodes 2.5x slower
``hang=policy/1@5:20``                  policy rank 1 stalls 20 s inside training at step 5
``kill=generation/1@6``                 ``ray.kill`` generation worker 1 at the start of step 6;
                                        the run continues on the other workers
``env-errors=0.1``                      10% of environment requests fail and are retried;
                                        the failed attempts are counted ``wasted``
=====================================  ===================================================

Several ``--inject`` flags combine; each kind may be given once per target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Faults", "parse_faults"]

_TARGET = r"(?P<group>generation|policy)/(?P<rank>\d+)"
_PATTERNS = {
    "straggler": re.compile(rf"{_TARGET}:(?P<factor>\d+(\.\d+)?)"),
    "hang": re.compile(rf"{_TARGET}@(?P<step>\d+):(?P<seconds>\d+(\.\d+)?)"),
    "kill": re.compile(rf"{_TARGET}@(?P<step>\d+)"),
    "env-errors": re.compile(r"(?P<rate>0(\.\d+)?|1(\.0+)?)"),
}
_FORMS = ("straggler=generation/1:2.5, hang=policy/1@5:20, kill=generation/1@6, "
          "env-errors=0.1")


@dataclass(frozen=True, slots=True)
class Faults:
    """The faults of one run.

    Attributes:
        slowdown: ``(worker_group, rank) -> factor``: that worker's work takes factor x longer.
        hangs: ``(worker_group, rank) -> (step, seconds)``: that rank stalls inside training.
        kills: ``(worker_group, rank) -> step``: the actor is killed when that step starts.
        env_error_rate: Share of environment requests that fail (each is retried).
    """

    slowdown: dict[tuple[str, int], float] = field(default_factory=dict)
    hangs: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    kills: dict[tuple[str, int], int] = field(default_factory=dict)
    env_error_rate: float = 0.0

    def describe(self) -> list[str]:
        """One line per fault, for the run's header."""
        lines = [f"straggler {g}/{r} x{f:g}" for (g, r), f in sorted(self.slowdown.items())]
        lines += [f"hang {g}/{r} at step {s} for {t:g} s" for (g, r), (s, t) in sorted(self.hangs.items())]
        lines += [f"kill {g}/{r} at step {s}" for (g, r), s in sorted(self.kills.items())]
        if self.env_error_rate:
            lines.append(f"env errors {self.env_error_rate:.0%}")
        return lines


def parse_faults(specs: Iterable[str]) -> Faults:
    """Parse ``--inject`` values.

    Raises:
        ValueError: a value has no known kind or a malformed argument; the message lists the
            accepted forms.
    """
    faults = Faults()
    rate = 0.0
    for spec in specs:
        kind, sep, arg = spec.strip().partition("=")
        pattern = _PATTERNS.get(kind)
        match = pattern.fullmatch(arg) if pattern is not None and sep else None
        if match is None:
            raise ValueError(f"--inject {spec!r}: expected one of {_FORMS}")
        if kind == "env-errors":
            rate = float(match["rate"])
            if rate >= 1:
                raise ValueError(f"--inject {spec!r}: the error rate must be below 1 (retries would fail)")
            continue
        target = (match["group"], int(match["rank"]))
        if kind == "straggler":
            factor = float(match["factor"])
            if factor <= 0:
                raise ValueError(f"--inject {spec!r}: the slowdown factor must be > 0")
            faults.slowdown[target] = factor
        elif kind == "hang":
            faults.hangs[target] = (int(match["step"]), float(match["seconds"]))
        else:
            faults.kills[target] = int(match["step"])
    return Faults(faults.slowdown, faults.hangs, faults.kills, rate)
