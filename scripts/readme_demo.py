"""Regenerate the README's demo excerpt and the HTML report's screenshot from a real run.

``make readme-demo`` runs the default demo (or reads ``--run-dir`` of an earlier one), writes
the progress curve and ``rlsight report`` between the ``demo-report`` markers of README.md, and
screenshots the run's ``report.html`` in headless Chromium into ``docs/img/report.png``. Nothing
in either is typed by hand.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SCREENSHOT = ROOT / "docs" / "img" / "report.png"
_MARKERS = re.compile(r"(<!-- demo-report:start -->\n).*?(<!-- demo-report:end -->)", re.DOTALL)
_CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", "--hide-scrollbars", "--virtual-time-budget=10000")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("readme-demo: headless Chromium is needed for the screenshot: make browser")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, help="an existing demo run (default: run one)")
    parser.add_argument("--log", type=Path, help="that run's `make demo` output, for its progress lines")
    args = parser.parse_args()
    progress = ""
    if args.log is not None:
        progress = "\n".join(
            line for line in args.log.read_text(encoding="utf-8").splitlines() if line.startswith("step ")
        )
    run_dir: Path = args.run_dir.resolve() if args.run_dir is not None else None  # type: ignore[assignment]
    if run_dir is None:
        from rlsight.demo import run_demo

        out = io.StringIO()
        run_dir = run_demo(out=out)
        progress = out.getvalue()
    from rlsight.cli import main as cli_main

    report = io.StringIO()
    with redirect_stdout(report):
        code = cli_main(["report", str(run_dir), "--html", str(run_dir / "report.html"), "--quiet"])
    if code != 0:
        return code
    lines = progress.splitlines()
    curve = [*lines[:3], "...", *lines[-2:]] if len(lines) > 6 else lines
    excerpt = "```text\n$ make demo\n" + "\n".join(curve) + "\n\n" + report.getvalue().rstrip() + "\n```\n"
    text = README.read_text(encoding="utf-8")
    if not _MARKERS.search(text):
        sys.exit("readme-demo: README.md has no <!-- demo-report:start/end --> markers")
    README.write_text(_MARKERS.sub(lambda m: m.group(1) + excerpt + m.group(2), text), encoding="utf-8")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [_chromium(), *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,1800",
             f"--screenshot={SCREENSHOT}", (run_dir / "report.html").as_uri()],
            check=True, capture_output=True, timeout=180,
        )
    print(f"readme-demo: README.md excerpt from {run_dir}; screenshot {SCREENSHOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
