"""The flow-matching questions (docs/methods.md §12.5) as claim records: one :class:`Claim` per
testable claim, judged in the ``flow_matching`` group like every other claim.

The five questions (issue numbering), each a claim of a paper or a question users of the
flow-matching trainers ask (``asked_in``: the threads where they ask it):

1. Which ``weighting_scheme`` for flow matching: none (uniform t), logit_normal, mode, cosmap?
2. Is sampling t from a density the same as weighting the loss by it?
3. Does a timestep shift help training?
4. Do SpeeD, min-SNR and the adaptive sampler carry over to flow matching?
5. Curriculum: logit-normal first, then uniform.
6. Which resolution rule for the shift: SD3's ``sqrt(m/n)`` or Flux's token-count line?
7. diffusers' SD3 default ``precondition_outputs`` (a sigma^2-weighted velocity loss) or the plain velocity loss?
8. Does truncating the timestep range help?
9. Training shift or sampling shift: does sampling on the shifted grid (``sample.shift``, as the SD3
   and Flux pipelines do) matter apart from training with the shift?

Arms are named by the study's catalogue labels (``sampler``/``weighting`` columns of the
collected table; config/config.yaml's ``samplers:`` and ``weightings:``), all in the group
:data:`FLOW_GROUP`; a study without the arm reads "not run" with ``needs``. SD3's text was not
available offline: its quotes and section names are recalled, and each such claim's note says so.
"""

from __future__ import annotations

from typing import Any, Mapping

from timestep_lab.claims.papers import ANTS, SPEED
from timestep_lab.claims.record import Claim, PaperNumber, Source

__all__ = ["FLOW_CLAIMS", "FLOW_GROUP", "FLOW_BASELINE", "QUESTIONS", "QUESTION_OF", "BASE_LENGTH"]

FLOW_GROUP = "flow_matching"
#: the group's baseline arm: uniform t, unweighted loss (diffusers' weighting_scheme "none"), scored
#: on the study's own sampling grid (``sample_shift`` column: the base's ``sample.shift``, 1 = no shift)
FLOW_BASELINE: dict[str, Any] = {"sampler": "uniform", "weighting": "none", "sample_shift": "{base}"}
#: an arm scored on the grid shifted by SD3's 3.0 (``overrides: {sample.shift: 3.0}``)
SAMPLE_SHIFT3: dict[str, Any] = {"sample_shift": 3.0}
#: runs at the study's base length (``total_kimg`` column of the run table): a group's
#: ``train.total_kimg`` override (the default study's 6-kimg flow runs) leaves them out
BASE_LENGTH: dict[str, Any] = {"total_kimg": "{base}"}

QUESTIONS = {
    1: "Which weighting_scheme for flow matching: none, logit_normal, mode or cosmap?",
    2: "Is sampling t from a density the same as reweighting the loss by it?",
    3: "Does a timestep shift help training?",
    4: "Do SpeeD, min-SNR and the adaptive sampler carry over to flow matching?",
    5: "Curriculum: logit-normal first, then uniform?",
    6: "Which resolution rule for the shift: SD3's sqrt(m/n) or Flux's token-count rule?",
    7: "diffusers' default precondition_outputs (x0 loss) or the plain velocity loss?",
    8: "Does truncating the timestep range help?",
    9: "Training shift or sampling shift: does sampling on the shifted grid matter apart from training with it?",
}

# threads where users ask (diffusers, finetrainers, OneTrainer, sd-scripts, musubi-tuner, minRF)
THREADS = {
    1: ("https://github.com/huggingface/diffusers/pull/8639", "https://github.com/huggingface/diffusers/pull/12056",
        "https://github.com/huggingface/diffusers/issues/9056", "https://github.com/huggingface/finetrainers/pull/198"),
    2: ("https://github.com/huggingface/diffusers/pull/8528", "https://github.com/huggingface/diffusers/issues/8534"),
    3: ("https://github.com/Nerogar/OneTrainer/pull/653", "https://github.com/kohya-ss/sd-scripts/issues/1762",
        "https://github.com/kohya-ss/musubi-tuner/issues/54"),
    4: ("https://github.com/cloneofsimo/minRF/issues/2", "https://github.com/kohya-ss/sd-scripts/issues/1962"),
    5: (),
    6: ("https://github.com/Nerogar/OneTrainer/pull/653", "https://github.com/kohya-ss/sd-scripts/issues/1762"),
    7: (),
    8: (),
    9: ("https://github.com/kohya-ss/sd-scripts/issues/1762", "https://github.com/Nerogar/OneTrainer/pull/653"),
}

SD3 = Source("sd3", "Esser et al. 2024 (SD3)", "arXiv 2403.03206",
             "Scaling Rectified Flow Transformers for High-Resolution Image Synthesis",
             "not held offline: section names, table entries and quotes are recalled [unverified]")
HANG = Source("hang2024", "Hang et al. 2024", "arXiv 2407.03297",
              "Improved Noise Schedule for Diffusion Training", "the arXiv abstract")
CURRICULUM = Source("curriculum", "Sun 2026, Curriculum Sampling", "arXiv 2603.12517",
                    "Curriculum Sampling for flow matching", "the arXiv abstract")
MIN_SNR = Source("minsnr", "Hang et al. 2023, Min-SNR", "arXiv 2303.09556",
                 "Efficient Diffusion Training via Min-SNR Weighting Strategy", "recalled [unverified]")
DIFFUSERS_8528 = Source("diffusers8528", "diffusers PR 8528", "https://github.com/huggingface/diffusers/pull/8528",
                        "Implement SD3 loss weighting", "the pull request's description")

DIFFUSERS_FLUX = Source("diffusers_flux", "diffusers FluxPipeline (Flux's dynamic shifting)",
                        "diffusers/pipelines/flux/pipeline_flux.py, calculate_shift (diffusers 0.42.1)",
                        "calculate_shift(image_seq_len, 256, 4096, 0.5, 1.15)", "the installed diffusers source")
DIFFUSERS_SD3 = Source("diffusers_sd3", "diffusers SD3 training script",
                       "diffusers/examples/dreambooth/train_dreambooth_sd3.py (--precondition_outputs, default 1)",
                       "train_dreambooth_sd3.py", "recalled [unverified]: the example scripts are not installed")
DIFFUSERS_SAMPLE_SHIFT = Source("diffusers_sample_shift", "diffusers FlowMatchEulerDiscreteScheduler (shift)",
                                "diffusers/schedulers/scheduling_flow_match_euler_discrete.py, set_timesteps (diffusers "
                                "0.42.1); SD3's scheduler config sets shift 3.0",
                                "FlowMatchEulerDiscreteScheduler", "the installed diffusers source")
TRAINERS = Source("trainers", "OneTrainer / sd-scripts timestep ranges",
                  "OneTrainer ModelSetupNoiseMixin._get_timestep_discrete (min/max_noising_strength)",
                  "OneTrainer noising-strength limits", "the OneTrainer source")

#: the question each flow claim answers (the report groups them by it), filled as the claims are made
QUESTION_OF: dict[str, int] = {}

RECALLED = "quote recalled, the source's text was not available offline [unverified]"
#: Why the shift claims predict a higher FID here (issue 37: they were recorded as SD3 finding that shift 3 helps)
SHIFT_RULE = ("SD3 applies shift 3 at 1024^2; its own rule, shift alpha = sqrt(m/n) for m pixels against a base "
              "resolution of n, asks for a shift below 1 (toward data) at 8x8, so shift 3 moves away from what the "
              "rule wants: a prediction we derive from SD3's rule (SD3 tested no such resolution), assuming FID rises as "
              "the shift moves away from the rule's value; users ask whether shift 3 helps anyway (question 3's "
              "threads)")
#: Why SD3's ranking rows are judged at convergence only (issue 42: at 94 optimizer steps, 21x the floor,
#: they read "reproduced" on speed-ups of 1.08x while the claim is about trained models)
TRAINED = ("SD3 ranks models trained to the end of its budget: a claim about trained models, judged only once this "
           "study's baseline has stopped improving (docs/methods.md §9.7); early in training the "
           "fm_logit_normal_early row says who is ahead")
NOT_OURS = ("a number from another objective, data set, model and metric: it does not carry over to this study's "
            "FID (its own feature extractor, data set and budget)")


def _flow(claim_id: str, question: int, source: Source, where: str, quote: str, statement: str,
          arm: Mapping[str, Any], *, baseline: Mapping[str, Any] | None = None, expected_sign: int = -1,
          recalled: bool = False, needs: str = "", note: str = "", **kw: Any) -> Claim:
    """A flow_matching claim: ``arm - baseline`` in final FID has sign ``expected_sign``. An arm or
    baseline that names no ``sample_shift`` is the one scored on the study's own grid."""
    baseline = {"sample_shift": "{base}", **(baseline or FLOW_BASELINE)}
    arm = {"sample_shift": "{base}", **arm}
    spelled = lambda sel: (f"{sel.get('sampler')}+{sel.get('weighting')}"  # noqa: E731
                           + ("" if sel["sample_shift"] == "{base}" else f" sampled with shift {sel['sample_shift']:g}"))
    direction = f"{spelled(arm)} reaches a {'lower' if expected_sign < 0 else 'higher'} final FID than {spelled(baseline)}"
    needs = needs or (f"groups.{FLOW_GROUP} with sampler {arm['sampler']} + weighting {arm['weighting']}"
                      + ("" if arm["sample_shift"] == "{base}" else
                         f" + overrides {{sample.shift: {arm['sample_shift']:g}}}")
                      + " (and its baseline arm), 2+ paired seeds")
    note = "; ".join(filter(None, (f"flow-matching question {question}", RECALLED if recalled else "", note)))
    QUESTION_OF[claim_id] = question
    return Claim(claim_id, source, where, quote, kw.pop("status", "finding"), statement, direction, expected_sign, needs,
                 group=FLOW_GROUP, arm=dict(arm), baseline=baseline, note=note, asked_in=THREADS[question], **kw)


FLOW_CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- question 1
    _flow("fm_logit_normal", 1, SD3, "Sec. 5.1, Tables 1-2", "rf/lognorm(0.00, 1.00)",
          "rectified flow trained with logit-normal(0, 1) t reaches a lower FID than with uniform t "
          "(SD3 ranks it first of 61 variants)",
          {"sampler": "logit_normal", "weighting": "none"}, recalled=True, judged_at="convergence",
          note=TRAINED,
          numbers=(PaperNumber("other", "average rank 1.54 (rf/lognorm(0.00, 1.00)) vs 5.67 (rf, uniform t)",
                               "average rank over FID/CLIP/validation-loss settings (lower is better)",
                               "61 variants, ImageNet and CC12M", "Tables 1-2", "SD3 (recalled)",
                               not_comparable="a rank among 61 variants, not a difference or a speed-up"),)),
    _flow("fm_logit_normal_asymptote", 1, CURRICULUM, "Abstract",
          "middle-biased sampling accelerates early convergence but yields worse asymptotic fidelity than "
          "Uniform sampling",
          "at the end of training, logit-normal t gives a higher FID than uniform t (the opposite of SD3's ranking)",
          {"sampler": "logit_normal", "weighting": "none", **BASE_LENGTH},
          baseline={**FLOW_BASELINE, **BASE_LENGTH}, expected_sign=+1, judged_at="convergence",
          needs=f"groups.{FLOW_GROUP} at the study's base run length, without a train.total_kimg override "
                "(config/digits-full.yaml: 96 kimg)",
          note="judged on full-length runs only: the paper finds logit-normal ahead early"),
    _flow("fm_logit_normal_early", 1, CURRICULUM, "Abstract",
          "middle-biased sampling accelerates early convergence",
          "early in training, logit-normal t reaches a lower FID than uniform t at equal images seen (the first "
          "half of Curriculum Sampling's finding: the advantage SD3's ranking reports may be early only)",
          {"sampler": "logit_normal", "weighting": "none"},
          note="judged at any length: what a study at the start of training can say about logit-normal t, where "
               "SD3's claim about trained models is not judged (issue 42)"),
    _flow("fm_mode", 1, SD3, "Sec. 3.1 (mode sampling with heavy tails), Table 1 rf/mode(1.29)",
          "f_mode(u; s) = 1 - u - s (cos^2(pi/2 u) - 1 + u)", "mode(1.29) t reaches a lower FID than uniform t",
          {"sampler": "mode", "weighting": "none"}, recalled=True, judged_at="convergence", note=TRAINED),
    _flow("fm_cosmap", 1, SD3, "Sec. 3.1 (CosMap), Table 1 rf/cosmap", "pi_CosMap(t) = 2 / (pi - 2 pi t + 2 pi t^2)",
          "CosMap t (sampled, as the paper defines it) reaches a lower FID than uniform t",
          {"sampler": "cosmap", "weighting": "none"}, recalled=True, judged_at="convergence", note=TRAINED),
    # ---------------------------------------------------------------- question 2
    _flow("fm_sample_not_weight", 2, HANG, "Abstract",
          "the importance sampling of the logarithm of the Signal-to-Noise ratio (log SNR), theoretically "
          "equivalent to a modified noise schedule, is particularly beneficial for training efficiency when "
          "increasing the sample frequency around log SNR = 0",
          "drawing t from logit-normal(0, 1) beats drawing t uniformly and weighting the loss by the same "
          "density (equal expected objective): the weighted arm's FID is higher",
          {"sampler": "uniform", "weighting": "ln_density"}, baseline={"sampler": "logit_normal", "weighting": "none"},
          expected_sign=+1, status="hypothesis",
          note="the paper reports that sampling more often around log SNR = 0 helps (against the cosine schedule); "
               "that sampling beats weighting the loss by the same density is our reading of 'theoretically "
               "equivalent to a modified noise schedule', not something the quoted text reports: a hypothesis "
               "(the question of diffusers PR 8528 and issue 8534)",
          numbers=(PaperNumber("fid_pair", "10.85 -> 7.96", "FID (Inception)", "ImageNet-256, cosine -> Laplace schedule",
                               "results", "the paper's summary", baseline=10.85, method=7.96, not_comparable=NOT_OURS),)),
    _flow("fm_cosmap_weight_vs_sample", 2, DIFFUSERS_8528, "PR description (the scheme diffusers ships)",
          "Potentially, a better approach would be to sample the timestep according to that density in the first "
          "place.",
          "diffusers' cosmap (uniform t, loss weighted by pi_CosMap) trains worse than SD3's cosmap (t drawn "
          "from pi_CosMap)",
          {"sampler": "uniform", "weighting": "cosmap_density"}, baseline={"sampler": "cosmap", "weighting": "none"},
          expected_sign=+1, status="hypothesis"),
    # ---------------------------------------------------------------- question 3
    _flow("fm_shift", 3, SD3, "Sec. 5.3.2 (resolution-dependent shifting of timestep schedules)",
          "Intuitively, since higher resolutions have more pixels, we need more noise to destroy their signal.",
          "SD3's resolution rule at 8x8 pixels: fewer pixels need less noise, so shift 3 (toward noise, SD3's "
          "setting at 1024^2) raises FID against no shift",
          {"sampler": "shift3", "weighting": "none"}, expected_sign=+1, status="hypothesis", recalled=True,
          note=SHIFT_RULE,
          numbers=(PaperNumber("other", "shift 3.0 at 1024^2", "the shift SD3 deploys (t' = s t / (1 + (s - 1) t))",
                               "SD3 at 1024x1024", "Sec. 5.3.2", "SD3 (recalled)",
                               not_comparable="a setting, not an effect size"),)),
    _flow("fm_shift_logit_normal", 3, SD3, "Sec. 5.3.2 (resolution-dependent shifting; SD3 trains logit-normal t)",
          "Intuitively, since higher resolutions have more pixels, we need more noise to destroy their signal.",
          "SD3's resolution rule at 8x8 pixels: shift 3 around logit-normal(0, 1) raises FID against logit-normal "
          "alone",
          {"sampler": "shift3_logit_normal", "weighting": "none"},
          baseline={"sampler": "logit_normal", "weighting": "none"}, expected_sign=+1, status="hypothesis",
          recalled=True, note=SHIFT_RULE),
    # ---------------------------------------------------------------- question 6
    _flow("fm_shift_rule_sd3", 6, SD3, "Sec. 5.3.2 (resolution-dependent shifting of timestep schedules)",
          "Intuitively, since higher resolutions have more pixels, we need more noise to destroy their signal.",
          "the shift SD3's rule gives at 8x8 (sqrt(64 / 256^2) = 1/32, toward data) lowers FID against no shift",
          {"sampler": "shift_sd3", "weighting": "none"}, status="hypothesis", recalled=True,
          note="SD3 fits its rule from 256^2 up to 1024^2; at 8x8 it is extrapolated 32-fold down: a hypothesis"),
    _flow("fm_shift_rule_flux", 6, DIFFUSERS_FLUX, "calculate_shift, use_dynamic_shifting",
          "mu = image_seq_len * m + b",
          "Flux's rule at 8x8 (0.25 tokens of 16x16 pixels, extrapolated below its 256-token base: shift "
          "exp(0.457) = 1.58, toward noise) raises FID against no shift, as SD3's argument predicts for any shift "
          "above 1 at this resolution",
          {"sampler": "shift_flux", "weighting": "none"}, expected_sign=+1, status="hypothesis",
          note="the line is fitted between 256 and 4096 tokens; 8x8 lies far below its range"),
    # ---------------------------------------------------------------- question 7
    _flow("fm_precondition_outputs", 7, DIFFUSERS_SD3, "--precondition_outputs (default 1)",
          "model_pred = model_pred * (-sigmas) + noisy_model_input; target = model_input",
          "diffusers' preconditioned SD3 loss (the x0 error, i.e. the velocity loss weighted by sigma^2) raises "
          "FID against the plain velocity loss of SD3's rectified-flow objective: it weights the low-noise "
          "timesteps down by up to 1e6",
          {"sampler": "uniform", "weighting": "precondition"}, expected_sign=+1, status="hypothesis", recalled=True,
          note="no source compares the two; the direction is ours"),
    # ---------------------------------------------------------------- question 8
    _flow("fm_truncate_noise_end", 8, TRAINERS, "min/max_noising_strength; sd-scripts min/max_timestep", "",
          "training only sigma <= 0.9 (the trainers' max noising strength 0.9) raises FID against the full range: "
          "sampling starts from pure noise, where the truncated model never trained",
          {"sampler": "truncate09", "weighting": "none"}, expected_sign=+1, status="hypothesis",
          note="the trainers expose the limits without a claim; the direction is ours"),
    # ---------------------------------------------------------------- question 9
    _flow("fm_sample_shift", 9, DIFFUSERS_SAMPLE_SHIFT, "set_timesteps",
          "sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)",
          "scoring a uniform-t model on the sampling grid shifted by 3 (more solver steps near pure noise, as SD3's "
          "pipeline samples) raises FID against the unshifted grid at 8x8",
          {"sampler": "uniform", "weighting": "none", **SAMPLE_SHIFT3}, expected_sign=+1, status="hypothesis",
          note="the pipelines shift the sampling grid by the value the model was trained with; at 8x8 SD3's rule "
               "asks for less noise, not more (question 3): the direction is ours"),
    _flow("fm_train_sample_shift", 9, DIFFUSERS_SAMPLE_SHIFT, "set_timesteps (SD3 samples with its training shift)",
          "sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)",
          "a model trained with shift 3 reaches a lower FID when it is also sampled on the grid shifted by 3, as "
          "the SD3 and Flux pipelines do, than on the unshifted grid",
          {"sampler": "shift3", "weighting": "none", **SAMPLE_SHIFT3},
          baseline={"sampler": "shift3", "weighting": "none"}, status="hypothesis",
          note="the pipelines sample with their training shift without comparing; the direction is ours. Both arms "
               "train the same weights (same seed, same training config): only the scoring grid differs"),
    # ---------------------------------------------------------------- question 4
    _flow("fm_speed", 4, SPEED, "Abstract (on DDPM-style diffusion)", "",
          "SpeeD (asymmetric sampling + change-aware weighting) lowers a rectified flow's FID too",
          {"sampler": "speed", "weighting": "speed"}, status="hypothesis",
          note="the paper tests Gaussian diffusion only; carrying it over is the users' question"),
    _flow("fm_min_snr", 4, MIN_SNR, "Abstract, Sec. 3 (min-SNR-gamma weighting, gamma = 5), on DDPM", "",
          "min-SNR-5 weighting (converted to the velocity loss) lowers a rectified flow's FID",
          {"sampler": "uniform", "weighting": "min_snr"}, status="hypothesis",
          numbers=(PaperNumber("speedup", "3.4x faster convergence", "x (on DDPM, as recalled from the abstract)",
                               "Gaussian diffusion", "Abstract", "recalled [unverified]",
                               not_comparable="measured on Gaussian diffusion, not on a rectified flow"),)),
    _flow("fm_adaptive", 4, ANTS, "Abstract (on DDPM-style diffusion)", "",
          "the learned timestep sampler lowers a rectified flow's FID", {"sampler": "adaptive", "weighting": "none"},
          status="hypothesis", note="the paper tests Gaussian diffusion only; carrying it over is the users' question"),
    # ---------------------------------------------------------------- question 5
    _flow("fm_curriculum", 5, CURRICULUM, "Abstract (CIFAR-10)",
          "On CIFAR-10, Curriculum Sampling improves the best FID from 3.85 (Uniform) to 3.22 while reaching peak "
          "performance at 100k rather than 150k training steps.",
          "logit-normal t for the first half of training, then uniform t, lowers FID against uniform t throughout",
          {"sampler": "curriculum", "weighting": "none"}, judged_at="convergence",
          note="about the best FID of trained models (the paper's peak at 100k steps): judged only once the "
               "baseline has stopped improving (issue 42)",
          numbers=(PaperNumber("fid_pair", "3.85 -> 3.22", "FID (Inception)", "CIFAR-10, best FID", "Abstract",
                               "the arXiv abstract", baseline=3.85, method=3.22, not_comparable=NOT_OURS),
                   PaperNumber("other", "peak at 100k instead of 150k steps", "training steps", "CIFAR-10", "Abstract",
                               "the arXiv abstract", not_comparable="steps to a peak FID; our runs do not reach one"))),
)
