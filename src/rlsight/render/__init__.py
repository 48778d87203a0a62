"""Renderers for an analysed run: terminal tables, a self-contained HTML page, a Perfetto trace.

Each is a submodule imported by the command that needs it (``rich`` for the tables; the HTML
page inlines the vendored Chart.js), so importing :mod:`rlsight` loads none of them.
"""

from __future__ import annotations

__all__: list[str] = []
