"""Errors and warnings rlsight raises, in one module so nothing imports in a loop.

::

    RlsightError
    ├── ConfigError (ValueError)          bad TelemetryConfig field, env var or YAML value
    ├── SpanGroupError (ValueError)       a span group or preset declared wrongly
    ├── MetricSpecError (ValueError)      a metric group declared wrongly
    ├── TelemetryStateError (RuntimeError) setup twice, or an API used before setup
    └── StoreError (OSError)              a run folder that cannot be read at all

    RlsightWarning (UserWarning)          telemetry is reduced, the run goes on

Errors subclass the builtin a caller would already catch, so ``except ValueError`` around a
config load keeps working. Warnings go through :func:`warn_once`, because the same problem on
every step of every actor is noise, not information.
"""

from __future__ import annotations

import threading
import warnings

__all__ = [
    "ConfigError",
    "MetricSpecError",
    "RlsightError",
    "RlsightWarning",
    "SpanGroupError",
    "StoreError",
    "TelemetryStateError",
    "warn_once",
]


class RlsightError(Exception):
    """Base of every error rlsight raises on purpose."""


class ConfigError(RlsightError, ValueError):
    """A configuration value is wrong; the message names the field, the value and the fix."""


class SpanGroupError(RlsightError, ValueError):
    """A span group, preset or namespace was declared inconsistently."""


class MetricSpecError(RlsightError, ValueError):
    """A metric group was declared wrongly (duplicate key or name, empty, registered twice)."""


class TelemetryStateError(RlsightError, RuntimeError):
    """The telemetry lifecycle was used out of order (for example set up twice)."""


class StoreError(RlsightError, OSError):
    """A run folder or store file cannot be used at all (missing, not a run)."""


class RlsightWarning(UserWarning):
    """Telemetry is reduced or a setting is ignored; the run itself goes on."""


#: Keys already warned about. Process-scoped on purpose: a warning is about the code or config
#: of the process (a typo'd group, a bad value), and repeating it for every run a notebook or
#: a test starts would be noise; ``rlsight.testing.capture_telemetry`` forgets them per capture.
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(
    key: str,
    message: str,
    *,
    category: type[Warning] = RlsightWarning,
    stacklevel: int = 2,
) -> bool:
    """Emit ``message`` the first time ``key`` is seen in this process; return whether it did.

    Args:
        key: What makes two warnings "the same" (e.g. ``"pending-group:per_promt"``).
        message: The text; it should name the thing, the value and the fix.
        category: Warning class, an :class:`RlsightWarning` by default.
        stacklevel: Passed to :func:`warnings.warn`, counted from the caller of ``warn_once``.
    """
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(message, category, stacklevel=stacklevel + 1)
    return True


def after_fork() -> None:
    """Replace the warn-once lock in a forked child (another thread may have held it)."""
    global _warned_lock
    _warned_lock = threading.Lock()


def reset_warn_once() -> None:
    """Forget which warnings were shown (used by ``rlsight.testing`` between captures)."""
    with _warned_lock:
        _warned.clear()
