"""A span's status message in one line: what the report, watch and diff quote of an error.

A status message is an exception's type and text, often with a traceback and, from Ray, terminal
colour codes and a wrapper whose first line is an actor's repr; one line of it must still say
what was raised.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["first_line"]


#: Terminal colour codes Ray writes into its task errors (``\x1b[36mray::Policy.train()\x1b[39m``).
_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")
#: Ray's wrapper of an exception raised in a task: its type, then where it was raised.
_RAY_TASK_ERROR: Final = re.compile(r"(RayTaskError(?:\([\w.]+\))?): *(ray::[\w.]+\(\))?")
#: The last line of a traceback: the exception that ended it, module path optional.
_EXCEPTION_LINE: Final = re.compile(r"(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): \S.*")


def first_line(message: str, limit: int = 160) -> str:
    """A status message in one line, cut to ``limit`` characters (a traceback is long).

    Its first line, without terminal colour codes; for Ray's ``RayTaskError`` wrapper, whose
    first line is the actor's repr, the exception it wraps, which a later line names:
    ``RayTaskError(ActorDiedError) in ray::Policy.train(): ActorDiedError: The actor died...``.
    """
    lines = [_SGR.sub("", x).rstrip() for x in message.strip().splitlines()]
    line = lines[0] if lines else ""
    wrapper = _RAY_TASK_ERROR.match(line)
    if wrapper is not None:
        causes = [m for m in map(_EXCEPTION_LINE.fullmatch, lines[1:]) if m is not None]
        if causes:
            where = f" in {wrapper.group(2)}" if wrapper.group(2) else ""
            cause = causes[-1]
            line = f"{wrapper.group(1)}{where}: {cause.group(1)}{cause.group(0)[cause.end(1):]}"
    return line if len(line) <= limit else line[: limit - 3] + "..."
