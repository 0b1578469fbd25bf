"""The scorecard across scales (timestep_lab.evidence.scaling, timestep_lab.reporting.study_scale / across,
the `scorecard` command): two small fake studies whose verdicts.json the real writer makes from
synthetic metrics tables, with benchmark files, job logs, run configs and data manifests; the
holds / flips / unresolved rules, the cost and scale columns, the page, and the CLI's error line."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
import yaml
from test_cost import _bench
from test_verdicts import _study

from timestep_lab.cli import main
from timestep_lab.evidence.scaling import effective_verdict, trend
from timestep_lab.reporting import network_references, render_index
from timestep_lab.reporting.study_scale import VERDICTS_FORMAT, count_parameters, read_study
from timestep_lab.workflow.collect import VERDICTS_FORMAT as WRITTEN_FORMAT
from timestep_lab.workflow.collect import write_verdicts

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"channels": 8, "channel_mult": [1, 2], "num_res_blocks": 1, "norm_groups": 4}
# name -> (data set, shape, extractor label, speed effect, adaptive effect, interference effect or None)
STUDIES = {
    "small": ("digits", [8, 8, 1], "FID (digits-CNN features)", -30.0, -30.0, None),
    "large": ("mnist5k", [32, 32, 1], "FID (mnist-cnn features)", -30.0, +30.0,
              {"n": 3, "diff": 0.4, "ci_low": 0.1, "ci_high": 0.7, "p": 0.001, "sd": 0.12}),
}


def _make(root: Path, name: str) -> Path:
    """results/<name> as a finished study leaves it (what the scorecard reads), plus its job logs and data manifest."""
    dataset, shape, label, speed, adaptive, interference = STUDIES[name]
    res = root / "results" / name
    res.mkdir(parents=True)
    metrics = _study(effect_speed=speed, effect_adaptive=adaptive, seed=len(name))
    metrics.to_csv(res / "metrics.csv", index=False)
    ctl = None
    if interference:
        ctl = res / "interference_control.json"
        ctl.write_text(json.dumps({"off_diagonal": interference}))
    write_verdicts(str(res / "metrics.csv"), str(res / "verdicts.json"), study=name,
                   interference=str(ctl) if ctl else None)
    (res / "summary.json").write_text(json.dumps({"runs": len(metrics), "failed_runs": [], "fid_label": label,
                                                  "fid_tool": "torch-fidelity", "protocol": {
        "tool": "torch-fidelity", "tool_version": "0.4.0", "num_generated": 500, "num_reference": 1000,
        "method": "ddim", "steps": 20, "ema": True}}))
    runs = metrics[["run", "arm"]].drop_duplicates()
    runs.to_csv(res / "runs.csv", index=False)
    data = f"data/prepared/{dataset}-train"
    for run in runs["run"]:
        (res / "runs" / run).mkdir(parents=True)
        (res / "runs" / run / "run.yaml").write_text(yaml.safe_dump({
            "data": {"name": dataset, "path": data}, "model": MODEL, "diffusion": {"num_timesteps": 100},
            "train": {"batch_size": 32}}))
    (root / data).mkdir(parents=True, exist_ok=True)
    manifest = {"dataset": dataset, "split": "train", "count": 4000 if name == "large" else 1438, "shape": shape}
    if name == "large":
        manifest["padding"] = "28x28 zero-padded by 2 pixels on every side to 32x32"
    (root / data / "manifest.json").write_text(json.dumps(manifest))
    # two training jobs (one with its exact usage line, one as Snakemake sampled it) and the verdicts job
    # (its usage line: every job is a command; its benchmark sampled more, the usage line wins)
    _bench(res / "benchmarks" / "train" / "a.tsv", (10.0, 300.0, 9.5))
    _bench(res / "benchmarks" / "train" / "b.tsv", (12.0, 320.0, 11.5))
    _bench(res / "benchmarks" / "verdicts" / "verdicts.tsv", (0.5, 900.0, 250.0))
    logs = root / "logs" / name / "train"
    logs.mkdir(parents=True)
    (logs / "a.log").write_text("timestep_lab usage: cpu_s=40.250 max_rss_mb=350.5\n")
    (logs.parent / "verdicts").mkdir()
    (logs.parent / "verdicts" / "verdicts.log").write_text("timestep_lab usage: cpu_s=1.500 max_rss_mb=200.0\n")
    return res


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scales")
    return {"root": root, **{name: _make(root, name) for name in STUDIES}}


@pytest.fixture(scope="module")
def page(studies, tmp_path_factory):
    """The command run on both studies, the larger named first."""
    out = tmp_path_factory.mktemp("page")
    argv = ["scorecard", str(studies["large"]), str(studies["small"]), "--out", str(out / "scorecard.html"),
            "--json", str(out / "scorecard.json"),
            "--template", str(ROOT / "reports" / "scorecard.html.j2")]
    assert main(argv) == 0
    return (out / "scorecard.html").read_text(), json.loads((out / "scorecard.json").read_text())


def _text(html: str) -> str:
    """The page's words: tags dropped, entities decoded, white space collapsed."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))


def _row(verdict, diff=-1.0, sign=-1, agrees=True):
    return {"verdict": verdict, "diff": diff, "expected_sign": sign, "log": {"verdict": "inconclusive", "agrees": agrees}}


@pytest.mark.parametrize("verdicts, expected, finding", [
    (["reproduced", "reproduced"], "holds", "reproduced"),
    (["contradicted", "contradicted"], "holds", "contradicted"),
    (["reproduced", "reproduced", "not run"], "holds", "reproduced"),  # over the scales that judged it
    (["reproduced", "contradicted"], "flips", None),
    (["reproduced", "inconclusive", "contradicted"], "flips", None),
    (["reproduced", "inconclusive"], "unresolved", None),
    (["inconclusive", "inconclusive"], "unresolved", None),
    (["reproduced", "not run"], "unresolved", None),  # one scale is no trend
    (["reproduced", None], "unresolved", None),  # absent from the second study's file
    (["not judged at this length", "reproduced"], "unresolved", None),
    (["not run", "not run"], "unresolved", None),
])
def test_trend_rules(verdicts, expected, finding):
    cells = [(f"s{i}", None if v is None else _row(v)) for i, v in enumerate(verdicts)]
    out = trend(cells)
    assert (out["trend"], out["finding"]) == (expected, finding), out["reason"]
    assert out["judged"] == [f"s{i}" for i, v in enumerate(verdicts) if v in ("reproduced", "contradicted", "inconclusive")]


def test_a_finding_the_log_ratio_check_disputes_counts_as_inconclusive():
    shaky = _row("reproduced", agrees=False)
    assert effective_verdict(shaky)[0] == "inconclusive" and "log-ratio check" in effective_verdict(shaky)[1]
    assert trend([("a", shaky), ("b", _row("reproduced"))])["trend"] == "unresolved"
    assert trend([("a", shaky), ("b", _row("contradicted"))])["trend"] == "unresolved"  # no flip on a shaky finding
    # point estimates are reported, not tested
    out = trend([("a", _row("inconclusive", diff=-2.0)), ("b", _row("inconclusive", diff=+1.0))])
    assert out["sides"] == {"a": "claimed", "b": "other"} and "claimed side at 1 of the 2" in out["reason"]


def test_verdicts_format_is_the_one_written():
    assert VERDICTS_FORMAT == WRITTEN_FORMAT


def test_each_claim_holds_flips_or_is_unresolved_across_two_studies(page):
    html, data = page
    assert data["studies"] == ["small", "large"]  # smallest scale first, whatever the order given
    claims = {c["id"]: c for c in data["claims"]}
    assert (claims["speed_faster"]["trend"]["trend"], claims["speed_faster"]["trend"]["finding"]) == ("holds", "reproduced")
    assert claims["adaptive_faster"]["trend"]["trend"] == "flips"
    assert claims["adaptive_faster"]["trend"]["reason"] == "reproduced at small; contradicted at large"
    assert claims["clts_faster"]["trend"]["trend"] == "unresolved"  # run at neither
    assert claims["slot_interference"]["trend"]["trend"] == "unresolved"
    assert "judged at one scale only" in claims["slot_interference"]["trend"]["reason"]
    assert data["counts"]["holds"] == 1 and data["counts"]["flips"] == 1
    assert sum(data["counts"].values()) == len(claims)
    # each cell: the verdict, the ratio and the difference in that scale's own FID
    cell = claims["adaptive_faster"]["cells"]["large"]
    assert cell["verdict"] == "contradicted" and cell["ratio"].startswith("FID ratio 1.")
    assert "(final FID (mnist-cnn features), arm - baseline)" in cell["difference"] and cell["n"] == "5"
    assert "(family of 3)" in cell["p_adj"] and cell["kimg"] == "24 kimg"
    assert "(family of 2)" in claims["adaptive_faster"]["cells"]["small"]["p_adj"]  # its own Holm family
    assert claims["clts_faster"]["cells"]["small"]["note"].startswith("needs: groups.sampler_comparison")


def test_the_scales_and_their_cost(page, studies):
    _, data = page
    small, large = data["scales"]["small"], data["scales"]["large"]
    assert small["data set"] == "digits, 1,438 training images" and small["resolution (H x W x C)"] == "8x8x1"
    assert large["resolution (H x W x C)"] == "32x32x1 (28x28 zero-padded by 2 pixels on every side to 32x32)"
    assert large["FID"] == "FID (mnist-cnn features) (torch-fidelity)" and small["FID"].startswith("FID (digits-CNN")
    assert large["images seen by each compared run"] == "24 kimg" and large["batch size"] == "32"
    # the parameter count is the network's, counted on the meta device
    from conftest import tiny_config

    from timestep_lab.components import build_model

    net = build_model(tiny_config("x", model=MODEL), 32, 1)
    n = sum(p.numel() for p in net.parameters())
    assert large["parameters"].startswith(f"{n:,} (") and count_parameters({"model": MODEL}, 32, 1) == n
    # cost: train a from its usage line (40.25 exact), b as sampled (11.5), verdicts from its usage line (1.5)
    assert small["CPU, measured"].startswith("53 s (0.01 h) over 3 jobs (2 from their own usage line)")
    assert small["job wall time, summed"].startswith("22 s") and "not the elapsed time" in small["job wall time, summed"]
    assert small["estimate before the run"] == "no estimate.json"
    # each study's family says what its p-values were referred to, and the condition of its promise
    assert "on the 'skew_envelope' calibration: a study with no true effect" in small["claims judged / family"]
    assert "lognormal of log-SD 1" in small["claims judged / family"]
    study = read_study(studies["small"])
    assert study.cost["cpu_s"] == pytest.approx(40.25 + 11.5 + 1.5) and study.cost["exact_jobs"] == 2


def test_the_page_is_self_contained_and_warns_against_comparing_fids(page):
    html, data = page
    assert network_references(html) == []
    assert 'font-family: -apple-system, "Segoe UI"' in html  # the style sheet as written, not HTML-escaped
    text = _text(html)
    assert "FID values are not comparable across these columns" in text and "never raw FIDs" in text
    assert "small: FID (digits-CNN features); large: FID (mnist-cnn features)" in text
    assert "holds (reproduced)" in text and "flips" in text and "Claims: 1 holds, 1 flips" in text
    assert "Snakemake's benchmark file of every job" in text and "docs/methods.md §9.9" in text
    assert html.index("<th>small<br>") < html.index("<th>large<br>")


def test_a_folder_without_verdicts_is_one_error_line(studies, tmp_path, capsys):
    empty = tmp_path / "results" / "empty"
    empty.mkdir(parents=True)
    out = tmp_path / "s.html"
    assert main(["scorecard", str(studies["small"]), str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {empty}: no verdicts.json") and "\n" not in err and not out.exists()
    old = tmp_path / "results" / "old"
    old.mkdir()
    (old / "verdicts.json").write_text(json.dumps({"study": "old", "claims": []}))
    assert main(["scorecard", str(old), "--out", str(out)]) == 2
    assert "format None, expected 'timestep_lab.verdicts/2'" in capsys.readouterr().err
    # the Snakemake target's mode: left out, named on the page
    assert main(["scorecard", str(studies["small"]), str(empty), "--out", str(out), "--skip-missing",
                 "--template", str(ROOT / "reports" / "scorecard.html.j2")]) == 0
    assert f"Left out: {empty} (no verdicts.json" in _text(out.read_text())


def test_the_index_links_the_scorecard_only_beside_another_study(studies, tmp_path):
    res = studies["small"]
    for scales, linked in (([], False), (["large"], True)):
        out = render_index(ROOT / "reports" / "index.html.j2", tmp_path / "index.html", study="small",
                           summary=res / "summary.json", verdicts=res / "verdicts.json", reports=[],
                           config_source="config/x.yaml", scales=scales)
        html = out.read_text()
        assert ('href="../scorecard.html"' in html) is linked
    assert "beside those of large" in html and "snakemake scorecard --configfile config/x.yaml" in html


def test_one_forest_per_study_with_its_own_verdicts(page, studies):
    html, data = page
    figures = re.findall(r'<figure style="margin:0" data-study="(\w+)">.*?(<svg.*?</svg>)', html, re.S)
    assert [name for name, _ in figures] == data["studies"]
    for name, svg in figures:
        claims = json.loads((studies[name] / "verdicts.json").read_text())["claims"]
        assert re.findall(r'data-claim="([^"]+)" data-verdict="([^"]+)"', svg) == \
            [(c["id"], c["verdict"]) for c in claims]
        groups = re.findall(r'data-claim="([^"]+)"[^>]*>(.*?)</g>', svg, re.S)
        drawn = {cid: tuple(map(float, m.groups())) for cid, body in groups
                 if (m := re.search(r'data-lo="([^"]+)" data-hi="([^"]+)"', body))}
        for c in claims:
            if c["id"] in drawn:
                assert drawn[c["id"]] == (c["ci_low"], c["ci_high"]), (name, c["id"])
        assert drawn, name
