"""The claims a study judges, in the sources' own words: one record per scorecard row.

This module is data. Each :class:`Claim` says who claims it (:class:`Source`) and where
(section, figure or table), quotes the source's own words, says whether it is a *finding* the
source reports or a *hypothesis* it puts forward, states the direction it predicts, carries the
source's numbers with their units (:class:`PaperNumber`, each saying whether it is comparable
with what we measure and, if not, why), says whether it is a claim about *speed* (judged at any
training length) or about *convergence* (judged only by a study trained long enough,
docs/methods.md §9.7), and names the runs that test it. :data:`CLAIMS` lists them, in
scorecard order; :func:`timestep_lab.verdicts.judge_claims` measures and judges them and
``verdicts.json`` carries every field of the record (:meth:`Claim.record`) beside both verdicts.

Adding a claim: append a :class:`Claim` to :data:`CLAIMS` (ids are never reused); a new source
gets a :class:`Source`. The quote is checked against the source's text where we hold it;
``Source.held`` says what we hold. Pure Python: no numpy, pandas or torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

__all__ = ["Source", "PaperNumber", "Claim", "CLAIMS", "STATUSES", "JUDGED_AT", "NUMBER_KINDS", "claim_by_id"]

#: What a claim is in its source: something it reports having observed, or something it proposes.
STATUSES = ("finding", "hypothesis")
#: When a claim can be judged: "any length" (speed: which arm is ahead at equal images seen) or
#: "convergence" (the converged model; only in a study whose baseline has stopped improving).
JUDGED_AT = ("any length", "convergence")
#: Kinds of published numbers: a training speed-up (x), a pair of FIDs (baseline -> method), slot ranges.
NUMBER_KINDS = ("speedup", "fid_pair", "slots")


@dataclass(frozen=True)
class Source:
    """Who makes a claim. ``ref``: arXiv id or address; ``held``: what of its text we hold."""

    key: str
    cite: str
    ref: str
    title: str
    held: str

    @property
    def label(self) -> str:
        """``"SpeeD (2405.17403)"``: the scorecard's paper column."""
        return f"{self.cite} ({self.ref.removeprefix('arXiv ')})"


@dataclass(frozen=True)
class PaperNumber:
    """A number a source publishes for a claim, with its unit and setting.

    ``kind`` "speedup": ``low``..``high`` (equal for a single number) in ``unit`` (x: training
    images the baseline needs over those the method needs to reach the same FID); "fid_pair":
    ``baseline`` -> ``method`` FIDs; "slots": a table. ``text`` is how the source writes it.
    ``not_comparable`` is empty when our measurement answers the same question in the same unit,
    else the reason it cannot be set against ours (the size verdict prints it).
    """

    kind: str
    text: str
    unit: str
    setting: str
    where: str
    source: str
    low: float | None = None
    high: float | None = None
    baseline: float | None = None
    method: float | None = None
    not_comparable: str = ""

    def __post_init__(self) -> None:
        if self.kind not in NUMBER_KINDS:
            raise ValueError(f"PaperNumber.kind must be one of {NUMBER_KINDS}, got {self.kind!r}")
        if self.kind == "speedup" and not self.not_comparable and (self.low is None or self.high is None):
            raise ValueError(f"a comparable speed-up needs low and high: {self.text!r}")


@dataclass(frozen=True)
class Claim:
    """One claim and how a study tests it.

    Record: ``source``, ``where`` (section, figure or table), ``quote`` (the source's words),
    ``status`` (:data:`STATUSES`), ``statement`` (what we test, in one line), ``direction`` (the
    predicted sign in words), ``numbers`` (:class:`PaperNumber`; the first comparable one is what
    the size verdict judges), ``judged_at`` (:data:`JUDGED_AT`), ``note``.

    Test: ``kind="fid"``: the final-FID difference ``arm - baseline`` in ``group`` should have
    sign ``expected_sign`` (-1: the arm reaches a lower FID); ``arm``/``baseline`` select arms by
    run axes (:func:`timestep_lab.verdicts.select_arm`). ``kind="analysis"``: the effect of the
    analysis ``analysis`` (``{"diff", "ci_low", "ci_high", "p", "sd", "n"}``). ``needs``: what a
    study must run to test it ("not run" prints it).
    """

    id: str
    source: Source
    where: str
    quote: str
    status: str
    statement: str
    direction: str
    expected_sign: int
    needs: str
    kind: str = "fid"
    group: str = ""
    arm: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] = field(default_factory=dict)
    analysis: str = ""
    judged_at: str = "any length"
    numbers: tuple[PaperNumber, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"claim {self.id}: status must be one of {STATUSES}, got {self.status!r}")
        if self.judged_at not in JUDGED_AT:
            raise ValueError(f"claim {self.id}: judged_at must be one of {JUDGED_AT}, got {self.judged_at!r}")
        if self.expected_sign not in (-1, 1) or self.kind not in ("fid", "analysis"):
            raise ValueError(f"claim {self.id}: expected_sign -1/+1 and kind fid/analysis")

    @property
    def paper(self) -> str:
        return self.source.label

    def record(self) -> dict[str, Any]:
        """Every field, JSON-ready: what ``verdicts.json`` carries for the claim (docs/design.md)."""
        out = asdict(self)
        out["source"] = {**asdict(self.source), "label": self.source.label}
        out["arm"], out["baseline"] = dict(self.arm), dict(self.baseline)
        out["numbers"] = [asdict(n) for n in self.numbers]
        return out


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
#: the consistency group's plain arm: no optimizer-schedule override (``_opt...``) and the base width (``_ch...``)
CONSTANT_BASE = {"arm!~": ["_opt", "_ch"]}

_NOT_FID = ("Inception FID of {what}; ours is digits-CNN FID on this study's data: FID values, their "
            "differences and their ratios do not carry over between feature extractors and data sets")


def _sampler(claim_id: str, source: Source, sampler: str, weighting: str = "none", **kw: Any) -> Claim:
    """A sampler-comparison claim: the arm ``sampler + weighting`` against uniform, lower FID predicted."""
    spelled = f"sampler {sampler}" + (f" + weighting {weighting}" if weighting != "none" else "")
    arm = f"{sampler}+{weighting}"
    return Claim(claim_id, source, group="sampler_comparison", arm={"sampler": sampler, "weighting": weighting},
                 baseline=UNIFORM, expected_sign=-1, needs=f"groups.sampler_comparison with {spelled}",
                 direction=f"{arm} reaches a lower final FID than uniform+none at equal images seen", **kw)


_SPEED_3X = PaperNumber("speedup", "3x", "x (training images to reach the baseline's FID, baseline / method)",
                        "various architectures, data sets and tasks", "Abstract", "arXiv abstract", low=3.0, high=3.0)
_CLTS_SPEEDUP = PaperNumber("speedup", "2x to 2.6x", "x (training speed-up)", "CIFAR-10 and ImageNet-128",
                            "paper body (not in the abstract we hold)", "docs/methods.md §5", low=2.0, high=2.6)

CLAIMS: tuple[Claim, ...] = (
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
             note="our CLTS is a reconstruction from the abstract (docs/methods.md §1.5); whether 2x-2.6x is CLTS alone "
                  "or CLTS with momentum decay we could not check [unverified]"),
    Claim("momentum_decay", CLTS, "Abstract", status="finding",
          quote="a momentum decay strategy, which reduces the momentum coefficient during the optimization process, "
                "as the large momentum may hinder the convergence speed and cause oscillations",
          statement="decaying Adam's beta1 during training lowers FID at equal images seen",
          direction="momentum decay reaches a lower final FID than constant momentum",
          group="consistency", arm={"arm~": "momentum-decay", "arm!~": "compensate"}, baseline=CONSTANT_BASE,
          expected_sign=-1, needs="groups.consistency with momentum_decay entries (paired seeds)",
          note="beta1 alone, learning rate untouched (docs/methods.md §4.2)"),
    Claim("momentum_decay_compensated", CLTS, "Abstract", status="finding",
          quote="a momentum decay strategy, which reduces the momentum coefficient during the optimization process",
          statement="momentum decay with the SGD-style lr compensation (lr falls with 1 - beta1: a confounded variant) "
                    "lowers FID at equal images seen",
          direction="compensated momentum decay reaches a lower final FID than constant momentum",
          group="consistency", arm={"arm~": "compensate"}, baseline=CONSTANT_BASE, expected_sign=-1,
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
          # the plain small-batch run, not its retraining toward t = 0 (also batch-sized small)
          group="batch_size", arm={"batch_size": "{smallest}", "arm!~": "toward_zero"}, baseline={"batch_size": "{base}"},
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
          statement="models trained from different seeds map the same noise to close images (paired distance below "
                    "unpaired)",
          direction="paired minus unpaired sample distance is negative",
          kind="analysis", analysis="consistency", expected_sign=-1,
          needs="groups.consistency and analyses.consistency"),
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


def claim_by_id(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (KeyError naming the known ids otherwise)."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


assert len({c.id for c in CLAIMS}) == len(CLAIMS), "claim ids must be unique"
