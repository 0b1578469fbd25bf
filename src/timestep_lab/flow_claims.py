"""The flow-matching questions as claim records (docs/methods.md §11.5): one record per testable
claim, with where it comes from, what it says and how the ``flow_matching`` group tests it.

Self-contained data (no import of the verdict machinery): :mod:`timestep_lab.verdicts` turns each
record into one of its ``Claim`` rows (:func:`timestep_lab.verdicts.flow_claim`), so the scorecard
judges them like every other claim; the extra fields (section, quote, the paper's number and
unit, the threads where users ask) travel with the record for the claim-record format of the
scorecard. A quote is verbatim from the source named in ``section`` when ``quote_checked`` is True;
False marks text recalled from a paper that was not available to us offline, to be checked.

The five questions (the issue's numbering):

1. Which ``weighting_scheme`` for flow matching: none (uniform t), logit_normal, mode, cosmap?
2. Is sampling t from a density the same as weighting the loss by it?
3. Does a timestep shift help training?
4. Do SpeeD, min-SNR and the adaptive sampler carry over to flow matching?
5. Curriculum: logit-normal first, then uniform.

Arms are named by the study's catalogue labels (``sampler``/``weighting`` columns of the
collected table; config/config.yaml's ``samplers:`` and ``weightings:``), all in the group
:data:`FLOW_GROUP`; a study without the arm reads "not run" with ``needs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["FlowClaim", "FLOW_CLAIMS", "FLOW_GROUP", "FLOW_BASELINE", "QUESTIONS"]

FLOW_GROUP = "flow_matching"
#: the group's baseline arm: uniform t, unweighted loss (diffusers' weighting_scheme "none")
FLOW_BASELINE: dict[str, Any] = {"sampler": "uniform", "weighting": "none"}

#: the run-id slug of a train.total_kimg override: shortened runs (the default study's 8 kimg) carry it
RUN_LENGTH_OVERRIDE = "_kimg"

SD3 = "Esser et al. 2024, SD3 (arXiv 2403.03206)"
HANG = "Hang et al. 2024 (arXiv 2407.03297)"
CURRICULUM = "Sun 2026, Curriculum Sampling (arXiv 2603.12517)"
SPEED = "SpeeD (arXiv 2405.17403)"
MIN_SNR = "Hang et al. 2023, Min-SNR (arXiv 2303.09556)"
ADAPTIVE = "Kim et al. 2024 (arXiv 2411.09998)"

QUESTIONS = {
    1: "Which weighting_scheme for flow matching: none, logit_normal, mode or cosmap?",
    2: "Is sampling t from a density the same as reweighting the loss by it?",
    3: "Does a timestep shift help training?",
    4: "Do SpeeD, min-SNR and the adaptive sampler carry over to flow matching?",
    5: "Curriculum: logit-normal first, then uniform?",
}

# threads where users ask (diffusers, OneTrainer, sd-scripts, minRF): the "where users ask"
THREADS = {
    1: ("https://github.com/huggingface/diffusers/pull/8639", "https://github.com/huggingface/diffusers/pull/12056",
        "https://github.com/huggingface/diffusers/issues/9056", "https://github.com/huggingface/finetrainers/pull/198"),
    2: ("https://github.com/huggingface/diffusers/pull/8528", "https://github.com/huggingface/diffusers/issues/8534"),
    3: ("https://github.com/Nerogar/OneTrainer/pull/653", "https://github.com/kohya-ss/sd-scripts/issues/1762",
        "https://github.com/kohya-ss/musubi-tuner/issues/54"),
    4: ("https://github.com/cloneofsimo/minRF/issues/2", "https://github.com/kohya-ss/sd-scripts/issues/1962"),
    5: (),
}


@dataclass(frozen=True)
class FlowClaim:
    """One claim: ``finding`` is the hypothesis tested; ``direction`` the sign of ``arm - baseline``
    in final FID it predicts (-1: the arm reaches a lower FID); ``paper_number`` the source's figure
    with its ``unit`` (None when the source gives none we could transcribe)."""

    id: str
    question: int
    paper: str
    section: str
    quote: str
    quote_checked: bool
    finding: str
    arm: Mapping[str, Any]
    baseline: Mapping[str, Any] = field(default_factory=lambda: dict(FLOW_BASELINE))
    direction: int = -1
    paper_number: str | None = None
    unit: str = ""
    threads: tuple[str, ...] = ()
    needs: str = ""


def _claim(id: str, question: int, paper: str, section: str, quote: str, quote_checked: bool, finding: str,
           arm: Mapping[str, Any], **kw: Any) -> FlowClaim:
    needs = kw.pop("needs", None) or (f"groups.{FLOW_GROUP} with sampler {arm['sampler']} + weighting "
                                      f"{arm['weighting']} (and its baseline arm), 2+ paired seeds")
    return FlowClaim(id, question, paper, section, quote, quote_checked, finding, dict(arm),
                     threads=THREADS[question], needs=needs, **kw)


FLOW_CLAIMS: tuple[FlowClaim, ...] = (
    # ---------------------------------------------------------------- question 1
    _claim("fm_logit_normal", 1, SD3, "Sec. 5.1, Tables 1-2",
           "rf/lognorm(0.00, 1.00)", False,
           "rectified flow trained with logit-normal(0, 1) t reaches a lower FID than with uniform t "
           "(SD3 ranks it first of 61 variants)",
           {"sampler": "logit_normal", "weighting": "none"},
           paper_number="average rank 1.54 (rf/lognorm(0.00, 1.00)) vs 5.67 (rf, uniform t)",
           unit="average rank over FID/CLIP/validation-loss settings, 61 variants (lower is better)"),
    _claim("fm_logit_normal_asymptote", 1, CURRICULUM, "Abstract",
           "middle-biased sampling accelerates early convergence but yields worse asymptotic fidelity than "
           "Uniform sampling", True,
           "at the end of training, logit-normal t gives a higher FID than uniform t (the opposite of SD3's ranking); "
           "judged on full-length runs only (the paper finds logit-normal ahead early)",
           {"sampler": "logit_normal", "weighting": "none", "arm!~": RUN_LENGTH_OVERRIDE},
           baseline={**FLOW_BASELINE, "arm!~": RUN_LENGTH_OVERRIDE}, direction=+1,
           needs=f"groups.{FLOW_GROUP} at the study's base run length, without a train.total_kimg override "
                 "(config/digits-full.yaml: 96 kimg)"),
    _claim("fm_mode", 1, SD3, "Sec. 3.1 (mode sampling with heavy tails), Table 1 rf/mode(1.29)",
           "f_mode(u; s) = 1 - u - s (cos^2(pi/2 u) - 1 + u)", False,
           "mode(1.29) t reaches a lower FID than uniform t",
           {"sampler": "mode", "weighting": "none"},
           unit="SD3 Table 1 rank of rf/mode(1.29): not transcribed here"),
    _claim("fm_cosmap", 1, SD3, "Sec. 3.1 (CosMap), Table 1 rf/cosmap",
           "pi_CosMap(t) = 2 / (pi - 2 pi t + 2 pi t^2)", False,
           "CosMap t (sampled, as the paper defines it) reaches a lower FID than uniform t",
           {"sampler": "cosmap", "weighting": "none"},
           unit="SD3 Table 1 rank of rf/cosmap: not transcribed here"),
    # ---------------------------------------------------------------- question 2
    _claim("fm_sample_not_weight", 2, HANG, "Abstract; Sec. 2 (importance sampling vs loss weighting)",
           "the importance sampling of the logarithm of the Signal-to-Noise ratio (log SNR), theoretically "
           "equivalent to a modified noise schedule, is particularly beneficial for training efficiency when "
           "increasing the sample frequency around log SNR = 0", True,
           "drawing t from logit-normal(0, 1) beats drawing t uniformly and weighting the loss by the same "
           "density (equal expected objective): the weighted arm's FID is higher",
           {"sampler": "uniform", "weighting": "ln_density"}, baseline={"sampler": "logit_normal", "weighting": "none"},
           direction=+1, paper_number="ImageNet-256 FID 10.85 (cosine) -> 7.96 (Laplace schedule)",
           unit="FID, as summarised for 2407.03297's noise-schedule comparison"),
    _claim("fm_cosmap_weight_vs_sample", 2, "diffusers PR 8528 (huggingface/diffusers)",
           "PR description (the scheme diffusers ships)",
           "Potentially, a better approach would be to sample the timestep according to that density in the first "
           "place.", True,
           "diffusers' cosmap (uniform t, loss weighted by pi_CosMap) trains worse than SD3's cosmap (t drawn "
           "from pi_CosMap)",
           {"sampler": "uniform", "weighting": "cosmap_density"}, baseline={"sampler": "cosmap", "weighting": "none"},
           direction=+1),
    # ---------------------------------------------------------------- question 3
    _claim("fm_shift", 3, SD3, "Sec. 5.3.2 (resolution-dependent shifting of timestep schedules)",
           "Intuitively, since higher resolutions have more pixels, we need more noise to destroy their signal.",
           False,
           "SD3's shift 3 (toward noise) lowers FID against no shift; note SD3's own rule, alpha = sqrt(m/n), "
           "asks for a shift below 1 at 8x8, so a contradiction here is what that rule predicts",
           {"sampler": "shift3", "weighting": "none"},
           paper_number="shift 3.0 at 1024^2", unit="the shift SD3 deploys (t' = s t / (1 + (s - 1) t))"),
    _claim("fm_shift_logit_normal", 3, SD3, "Sec. 5.3.2 (SD3 trains logit-normal t with shift 3)",
           "Intuitively, since higher resolutions have more pixels, we need more noise to destroy their signal.",
           False,
           "shift 3 around logit-normal(0, 1) lowers FID against logit-normal alone",
           {"sampler": "shift3_logit_normal", "weighting": "none"},
           baseline={"sampler": "logit_normal", "weighting": "none"}),
    # ---------------------------------------------------------------- question 4
    _claim("fm_speed", 4, SPEED, "Sec. 4 (asymmetric sampling + change-aware weighting), on DDPM",
           "", False, "SpeeD (asymmetric sampling + change-aware weighting) lowers a rectified flow's FID too",
           {"sampler": "speed", "weighting": "speed"}),
    _claim("fm_min_snr", 4, MIN_SNR, "Abstract, Sec. 3 (min-SNR-gamma weighting, gamma = 5), on DDPM",
           "", False,
           "min-SNR-5 weighting (converted to the velocity loss) lowers a rectified flow's FID",
           {"sampler": "uniform", "weighting": "min_snr"}, paper_number="3.4x faster convergence",
           unit="speed-up on DDPM (as recalled from the abstract)"),
    _claim("fm_adaptive", 4, ADAPTIVE, "Sec. 4 (the learned Beta timestep sampler), on DDPM",
           "", False, "the learned timestep sampler lowers a rectified flow's FID",
           {"sampler": "adaptive", "weighting": "none"}),
    # ---------------------------------------------------------------- question 5
    _claim("fm_curriculum", 5, CURRICULUM, "Abstract (CIFAR-10)",
           "On CIFAR-10, Curriculum Sampling improves the best FID from 3.85 (Uniform) to 3.22 while reaching peak "
           "performance at 100k rather than 150k training steps.", True,
           "logit-normal t for the first half of training, then uniform t, lowers FID against uniform t throughout",
           {"sampler": "curriculum", "weighting": "none"},
           paper_number="FID 3.85 -> 3.22; best at 100k instead of 150k steps", unit="CIFAR-10 FID, training steps"),
)
