"""The ``rlsight diff --html`` page in headless Chromium: its tables hold the change, and a
hostile span name stays text."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _build import RunBuilder, analyze

from rlsight.analysis import RunReport, diff_reports
from rlsight.render.diff import render_diff_html

pytestmark = pytest.mark.browser

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--enable-logging=stderr", "--v=0", "--dump-dom")
_EVIL = "<script>alert(1)</script>"


def _run(run_id: str, evil_s: float) -> RunReport:
    run = RunBuilder(run_id)
    driver = run.process()
    for i in range(3):
        step = driver.step(i, 10 * i, 10 * i + 5)
        driver.span("rl.train.policy", 10 * i, 10 * i + 2, parent=step, bucket="productive")
        driver.span(_EVIL, 10 * i + 2, 10 * i + 2 + evil_s, parent=step, bucket="overhead")
    return analyze(run)


def test_the_page_shows_the_change_and_keeps_hostile_names_as_text(tmp_path: Path):
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
                    None)
    if chromium is None:
        pytest.fail("headless Chromium is needed for the browser tests: apt-get install -y chromium")
    page = tmp_path / "diff.html"
    page.write_text(render_diff_html(diff_reports(_run("a", 1.0), _run("b", 1.5))), encoding="utf-8")
    proc = subprocess.run([chromium, *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in dom
    assert '<td class="up">+0.500s</td>' in dom
    assert "<script>alert(1)" not in dom
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
