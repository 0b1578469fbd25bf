"""The scorecard's forest plot on the index (timestep_lab.reporting.forest): its rows and intervals
are the verdicts' own, in the file's order; claims not run or not judged have no point; the SVG is
deterministic and loads nothing."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from page_overflow import chromium, overflowing, overflowing_pages
from test_scorecard import verdicts  # noqa: F401 - the synthetic study's verdicts.json fixture

from timestep_lab.reporting import render_index
from timestep_lab.reporting.forest import VERDICT_COLOURS, forest_rows, forest_svg
from timestep_lab.reporting.render import network_references

ROOT = Path(__file__).resolve().parents[1]


def _index(verdicts_path, tmp_path) -> str:
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"runs": 15, "failed_runs": []}))
    return render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="synthetic",
                        summary=summary, verdicts=verdicts_path, reports=[], config_source="config/x.yaml").read_text()


def test_forest_rows_and_intervals_equal_the_verdicts(verdicts, tmp_path):  # noqa: F811
    data = json.loads(verdicts.read_text())
    page = _index(verdicts, tmp_path)
    svg = page.split('<svg', 1)[1].split("</svg>", 1)[0]
    groups = re.findall(r'<g class="forest-row" data-claim="([^"]*)" data-verdict="([^"]*)">(.*?)</g>', svg, re.S)
    assert [(c, v) for c, v, _ in groups] == [(r["id"], r["verdict"]) for r in data["claims"]]
    drawn = 0
    for (claim, verdict, body), row in zip(groups, data["claims"]):
        point = re.search(r'data-diff="([^"]+)"', body)
        ci = re.search(r'data-lo="([^"]+)" data-hi="([^"]+)"', body)
        if verdict not in VERDICT_COLOURS:  # not run / not judged: named, not drawn
            assert point is None and ci is None and verdict in body, claim
            continue
        drawn += 1
        assert float(point.group(1)) == row["diff"], claim
        assert (float(ci.group(1)), float(ci.group(2))) == (row["ci_low"], row["ci_high"]), claim
        assert f'fill="{VERDICT_COLOURS[verdict]}"' in body
    assert drawn >= 2 and any(v == "not run" for _, v, _ in groups)
    assert network_references(page) == []


def test_forest_svg_is_deterministic_and_rows_share_an_axis_per_unit():
    rows = [{"id": "a", "verdict": "reproduced", "units": "FID", "diff": -10.0, "lo": -20.0, "hi": -1.0},
            {"id": "b", "verdict": "inconclusive", "units": "FID", "diff": 2.0, "lo": -4.0, "hi": 8.0},
            {"id": "c", "verdict": "contradicted", "units": "loss", "diff": 0.02, "lo": 0.01, "hi": 0.03},
            {"id": "d", "verdict": "not run", "units": "", "diff": None, "lo": None, "hi": None}]
    svg = forest_svg(rows)
    assert svg == forest_svg([dict(r) for r in rows])
    xs = {m[0]: (float(m[1]), float(m[2])) for m in re.findall(r'data-claim="(\w)".*?x1="([-0-9.]+)" y1="[^"]+" '
                                                                 r'x2="([-0-9.]+)"', svg, re.S)}
    zero = float(re.search(r'<line x1="([-0-9.]+)"', svg).group(1))
    assert xs["a"][1] < zero < xs["b"][1] and xs["b"][0] < zero  # FID rows: one axis, against 0
    assert xs["c"][0] > zero and xs["c"][1] > xs["a"][1] + 100  # the loss row is on its own, not collapsed at 0
    assert "not run" in svg.split('data-claim="d"', 1)[1]
    # forest_rows: only judged rows carry numbers
    got = forest_rows({"claims": [{"id": "x", "verdict": "not judged at this length", "diff": 1.0, "ci_low": 0.0,
                                   "ci_high": 2.0, "units": "FID"}]})
    assert got == [{"id": "x", "verdict": "not judged at this length", "units": "FID", "diff": None, "lo": None,
                    "hi": None}]


@pytest.mark.skipif(chromium() is None, reason="no chromium (CI installs it)")
def test_the_index_fits_a_1280px_window(verdicts, tmp_path):  # noqa: F811
    page = tmp_path / "index.html"
    _index(verdicts, tmp_path)
    assert overflowing(page) == []


def test_the_index_carries_its_style_sheet_unescaped(verdicts, tmp_path):  # noqa: F811
    """The page's CSS reaches the browser as written: HTML-escaped quotes (``&#34;``) would void
    every rule with a quoted value or selector (the font, the verdict cell's word breaking)."""
    from timestep_lab.reporting import PAGE_CSS

    _index(verdicts, tmp_path)
    style = (tmp_path / "index.html").read_text().split("<style>", 1)[1].split("</style>", 1)[0]
    assert style.strip() == PAGE_CSS.strip() and 'b[data-key="verdict"]' in style


@pytest.mark.skipif(chromium() is None, reason="no chromium (CI installs it)")
def test_the_overflow_check_sees_what_passes_the_window_outside_a_scroll_container(tmp_path):
    wide, fits = tmp_path / "wide.html", tmp_path / "fits.html"
    wide.write_text('<html><body><div class="w" style="width:2000px">x</div><div style="overflow-x:auto">'
                    '<table style="width:3000px"><tr><td>y</td></tr></table></div></body></html>')
    fits.write_text("<html><body><p>ok</p></body></html>")
    assert overflowing_pages([wide, fits]) == {"wide.html": ["DIV.w:2008"], "fits.html": []}


def test_a_group_report_shows_its_claims_forest_and_compact_table(verdicts, monkeypatch):  # noqa: F811
    from timestep_lab.reporting import notebook
    from timestep_lab.reporting.scorecard import COLUMNS, scorecard_rows

    shown = []
    monkeypatch.setattr(notebook, "display", shown.append)
    ids = ["adaptive_faster", "speed_faster", "clts_faster"]
    notebook.show_verdicts(verdicts, ids)
    svg, table = shown[1].data, shown[2].data
    data = json.loads(verdicts.read_text())
    in_file_order = [r["id"] for r in data["claims"] if r["id"] in ids]
    assert re.findall(r'data-claim="([^"]+)"', svg) == in_file_order
    assert re.findall(r'<span data-key="id">([^<]+)</span>', table) == in_file_order
    for row in scorecard_rows(data, ids):  # every field of the scorecard row, escaped, in the row or folded under it
        part = table.split(f'<span data-key="id">{row["id"]}</span>', 1)[1].split("</tr>", 1)[0]
        for key, _ in COLUMNS:
            assert f'data-key="{key}">{html.escape(row[key])}</' in part, (row["id"], key)
    assert table.count("<details>") == 3
