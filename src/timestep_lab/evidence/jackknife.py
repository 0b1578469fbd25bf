"""Leave-one-model-out inference for statistics over model pairs (docs/methods.md §4.1, §9.5).

A statistic measured on every pair of M models (the consistency phenomenon's distances) has
dependent pairs: two pairs sharing a model share its noise. The unit of analysis is the model:
:func:`jackknife_over_models` gives the mean over pairs a jackknife interval over models, and
:func:`models_vs_control` the contrast that tells the models' agreement from a closed-form
control's (issue 42). Pure numpy (scipy for the t quantile).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as sps

__all__ = ["jackknife_over_models", "models_vs_control"]


def jackknife_over_models(models: list[str], per_pair: dict[tuple[str, str], float],
                          level: float = 0.95) -> dict[str, Any]:
    """Mean of a per-pair statistic with a leave-one-model-out jackknife interval.

    Pairs that share a model are dependent, so the unit of analysis is the model: ``theta`` is
    the mean over all pairs, ``theta_(-m)`` the mean over the pairs without model ``m``,
    ``SE^2 = (M-1)/M sum_m (theta_(-m) - mean_m theta_(-m))^2`` and the interval
    ``theta +- t_{level, M-1} SE`` (``n`` = M models). Needs M >= 3 for an interval.
    """
    theta = float(np.mean(list(per_pair.values())))
    M = len(models)
    out: dict[str, Any] = {"diff": theta, "n": M, "unit": "models", "pairs": len(per_pair),
                           "ci_low": None, "ci_high": None, "se": None}
    if M < 3:
        return out
    loo = np.array([np.mean([v for (a, b), v in per_pair.items() if m not in (a, b)]) for m in models])
    se = float(np.sqrt((M - 1) / M * ((loo - loo.mean()) ** 2).sum()))
    tq = float(sps.t.ppf(0.5 + level / 2, M - 1))
    out.update(se=se, ci_low=theta - tq * se, ci_high=theta + tq * se,
               detectable=(tq + float(sps.t.ppf(0.80, M - 1))) * se)
    return out


def models_vs_control(names: list[str], model_ratio: dict[tuple[str, str], float],
                      control_ratio: dict[str, float]) -> dict[str, Any]:
    """The contrast that tells the phenomenon from the closed-form solution (issue 42): per model
    pair ``(a, b)``, ``log(paired/unpaired)_{ab} - (log(paired/unpaired)_{aC} + log(paired/unpaired)_{bC}) / 2``
    (``C`` the control; ratios of mean distances, unpaired = shifted by one seed), with the
    jackknife interval over models (:func:`jackknife_over_models`). Negative: the models agree with
    each other on a noise more than each agrees with the control, so their agreement is more than
    the closed-form denoiser's (which itself has ``paired/unpaired`` well below 1). NaN where a
    ratio is not positive."""
    def log(x: float) -> float:
        return float(np.log(x)) if x > 0 and np.isfinite(x) else float("nan")

    per_pair = {(a, b): log(r) - (log(control_ratio[a]) + log(control_ratio[b])) / 2
                for (a, b), r in model_ratio.items()}
    out = jackknife_over_models(names, per_pair)
    out["per_pair"] = [{"a": a, "b": b, "diff": v, "models_ratio": model_ratio[(a, b)]}
                       for (a, b), v in per_pair.items()]
    out["units"] = "log(paired/unpaired) of a model pair - mean of its models' log(paired/unpaired) against the control"
    return out
