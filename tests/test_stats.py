"""Paired statistics: coverage and false-verdict rates on synthetic seeds, closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from timestep_lab.evidence.stats import (
    detectable_effect,
    detectable_multiplier,
    holm,
    holm_rows,
    holm_table,
    json_safe,
    kimg_to_reach,
    paired,
    seeds_needed,
    speedup,
    verdict,
)


def _synthetic(rng: np.random.Generator, n: int, effect: float, seed_sd: float = 8.0, noise_sd: float = 2.0):
    """FIDs of a baseline and an arm over ``n`` paired seeds: a shared per-seed offset (what
    pairing cancels) plus independent noise; the arm is shifted by ``effect``."""
    seed_offset = rng.normal(0.0, seed_sd, n)
    base = 100.0 + seed_offset + rng.normal(0.0, noise_sd, n)
    arm = 100.0 + effect + seed_offset + rng.normal(0.0, noise_sd, n)
    return base, arm


def test_interval_covers_a_known_effect_at_its_nominal_rate():
    rng = np.random.default_rng(0)
    covered = sum(
        (r := paired(*_synthetic(rng, 5, -6.0))).ci_low <= -6.0 <= r.ci_high for _ in range(200)
    )
    assert 180 <= covered <= 198, covered  # 90-99% of 200 repeats


def test_no_effect_is_inconclusive_at_least_95_percent():
    rng = np.random.default_rng(1)
    verdicts = [verdict(r.ci_low, r.ci_high, -1) for r in (paired(*_synthetic(rng, 5, 0.0)) for _ in range(200))]
    assert verdicts.count("inconclusive") >= 190
    assert set(verdicts) <= {"inconclusive", "reproduced", "contradicted"}


def test_large_effect_is_reproduced_or_contradicted_by_its_sign():
    rng = np.random.default_rng(2)
    base, arm = _synthetic(rng, 5, -20.0)
    r = paired(base, arm)
    assert verdict(r.ci_low, r.ci_high, -1) == "reproduced"
    assert verdict(r.ci_low, r.ci_high, +1) == "contradicted"
    # pairing removes the shared seed offset: the unpaired spread is much wider
    assert r.sd < np.std(arm, ddof=1)


def test_paired_matches_scipy_and_closed_forms():
    base = [101.0, 95.0, 110.0, 99.0, 104.0]
    arm = [97.0, 93.5, 103.0, 98.0, 99.0]
    r = paired(base, arm)
    d = np.subtract(arm, base)
    assert r.n == 5 and r.diff == pytest.approx(d.mean())
    assert r.p == pytest.approx(sps.ttest_rel(arm, base).pvalue)
    se = d.std(ddof=1) / math.sqrt(5)
    assert r.ci_high - r.diff == pytest.approx(sps.t.ppf(0.975, 4) * se)
    assert r.detectable == pytest.approx(detectable_multiplier(5, 0.05) * d.std(ddof=1))
    assert paired(base, arm, alpha=0.01).detectable > r.detectable  # a stricter level needs a larger effect
    lg = paired(base, arm, log=True)
    assert lg.diff == pytest.approx(np.mean(np.log(arm) - np.log(base)))


def test_paired_drops_failed_seeds_and_says_nan_below_two():
    r = paired([100.0, float("nan"), 90.0], [95.0, 80.0, 88.0])
    assert r.n == 2 and r.diff == pytest.approx(-3.5)
    one = paired([100.0], [90.0])
    assert one.n == 1 and one.diff == -10.0 and math.isnan(one.ci_low) and math.isnan(one.p)
    assert verdict(one.ci_low, one.ci_high, -1) == "inconclusive"
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])


def test_detectable_multiplier_is_80_percent_power_averaged_over_the_sample_sd():
    """k(n, alpha): a true difference of k times the sample SD is found 80% of the time, averaged
    over the chi distribution of s / sigma; plugging s in for sigma (the exact noncentral-t power)
    gives less at small n, and the old normal-quantile formula less still."""
    for n, alpha in ((3, 0.05), (5, 0.05), (5, 0.05 / 8), (10, 0.01)):
        k, df = detectable_multiplier(n, alpha), n - 1
        crit = sps.t.ppf(1 - alpha / 2, df)
        r = np.sqrt(sps.chi2.ppf((np.arange(4000) + 0.5) / 4000, df) / df)  # finer than the function's nodes
        assert sps.nct.sf(crit, df, k * r * math.sqrt(n)).mean() == pytest.approx(0.80, abs=0.005)
        plug_in = sps.nct.sf(crit, df, k * math.sqrt(n))  # if s were exactly sigma
        assert plug_in > 0.80
    assert detectable_multiplier(5, 0.05) == pytest.approx(2.09, abs=0.01)  # vs 1.66 of (t_.975 + t_.8) / sqrt(n)
    assert detectable_multiplier(10, 0.05) < detectable_multiplier(5, 0.05) < detectable_multiplier(3, 0.05)
    assert math.isnan(detectable_effect(1.0, 1)) and math.isnan(detectable_multiplier(1))
    # another test's critical value (the scorecard's calibration): the same power rule at that value
    assert detectable_multiplier(5, 0.05, crit=sps.t.ppf(0.975, 4)) == pytest.approx(detectable_multiplier(5, 0.05))
    k = detectable_multiplier(5, 0.05, crit=6.36)
    r = np.sqrt(sps.chi2.ppf((np.arange(64) + 0.5) / 64, 4) / 4)
    assert sps.nct.sf(6.36, 4, k * r * math.sqrt(5)).mean() == pytest.approx(0.8, abs=1e-4) and k > 4


def test_seeds_needed_inverts_the_detectable_effect():
    sd, effect, alpha = 0.4, math.log(3.0), 0.05 / 6
    n = seeds_needed(effect, sd, alpha)
    assert n is not None and n >= 3
    assert detectable_effect(sd, n, alpha) <= effect < detectable_effect(sd, n - 1, alpha)
    assert seeds_needed(effect, 100.0, alpha) is None  # more than 200
    assert seeds_needed(effect, 0.0, alpha) == 2 and seeds_needed(0.0, sd) is None


def test_holm_step_down_closed_form():
    # sorted p: 0.01, 0.02, 0.04 with m = 3 -> 0.03, 0.04, 0.04 (monotone), NaN untouched
    assert holm([0.04, 0.01, float("nan"), 0.02]) == pytest.approx([0.04, 0.03, float("nan"), 0.04], nan_ok=True)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    # many families at once (simulated scorecards): each row as holm() adjusts it alone
    rng = np.random.default_rng(4)
    P = rng.uniform(0, 0.1, (50, 6))
    P[rng.uniform(size=P.shape) < 0.2] = np.nan
    assert holm_rows(P) == pytest.approx(np.array([holm(row) for row in P]), nan_ok=True)
    table = holm_table({"a": paired([1, 2, 3.0], [0, 1, 2.5]), "b": paired([1, 2, 3.0], [1.1, 2.0, 3.2])})
    assert table["a"].p_adj >= table["a"].p and table["b"].p_adj >= table["b"].p


def test_verdict_rejects_a_missing_direction():
    with pytest.raises(ValueError):
        verdict(-1.0, 1.0, 0)


def test_kimg_to_reach_interpolates_in_log_fid():
    # geometric midpoint of 200 and 100 is reached half way between 8 and 16 kimg
    assert kimg_to_reach([8, 16], [200.0, 100.0], math.sqrt(200 * 100)) == pytest.approx(12.0)
    assert kimg_to_reach([8, 16], [200.0, 100.0], 250.0) == 8.0
    assert math.isnan(kimg_to_reach([8, 16], [200.0, 100.0], 50.0))


def test_speedup_paired_and_censored():
    base = [([4, 8, 12, 16], [200.0, 120.0, 90.0, 80.0])] * 3
    # the arm reaches 80 at exactly 8 kimg in each seed: 16 / 8 = 2x, no spread -> point interval
    arm = [([4, 8, 12, 16], [150.0, 80.0, 70.0, 60.0])] * 3
    s = speedup(base, arm)
    assert s.value == pytest.approx(2.0) and s.bound == "" and s.label() == "2.00x"
    assert s.ci_low == pytest.approx(2.0) and s.ci_high == pytest.approx(2.0)
    # never reached: needs more than 16 kimg, so the speed-up is at most 1
    slow = speedup(base, [([4, 8, 12, 16], [300.0, 200.0, 150.0, 100.0])] * 3)
    assert (slow.bound, slow.kimg_bound, slow.value) == ("<", ">", pytest.approx(1.0))
    assert math.isnan(slow.ci_low) and slow.label() == "<1.00x"
    # reached at the first point: at least 16 / 4 = 4x, no more can be said
    fast = speedup(base, [([4, 8, 12, 16], [70.0, 60.0, 50.0, 40.0])] * 3)
    assert (fast.bound, fast.kimg_bound, fast.value) == (">", "<", pytest.approx(4.0))
    with pytest.raises(ValueError):
        speedup(base, arm[:2])


def test_speedup_censored_both_ways_bounds_nothing():
    """Two seeds reach the level before the first point (ratio >= 16/4 each), one never does
    (ratio <= 1): the geometric mean of these bounds (here 2.52x) is neither an upper nor a lower
    bound of the truth, so it is not printed (it used to read "<2.52x" whatever the truth was)."""
    base = [([4, 8, 12, 16], [200.0, 120.0, 90.0, 80.0])] * 3
    arm = [([4, 8, 12, 16], [70.0, 60.0, 50.0, 40.0])] * 2 + [([4, 8, 12, 16], [300.0, 200.0, 150.0, 100.0])]
    s = speedup(base, arm, seeds=[0, 1, 2])
    assert s.bound == "both" and math.isnan(s.value) and math.isnan(s.ci_low)
    assert s.label() == "n/a (censored both ways)"
    assert [r.censoring for r in s.seeds] == ["early", "early", "never"] and [r.seed for r in s.seeds] == [0, 1, 2]


def test_speedup_drops_a_seed_without_a_finite_level_or_curve():
    good = ([4, 8, 12, 16], [200.0, 120.0, 90.0, 80.0])
    arm = ([4, 8, 12, 16], [150.0, 80.0, 70.0, 60.0])  # reaches 80 at 8 kimg: 2x
    nan_level = ([4, 8, 12, 16], [200.0, 120.0, 90.0, float("nan")])  # the baseline's last FID failed
    s = speedup([good, nan_level, good], [arm, arm, ([4, 8], [float("nan")] * 2)], seeds=[0, 1, 2])
    # before: the NaN level counted as "never reached" and the result read "<1.00x"
    assert s.bound == "" and s.value == pytest.approx(2.0) and s.per_seed == (pytest.approx(2.0),)
    assert [(r.seed, r.censoring) for r in s.seeds] == [(0, ""), (1, "dropped"), (2, "dropped")]
    assert "not finite" in s.seeds[1].note and "arm" in s.seeds[2].note
    assert s.seeds[0].target == 80.0 and s.seeds[0].total_kimg == 16 and s.seeds[0].reach_kimg == pytest.approx(8.0)
    # the level is the baseline's *last progress point*, not a final FID the caller could pass
    assert speedup([([4, 8], [200.0, 100.0])], [([4, 8], [150.0, 100.0])]).value == pytest.approx(1.0)
    assert math.isnan(speedup([nan_level], [([4, 8], [float("nan")] * 2)]).value)


def test_json_safe_writes_strict_json():
    out = json.dumps(json_safe({"a": float("nan"), "b": [np.float64(1.5), float("inf")]}), allow_nan=False)
    assert json.loads(out) == {"a": None, "b": [1.5, None]}
