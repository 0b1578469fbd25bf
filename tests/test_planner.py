"""The sequential design's planner (issue 40): each rule of evidence/planner.py."""

from __future__ import annotations

import math

from timestep_lab.evidence.planner import (
    ALL_RESOLVED,
    BUDGET,
    UNREACHABLE,
    ClaimState,
    StageBudget,
    plan_stage,
)
from timestep_lab.evidence.sequential import resolvable_effect, seeds_to_resolve

PRICES = {"A": 1.0, "B": 1.0, "C": 1.0, "D": 1.0, "base": 1.0}


def claim(name, arm, n=4, **kw):
    return ClaimState(name, (arm, "base"), n, **kw)


def test_resolved_claims_get_nothing_and_all_resolved_stops():
    stage = plan_stage([claim("a", "A", resolved=True), claim("b", "B", resolved=True)],
                       StageBudget(100.0, PRICES))
    assert stage.stop == ALL_RESOLVED and stage.seeds == {} and stage.extend == () and stage.cost == 0.0


def test_an_open_claim_gets_seeds_up_to_its_target_a_step_at_a_time():
    c = claim("a", "A", mean=1.5, sd=1.0)
    target = seeds_to_resolve(1.5, 1.0, 0.05)
    assert target > 5  # more than one step away
    stage = plan_stage([c], StageBudget(100.0, PRICES, step_seeds=1))
    assert stage.stop is None and stage.seeds == {"A": 1, "base": 1} and stage.cost == 2.0
    assert stage.needs["a"].seeds == target and stage.needs["a"].cost == 2 * (target - 4)
    assert plan_stage([c], StageBudget(100.0, PRICES, step_seeds=50)).seeds == {"A": target - 4, "base": target - 4}
    # the claimed size, when given, is planned for instead of the observed mean
    assert plan_stage([claim("a", "A", mean=1.5, sd=1.0, effect=30.0)], StageBudget(100.0, PRICES)).needs["a"].seeds == 5


def test_not_judged_claims_train_longer_every_seed_of_their_arms():
    c = claim("conv", "D", n=3, not_judged=True)
    stage = plan_stage([c], StageBudget(100.0, PRICES, extend_cost={"D": 2.0, "base": 0.5}))
    assert stage.extend == ("D", "base") and stage.seeds == {} and stage.cost == 3 * 2.0 + 3 * 0.5
    # runs at their longest: the claim cannot resolve
    stuck = plan_stage([c], StageBudget(100.0, PRICES, extend_cost={"base": 0.5}))
    assert stuck.stop == UNREACHABLE and "longest" in stuck.needs["conv"].why


def test_best_chance_first_and_never_past_the_budget():
    """Three open claims on one baseline: the one with the largest effect per detectable effect is
    served first; a claim whose whole need does not fit what is left is not started."""
    strong, weak = claim("strong", "A", mean=6.0, sd=1.0), claim("weak", "B", mean=2.0, sd=1.0)
    level = 0.05 / 2
    assert 6.0 / resolvable_effect(1.0, 4, level) > 2.0 / resolvable_effect(1.0, 4, level)
    roomy = plan_stage([weak, strong], StageBudget(1000.0, PRICES))
    assert roomy.claims == ("strong", "weak") and roomy.cost == 3.0  # the baseline's new seed paid once
    need_strong = roomy.needs["strong"].cost
    tight = plan_stage([weak, strong], StageBudget(need_strong, PRICES))
    assert tight.claims == ("strong",) and tight.cost <= need_strong and "left" in tight.needs["weak"].why
    # what is left is reserved for all a served claim will need, not only for this stage's step
    slow_a, slow_b = claim("p", "A", mean=1.5, sd=1.0), claim("q", "B", mean=1.5, sd=1.0)
    one = plan_stage([slow_a, slow_b], StageBudget(14.0, PRICES))
    assert one.needs["p"].cost == 12.0 and one.claims == ("p",) and one.cost == 2.0
    assert len(plan_stage([slow_a, slow_b], StageBudget(24.0, PRICES)).claims) == 2
    for budget in (0.5, 1.0, 2.0, 7.0, need_strong, 50.0):  # the stage never costs more than what is left
        assert plan_stage([weak, strong], StageBudget(budget, PRICES)).cost <= budget
    # a printed detectable effect ranks instead of the sequential one
    ranked = plan_stage([claim("x", "A", mean=6.0, sd=1.0, detectable=100.0), claim("y", "B", mean=2.0, sd=1.0)],
                        StageBudget(1000.0, PRICES))
    assert ranked.claims[0] == "y"


def test_why_it_stops_budget_or_unreachable():
    open_claim = claim("a", "A", mean=1.5, sd=1.0)  # 9 seeds: 10 to pay
    assert plan_stage([open_claim], StageBudget(1.5, PRICES)).stop == BUDGET  # one seed of A and base costs 2
    far = plan_stage([open_claim], StageBudget(5.0, PRICES))  # a seed fits, the whole need does not
    assert far.stop == UNREACHABLE and far.seeds == {}
    hopeless = plan_stage([claim("z", "A", mean=0.01, sd=1.0)], StageBudget(1e9, PRICES))
    assert hopeless.stop == UNREACHABLE and hopeless.needs["z"].seeds is None and math.isinf(hopeless.needs["z"].cost)
    at_max = plan_stage([claim("m", "A", n=10, mean=0.5, sd=1.0)], StageBudget(1e9, PRICES, max_seeds=10))
    assert at_max.stop == UNREACHABLE


def test_seeds_already_run_are_not_paid_again():
    # the baseline has 6 seeds already (another claim's): a claim at 4 pays only its own arm up to 6
    c = claim("a", "A", mean=1.5, sd=1.0)
    stage = plan_stage([c], StageBudget(100.0, PRICES, arm_seeds={"base": 6}, step_seeds=2))
    assert stage.seeds == {"A": 2} and stage.cost == 2.0


def test_the_envelope_asks_for_more_seeds():
    """Planned under the skew envelope (the verdicts' calibration), a claim needs more seeds than
    under Ville's bound, and one that Ville's bound would finish in 10 may not."""
    c = claim("a", "A", mean=3.0, sd=1.0)
    normal = plan_stage([c], StageBudget(100.0, PRICES)).needs["a"].seeds
    skewed = plan_stage([c], StageBudget(100.0, PRICES, horizon=10)).needs["a"].seeds
    assert (normal, skewed) == (5, 7)
    slow = claim("b", "A", mean=1.5, sd=1.0)
    assert plan_stage([slow], StageBudget(100.0, PRICES)).stop is None
    assert plan_stage([slow], StageBudget(100.0, PRICES, horizon=10)).stop == UNREACHABLE


def test_below_the_first_resolvable_seeds_the_larger_standardised_effect_goes_first():
    """At 3 seeds no mean resolves at Holm's first level (the detectable effect is infinite for every
    claim, as after a study's first look): the claims are compared at the first seeds where one can,
    so the larger effect per SD is served first even when it is the dearer, not the cheaper one."""
    level = 0.05 / 2
    assert resolvable_effect(1.0, 3, level) == math.inf and math.isfinite(resolvable_effect(1.0, 4, level))
    prices = {"A": 1.0, "B": 5.0, "base": 1.0}
    small, large = claim("a_small", "A", n=3, mean=3.0, sd=1.0), claim("b_large", "B", n=3, mean=6.0, sd=1.0)
    roomy = plan_stage([small, large], StageBudget(1000.0, prices))
    assert roomy.claims == ("b_large", "a_small")
    assert roomy.needs["b_large"].chance == 2 * roomy.needs["a_small"].chance > 0
    assert roomy.needs["b_large"].cost > roomy.needs["a_small"].cost  # the prices alone would order them the other way
    tight = plan_stage([small, large], StageBudget(roomy.needs["b_large"].cost, prices))
    assert tight.claims == ("b_large",) and "better chance" in tight.needs["a_small"].why
