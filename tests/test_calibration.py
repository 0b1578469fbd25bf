"""`timestep_lab estimate` calibrated on this machine: per-rule CPU fits from a finished study's cost
files (benchmark TSVs and the usage lines of the job logs), written here by hand from a known cost
model, recovered by the fit and used by the next estimate of any study."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import ROOT
from test_estimate import TINY, plan_from_dict

from timestep_lab.cost.estimate import rule_costs
from timestep_lab.cost.estimate.calibration import Store, fit_rule, job_features, observe
from timestep_lab.cost.estimate.table import estimate, format_table
from timestep_lab.cost.measured import job_usages, study_cost

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
LOCAL = {"run_config", "collect", "verdicts", "index"}
# the machine's true cost per rule: overhead, CPU-s per GFLOP, CPU-s per optimizer step
TRUTH = {"train": (0.8, 0.05, 0.02), "sample_score": (1.5, 0.2, 0.0), "evaluate_progress": (1.0, 0.3, 0.0),
         "profile_losses": (0.4, 0.25, 0.0), "report": (0.9, 0.0, 0.0)}


def _bigger() -> dict:
    """TINY with other job sizes (longer runs, more samples): the spread the fit needs."""
    study = copy.deepcopy(TINY)
    study["study"] = "tiny2"
    study["base"]["train"] = {"batch_size": 32, "total_kimg": 3}
    study["evaluation"] = {**study["evaluation"], "num_samples": 300, "progress_num_samples": 120}
    study["analyses"] = {"loss_profile": {"num_images": 30, "stride": 10, "grad_timesteps": 2, "grad_samples": 3}}
    return study


def _true_cpu(rule: str, features: dict) -> float:
    o, per_gflop, per_step = TRUTH.get(rule, (0.6, 0.0, 0.0))
    return o + per_gflop * features["gflop"] + per_step * features["steps"]


def _write_study(root, plan, server_cpu: float | None = 6.0):
    """Benchmark files and job logs as a finished run leaves them, every job costing ``_true_cpu``."""
    name = plan.study["study"]
    res, logs = root / "results" / name, root / "logs" / name
    for cost in rule_costs(plan):
        for job, work in cost.job_work.items():
            bench = res / "benchmarks" / cost.rule / f"{job}.tsv"
            bench.parent.mkdir(parents=True, exist_ok=True)
            bench.write_text(HEADER + "1.0\t0:00:01\t100\t900\t80\t81\t0\t0\t50\t0.5\n")
            log = logs / cost.rule / f"{job}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            usage = "" if cost.rule in LOCAL else \
                f"timestep_lab usage: cpu_s={_true_cpu(cost.rule, job_features(work)):.6f} max_rss_mb=300.0 start=warm\n"
            log.write_text("12:00:00 INFO timestep_lab: done\n" + usage)
    if server_cpu is not None:
        (logs / "warm_start.log").write_text(f"timestep_lab warm-start server usage: cpu_s={server_cpu:.3f}\n")
    return res, logs


@pytest.fixture(scope="module")
def plans():
    return plan_from_dict(TINY, "tiny.yaml"), plan_from_dict(_bigger(), "tiny2.yaml")


def test_the_fit_recovers_the_cost_model_from_the_cost_files(tmp_path, plans):
    store = Store(tmp_path / "calibration.json")
    for plan in plans:
        res, logs = _write_study(tmp_path, plan)
        obs, unknown = observe(rule_costs(plan), job_usages(res, logs), LOCAL)
        assert not unknown and {o.rule for o in obs} >= {"train", "sample_score", "run_config"}
        store.record("machine-a", plan.study["study"], obs, {"(warm-start server)": [6.0]}, plan.source)
    store.save()
    cal = Store.load(tmp_path / "calibration.json").calibration("machine-a")  # through the file
    assert cal.studies == ("tiny", "tiny2") and cal.helper_cpu_s == pytest.approx({"(warm-start server)": 6.0})
    for rule, (o, per_gflop, per_step) in TRUTH.items():
        f = cal.rules[rule]
        assert (f.overhead, f.per_gflop, f.per_step) == pytest.approx((o, per_gflop, per_step), rel=1e-3, abs=1e-4), rule
        assert (f.low, f.high) == pytest.approx((1.0, 1.0), abs=1e-3)  # exact costs: no spread between studies
    assert cal.rules["run_config"].predict({"gflop": 0, "steps": 0}) == 0  # local: no CPU of its own
    assert Store.load(tmp_path / "calibration.json").calibration("machine-b") is None  # another machine: no fit

    # the estimate of each study on the CPU is its measured cost, rule by rule and in total
    for plan in plans:
        res = tmp_path / "results" / plan.study["study"]
        measured = {k: c.cpu_s for k, c in study_cost(res, res.parents[1] / "logs" / res.name, LOCAL).items()}
        est = estimate(plan, "cpu", cal, measured)
        for rule, seconds in measured.items():
            assert est.ratio(rule) == pytest.approx(1.0, rel=1e-3) if seconds else est.hours(rule) == 0, rule
        assert est.ratio("total") == pytest.approx(1.0, rel=1e-3)
        assert est.hours("(warm-start server)") * 3600 == pytest.approx(6.0)
        text = format_table(est)
        assert "calibrated: per-rule CPU fit" in text and "this machine: machine-a" in text and "est/meas" in text


def test_one_job_size_is_fitted_as_proportional_to_work_and_says_so(plans):
    plan = plans[0]
    work = {r.rule: r for r in rule_costs(plan)}["sample_score"].job_work
    obs, _ = observe(rule_costs(plan), {"sample_score": {j: _usage(2.0) for j in work}})
    f = fit_rule("sample_score", [("tiny", o) for o in obs])
    assert f.overhead == 0 and "proportional" in f.note
    assert f.predict(obs[0].features) == pytest.approx(2.0)
    # twice the work, twice the cost
    assert f.predict({k: 2 * v for k, v in obs[0].features.items()}) == pytest.approx(4.0)


def test_jobs_with_and_without_work_separate_overhead_from_work():
    from timestep_lab.cost.estimate.calibration import Observation

    obs = [("a", Observation("r", "j1", 1.0, "warm", {"gflop": 0.0, "steps": 0})),
           ("a", Observation("r", "j2", 3.0, "warm", {"gflop": 4.0, "steps": 0}))]
    f = fit_rule("r", obs)
    assert (f.overhead, f.per_gflop, f.note) == (pytest.approx(1.0), pytest.approx(0.5), "")


def test_the_range_spans_how_the_fit_did_on_each_study():
    from timestep_lab.cost.estimate.calibration import Observation

    obs = [("a", Observation("r", "j1", 10.0, "warm", {"gflop": 1.0, "steps": 0})),
           ("a", Observation("r", "j2", 20.0, "warm", {"gflop": 2.0, "steps": 0})),
           ("b", Observation("r", "j3", 45.0, "warm", {"gflop": 3.0, "steps": 0}))]  # study b costs 1.5x the trend
    f = fit_rule("r", obs)
    ratios = [(f.predict({"gflop": 1.0}) + f.predict({"gflop": 2.0})) / 30.0, f.predict({"gflop": 3.0}) / 45.0]
    assert f.low == pytest.approx(1 / max(ratios)) and f.high == pytest.approx(1 / min(ratios))
    assert f.low < 1 < f.high


def test_noise_does_not_pull_the_fit_low():
    """Three identical jobs measured at 1, 2 and 3 CPU-s are priced at their mean, 2 (weighting by
    the measured cost would give sum(1/y) / sum(1/y^2) = 1.35: every study underestimated)."""
    from timestep_lab.cost.estimate.calibration import Observation

    obs = [("a", Observation("report", f"j{i}", y, "warm", {"gflop": 0.0, "steps": 0.0})) for i, y in enumerate((1, 2, 3))]
    assert fit_rule("report", obs).overhead == pytest.approx(2.0)
    obs = [("a", Observation("r", f"j{i}", y, "warm", {"gflop": g, "steps": 0.0}))
           for i, (g, y) in enumerate(((1, 1.0), (1, 3.0), (2, 2.0), (2, 6.0)))]
    f = fit_rule("r", obs)  # proportional in truth (2 CPU-s per GFLOP on average), +-50% noise
    assert f.predict({"gflop": 1.0}) + f.predict({"gflop": 2.0}) == pytest.approx((1 + 3 + 2 + 6) / 2, rel=0.01)


def _usage(cpu: float):
    from timestep_lab.cost.measured import Usage

    return Usage(cpu, 100.0, True)


def test_the_cli_records_the_study_and_the_next_estimate_of_another_study_uses_the_fit(tmp_path, plans, capsys,
                                                                                      monkeypatch):
    """The CLI names the file: the first estimate of a run study records it there, the estimate of
    another study reads the fit from it and says so; --no-record only reads, --no-calibration does
    neither."""
    import yaml

    from timestep_lab.cli import main
    from timestep_lab.cost.estimate import study

    monkeypatch.chdir(tmp_path)
    by_file = {f"{p.study['study']}.yaml": p for p in plans}  # the DAGs built once (the fixture)
    monkeypatch.setattr(study, "load_plan", lambda path, snakefile="Snakefile": by_file[str(path)])
    for plan in plans:
        _write_study(tmp_path, plan)
        (tmp_path / f"{plan.study['study']}.yaml").write_text(yaml.safe_dump(
            {k: v for k, v in (TINY if plan.study["study"] == "tiny" else _bigger()).items()}))
    cal = tmp_path / "cal.json"
    # the DAG from the project's Snakefile; no measured studies of the package's (fitted to these studies only)
    (tmp_path / "none.json").write_text(json.dumps({"format": "timestep_lab.measured_studies/1", "studies": {}}))
    where = ["--snakefile", str(ROOT / "Snakefile"), "--measured", str(tmp_path / "none.json")]
    assert main(["estimate", "tiny2.yaml", "--gpu", "cpu", "--calibration", str(cal), "--json", *where]) == 0
    first = json.loads(capsys.readouterr().out)
    assert list(json.loads(cal.read_text())["machines"].values())[0]["studies"].keys() == {"tiny2"}
    assert "tiny2" in first["calibration"] and first["total"]["ratio"] == pytest.approx(1.0, rel=0.02)
    # the tiny study has not been run here (its results moved away): priced from tiny2's fit alone
    (tmp_path / "results" / "tiny").rename(tmp_path / "elsewhere")
    assert main(["estimate", "tiny.yaml", "--gpu", "cpu", "--calibration", str(cal), *where]) == 0
    out = capsys.readouterr().out
    assert "calibrated: per-rule CPU fit" in out and "tiny2" in out and "fit " in out
    assert main(["estimate", "tiny.yaml", "--gpu", "cpu", "--calibration", str(cal), "--no-calibration",
                 "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] is None
    # the workflow's own estimate job (--no-record): priced from the file, this study's files left alone
    assert main(["estimate", "tiny2.yaml", "--gpu", "cpu", "--calibration", str(tmp_path / "new.json"),
                 "--no-record", "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] is None and not (tmp_path / "new.json").exists()
    # the package's measured studies: the fit before this machine has recorded any study of its own
    assert main(["estimate", "tiny2.yaml", "--gpu", "cpu", "--calibration", str(tmp_path / "new.json"),
                 "--no-record", "--json", "--snakefile", str(ROOT / "Snakefile")]) == 0
    assert "digits, mnist, smoke (measured_studies.json;" in json.loads(capsys.readouterr().out)["calibration"]


def test_a_broken_calibration_file_is_one_error_line(tmp_path, capsys, monkeypatch, plans):
    from timestep_lab.cli import main
    from timestep_lab.cost.estimate import study

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(study, "load_plan", lambda path, snakefile="Snakefile": plans[0])
    (tmp_path / "tiny.yaml").write_text(json.dumps(TINY))
    bad = tmp_path / "cal.json"
    bad.write_text("{not json")
    assert main(["estimate", "tiny.yaml", "--gpu", "cpu", "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "cal.json" in err[-1]


def test_the_budget_counts_resubmissions_at_the_slow_end():
    """A training job longer than runtime_min is resubmitted; each resubmission redoes up to one
    checkpoint interval: submissions = 1 + ceil((wall - limit) / (limit - redo)) at the slow end."""
    import math

    from timestep_lab.cost.estimate.budget import clock
    from timestep_lab.cost.estimate.throughput import rate

    study = copy.deepcopy(TINY)
    study["resources"] = {"device": "cpu", "runtime_min": 1}
    study["base"]["train"] = {"batch_size": 64, "total_kimg": 256, "checkpoint_every_kimg": 8}
    plan = plan_from_dict(study, "long.yaml")
    advice = estimate(plan, "cpu").advice
    work = {r.rule: r for r in rule_costs(plan)}["train"].job_work["uniform_none_eps_b64_linear_s0"][0]
    per_image = rate(work.model, work.flops_per_image, "cpu", "fp32", "train", "train").high
    wall, redo, limit = work.images * per_image / 3600, 8000 * per_image / 3600, 1 / 60
    group = next(g for g in advice.train if g.images == work.images)
    assert group.wall[2] == pytest.approx(wall) and group.redo_h == pytest.approx(redo)
    assert wall > limit > redo  # the case worth checking: resubmissions, and each one gains ground
    assert group.submissions == 1 + math.ceil((wall - limit) / (limit - redo)) > 1
    assert group.ask_min == math.ceil(wall * 60 * 1.1 / 15) * 15
    assert clock(2445) == "40:45:00" and clock(75) == "1:15:00"


def test_a_sampling_job_longer_than_its_limit_is_flagged():
    """Sampling and scoring jobs get max(10, runtime_min // 4) minutes and cannot resume: the budget
    flags the longest one when its slow end is past that, and says what runtime_min would fit it."""
    from timestep_lab.cost.estimate.budget import format_advice

    study = copy.deepcopy(TINY)
    study["resources"] = {"device": "cpu", "runtime_min": 20}
    study["evaluation"] = {**study["evaluation"], "num_samples": 2_000_000}
    advice = estimate(plan_from_dict(study, "big.yaml"), "cpu").advice
    checks = {e.rule: e for e in advice.evaluation}
    assert checks["sample_score"].limit_min == 10  # max(10, 20 // 4)
    assert checks["sample_score"].wall[2] * 60 > 10 and not checks["sample_score"].fits
    assert checks["profile_losses"].fits
    text = " ".join("\n".join(format_advice(advice)).split())
    assert "sample_score: longest job" in text and "does NOT fit (no resume)" in text
