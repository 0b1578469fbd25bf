"""The estimate of a sequential design (a study with ``budget:``, docs/methods.md §14): its claims'
arms priced per seed from the estimate's own jobs, the first look, the expectation per scenario and
the worst case (cost/estimate/sequential.py). The command's block: tests/test_estimate.py's
test_cli_on_cifar10."""

from __future__ import annotations

from dataclasses import replace

import pytest
from study_plans import study_plan

from timestep_lab.claims import CLAIMS
from timestep_lab.config import BudgetConfig
from timestep_lab.cost.estimate.sequential import claim_arms, seed_costs, sequential_cost
from timestep_lab.cost.estimate.table import estimate


@pytest.fixture(scope="module")
def default_study():
    plan = study_plan("config")
    return plan, estimate(plan, "cpu")


def test_claims_are_priced_by_their_own_arms_and_the_figures_order_as_the_design_does(default_study):
    plan, est = default_study
    budget = BudgetConfig(amount=1.0, initial_seeds=2, step_seeds=1, max_seeds=10, max_length=3.0,
                          calibration="normal")
    s = sequential_cost(plan, est, budget, studies=400)
    # the verdicts' own selection: SpeeD's arm against the uniform baseline of the sampler comparison
    assert s.claims["speed_faster"] == ("speed_speed_eps_b64_linear", "uniform_none_eps_b64_linear")
    assert "slot_interference" in s.left_out and "analysis" in s.left_out["slot_interference"]
    found, _, table = claim_arms(plan)
    seed, grow = seed_costs(plan, est, table)
    arms = sorted({a for pair in found.values() for a in pair})
    assert all(seed[a] > grow[a] > 0 for a in arms)  # a seed is its training, scoring and progress points
    # the jobs no FID claim reads are paid once; the claim arms at the configured seeds make up the rest
    configured = sum(int((table["arm"] == a).sum()) * seed[a] for a in arms)
    assert s.fixed == pytest.approx(est.gpu_hours - configured) and 0 < s.fixed < est.gpu_hours
    # the first look is stage 0: 2 seeds of every staged arm, but 3 of the baseline and of SpeeD's arm,
    # which the schedules group (no FID claim reads it: unstaged) runs at its seeds 0-2 whatever the
    # claims say (so do the consistency group's seeds 0-2 of the baseline)
    stage0 = {a: 3 if a in ("uniform_none_eps_b64_linear", "speed_speed_eps_b64_linear") else 2 for a in arms}
    assert s.first_look == pytest.approx(s.fixed + sum(stage0[a] * seed[a] for a in arms))
    # a claim of an unstaged group is not a sequential claim: the planner never adds seeds to it
    assert "momentum_decay" not in s.claims and "not staged" in s.left_out["momentum_decay"]
    assert s.fixed_design == pytest.approx(est.gpu_hours)  # this plan is the fixed design (no budget: in it)
    # the worst case in closed form: every claim arm at max_seeds, the convergence claims' arms 3x as long
    growing = {a for k in s.longer for a in found[k]}
    convergence = {c.id for c in CLAIMS if c.judged_at == "convergence"}  # what the regime check can hold back
    assert "adaptive_converges_better" in s.longer and set(s.longer) == convergence & set(s.claims)
    worst = s.fixed + 10 * sum(seed[a] for a in arms) + 10 * sum(2.0 * grow[a] for a in growing)
    assert s.worst == pytest.approx(worst)
    # nothing to find runs every claim to max_seeds; larger effects resolve sooner and cost less
    assert s.first_look < s.expected[2.0] <= s.expected[1.0] <= s.expected[0.0] < s.worst
    assert s.resolved[0.0] < 0.05 < s.resolved[2.0]
    # the skew envelope (the default calibration) keeps its promise under skewed seeds by resolving later
    skew = sequential_cost(plan, est, replace(budget, calibration="skew_envelope"), studies=400)
    assert skew.resolved[2.0] < s.resolved[2.0] and skew.expected[2.0] > s.expected[2.0]
    assert skew.worst == pytest.approx(s.worst) and "skew_envelope calibration" in skew.as_dict()["assumes"]



def test_a_budgeted_study_is_priced_on_its_budgets_device_whatever_it_runs_on(tmp_path, capsys):
    """The smoke study runs on CPU; with a budget in A100-hours the estimate (the workflow's estimate
    job runs exactly this) prices it on the A100, so that the stage plans weigh A100-hours against
    budget.amount; a card the estimator does not know is one error line naming budget.gpu."""
    import json

    import yaml
    from worktree import ROOT

    from timestep_lab.cli import main  # in this process: no second interpreter

    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    assert cfg["resources"]["device"] == "cpu"
    cfg["budget"] = {"amount": 5, "unit": "gpu-hours", "gpu": "A100", "max_seeds": 3}
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    args = ["estimate", str(tmp_path / "smoke.yaml"), "--snakefile", str(ROOT / "Snakefile"), "--no-calibration"]
    assert main([*args, "--out", str(tmp_path / "estimate.json")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "estimate.json").read_text())
    assert written["device"] == "a100" and written["sequential"]["device"] == "a100"
    assert written["sequential"]["unit"] == "GPU-hours (a100)" and "note:" not in out

    cfg["budget"]["gpu"] = "a10"
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "budget.gpu: unknown card 'a10'" in err[0], err
