"""A budgeted study's stages (issue 40, docs/methods.md §14.5): the run universe and stage 0, the plan
file's round trip, the planner's decision turned into runs, the stop reasons, the sequential verdicts
and the index's lines. Unit level (no Snakemake): tests/test_stages_workflow.py runs the checkpoint."""

from __future__ import annotations

import json
import math

import pytest

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.config import BudgetConfig, ConfigError, budget_config
from timestep_lab.evidence.sequential import sequential
from timestep_lab.evidence.sequential_family import SEQUENTIAL_METHOD, judge_sequentially
from timestep_lab.evidence.stats import holm
from timestep_lab.reporting.stages import stage_lines
from timestep_lab.workflow.runs import Run
from timestep_lab.workflow.stage_plan import plan_next
from timestep_lab.workflow.stages import (
    MAX_STAGES,
    StagePlan,
    arm_runs,
    next_runs,
    read_plan,
    seed_order,
    staged_groups,
    staged_study,
    write_plan,
)

A, B = "speed_none_eps_b64_linear", "uniform_none_eps_b64_linear"
TEST = f"sampler_comparison:{A}:{B}"


def _universe(n: int) -> dict[str, Run]:
    return {f"{arm}_s{s}": Run(f"{arm}_s{s}", {"sampler": arm.split("_")[0], "seed": s}, {}, ("sampler_comparison",))
            for arm in (A, B) for s in range(n)}


def test_stage_zero_takes_the_first_initial_seeds_and_the_universe_the_next_in_order():
    study = {"groups": {"sampler_comparison": {"seeds": [3, 0]}, "prediction_types": {"seeds": [0]},
                        "unclaimed": {"seeds": [0, 1]}, "consistency": {"list": [{"seed": 0}]}}}
    assert staged_groups(study) == ("sampler_comparison", "prediction_types")  # groups a final-FID claim reads, with seeds:
    assert seed_order([3, 0], 5) == [3, 0, 4, 5, 6] and seed_order([], 2) == [0, 1] and seed_order([0, 1, 2], 2) == [0, 1]
    s0, universe = staged_study(study, 2, 4), staged_study(study, 4)
    assert s0["groups"]["sampler_comparison"]["seeds"] == [3, 0] and s0["groups"]["prediction_types"]["seeds"] == [0, 1]
    assert universe["groups"]["sampler_comparison"]["seeds"] == [3, 0, 4, 5]
    assert s0["groups"]["unclaimed"]["seeds"] == [0, 1] and study["groups"]["prediction_types"]["seeds"] == [0]  # not modified


def test_arms_list_their_runs_in_seed_order_and_next_runs_never_skip_a_seed():
    arms = arm_runs(_universe(4), {"groups": {"sampler_comparison": {"seeds": [0, 1]}}})
    assert arms[A] == [f"{A}_s{s}" for s in range(4)]
    have = [f"{A}_s0", f"{A}_s1", f"{B}_s0", f"{B}_s1"]
    assert next_runs(arms, have, {A: 2}) == [f"{A}_s2", f"{A}_s3"]
    with pytest.raises(ValueError, match="3 more seeds asked for, 2 left"):
        next_runs(arms, have, {A: 3})


def test_the_plan_file_round_trips_and_a_bad_one_is_one_error_naming_it(tmp_path):
    plan = StagePlan(2, ("a_s2", "a_s3"), ("a_s3",), (0.5, 0.25), "CPU-core-hours", 2.0, 0.125, None, (), (TEST,),
                     {"c1": {"seeds": 4, "extend": False, "cost": 0.5, "chance": 1.5, "served": True, "why": ""}})
    path = tmp_path / "next.json"
    write_plan(str(path), plan)
    assert read_plan(str(path)) == plan
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically
    for bad, msg in (({**plan.as_dict(), "format": "x"}, "not a stage plan"),
                     ({**plan.as_dict(), "stop": "bored"}, "stop: 'bored' is none of"),
                     ({k: v for k, v in plan.as_dict().items() if k != "spent"}, "no 'spent'"),
                     ({**plan.as_dict(), "stage": 0}, "stage: expected an integer >= 1")):
        path.write_text(json.dumps(bad))
        with pytest.raises(ArtifactError, match=msg) as err:
            read_plan(str(path))
        assert str(path) in str(err.value)


def _verdicts(diffs: list[float], verdict: str = "inconclusive", sd: float | None = None) -> dict:
    s = sequential(diffs)
    return {"claims": [{"id": "speed_sampling_alone", "kind": "fid", "test": TEST, "arm": A, "baseline": B,
                        "n": len(diffs), "diff": s.diff, "sd": s.sd if sd is None else sd, "detectable": s.detectable,
                        "verdict": verdict},
                       {"id": "an_analysis", "kind": "analysis", "test": "analysis:x", "verdict": "inconclusive"}]}


COSTS = {"first_look": 1.0, "seed_cost": {A: 0.25, B: 0.25}, "unit": "CPU-core-hours", "device": "cpu"}


def _plan(verdicts, amount=10.0, previous=None, k=0, **budget):
    b = BudgetConfig(amount=amount, initial_seeds=2, max_seeds=6, max_stages=budget.pop("max_stages", 4),
                     calibration="normal", **budget)
    arms = arm_runs(_universe(6), {"groups": {"sampler_comparison": {"seeds": [0, 1]}}})
    stage0 = [f"{A}_s0", f"{A}_s1", f"{B}_s0", f"{B}_s1"]
    return plan_next(verdicts, COSTS, b, arms, stage0, previous, k)


def test_an_open_claim_gets_the_next_seed_of_both_its_arms_and_the_spending_accumulates():
    p1 = _plan(_verdicts([-5.0, -5.4]))  # a large effect: resolvable within max_seeds, not at 2 seeds
    assert p1.stop is None and p1.new_runs == (f"{A}_s2", f"{B}_s2") and p1.runs == p1.new_runs
    assert p1.spent == (1.0,) and p1.cost == pytest.approx(0.5) and p1.served == (TEST,)
    assert p1.needs["speed_sampling_alone"]["served"] and "an_analysis" not in p1.needs
    p2 = _plan(_verdicts([-5.0, -5.4, -5.2]), previous=p1, k=1)
    assert p2.new_runs == (f"{A}_s3", f"{B}_s3") and p2.runs == p1.runs + p2.new_runs
    assert p2.spent == (1.0, 0.5) and p2.stage == 2


def test_every_stop_reason():
    assert _plan(_verdicts([-5.0, -5.4, -5.2], verdict="reproduced")).stop == "all resolved"
    # stage 0 cost 1.0: what is left of 1.2 pays for no seed of the open claim's two arms (0.5)
    spent = _plan(_verdicts([-5.0, -5.4]), amount=1.2)
    assert spent.stop == "budget" and spent.new_runs == ()
    noisy = _plan(_verdicts([-1.0, 1.0]))  # no effect at this SD resolves by max_seeds
    assert noisy.stop == "no claim can resolve within the budget"
    assert "more than 6 seeds" in noisy.needs["speed_sampling_alone"]["why"] and noisy.needs["speed_sampling_alone"]["cost"] is None
    last = _plan(_verdicts([-5.0, -5.4]), max_stages=1)
    assert last.stop == MAX_STAGES and last.new_runs == () and last.needs["speed_sampling_alone"]["seeds"] >= 3
    assert not last.needs["speed_sampling_alone"]["served"]  # the planner would serve it; the stop runs nothing


def test_a_claim_not_judged_at_its_length_cannot_ask_for_longer_runs_yet():
    p = _plan(_verdicts([-5.0, -5.4], verdict="not judged at this length"))
    assert p.stop == "no claim can resolve within the budget" and "does not train runs longer" in \
        p.needs["speed_sampling_alone"]["why"]


def test_a_missing_price_is_one_error():
    b = BudgetConfig(amount=1.0)
    with pytest.raises(ArtifactError, match="estimate.json: no sequential block"):
        plan_next(_verdicts([1.0, 2.0]), {}, b, {}, [], None, 0)
    with pytest.raises(ConfigError, match="budget.max_stages must be >= 1"):
        budget_config({"budget": {"amount": 1, "max_stages": 0}}, "c.yaml")


def test_prices_on_another_device_than_the_budgets_are_refused():
    """The plan weighs the estimate's prices against budget.amount: both must count one device's hours."""
    assert BudgetConfig(amount=1.0).device == "cpu"
    h100 = BudgetConfig(amount=100.0, unit="gpu-hours", gpu="H100")
    assert h100.device == "h100"
    with pytest.raises(ArtifactError, match=r"estimate.json: priced on 'cpu', but the budget counts gpu-hours on H100"):
        plan_next(_verdicts([-5.0, -5.4]), COSTS, h100, {}, [], None, 0)
    with pytest.raises(ArtifactError, match=r"priced on None"):  # an estimate.json from before the device was recorded
        plan_next(_verdicts([-5.0, -5.4]), {k: v for k, v in COSTS.items() if k != "device"}, BudgetConfig(amount=1.0),
                  {}, [], None, 0)
    assert _plan(_verdicts([-5.0, -5.4])).stop is None  # the same prices on the budget's device are taken


def test_fid_claims_are_judged_by_the_confidence_sequence_and_the_analyses_stay_in_holms_family():
    fixed = {"family": {"size": 2, "method": "holm", "calibration": "skew_envelope"},
             "claims": [{"id": "c", "kind": "fid", "test": "t1", "arm": "a", "baseline": "b", "expected_sign": -1,
                         "n": 5, "p": 1e-6, "ci_low": -6.0, "ci_high": -4.0, "verdict": "reproduced", "log": {}},
                        {"id": "d", "kind": "analysis", "test": "analysis:x", "expected_sign": 1, "n": 8, "p": 0.2,
                         "ci_low": -1.0, "ci_high": 3.0, "verdict": "inconclusive"},
                        {"id": "e", "kind": "fid", "verdict": "not run"}]}
    fids = {"a": {s: 10.0 - 5.0 + 0.1 * s for s in range(5)}, "b": {s: 10.0 + 0.05 * s * s for s in range(5)}}
    out = judge_sequentially(fixed, fids, prior_sd=3.0, horizon=None)
    c, d, e = out["claims"]
    s = sequential([fids["a"][k] - fids["b"][k] for k in range(5)])
    assert c["p"] == pytest.approx(s.p) and c["ci_low"] == pytest.approx(s.ci_low) and c["e_value"] == pytest.approx(s.e_value)
    assert [c["p_adj"], d["p_adj"]] == pytest.approx(holm([s.p, 0.2]))  # one family: the FID test and the analysis
    assert c["verdict"] == ("reproduced" if c["p_adj"] < 0.05 and c["ci_high"] < 0 else "inconclusive")
    assert c["fixed_design"]["p"] == 1e-6 and c["size_verdict"] is None and c["p"] > 1e-6  # the price of looking
    assert e["verdict"] == "not run"
    assert out["family"]["method"] == SEQUENTIAL_METHOD and out["family"]["tests"] == ["t1", "analysis:x"]
    assert "Ville" in out["family"]["calibration"] and fixed["claims"][0]["p"] == 1e-6  # the input is not modified


def test_the_index_says_what_was_spent_what_each_open_claim_needs_and_why_it_stopped():
    p1 = StagePlan(1, ("a_s2",), ("a_s2",), (1.0,), "CPU-core-hours", 2.0, 0.5, None, (), ("t",), {})
    p2 = StagePlan(2, ("a_s2",), (), (1.0, 0.5), "CPU-core-hours", 2.0, 0.0, "budget", (), (),
                   {"c": {"seeds": 5, "extend": False, "cost": 0.75, "chance": 1.2, "served": False,
                          "why": "needs 0.75 more, 0.5 left"},
                    "done": {"seeds": 3, "cost": 0.1, "served": False, "why": ""},
                    "far": {"seeds": None, "cost": None, "served": False, "why": "more than 6 seeds at this SD"}})
    verdicts = {"family": {"sequential": {"reference": "Ville's bound"}},
                "claims": [{"id": "c", "verdict": "inconclusive"}, {"id": "done", "verdict": "reproduced"},
                           {"id": "far", "verdict": "inconclusive"}]}
    lines = stage_lines([p1, p2], verdicts)
    text = "\n".join(lines)
    assert "anytime-valid" in lines[0] and "Ville's bound" in lines[0] and "2 stage(s)" in lines[0]
    assert "stage 0: 1; stage 1: 0.5; total 1.5 of the budget's 2" in text
    assert "Stage 1 added 1 run(s) for 1 open comparison(s): a_s2." in text
    assert "Stopped after stage 1: the budget is spent" in text
    assert "Still open: c (inconclusive) would need 5 paired seeds, 0.75 CPU-core-hours more (needs 0.75 more" in text
    assert "Still open: far (inconclusive) cannot resolve here: more than 6 seeds at this SD." in text
    assert "done" not in "".join(text.split("Still open")[1:]) and stage_lines([], verdicts) == []
    assert math.isclose(sum(p2.spent), 1.5)


def test_the_estimate_prices_a_budgeted_study_on_stage_zeros_run_table():
    """The estimate's DAG of a study with budget: is stage 0's (staged groups at initial_seeds): its
    claim arms' seed counts, which split the once-paid part from the seeds, are that table's."""
    from types import SimpleNamespace

    import yaml
    from worktree import ROOT

    from timestep_lab.cost.estimate.sequential import _run_table

    study = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    budget = BudgetConfig(amount=1.0, initial_seeds=3, max_seeds=5)
    seeds = lambda t, arm: sorted(t.loc[t["arm"] == arm, "seed"])  # noqa: E731
    fixed = _run_table(SimpleNamespace(study=study, source="smoke"), budget)  # no budget: block, the fixed DAG
    staged = _run_table(SimpleNamespace(study={**study, "budget": {"amount": 1.0}}, source="smoke"), budget)
    assert seeds(fixed, "uniform_none_mixed_b64_linear") == [0] and seeds(staged, "uniform_none_mixed_b64_linear") == [0, 1, 2]
    assert seeds(staged, "speed_speed_eps_b64_linear") == [0, 1, 2]  # listed [0, 1], then the next
    assert len(staged[staged["groups"] == "consistency"]) == len(fixed[fixed["groups"] == "consistency"])  # not staged


def test_a_comparison_is_held_back_only_when_every_claim_on_it_is_not_judged():
    """Two claims on one comparison, one on the converged model ("not judged at this length") and one
    on early training (inconclusive, a large effect), in either order: the comparison gets the next
    seeds for the early claim, and the converged one's need says it needs longer runs; once the early
    claim is resolved nothing is planned, and the study does not stop as "all resolved"."""
    s = sequential([-5.0, -5.4])

    def rows(first_verdict, second_verdict):
        row = {"kind": "fid", "test": TEST, "arm": A, "baseline": B, "n": 2, "diff": s.diff, "sd": s.sd,
               "detectable": s.detectable}
        conv = {**row, "id": "converged", "verdict": first_verdict}
        early = {**row, "id": "early", "verdict": second_verdict}
        return conv, early

    for order in (1, -1):
        plan = _plan({"claims": list(rows("not judged at this length", "inconclusive"))[::order]})
        assert plan.stop is None and plan.new_runs == (f"{A}_s2", f"{B}_s2")
        assert plan.needs["early"]["served"] and not plan.needs["converged"]["served"]
        assert "not judged at this length" in plan.needs["converged"]["why"] and plan.needs["converged"]["extend"]
    done = _plan({"claims": list(rows("not judged at this length", "reproduced"))})
    assert done.stop == "no claim can resolve within the budget" and done.new_runs == ()
    assert "not judged at this length" in done.needs["converged"]["why"]
    both = _plan({"claims": list(rows("not judged at this length", "not judged at this length"))})
    assert both.new_runs == () and both.needs["early"]["extend"]
