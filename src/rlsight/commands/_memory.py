"""Keep freed memory in the process for the batch commands that build many large arrays.

Analysing a run allocates and frees hundreds of column-sized numpy arrays (8 MB each at a
million spans). glibc serves each from a fresh ``mmap`` and unmaps it on free, so every new
array pays page faults (and zeroing of transparent huge pages) again: on the 1M-span benchmark
that was half a second of system time out of two. Raising the mmap and trim thresholds makes
freed arrays go back to the heap and be reused; the peak resident size stays the same, because
the peak is the live arrays, not the freed ones. Batch commands exit soon after, so nothing is
held for long. Elsewhere than glibc (macOS, musl) this does nothing.

numpy also asks the kernel for transparent huge pages for every array of 4 MiB or more
(``madvise(MADV_HUGEPAGE)``). Where the kernel's defrag setting is ``madvise`` (the common
default), a fault in such an array compacts memory on the spot when no free 2 MiB page is at
hand, which is the case right after a cold read has filled the page cache and churned the
heap: on the 1M-span benchmark the analysis then spent 0.7-0.9 s of system time (of ~1.7 s)
zeroing and compacting pages. Ordinary 4 KiB pages cost more faults and none of that, so
``rlsight report`` turns numpy's request off (:func:`avoid_huge_pages`).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Final

__all__ = ["avoid_huge_pages", "reuse_freed_memory"]

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
#: glibc's largest mmap threshold on 64-bit (4 * 1024 * 1024 * sizeof(long)).
_MMAP_THRESHOLD_MAX: Final = 32 << 20
_TRIM_THRESHOLD: Final = 1 << 30


def reuse_freed_memory() -> None:
    """Ask glibc to keep freed blocks up to 32 MiB in the heap (no-op without glibc)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def avoid_huge_pages() -> None:
    """Stop numpy asking for transparent huge pages (a no-op off Linux or where numpy lacks
    the switch).

    For every read, warm ones too: turned off for a cold read only, the compaction moved to
    the next report of the run (a warm read after a cold one took 1.5-2.0 s instead of 1.3 s),
    while 4 KiB pages throughout keep both steady.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import numpy as np
    except ImportError:  # the commands that call this need numpy; nothing to switch without it
        return
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if callable(switch):
        switch(False)
