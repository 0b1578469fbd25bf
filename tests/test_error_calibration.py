"""The calibrations a paired t-statistic is referred to (timestep_lab.evidence.calibration,
docs/methods.md §9.1): Student t's closed form, and the skew envelope's p-values valid for every
distribution of its stated family on fresh draws, its critical values consistent with them, its
boundary where the card's printed condition puts it, and its numbers reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from timestep_lab.config import ConfigError
from timestep_lab.evidence.calibration import CALIBRATIONS, _envelope_draws, calibration, studentized

ENVELOPE = calibration("skew_envelope")


def test_student_t_is_the_closed_form():
    st = calibration("student_t")
    assert st.pvalue(np.array([2.0, -3.0]), 5) == pytest.approx(2 * sps.t.sf([2.0, 3.0], 4))
    assert st.critical(5, 0.05) == pytest.approx(sps.t.ppf(0.975, 4))
    assert math.isnan(st.critical(1, 0.05)) and np.isnan(st.pvalue(np.array([np.nan]), 5)).all()


def _fresh(model: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if model == "normal":
        return rng.standard_normal(shape)
    if model == "t3":
        return rng.standard_t(3, shape)
    s = float(model[len("lognormal("):-1])
    return -(np.exp(s * rng.standard_normal(shape)) - math.exp(s * s / 2))  # left skew: the mirror is covered too


@pytest.mark.parametrize("n", [3, 5, 10])
def test_envelope_p_values_hold_for_every_member_on_fresh_draws(n):
    """60,000 fresh null studies per family member (another generator than the envelope's own):
    the share with p < level is at most the level, up to 3 binomial SEs, at the scorecard's levels
    (0.05, and Holm's first step for the default card, m = 14, and digits-full, m = 21)."""
    rng = np.random.default_rng(2026 + n)
    for model in ("normal", "t3", "lognormal(0.5)", "lognormal(1)"):
        d = _fresh(model, rng, (60_000, n))
        p = ENVELOPE.pvalue(studentized(d.mean(axis=1), d.std(axis=1, ddof=1), n), n)
        for level in (0.05, 0.05 / 14, 0.05 / 21):
            share = float((p < level).mean())
            assert share <= level + 3 * math.sqrt(level * (1 - level) / len(p)), (model, n, level, share)


def test_the_envelopes_worst_member_is_the_lognormal_of_log_sd_1():
    """The condition the card prints, "no more skewed than log-SD 1, no heavier-tailed than t3": at
    the Holm level the tail of |T| grows with the log-SD and t3's lies under the normal's."""
    for n in (3, 5, 10):
        q = {m: float(np.quantile(ref, 1 - 0.05 / 14)) for m, ref in ENVELOPE.models(n)}
        assert q["t3"] < q["normal"] < q["lognormal(0.25)"] < q["lognormal(0.5)"] < q["lognormal(0.75)"] \
            < q["lognormal(1)"], (n, q)
        assert ENVELOPE.critical(n, 0.05 / 14) >= q["lognormal(1)"]
        # the price: 2.5-3x Student t's critical value at that level
        assert 2.4 < ENVELOPE.critical(n, 0.05 / 14) / sps.t.ppf(1 - 0.05 / 28, n - 1) < 3.0


def test_critical_values_and_p_values_agree():
    """|t| just above the critical value has p <= level, just below p > level: a calibrated p < 0.05
    is the same event as the calibrated 95% interval excluding 0."""
    for n in (3, 5, 10):
        for level in (0.05, 0.05 / 14, 0.01):
            c = ENVELOPE.critical(n, level)
            assert ENVELOPE.pvalue(c * (1 + 1e-9), n) <= level < ENVELOPE.pvalue(c * (1 - 1e-6), n)


def test_the_envelope_is_reproducible_and_refuses_unknown_names():
    a = _envelope_draws.__wrapped__(3, 4096, 937)
    b = _envelope_draws.__wrapped__(3, 4096, 937)
    assert all(ma == mb and np.array_equal(ra, rb) for (ma, ra), (mb, rb) in zip(a, b))
    assert not np.array_equal(a[0][1], _envelope_draws.__wrapped__(3, 4096, 938)[0][1])
    with pytest.raises(ConfigError, match="unknown error calibration 'skew'"):
        CALIBRATIONS.build("skew")
    assert np.isnan(studentized(1.0, 0.0, 3)) and studentized(1.0, 2.0, 4) == pytest.approx(1.0)
