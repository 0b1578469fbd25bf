"""The next stage of a sequential study: which arms get more seeds, which runs train longer, or why none.

A pure function of the claims' state and a budget (docs/methods.md §14.3): :func:`plan_stage` reads
one :class:`ClaimState` per claim of the card and :class:`StageBudget` (what is left, each arm's
price of one more seed and of training one seed one length step longer; the workflow prices them
with the estimator) and returns a :class:`Stage`. Rules, in order:

1. A resolved claim (reproduced or contradicted) gets nothing.
2. A claim "not judged at this length" (the regime check, §9.7) asks for longer training: every
   seed of its arms trains one length step longer (resuming the same runs); it cannot ask for
   seeds first. An arm that cannot grow (not in ``extend_cost``) leaves the claim unresolvable.
3. Any other open claim asks for seeds: :func:`timestep_lab.evidence.sequential.seeds_to_resolve`
   of the effect it plans for (the claimed size when the caller passes one, else the observed mean
   difference) at its SD and at Holm's first level over the open claims (``alpha / open``). A claim
   that would need more than ``max_seeds`` is unresolvable.
4. Claims are served best chance first: the largest ratio of the effect to the detectable
   (resolvable) effect at the current seeds (below the seeds at which any mean resolves, where
   that effect is infinite for every claim, at those seeds: the standardised effects then decide),
   ties to the cheaper. A claim is served only when
   *all* it still needs (to its seed target, or its extension) fits in what is left after all
   the claims served before it will need (a future seed two of them share is counted for each:
   conservative): no budget is spent on a claim that cannot finish. A stage advances a seed
   claim by at most ``step_seeds``; a seed two claims share (the baseline's) is paid once.
5. Nothing planned: "all resolved" (no open claim), "budget" (what is left does not pay for one
   seed or one extension of any open claim), or "no claim can resolve within the budget".

The expected and worst-case cost of a sequential design: :func:`timestep_lab.evidence.sequential_sim.expected_cost`
(by simulation). Pure Python and numpy; no files, no Snakemake.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from timestep_lab.evidence.sequential import ALPHA, PRIOR_SD, cs_multiplier, resolvable_effect, seeds_to_resolve

__all__ = ["ALL_RESOLVED", "BUDGET", "UNREACHABLE", "STOP_REASONS", "ClaimState", "StageBudget", "ClaimNeed", "Stage",
           "plan_stage"]

ALL_RESOLVED = "all resolved"
BUDGET = "budget"
UNREACHABLE = "no claim can resolve within the budget"
STOP_REASONS = (ALL_RESOLVED, BUDGET, UNREACHABLE)


@dataclass(frozen=True)
class ClaimState:
    """One claim after the last stage. ``arms``: the arms its comparison reads (the arm and its
    baseline); ``n``: paired seeds so far; ``resolved``: its verdict is reproduced or contradicted;
    ``not_judged``: "not judged at this length"; ``effect``: the size to plan for, in the units of
    the per-seed differences (the paper's claimed size; NaN: the observed ``mean``); ``sd``: the
    per-seed differences' SD; ``detectable``: the detectable effect printed for it (NaN: the
    sequential one at ``n``, :func:`timestep_lab.evidence.sequential.resolvable_effect`)."""

    name: str
    arms: tuple[str, ...]
    n: int
    resolved: bool = False
    not_judged: bool = False
    effect: float = math.nan
    mean: float = math.nan
    sd: float = math.nan
    detectable: float = math.nan


@dataclass(frozen=True)
class StageBudget:
    """What is left (``remaining``, any unit: CPU-core-hours, GPU-hours) and the prices:
    ``seed_cost[arm]`` one more seed of the arm at its current length, ``extend_cost[arm]``
    training one seed of it one length step longer (absent: the arm is at its longest);
    ``arm_seeds[arm]``: the seeds it has (absent: the most any claim on it has)."""

    remaining: float
    seed_cost: Mapping[str, float]
    extend_cost: Mapping[str, float] = field(default_factory=dict)
    arm_seeds: Mapping[str, int] = field(default_factory=dict)
    max_seeds: int = 10
    step_seeds: int = 1
    alpha: float = ALPHA
    prior_sd: float = PRIOR_SD
    horizon: int | None = None  # the skew envelope's horizon when the verdicts use it (max_seeds), else None


@dataclass(frozen=True)
class ClaimNeed:
    """What one open claim still needs: ``seeds`` (its seed target; None: more than ``max_seeds``
    or not known), ``extend`` (a longer run first), ``cost`` (all of it at today's prices; inf
    when unreachable), ``chance`` (effect / detectable; the ranking), ``served`` (in this stage)
    and ``why`` (the reason it is not served, or "")."""

    seeds: int | None
    extend: bool
    cost: float
    chance: float
    served: bool = False
    why: str = ""


@dataclass(frozen=True)
class Stage:
    """The next stage: ``seeds[arm]`` seeds to add (seed numbers ``arm_seeds[arm]`` onward),
    ``extend`` the arms whose every seed trains one length step longer, ``cost`` its price,
    ``claims`` the claims it serves (best chance first), ``stop`` None, or why nothing is planned
    (:data:`STOP_REASONS`), ``needs`` every open claim's :class:`ClaimNeed`."""

    seeds: Mapping[str, int]
    extend: tuple[str, ...]
    cost: float
    claims: tuple[str, ...]
    stop: str | None
    needs: Mapping[str, ClaimNeed]


def _arm_seeds(claims: Sequence[ClaimState], budget: StageBudget) -> dict[str, int]:
    have: dict[str, int] = {}
    for c in claims:
        for a in c.arms:
            have[a] = max(have.get(a, 0), c.n)
    return {**have, **{a: int(k) for a, k in budget.arm_seeds.items()}}


def _first_resolvable(level: float, budget: StageBudget, max_n: int = 64) -> int:
    """The fewest seeds at which some mean difference resolves at ``level`` (``c_n`` finite;
    ``max_n + 1`` when none up to ``max_n`` does)."""
    n = np.arange(2, max_n + 1)
    ok = np.isfinite(cs_multiplier(n, level, budget.prior_sd, budget.horizon))
    return int(n[np.argmax(ok)]) if ok.any() else max_n + 1


def _need(c: ClaimState, budget: StageBudget, level: float, have: Mapping[str, int]) -> ClaimNeed:
    """The claim's need alone, priced at today's seeds (rules 2-4)."""
    effect = c.effect if math.isfinite(c.effect) else c.mean
    detectable = c.detectable if math.isfinite(c.detectable) else \
        resolvable_effect(c.sd, c.n, level, budget.prior_sd, budget.horizon)
    if detectable == math.inf:  # below the seeds at which any mean resolves (a study's first looks): every
        # claim's chance would be 0 and the order the prices'; compare them there instead, at a common n
        detectable = resolvable_effect(c.sd, max(c.n, _first_resolvable(level, budget)), level, budget.prior_sd,
                                       budget.horizon)
    chance = abs(effect) / detectable if math.isfinite(effect) and math.isfinite(detectable) and detectable > 0 else 0.0
    if c.not_judged:
        if not all(a in budget.extend_cost for a in c.arms):
            return ClaimNeed(None, True, math.inf, chance, why="its runs are at their longest and it is not judged")
        cost = sum(have.get(a, c.n) * float(budget.extend_cost[a]) for a in set(c.arms))
        return ClaimNeed(None, True, cost, chance)
    target = seeds_to_resolve(effect, c.sd, level, budget.prior_sd, max_n=budget.max_seeds, horizon=budget.horizon)
    if target is None:
        return ClaimNeed(None, False, math.inf, chance,
                         why=f"more than {budget.max_seeds} seeds at this SD and effect (or no effect or SD measured)")
    target = max(target, c.n + 1) if target <= c.n else target  # its SD says it should resolve: one more seed
    if target > budget.max_seeds:
        return ClaimNeed(None, False, math.inf, chance, why=f"already at {c.n} of {budget.max_seeds} seeds")
    cost = sum(max(0, target - have.get(a, 0)) * float(budget.seed_cost[a]) for a in set(c.arms))
    return ClaimNeed(target, False, cost, chance)


def _serve(c: ClaimState, need: ClaimNeed, budget: StageBudget, planned: dict[str, int], extend: set[str],
           have: Mapping[str, int]) -> tuple[float, float]:
    """``(cost of all it needs, cost of this stage's part)`` on top of what is already planned."""
    if need.extend:
        arms = set(c.arms) - extend
        cost = sum(have.get(a, c.n) * float(budget.extend_cost[a]) for a in arms)
        return cost, cost
    total = sum(max(0, need.seeds - max(have.get(a, 0), planned.get(a, 0))) * float(budget.seed_cost[a])
                for a in set(c.arms))
    now = min(need.seeds, c.n + budget.step_seeds)
    part = sum(max(0, now - max(have.get(a, 0), planned.get(a, 0))) * float(budget.seed_cost[a]) for a in set(c.arms))
    return total, part


def _cheapest_step(c: ClaimState, budget: StageBudget, have: Mapping[str, int]) -> float:
    """The least one stage could spend on the claim: one seed of its arms, or its extension."""
    if c.not_judged:
        return sum(have.get(a, c.n) * float(budget.extend_cost.get(a, math.inf)) for a in set(c.arms))
    return sum(float(budget.seed_cost[a]) for a in set(c.arms) if have.get(a, 0) <= c.n)


def plan_stage(claims: Sequence[ClaimState], budget: StageBudget) -> Stage:
    """The next stage for ``claims`` under ``budget`` (module docstring's rules)."""
    open_ = [c for c in claims if not c.resolved]
    if not open_:
        return Stage({}, (), 0.0, (), ALL_RESOLVED, {})
    have = _arm_seeds(claims, budget)
    level = budget.alpha / len([c for c in open_ if not c.not_judged] or open_)
    needs = {c.name: _need(c, budget, level, have) for c in open_}
    order = sorted(open_, key=lambda c: (-needs[c.name].chance, needs[c.name].cost, c.name))
    planned: dict[str, int] = {}
    extend: set[str] = set()
    spent, committed, served = 0.0, 0.0, []  # this stage's cost; all the served claims will need
    for c in order:
        need = needs[c.name]
        if not math.isfinite(need.cost):
            continue
        total, part = _serve(c, need, budget, planned, extend, have)
        if committed + total > budget.remaining:
            needs[c.name] = ClaimNeed(need.seeds, need.extend, need.cost, need.chance,
                                      why=f"needs {total:.4g} more, {budget.remaining - committed:.4g} left after "
                                          f"the claims with a better chance")
            continue
        spent, committed = spent + part, committed + total
        served.append(c.name)
        needs[c.name] = ClaimNeed(need.seeds, need.extend, need.cost, need.chance, served=True)
        if need.extend:
            extend |= set(c.arms)
        else:
            now = min(need.seeds, c.n + budget.step_seeds)
            for a in c.arms:
                planned[a] = max(planned.get(a, 0), now)
    seeds = {a: k - have.get(a, 0) for a, k in sorted(planned.items()) if k > have.get(a, 0)}
    if served:
        return Stage(seeds, tuple(sorted(extend)), spent, tuple(served), None, needs)
    # "budget" only when some claim could resolve at all but what is left pays for none of its steps
    steps = [_cheapest_step(c, budget, have) for c in open_ if math.isfinite(needs[c.name].cost)]
    spent_out = bool(steps) and min(steps) > budget.remaining
    return Stage({}, (), 0.0, (), BUDGET if spent_out else UNREACHABLE, needs)
