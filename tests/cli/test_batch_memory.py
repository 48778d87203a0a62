"""The batch commands' memory policy (``commands/_memory``): numpy's huge-page requests off."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from rlsight.commands._memory import reuse_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux-only policy")
def test_batch_commands_turn_off_numpys_huge_page_requests() -> None:
    """After a cold read, faults in huge-page arrays compact memory on the spot (0.7-0.9 s
    of system time on the 1M-span benchmark); the report and timeline commands opt out."""
    switch = np._core.multiarray._set_madvise_hugepage
    before = switch(True)  # returns the setting it replaces
    try:
        reuse_freed_memory()
        assert switch(True) is False
    finally:
        switch(before)
