"""The four papers' claims (docs/methods.md §9), in their own words: one :class:`Claim` per
scorecard row, in scorecard order. Adding one: append it to :data:`PAPER_CLAIMS` (ids are never
reused); a new source gets a :class:`Source`. The quote is checked against the source's text
where we hold it; ``Source.held`` says what we hold.
"""

from __future__ import annotations

from typing import Any

from timestep_lab.claims.record import Claim, PaperNumber, Source

__all__ = ["PAPER_CLAIMS", "SEED", "SPEED", "ANTS", "CLTS", "UNIFORM", "CONSTANT_BASE"]

SEED = Source("seed", "Xie & Agam 2025", "arXiv 2502.01990", "Rethinking Timesteps Samplers and Prediction Types",
              "full text")
SPEED = Source("speed", "SpeeD", "arXiv 2405.17403",
               "A Closer Look at Time Steps is Worthy of Triple Speed-Up for Diffusion Model Training",
               "the arXiv abstract; its figures as docs/methods.md §5 lists them (paper text not held)")
ANTS = Source("ants", "Kim et al. 2024", "arXiv 2411.09998",
              "Adaptive Non-uniform Timestep Sampling for Accelerating Diffusion Model Training",
              "abstract and a third-party summary of the paper")
CLTS = Source("clts", "Xu et al. 2024", "arXiv 2404.07946",
              "Towards Faster Training of Diffusion Models: An Inspiration of A Consistency Phenomenon",
              "abstract")

UNIFORM = {"sampler": "uniform", "weighting": "none"}
#: the consistency group's plain arm: a constant optimizer schedule at the study's base width
#: (columns of the run table: timestep_lab.workflow.runs.ARM_COLUMNS)
CONSTANT_BASE = {"optim_schedule": "constant", "channels": "{base}"}
#: the consistency group's momentum-decay arms, without and with the learning-rate compensation
MOMENTUM_DECAY = {"optim_schedule": "momentum_decay", "channels": "{base}", "lr_compensated": False}
MOMENTUM_DECAY_COMPENSATED = {**MOMENTUM_DECAY, "lr_compensated": True}

_NOT_FID = ("Inception FID of {what}; ours is this study's FID (its own feature extractor, data set and budget): "
            "FID values, their differences and their ratios do not carry over between feature extractors and data sets")


def _sampler(claim_id: str, source: Source, sampler: str, weighting: str = "none", **kw: Any) -> Claim:
    """A sampler-comparison claim: the arm ``sampler + weighting`` against uniform, lower FID predicted."""
    spelled = f"sampler {sampler}" + (f" + weighting {weighting}" if weighting != "none" else "")
    arm = f"{sampler}+{weighting}"
    return Claim(claim_id, source, group="sampler_comparison", arm={"sampler": sampler, "weighting": weighting},
                 baseline=UNIFORM, expected_sign=-1, needs=f"groups.sampler_comparison with {spelled}",
                 direction=f"{arm} reaches a lower final FID than uniform+none at equal images seen", **kw)


_SPEED_3X = PaperNumber("speedup", "3x", "x (training images to reach the baseline's FID, baseline / method)",
                        "various architectures, data sets and tasks", "Abstract", "arXiv abstract", low=3.0, high=3.0)
#: CLTS's "2x to 2.6x": in no text the project holds (the abstract gives no number); a public summary
#: credits it to CLTS and momentum decay with learning-rate compensation together, so it cannot be
#: set against CLTS alone (issue 37)
_CLTS_SPEEDUP = PaperNumber("speedup", "2x to 2.6x", "x (training speed-up)", "CIFAR-10 and ImageNet-128",
                            "not in the abstract we hold",
                            "a machine-written summary (https://www.sciencestack.ai/paper/2404.07946), not the paper",
                            low=2.0, high=2.6,
                            not_comparable="not in any text of the paper we hold; the summary that gives it credits it to "
                                           "CLTS and momentum decay with learning-rate compensation together, not to "
                                           "CLTS alone [unverified]")

PAPER_CLAIMS: tuple[Claim, ...] = (
    _sampler("speed_faster", SPEED, "speed", "speed", where="Abstract", status="finding",
             quote="SpeeD consistently achieves 3× acceleration across various diffusion architectures, datasets, "
                   "and tasks",
             statement="asymmetric sampling + change-aware weighting (SpeeD) trains faster than uniform sampling",
             numbers=(_SPEED_3X,
                      PaperNumber("fid_pair", "29.3 -> 21.1", "FID-10K (Inception)", "DiT-XL/2 MetFaces 256, 50K iter",
                                  "results table", "docs/methods.md §5", baseline=29.3, method=21.1,
                                  not_comparable=_NOT_FID.format(what="DiT-XL/2 on 256-px MetFaces")),
                      PaperNumber("fid_pair", "12.9 -> 9.9", "FID-10K (Inception)", "DiT-XL/2 FFHQ 256, 50K iter",
                                  "results table", "docs/methods.md §5", baseline=12.9, method=9.9,
                                  not_comparable=_NOT_FID.format(what="DiT-XL/2 on 256-px FFHQ")),
                      PaperNumber("fid_pair", "17.37 -> 15.07", "FID (Inception)",
                                  "FFHQ U-Net ablation: uniform -> asymmetric sampling + weighting", "ablation table",
                                  "docs/methods.md §5", baseline=17.37, method=15.07,
                                  not_comparable=_NOT_FID.format(what="a U-Net on FFHQ")))),
    _sampler("speed_sampling_alone", SPEED, "speed", where="Abstract; ablation (FFHQ U-Net)", status="finding",
             quote="we design an asymmetric sampling strategy that reduces the frequency of steps from the convergence "
                   "area while increasing the sampling probability for steps from other areas",
             statement="asymmetric timestep sampling alone (no weighting) trains faster than uniform sampling",
             numbers=(PaperNumber("fid_pair", "17.37 -> 15.82", "FID (Inception)",
                                  "FFHQ U-Net ablation: uniform -> asymmetric sampling alone", "ablation table",
                                  "docs/methods.md §5", baseline=17.37, method=15.82,
                                  not_comparable=_NOT_FID.format(what="a U-Net on FFHQ")),)),
    _sampler("adaptive_faster", ANTS, "adaptive", where="Abstract", status="finding",
             quote="this approach not only accelerates the training process",
             statement="the learned Beta timestep sampler (ANTS) trains faster than uniform sampling",
             numbers=(PaperNumber("fid_pair", "3.57 -> 2.94", "FID-50K (Inception)", "CIFAR-10, SpeeD -> ANTS",
                                  "Key Results", "a third-party summary of the paper",
                                  baseline=3.57, method=2.94,
                                  not_comparable="the pair compares ANTS with SpeeD, ours with uniform; and "
                                                 + _NOT_FID.format(what="CIFAR-10")),)),
    _sampler("adaptive_converges_better", ANTS, "adaptive", where="Abstract", status="finding",
             quote="but also leads to improved performance at convergence", judged_at="convergence",
             statement="the learned Beta timestep sampler (ANTS) converges to a better model than uniform sampling"),
    _sampler("clts_faster", CLTS, "clts", where="Abstract", status="finding",
             quote="a curriculum learning based timestep schedule, which leverages the noise rate as an explicit "
                   "indicator of the learning difficulty and gradually reduces the training frequency of easier "
                   "timesteps, thus improving the training efficiency",
             statement="the curriculum timestep schedule (CLTS) trains faster than uniform sampling",
             numbers=(_CLTS_SPEEDUP,),
             note="our CLTS is a reconstruction from the abstract (docs/methods.md §1.5); the 2x-2.6x a summary "
                  "reports is for CLTS with momentum decay and learning-rate compensation, so it judges no size here"),
    Claim("momentum_decay", CLTS, "Abstract", status="finding",
          quote="a momentum decay strategy, which reduces the momentum coefficient during the optimization process, "
                "as the large momentum may hinder the convergence speed and cause oscillations",
          statement="decaying Adam's beta1 during training lowers FID at equal images seen",
          direction="momentum decay reaches a lower final FID than constant momentum",
          group="consistency", arm=MOMENTUM_DECAY, baseline=CONSTANT_BASE,
          expected_sign=-1, needs="groups.consistency with momentum_decay entries (paired seeds)",
          note="beta1 alone, learning rate untouched (docs/methods.md §4.2)"),
    Claim("momentum_decay_compensated", CLTS, "Abstract", status="finding",
          quote="a momentum decay strategy, which reduces the momentum coefficient during the optimization process",
          statement="momentum decay with the SGD-style lr compensation (lr falls with 1 - beta1: a confounded variant) "
                    "lowers FID at equal images seen",
          direction="compensated momentum decay reaches a lower final FID than constant momentum",
          group="consistency", arm=MOMENTUM_DECAY_COMPENSATED, baseline=CONSTANT_BASE, expected_sign=-1,
          needs="groups.consistency with momentum_decay entries with compensate: true",
          note="a summary of the paper calls its method momentum decay with learning-rate compensation; the "
               "paper's form of the compensation is not in the abstract we hold [unverified]"),
    Claim("mixed_heads", SEED, "Sec. 3.2", status="finding",
          quote="Achieving convergence with mixed predictions [...] has proven to be exceptionally challenging. In "
                "fact, the results obtained from mixed predictions are often worse than those from a single prediction",
          statement="a mixed x0/eps/v prediction head gives worse results than eps prediction",
          direction="mixed reaches a higher final FID than eps",
          group="prediction_types", arm={"prediction": "mixed"}, baseline={"prediction": "eps"}, expected_sign=+1,
          needs="groups.prediction_types with prediction mixed"),
    Claim("mixed_heads_hypothesis", SEED, "Abstract", status="hypothesis",
          quote="We hypothesize that using a mixed-prediction approach to identify the most accurate prediction type "
                "could potentially serve as a breakthrough in addressing this issue",
          statement="a mixed x0/eps/v prediction head trains better than eps prediction (the abstract's hypothesis; "
                    "Sec. 3.2 reports the opposite)",
          direction="mixed reaches a lower final FID than eps",
          group="prediction_types", arm={"prediction": "mixed"}, baseline={"prediction": "eps"}, expected_sign=-1,
          needs="groups.prediction_types with prediction mixed"),
    Claim("small_batch", SEED, "Sec. 2.1, Fig. 1(b)", status="finding",
          quote="with a smaller batch size and relatively more training iterations to achieve the same training "
                "iterations for each timestep, the final model achieves a poor performance",
          statement="a small batch trains a worse final model than a large one at equal images seen",
          direction="the smallest batch reaches a higher final FID than the base batch",
          # the plain small-batch run, not its retraining toward t = 0 nor its uniform continuation
          # (batch-sized small too, both started from it)
          group="batch_size", arm={"batch_size": "{smallest}", "init_from": "none", "total_kimg": "{base}"},
          baseline={"batch_size": "{base}", "init_from": "none", "total_kimg": "{base}"},
          expected_sign=+1, judged_at="convergence", needs="groups.batch_size with two batch sizes",
          note="about the final model of a full training run: early in training the small batch's extra optimizer "
               "steps favour it whatever happens at convergence"),
    Claim("slot_interference", SEED, "Sec. 2.1, Fig. 2", status="finding",
          quote="training at the one range of timesteps is easy to destroy the efforts of training so many iterations "
                "at the other range of timesteps",
          statement="fine-tuning one slot raises the other slots' loss more than fine-tuning on uniform t does",
          direction="slot fine-tune minus uniform-t control, mean relative loss change of the other slots, is positive",
          kind="analysis", analysis="interference", expected_sign=+1,
          needs="analyses.slots.finetune with a uniform control"),
    Claim("same_noise_same_image", CLTS, "Abstract", status="finding",
          quote="DMs with different initializations or even different architectures can produce very similar outputs "
                "given the same noise inputs",
          statement="models trained from different seeds map the same noise to images closer to each other than the "
                    "closed-form Gaussian denoiser's shared solution explains (models against the control)",
          direction="a model pair's log(paired/unpaired) distance ratio minus its models' log ratios against the "
                    "Gaussian control is negative",
          kind="analysis", analysis="consistency", expected_sign=-1,
          needs="groups.consistency and analyses.consistency with controls: true",
          note="'paired < unpaired' alone cannot discriminate: the closed-form Gaussian denoiser passes it too "
               "(issue 42); the test is the models against that control, jackknife over models "
               "(docs/methods.md §9.5)"),
    Claim("table1_pretrained", SEED, "Sec. 2.1, Table 1", status="finding",
          quote="we split the whole timesteps into ten slots based on the MSE losses [...] so that the sum of MSE "
                "losses for all timesteps in each slot is the same",
          statement="Table 1: slot fine-tuning of the ImageNet-256 guided-diffusion model",
          direction="as the slot-interference claim, on the paper's own model",
          kind="analysis", analysis="table1", expected_sign=+1,
          needs="the guided-diffusion ImageNet-256 checkpoint as reference.pretrained (config/imagenet.yaml)",
          numbers=(PaperNumber("slots", "Table 1", "timestep ranges", "slots of guided-diffusion ImageNet-256",
                               "Table 1", "the seed paper's text",
                               not_comparable="our slots come from our own reference model's loss profile"),)),
)
