"""The HTML report: self-contained, every span string escaped, one chart per section."""

from __future__ import annotations

import re

from _build import analyze
from _sample import HOSTILE_GROUP, HOSTILE_SPAN, sample_metrics, sample_run

from rlsight.analysis import RunReport
from rlsight.render.html import render_html


def _page() -> tuple[RunReport, str]:
    report = analyze(sample_run())
    return report, render_html(report)


def test_the_page_loads_nothing_from_the_network():
    _, page = _page()
    assert not re.search(r"<script[^>]+src=", page)
    assert "<link" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page) and "@import" not in page


def test_the_chart_library_is_inlined():
    _, page = _page()
    assert "Chart.js v4.5.1" in page


def test_a_span_named_like_a_script_tag_is_escaped():
    _, page = _page()
    assert HOSTILE_SPAN not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_strings_in_the_chart_data_cannot_close_the_script_element():
    _, page = _page()
    data = page.split('<script type="application/json" id="rlsight-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data
    assert "alert(2)" in data and HOSTILE_GROUP not in page


def test_every_section_has_its_chart():
    _, page = _page()
    for chart in ("steps-chart", "startup-chart", "fleets-chart", "volume-chart"):
        assert f'id="{chart}"' in page
    assert 'id="engine-chart"' not in page
    assert "No engine metrics" in page


def test_the_straggler_table_names_the_slow_rank():
    report, page = _page()
    assert [(s.worker_group, s.rank, s.step) for s in report.stragglers.findings] == [("policy", 2, 4)]
    assert "<td>policy/2</td>" in page


def test_engine_metrics_add_the_tokens_per_second_chart():
    page = render_html(analyze(sample_run(), metrics=sample_metrics()))
    assert 'id="engine-chart"' in page and "No engine metrics" not in page
