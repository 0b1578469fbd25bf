"""The size verdict as an equivalence statement (docs/methods.md §9.3): the rule's cases, and the
size verdicts of simulated studies whose true speed-up is the paper's number (wrong "smaller" /
"larger" in at most 5%) or half of it ("consistent" in at most 5%), on the studies' own
progress grids and seed counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from card_simulation import NOISE, STUDIES, card_layout

from timestep_lab.claims import claim_by_id
from timestep_lab.evidence.calibration import calibration
from timestep_lab.evidence.size import band, size_of, size_verdict
from timestep_lab.evidence.stats import speedup
from timestep_lab.evidence.verdicts import speedup_dict

SPEED_3X = claim_by_id("speed_faster").record()["numbers"]  # 3x, comparable; then FID pairs, not comparable
RANGE = [{"kind": "speedup", "text": "2x to 2.6x", "low": 2.0, "high": 2.6, "not_comparable": ""}]


def test_the_band_is_a_factor_of_1_5_either_way():
    assert band(3.0, 3.0) == pytest.approx((2.0, 4.5)) and band(2.0, 2.6) == pytest.approx((4 / 3, 3.9))


@pytest.mark.parametrize("paper, ours, censored, expected, why", [
    ((3, 3), (2.2, 4.0), "", "consistent", ""),                       # inside the band, excludes 1x
    ((3, 3), (0.8, 3.1), "", "not comparable", "covers no effect"),   # includes 3x but also no speed-up
    ((3, 3), (0.4, 25.0), "", "not comparable", "covers no effect"),  # wide
    ((3, 3), (1.2, 25.0), "", "not comparable", "too wide"),          # wide, off no effect: says nothing
    ((3, 3), (1.19, 1.93), "", "smaller", ""),                        # wholly below 2.00x
    ((3, 3), (0.5, 1.8), "", "smaller", ""),                          # below the band, no effect or not
    ((3, 3), (5.0, 7.0), "", "larger", ""),                           # wholly above 4.50x
    ((3, 3), (1.5, 3.5), "", "not comparable", "too wide"),           # reaches below the band's edge
    ((3, 3), (math.nan, 1.4), "<", "smaller", ""),                    # "<": its upper bound below the band
    ((3, 3), (math.nan, 5.28), "<", "not comparable", "reaches into the band"),
    ((3, 3), (5.0, math.nan), ">", "larger", ""),                     # ">": its lower bound above the band
    ((3, 3), (4.0, math.nan), ">", "not comparable", "reaches into the band"),
    ((2, 2.6), (1.5, 3.5), "", "consistent", ""),                     # a range: band [1.33, 3.90]
    ((2, 2.6), (1.25, 1.54), "", "not comparable", "too wide"),
    ((2, 2.6), (1.1, 1.3), "", "smaller", ""),
    ((2, 2.6), (4.0, 6.0), "", "larger", ""),
    ((3, 3), (math.nan, 2.0), "", "not comparable", "no interval"),
])
def test_the_size_rule(paper, ours, censored, expected, why):
    word, reason = size_verdict(*paper, *ours, censored=censored)
    assert word == expected and why in reason and (reason == "") == (word != "not comparable")


def _speedup(ratios, censoring, value, bound):
    return {"value": value, "bound": bound, "per_seed": [{"ratio": r, "censoring": c} for r, c in zip(ratios, censoring)]}


def test_size_of_states_the_band_and_what_it_read():
    cal = calibration()
    exact = _speedup([2.9, 3.1, 3.0, 2.95, 3.05], [""] * 5, 3.0, "")
    word, detail, the_band = size_of(SPEED_3X, exact, cal)
    assert word == "consistent" and the_band == pytest.approx([2.0, 4.5])
    assert "band [2.00x, 4.50x] (the paper's number within a factor 1.5)" in detail and "(5 seeds)" in detail
    never = _speedup([1.0, 1.0, 1.2, 1.1, 1.0], ["never", "never", "", "", "never"], 1.06, "<")
    word, detail, _ = size_of(SPEED_3X, never, cal)
    assert word == "smaller" and detail.startswith("ours <1.06x (censored; 95% upper bound 1.")
    assert size_of(SPEED_3X, {"value": math.nan, "bound": "both"}, cal)[0] == "not comparable"
    one = size_of(SPEED_3X, _speedup([2.0], [""], 2.0, ""), cal)
    assert one[0] == "not comparable" and "fewer than 2 seeds" in one[1]
    # CLTS's 2x-2.6x is in no text we hold and is credited to CLTS with momentum decay: it judges no size
    clts = claim_by_id("clts_faster").record()["numbers"]
    word, detail, the_band = size_of(clts, exact, cal)
    assert word == "not comparable" and "momentum decay" in detail and the_band is None
    assert size_of([], exact, cal) == (None, "", None)


def _grid(study: str) -> tuple[np.ndarray, int]:
    """Progress points (kimg) and seeds of the SpeeD arm in the study's sampler comparison."""
    runs = [r for r in card_layout(study).runs.values()
            if "sampler_comparison" in r.groups and (r.axes["sampler"], r.axes["weighting"]) == ("speed", "speed")]
    train = runs[0].config["train"]
    return np.arange(train["snapshot_every_kimg"], train["total_kimg"] + 1e-9, train["snapshot_every_kimg"]), len(runs)


def _speedups(ratios: np.ndarray, points: np.ndarray) -> list[dict]:
    """What :func:`speedup` reports for seeds whose arm reaches the baseline's level at ``K / ratio``
    (``K`` the last point; log FID linear in images seen, so the interpolation is exact): censored
    "early" at or before the first point (ratio K / first), "never" after the last (ratio 1)."""
    first, K = float(points[0]), float(points[-1])
    reach = K / ratios
    early, never = reach <= first, reach > K
    rep = np.where(early, K / first, np.where(never, 1.0, ratios))
    value = np.exp(np.log(rep).mean(axis=1))
    cens = np.where(early, "early", np.where(never, "never", "")).tolist()
    out = []
    for i, (r, c) in enumerate(zip(rep.tolist(), cens)):
        e, v = "early" in c, "never" in c
        bound = "both" if e and v else "<" if v else ">" if e else ""
        out.append(_speedup(r, c, math.nan if bound == "both" else float(value[i]), bound))
    return out


def _curves(ratios, points):
    K = float(points[-1])
    base = [(list(points), list(100.0 * (K / points) ** 0.5))] * len(ratios)
    arm = [(list(points), list(100.0 * np.exp(np.clip(-0.2 * (points - K / r), -50, 50)))) for r in ratios]
    return base, arm


@pytest.mark.parametrize("study", STUDIES)
def test_when_the_truth_is_the_papers_number_a_wrong_size_verdict_is_rare(study):
    """2,000 studies per noise model of the per-seed log speed-up (mean log 3x; SD 0.3 in half of
    them, 0.6 in the other: moderate spread): "smaller" or "larger" against SpeeD's 3x in at most
    5% (one-sided 95% Monte Carlo bound); measured: none in 2,000 in every cell. With the truth at half the
    paper's number (1.5x) "consistent" is as rare (the audit found it in 32% of studies before).
    The vectorised speed-ups are :func:`speedup`'s (checked on 50 studies per cell through its
    progress curves)."""
    points, n = _grid(study)
    cal = calibration()
    rng = np.random.default_rng(13)
    spread = np.repeat([0.3, 0.6], 1000)[:, None]
    for noise in ("normal", "t3", "lognormal(0.5)", "lognormal(1)"):
        for truth, wrong in ((3.0, ("smaller", "larger")), (1.5, ("consistent",))):
            ratios = np.exp(math.log(truth) + spread * NOISE[noise](rng, (2000, n)))
            sps = _speedups(ratios, points)
            words = [size_of(SPEED_3X, sp, cal)[0] for sp in sps]
            rate = sum(w in wrong for w in words) / len(words)
            assert rate + 1.645 * math.sqrt(max(rate, 1e-4) * (1 - rate) / len(words)) <= 0.05, (noise, truth, rate)
            for i in range(0, 2000, 40):  # the fast speed-ups are what the real function reports
                real = speedup_dict(speedup(*_curves(ratios[i], points)))
                assert size_of(SPEED_3X, real, cal)[0] == words[i]
                assert real["bound"] == sps[i]["bound"] and [r["censoring"] for r in real["per_seed"]] == \
                    [r["censoring"] for r in sps[i]["per_seed"]]


def test_a_range_claim_whose_truth_lies_in_it_is_never_smaller_or_larger():
    """The truth at 2.3x against a published 2x-2.6x (band [1.33x, 3.90x]), the default study's grid
    and seeds, lognormal(1) spread 0.3: never "smaller" / "larger"; "consistent" when the
    interval is tight enough."""
    points, n = _grid("config.yaml")
    rng = np.random.default_rng(17)
    ratios = np.exp(math.log(2.3) + 0.3 * NOISE["lognormal(1)"](rng, (2000, n)))
    words = [size_of(RANGE, sp, calibration())[0] for sp in _speedups(ratios, points)]
    assert not {"smaller", "larger"} & set(words) and words.count("consistent") > 100
