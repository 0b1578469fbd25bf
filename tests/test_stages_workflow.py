"""A budgeted study's stages through the workflow's checkpoint (issue 40, docs/methods.md §14.5), in a
fresh copy of the repo on a two-arm study (speed against uniform, 2 seeds first, at most 4).

The runs' own jobs (training, scoring) are not what is tested here, and would cost minutes: the test
writes each run's final FID and training log where those jobs write them, and lets Snakemake run
only the stage rules (``--allowed-rules``: every other rule's outputs are files the test provides).
Stage 0's FIDs leave the claim open but resolvable (differences -5.0, -5.4); the checkpoint's plan
must add exactly the next seed of both arms, the DAG must then ask for those runs and no other, the
finished runs must not be touched, and stage 1 (-5.2) must resolve the claim sequentially and stop
the study with "all resolved", the index's lines saying so."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from worktree import copy_worktree, run, study_env

from timestep_lab.workflow.stages import read_plan

pytestmark = pytest.mark.workflow

STUDY = "staged"
A, B = "speed_none_eps_b64_linear", "uniform_none_eps_b64_linear"
STAGE_RULES = ("collect_stage", "verdicts_stage", "plan_stage", "adopt_collect", "adopt_verdicts")
FIDS = {f"{A}_s0": 95.0, f"{A}_s1": 95.6, f"{B}_s0": 100.0, f"{B}_s1": 101.0, f"{A}_s2": 96.8, f"{B}_s2": 102.0,
        "reference": 90.0}
OLD = 1_700_000_000  # every provided file's mtime: none newer than another, so none asks for a rerun


def _config(root) -> str:
    cfg = yaml.safe_load((root / "config" / "smoke.yaml").read_text())
    cfg["study"] = STUDY
    cfg["data"]["test_split"] = None  # no floor: nothing but the runs under the stage rules
    cfg["reference"]["progress_every_kimg"] = None
    cfg["groups"] = {"sampler_comparison": {"grid": {"sampler": ["uniform", "speed"], "weighting": ["none"]},
                                            "seeds": [0, 1]}}
    cfg["analyses"] = {}
    cfg["budget"] = {"amount": 1.0, "initial_seeds": 2, "max_seeds": 4, "max_stages": 3, "calibration": "normal"}
    (root / "config" / "staged.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    os.utime(root / "config" / "staged.yaml", (OLD, OLD))  # the estimate job's input: not newer than its output
    return "config/staged.yaml"


def _snakemake(root, config, *args):
    return run(["snakemake", "--cores", "1", "--configfile", config, "--workflow-profile", "none", *args], root,
               study_env(), timeout=300)


def _jobs(dry: str) -> list[tuple[str, list[str]]]:
    """(rule, outputs) of every job a dry run lists."""
    return [(m.group(1), m.group(2).split(", "))
            for m in re.finditer(r"^(?:local)?(?:rule|checkpoint) (\w+):\n(?:    (?!output).*\n)*    output: (.*)$", dry, re.M)]


def _provide(root, jobs) -> list[str]:
    """What the jobs of rules other than the stages' leave, where they leave it: each run's final FID
    and training log as collect reads them, the estimate's prices, and an empty file (or folder) for
    every other output. Returns the runs trained."""
    trained = []
    for rule, outputs in jobs:
        if rule in STAGE_RULES:
            continue
        for out in outputs:
            path = root / out
            path.parent.mkdir(parents=True, exist_ok=True)
            rid = path.parent.name
            if path.name == "snapshots":
                path.mkdir(exist_ok=True)
            elif path.name == "metrics.json":
                path.write_text(json.dumps({"status": "ok", "nimg": 1024, "records": [
                    {"metric": "fid", "value": FIDS[rid], "tool": "torch-fidelity", "num_generated": 200}]}))
            elif path.name == "train_log.jsonl":
                trained.append(rid)
                path.write_text(json.dumps({"kimg": 1.0, "nimg": 1024, "step": 16, "wall_time_s": 1.0,
                                            "sec_per_step": 0.06, "loss": 0.5}) + "\n")
            elif path.name == "estimate.json":  # the estimate's prices: stage 0, and one seed of each arm
                path.write_text(json.dumps({"sequential": {"first_look": 0.2, "seed_cost": {A: 0.05, B: 0.05},
                                                           "unit": "CPU-core-hours", "device": "cpu"}}))
            else:
                path.write_bytes(b"")
            os.utime(path, (OLD, OLD))
    return sorted(trained)


def test_stage_one_runs_only_the_open_claims_next_seeds_and_redoes_no_finished_run(tmp_path):
    root = copy_worktree(tmp_path / "repo")
    config = _config(root)
    res = root / "results" / STUDY
    dry = _snakemake(root, config, "-n", f"results/{STUDY}/stages/0/next.json")
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert _provide(root, _jobs(dry.stdout)) == sorted([f"{A}_s0", f"{A}_s1", f"{B}_s0", f"{B}_s1", "reference"])

    r = _snakemake(root, config, f"results/{STUDY}/stages/0/next.json")
    assert r.returncode == 0, r.stdout[-4000:]
    plan = read_plan(str(res / "stages" / "0" / "next.json"))
    assert plan.stop is None and plan.new_runs == (f"{A}_s2", f"{B}_s2") and plan.spent == (0.2,)
    assert plan.cost == pytest.approx(0.1)
    stage0 = json.loads((res / "stages" / "0" / "verdicts.json").read_text())
    claim = next(c for c in stage0["claims"] if c["id"] == "speed_sampling_alone")
    assert claim["verdict"] == "inconclusive" and claim["n"] == 2 and stage0["family"]["method"].startswith("holm (anytime")

    # stage 1's DAG trains the two new runs and no other
    dry = _snakemake(root, config, "-n", f"results/{STUDY}/verdicts.json", f"results/{STUDY}/metrics.csv")
    assert dry.returncode == 0, dry.stdout[-4000:]
    jobs = _jobs(dry.stdout)
    assert sorted(o.split("/")[-2] for rule, outs in jobs if rule == "train" for o in outs[:1]) == sorted(plan.new_runs)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (res / "runs").rglob("*") if p.is_file()}
    before.update({p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (res / "stages" / "0").iterdir()})
    assert _provide(root, jobs) == sorted(plan.new_runs)
    r = _snakemake(root, config, f"results/{STUDY}/verdicts.json", f"results/{STUDY}/metrics.csv")
    assert r.returncode == 0, r.stdout[-4000:]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in before} == before  # nothing finished was redone
    last = read_plan(str(res / "stages" / "1" / "next.json"))
    assert last.stop == "all resolved" and last.new_runs == () and last.spent == (0.2, pytest.approx(0.1))
    final = json.loads((res / "verdicts.json").read_text())
    assert final == json.loads((res / "stages" / "1" / "verdicts.json").read_text())  # the study's: the last stage's
    claim = next(c for c in final["claims"] if c["id"] == "speed_sampling_alone")
    assert claim["verdict"] == "reproduced" and claim["n"] == 3 and claim["interval"] == "confidence sequence (safe t)"
    assert claim["ci_high"] < 0 and claim["fixed_design"]["p"] < claim["p"]
    assert {ln.split(",")[0] for ln in (res / "runs.csv").read_text().splitlines()[1:]} == set(FIDS)
    assert not (res / "stages" / "2").exists()  # the study stopped: no third stage

    from timestep_lab.reporting.stages import read_stage_plans, stage_lines

    lines = "\n".join(stage_lines(read_stage_plans([str(res / "stages" / k / "next.json") for k in "01"]), final))
    assert "stage 0: 0.2; stage 1: 0.1; total 0.3 of the budget's 1" in lines
    assert f"Stage 1 added 2 run(s) for 1 open comparison(s): {A}_s2, {B}_s2." in lines
    assert "Stopped after stage 1: every claim it can judge is resolved" in lines
