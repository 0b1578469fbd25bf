"""The claim-by-claim scorecard: verdicts.json from a synthetic metrics table, the index's verdict
column (timestep_lab.reporting.index / scorecard), no unpaired number on the page."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from test_verdicts import _study
from timestep_lab.reporting import render_index
from timestep_lab.reporting.scorecard import COLUMNS, scorecard_rows
from timestep_lab.verdicts import CLAIMS
from timestep_lab.workflow.collect import write_verdicts

ROOT = Path(__file__).resolve().parents[1]


def _cells(html: str) -> list[list[str]]:
    """Text of every cell of every row of the scorecard table (the first <table> of the page)."""
    table = html.split('<table class="text scorecard">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)
    return [[unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.S)]
            for r in rows]


@pytest.fixture
def verdicts(tmp_path):
    metrics = tmp_path / "metrics.csv"
    _study().to_csv(metrics, index=False)
    interference = tmp_path / "interference_control.json"
    interference.write_text(json.dumps({"off_diagonal": {"n": 3, "diff": 0.02, "ci_low": -0.05, "ci_high": 0.09,
                                                         "p": 0.4, "p_adj": 0.4, "detectable": 0.12}}))
    out = tmp_path / "verdicts.json"
    write_verdicts(str(metrics), str(out), interference=str(interference), study="synthetic")
    return out


def test_verdicts_json_has_one_verdict_per_claim(verdicts):
    data = json.loads(verdicts.read_text())
    assert [r["id"] for r in data["claims"]] == [c.id for c in CLAIMS]
    by_id = {r["id"]: r for r in data["claims"]}
    assert by_id["speed_faster"]["verdict"] == "reproduced"
    assert by_id["speed_faster"]["ci_high"] < 0 and by_id["speed_faster"]["n"] == 5
    assert by_id["slot_interference"]["verdict"] == "inconclusive"  # interval covers 0
    assert by_id["clts_faster"]["verdict"] == "not run"


def test_index_has_a_verdict_column_with_intervals(verdicts, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"runs": 15, "failed_runs": [], "fid_label": "FID (digits-CNN features)",
                                   "fid_tool": "torch-fidelity", "fid": {"sampler_comparison": {
                                       "uniform+none+eps+128+linear": {"mean": 100.0, "std": 9.0, "n": 5}}}}))
    out = render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="synthetic",
                       summary=summary, verdicts=verdicts, reports=["sampler_comparison.html"],
                       config_source="config/x.yaml")
    html = out.read_text()
    rows = _cells(html)
    assert rows[0] == [h for _, h in COLUMNS] and "verdict" in rows[0]
    body = {r[1]: dict(zip([k for k, _ in COLUMNS], r)) for r in rows[1:]}
    assert set(body) == {c.statement for c in CLAIMS}
    speed = body[next(c.statement for c in CLAIMS if c.id == "speed_faster")]
    assert speed["verdict"] == "reproduced" and speed["n"] == "5"
    lo, hi = map(float, re.search(r"\[([-+0-9.e]+), ([-+0-9.e]+)\]", speed["difference"]).groups())
    assert lo < hi < 0 and float(speed["p_adj"]) < 0.05
    assert re.search(r"\d\.\d\dx", speed["speedup"]) and "seeds" in speed["speedup"]
    adaptive = body[next(c.statement for c in CLAIMS if c.id == "adaptive_faster")]
    assert adaptive["verdict"] == "inconclusive" and adaptive["detail"].startswith("detectable: |difference| >=")
    table1 = body[next(c.statement for c in CLAIMS if c.id == "table1_pretrained")]
    assert table1["verdict"] == "not run" and "guided-diffusion" in table1["detail"] and table1["difference"] == ""
    # no unpaired mean ± std or mean-curve speed-up anywhere on the page
    assert "±" not in html and "100.00" not in html


def test_scorecard_rows_keep_the_requested_claims_in_file_order(verdicts):
    data = json.loads(verdicts.read_text())
    rows = scorecard_rows(data, ids=["clts_faster", "speed_faster"])
    assert [r["id"] for r in rows] == ["speed_faster", "clts_faster"]
    assert rows[1]["detail"].startswith("needs: ") and rows[1]["p_adj"] == ""
    assert scorecard_rows({"claims": []}) == []
