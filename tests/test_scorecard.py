"""The claim-by-claim scorecard: verdicts.json from a synthetic metrics table, the index's columns
(source, quote, both verdicts, family, power, regime; timestep_lab.reporting.index / scorecard),
the papers' numbers with a size verdict each, no unpaired number on the page."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from test_verdicts import _study

from timestep_lab.evidence.verdicts import CLAIMS
from timestep_lab.reporting import render_index
from timestep_lab.reporting.scorecard import COLUMNS, scorecard_rows
from timestep_lab.workflow.collect import write_verdicts

ROOT = Path(__file__).resolve().parents[1]


def _cells(html: str) -> tuple[list[str], list[dict[str, str]]]:
    """The scorecard table's headers, and per row the text of every field by its key (the compact
    row's cells and those folded under it in <details>)."""
    table = html.split('<table class="text scorecard">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)
    headers = [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<th[^>]*>(.*?)</th>", rows[0], re.S)]
    return headers, [{k: unescape(re.sub(r"<[^>]+>", "", v)).strip()
                      for _, k, v in re.findall(r'<(span|dd|b|td)[^>]* data-key="(\w+)">(.*?)</\1>', r, re.S)}
                     for r in rows[1:]]


@pytest.fixture
def verdicts(tmp_path):
    metrics = tmp_path / "metrics.csv"
    _study().to_csv(metrics, index=False)
    interference = tmp_path / "interference_control.json"
    interference.write_text(json.dumps({"off_diagonal": {"n": 3, "diff": 0.02, "ci_low": -0.05, "ci_high": 0.09,
                                                         "p": 0.4, "sd": 0.03, "p_adj": 0.4, "detectable": 0.12}}))
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(FLOOR))
    out = tmp_path / "verdicts.json"
    write_verdicts(str(metrics), str(out), interference=str(interference), study="synthetic", floor=str(floor))
    return out


FLOOR = {"format": "timestep_lab.floor/1", "num_samples": 359, "sample_count_basis": "the held-out split's 359 images",
         "records": [{"tool": "torch-fidelity", "metric": "fid", "value": 9.06, "ci": [1.98, 20.7], "num_samples": 359,
                      "extractor": "digits-cnn", "reference_sha256": "ab" * 32}]}


def test_verdicts_json_has_one_verdict_per_claim(verdicts):
    data = json.loads(verdicts.read_text())
    assert data["format"] == "timestep_lab.verdicts/2" and data["family"]["size"] == 3 and data["floor"] == FLOOR
    assert [r["id"] for r in data["claims"]] == [c.id for c in CLAIMS]
    by_id = {r["id"]: r for r in data["claims"]}
    assert by_id["speed_faster"]["verdict"] == "reproduced" and by_id["speed_faster"]["size_verdict"] == "smaller"
    assert by_id["speed_faster"]["ci_high"] < 0 and by_id["speed_faster"]["n"] == 5
    assert by_id["speed_faster"]["regime"]["floor"]["value"] == 9.06
    assert by_id["slot_interference"]["verdict"] == "inconclusive"  # interval covers 0
    assert by_id["clts_faster"]["verdict"] == "not run"
    # every field of every claim's record is in the file (issue-24/cross-study readers rely on it)
    for c in CLAIMS:
        rec = c.record()
        row = by_id[c.id]
        for key in set(rec) - {"arm", "baseline"}:
            assert row[key] == json.loads(json.dumps(rec[key])), (c.id, key)
        assert row["arm_selector"] == dict(c.arm) and row["baseline_selector"] == dict(c.baseline)


def test_index_has_a_verdict_column_with_intervals(verdicts, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"runs": 15, "failed_runs": [], "fid_label": "FID (digits-CNN features)",
                                   "fid_tool": "torch-fidelity", "fid": {"sampler_comparison": {
                                       "uniform+none+eps+128+linear": {"mean": 100.0, "std": 9.0, "n": 5}}}}))
    out = render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="synthetic",
                       summary=summary, verdicts=verdicts, reports=["sampler_comparison.html"],
                       config_source="config/x.yaml")
    html = out.read_text()
    headers, rows = _cells(html)
    # compact: four columns fit the page; the rest of COLUMNS is folded under each row
    assert headers == ["claim (source, where)", "verdict", "our paired difference [95% CI]", "n seeds"]
    assert all(set(r) == {"id", *(k for k, _ in COLUMNS)} for r in rows)
    assert [r["id"] for r in rows] == [c.id for c in CLAIMS]
    body = {r["id"]: r for r in rows}
    assert html.count("<details>") == len(CLAIMS)
    for c in CLAIMS:  # every row: the source, where in it, and its own words
        assert c.paper in body[c.id]["claim"] and c.where in body[c.id]["claim"] and c.quote in body[c.id]["claim"]
    speed = body["speed_faster"]
    assert speed["verdict"] == "reproduced" and speed["n"] == "5" and "(finding)" in speed["claim"]
    lo, hi = map(float, re.search(r"\[([-+0-9.e]+), ([-+0-9.e]+)\]", speed["difference"]).groups())
    assert lo < hi < 0 and float(speed["p_adj"].split()[0]) < 0.05 and "(family of 3)" in speed["p_adj"]
    assert re.search(r"\d\.\d\dx", speed["speedup"]) and "seeds" in speed["speedup"]
    assert speed["size"].startswith("smaller at this length: ours 1.") and "the paper's 3x" in speed["size"]
    assert "band [2.00x, 4.50x] (the paper's number within a factor 1.5)" in speed["size"]
    assert "detectable: |difference| >=" in speed["power"] and "estimated from the sample SD" in speed["power"]
    assert "needs n = 2 seeds to resolve 3x" in speed["power"]
    assert speed["robustness"].startswith("agrees (FID ratio 0.7")
    assert "vs floor 9.06 [1.98, 20.7]" in speed["regime"] and "24 kimg" in speed["regime"]
    adaptive = body["adaptive_faster"]
    assert adaptive["verdict"] == "inconclusive" and adaptive["power"].startswith("detectable: |difference| >=")
    assert adaptive["size"].startswith("not comparable: 3.57 -> 2.94")
    converges = body["adaptive_converges_better"]
    assert converges["verdict"] == "not judged at this length" and "33%" in converges["power"]
    table1 = body["table1_pretrained"]
    assert table1["verdict"] == "not run" and "guided-diffusion" in table1["power"] and table1["difference"] == ""
    assert "Family: 3 distinct comparisons" in unescape(html) and "Floor: the held-out split" in unescape(html)
    # the promise with the condition it holds under, not a bare "at most 5% of studies"
    assert "'skew_envelope' calibration" in unescape(html) and "in at most 5% of studies when per-seed differences " \
        "are no more skewed than a lognormal of log-SD 1" in unescape(html)
    # the papers' numbers: SpeeD's 3x judged on size, its FID pairs not comparable, with the reason
    numbers = unescape(html).split("own numbers beside ours", 1)[1]
    assert "smaller at this length" in numbers and "not comparable: Inception FID of DiT-XL/2" in numbers
    # no unpaired mean ± std or mean-curve speed-up anywhere on the page
    assert "±" not in html and "100.00" not in html


def test_scorecard_rows_keep_the_requested_claims_in_file_order(verdicts):
    data = json.loads(verdicts.read_text())
    rows = scorecard_rows(data, ids=["clts_faster", "speed_faster"])
    assert [r["id"] for r in rows] == ["speed_faster", "clts_faster"]
    assert rows[1]["power"].startswith("needs: ") and rows[1]["p_adj"] == "" and rows[1]["size"] == ""
    assert scorecard_rows({"claims": []}) == []
    # a row without a quote still says where the claim stands and what it is (it read "SpeeD (2405.17403)")
    fm_speed = scorecard_rows(data, ids=["fm_speed"])[0]
    assert fm_speed["claim"] == "SpeeD (2405.17403), Abstract (on DDPM-style diffusion) (hypothesis): no quote held"


@pytest.mark.parametrize("given", ["path", "list", "empty"])
def test_collect_copies_the_floor_into_the_summary(tmp_path, given):
    """summary.json["floor"] is floor.json as it is; the rule passes its optional input as a list."""
    from timestep_lab.workflow.collect import collect

    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(FLOOR))
    arg = {"path": str(floor), "list": [str(floor)], "empty": []}[given]
    collect({}, str(tmp_path), str(tmp_path / "m.csv"), str(tmp_path / "r.csv"), str(tmp_path / "s.json"), floor_json=arg)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary.get("floor") == (None if given == "empty" else FLOOR)
