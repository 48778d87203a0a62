"""The HTML report in headless Chromium: charts draw, no console messages, hostile text stays text."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _build import analyze
from _sample import sample_metrics, sample_run

from rlsight.render.html import render_html

pytestmark = pytest.mark.browser

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is needed for the browser tests: apt-get install -y chromium "
                "(.ci/run installs it)")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(DOM after scripts ran, Chromium's log) for the sample report."""
    tmp = tmp_path_factory.mktemp("browser")
    page = tmp / "report.html"
    page.write_text(render_html(analyze(sample_run(), metrics=sample_metrics())), encoding="utf-8")
    proc = subprocess.run(
        [_chromium(), *_FLAGS, f"--user-data-dir={tmp / 'profile'}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def test_every_chart_rendered(rendered: tuple[str, str]):
    dom, _ = rendered
    canvases = re.findall(r"<canvas[^>]*>", dom)
    assert len(canvases) == 5
    assert all('data-rendered="true"' in c for c in canvases)
    assert re.search(r'<body[^>]*data-charts-rendered="5"', dom)


def test_the_page_logs_nothing_to_the_console(rendered: tuple[str, str]):
    """Chromium logs every console message and uncaught error as INFO:CONSOLE."""
    dom, log = rendered
    assert [line for line in log.splitlines() if ":CONSOLE" in line] == []
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "data-errors" not in body.group(0)


def test_a_span_named_like_a_script_tag_shows_as_text(rendered: tuple[str, str]):
    dom, _ = rendered
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in dom
    assert "<script>alert(1)" not in dom and "alert(2)</script>" not in dom


def test_a_broken_page_would_be_caught(tmp_path: Path):
    """The console check is live: a page that throws is seen in the log."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction()</script></body></html>")
    proc = subprocess.run([_chromium(), *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert any(":CONSOLE" in line and "undefinedFunction" in line for line in proc.stderr.splitlines())
