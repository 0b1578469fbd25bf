"""One owner each: the convergence rule, the floor's reader and the headline FID tool (issue 39)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from timestep_lab.artifacts.floor import FID_TOOL_ORDER, FLOOR_FORMAT, floor_record, floor_records, headline_tool
from timestep_lab.evidence.convergence import PLATEAU_DROP, plateau


def test_plateau_is_the_geometric_mean_fall_over_the_last_third():
    # seed 0 falls 20% between 16 and 24 kimg, seed 1 5%: geometric mean of the ratios 0.8 and 0.95
    p = plateau([([24, 8, 16], [80.0, 300.0, 100.0]), ([8, 16, 24], [300.0, 100.0, 95.0])])
    assert p["drop"] == pytest.approx(1 - math.sqrt(0.8 * 0.95)) and p["seeds"] == 2
    assert (p["from_kimg"], p["to_kimg"]) == (16.0, 24.0) and p["converged"] is False
    assert plateau([([8, 16, 24], [300.0, 100.0, 95.0])])["converged"] is True
    # just over the threshold: not converged; just under: converged
    assert plateau([([16, 24], [100.0, 100.0 * (1 - PLATEAU_DROP - 1e-6)])])["converged"] is False
    assert plateau([([16, 24], [100.0, 100.0 * (1 - PLATEAU_DROP + 1e-6)])])["converged"] is True
    # unusable points are dropped; a curve of one point tells nothing
    assert plateau([([8, 16], [float("nan"), 50.0])]) is None
    assert plateau([([8, 16, 24], [0.0, 100.0, 99.0])])["from_kimg"] == 16.0


def test_the_reports_long_run_and_the_scorecard_use_the_same_rule():
    from timestep_lab.reporting.regime import regime, regime_lines

    kimg, fid = [12.0, 24.0, 36.0, 48.0], [150.0, 60.0, 41.0, 38.0]
    metrics = pd.DataFrame([{"run": "reference", "groups": "reference", "metric": "fid", "tool": "torch-fidelity",
                             "stage": "progress", "kimg": k, "value": f, "num_generated": 200} for k, f in zip(kimg, fid)])
    runs = pd.DataFrame([{"run": "reference", "nimg": 48000, "batch_size": 64}])
    r = regime(metrics, runs, pd.DataFrame(), None, None, group_kimg=12.0, group_n=200)
    assert r["long_plateau"] == plateau([(kimg, fid)])
    assert r["long_plateau"]["drop"] == pytest.approx(1 - 38.0 / 41.0)  # 36 kimg is nearest 2/3 of 48
    line = next(x for x in regime_lines(r, "FID") if "Long run" in x)
    assert "fell 7%" in line and "converged by the scorecard's rule" in line and "not converged" not in line


def test_one_floor_reader_for_every_shape_and_the_headline_tool():
    recs = [{"tool": "clean-fid", "metric": "fid", "value": 8.0}, {"tool": "torch-fidelity", "metric": "fid", "value": 9.0},
            {"tool": "torch-fidelity", "metric": "kid", "value": 0.1}]
    floor = {"format": FLOOR_FORMAT, "records": recs}
    assert set(floor_records(floor)) == {"clean-fid", "torch-fidelity"}
    assert floor_record(floor)["value"] == 9.0 and floor_record(floor, "clean-fid")["value"] == 8.0
    assert floor_record({"tools": {"clean-fid": {"value": 8.0}}})["tool"] == "clean-fid"
    assert floor_record(recs[:1]) == recs[0] and floor_record(None) is None and floor_records({}) == {}
    assert headline_tool(["clean-fid", "torch-fidelity"]) == FID_TOOL_ORDER[0] == "torch-fidelity"
    assert headline_tool(["clean-fid"]) == "clean-fid" and headline_tool([]) is None


def test_the_headline_tool_and_floor_format_are_spelled_once():
    """No module but artifacts/floor.py writes the floor's format string or the tool order."""
    from pathlib import Path

    import timestep_lab

    root = Path(timestep_lab.__file__).parent
    hits = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if p.name != "floor.py" or p.parent.name != "artifacts"
            if '"timestep_lab.floor/1"' in p.read_text() or '("torch-fidelity", "clean-fid")' in p.read_text()]
    # the config schema lists the tools a study may choose (validation), not which one is the headline
    assert hits == ["config/schema.py"], hits

def test_the_docs_name_the_training_streams_the_code_draws_from():
    """Pairing by seed rests on separate data, t and noise streams (train/step.py StepGenerators):
    the design and methods documents say so, with the seeds the code uses."""
    import inspect

    from timestep_lab.train.step import StepGenerators

    assert StepGenerators.STREAMS == ("data", "t", "noise", "labels")
    assert "for k in (1, 2, 3, 4)" in inspect.getsource(StepGenerators.__init__)
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    design, methods = ((docs / f).read_text() for f in ("design.md", "methods.md"))
    assert "one device generator" not in design + methods
    for stream, k in (("data", 1), ("t", 2), ("noise", 3), ("labels", 4)):
        assert f"device generator `{stream}`, `manual_seed(train.seed + {k})`" in design
    assert "three device generators seeded `train.seed + 1`, `+ 2` and `+ 3`" in methods
    assert "label dropout has a fourth, `train.seed + 4`" in methods


def test_the_plateau_says_what_span_it_measured():
    """Issue 42: a two-point curve (3, 6 kimg) measures the last half; the regime note said "the last
    third". The note names the span the points allow, and a third where they hold one."""
    from timestep_lab.evidence.convergence import span_text
    from timestep_lab.evidence.verdicts import regime

    assert span_text(4.0, 6.0) == "the last third" and span_text(16.0, 24.0) == "the last third"
    assert span_text(3.0, 6.0).startswith("the last 50% ")
    rows = [{"run": f"a_s{s}", "arm": "a", "seed": s, "stage": st, "metric": "fid", "tool": "torch-fidelity",
             "kimg": k, "value": v} for s in (0, 1) for st, k, v in (("progress", 3.0, 100.0), ("progress", 6.0, 50.0),
                                                                      ("final", 6.0, 48.0))]
    note = regime(pd.DataFrame(rows), "a", [0, 1])["convergence_note"]
    assert "fell 50% over the last 50% (the progress points hold none nearer two thirds) of training" in note
    rows = [{**r, "kimg": 4.0} if r["kimg"] == 3.0 else r for r in rows]
    assert "over the last third of training (4 -> 6 kimg" in regime(pd.DataFrame(rows), "a", [0, 1])["convergence_note"]


def test_the_reports_step_cost_is_the_controlled_benchmarks_table():
    """Issue 42: the sampler report's step cost comes from benchmarks/sampler_overhead.py's controlled
    run (the table in benchmarks/RESULTS.md), not from runs that shared the CPUs; the record and the
    table are one set of numbers."""
    import re
    from pathlib import Path

    from timestep_lab.cost.step_overhead import CONTROLLED

    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.md").read_text()
    table = text.split("### `sampler_overhead.py`", 1)[1].split("\n\n", 3)[2]
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| (\w+)[^|]*\| [\d.]+ \| \**([\d.]+)\** \|", table, re.M)}
    assert rows == CONTROLLED and len(rows) == 10
