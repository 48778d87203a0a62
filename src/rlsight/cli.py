"""The ``rlsight`` command: parse, dispatch, exit code.

Each subcommand lives in ``rlsight.commands.<name>`` and exposes ``add_arguments(parser)``
and ``run(args) -> int``; its one-line help is the module docstring's first line. Handlers
import their heavy dependencies inside ``run`` so ``rlsight --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from types import ModuleType
from typing import Final

import rlsight
from rlsight.commands import check, demo, diff, export, report, runs, timeline, watch
from rlsight.commands._exit import (
    EXIT_BROKEN_PIPE,
    EXIT_BUG,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_STALLED,
    EXIT_USAGE,
)
from rlsight.errors import RlsightError, StoreError

__all__ = [
    "EXIT_BROKEN_PIPE", "EXIT_BUG", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PROBLEMS",
    "EXIT_STALLED", "EXIT_USAGE", "main",
]

#: Subcommand name -> module. Order is the order ``--help`` lists them in.
_COMMANDS: Final[dict[str, ModuleType]] = {
    "report": report,
    "watch": watch,
    "timeline": timeline,
    "diff": diff,
    "runs": runs,
    "export": export,
    "check": check,
    "demo": demo,
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsight",
        description="Read what an instrumented RL run wrote, and check instrumentation drift.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"rlsight {rlsight.__version__}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _COMMANDS.items():
        # The command modules' docstrings are the help text; a terminal shows ``--x`` as-is,
        # so the reStructuredText literal markers go.
        text = (module.__doc__ or "").replace("``", "").strip()
        summary = text.splitlines()[0] if text else name
        cmd = sub.add_parser(name, help=summary, description=text or summary)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail on the pipe again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file behind stdout (captured in a test): nothing to flush
        pass


def _stdout_is_devnull() -> bool:
    import os

    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        code = int(args._module.run(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit where nothing can catch it
        return code
    except BrokenPipeError:  # `rlsight runs --json | head`: the reader has what it wanted
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except SystemExit as exc:  # rich's answer to a closed pipe: stdout onto /dev/null, exit 1
        if exc.code == 1 and _stdout_is_devnull():
            return EXIT_BROKEN_PIPE
        raise
    except KeyboardInterrupt:
        print(f"rlsight {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RlsightError as exc:  # a documented error: its message names the thing and the fix
        if args.debug:
            traceback.print_exc()
        print(f"rlsight {args.command}: {exc}", file=sys.stderr)
        return EXIT_INPUT if isinstance(exc, StoreError) else EXIT_USAGE
    except OSError as exc:  # the disk or the OS, not rlsight: name the file
        if args.debug:
            traceback.print_exc()
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"rlsight {args.command}: {exc.strerror or exc}{where}; check the path and its "
              "permissions" + ("" if args.debug else ", or rerun with --debug for the traceback"),
              file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        print(
            f"rlsight {args.command}: unexpected {type(exc).__name__}: {exc}; this is a bug in "
            "rlsight, please report it with the traceback"
            + ("" if args.debug else " (rerun with --debug to print it)"),
            file=sys.stderr,
        )
        return EXIT_BUG

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
