"""The work of every Snakemake rule of a study, job by job, in images and network evaluations.

For each rule of ``workflow/rules/*.smk`` that the default target (``reports/<study>/index.html``)
pulls in, :func:`rule_costs` counts over the same run lists the rule is expanded over
(:class:`Plan`):

* ``train``: ``ceil(total_kimg * 1000 / batch) * batch`` images per run, one forward + backward
  each; disk: ``model.pt`` (weights + EMA), the resumable checkpoint (weights, EMA, Adam's two
  moments) and one EMA snapshot per ``snapshot_every_kimg`` (plus the final one) when followed.
* ``sample_score``: ``evaluation.num_samples`` images per scored run, each taking ``steps``
  network evaluations (``evaluation.sample`` over the run's ``sample``; ``steps`` null means all
  T), then two feature passes (torch-fidelity and clean-fid each extract their own); one job.
* ``evaluate_progress``: the same per snapshot of a followed run with ``progress_num_samples``.
* ``train_features`` (trained extractors only): ``epochs`` passes over the training split,
  one forward + backward of the classifier per image (a CPU job: priced on ``--gpu cpu`` only).
* ``reference_stats``: the training split (at most ``reference_max_images``) through both tools.
* ``floor``: the held-out split (at most ``num_samples`` images) through both tools; only with ``data.test_split``.
* ``profile_losses`` / ``profile_predictions``: ``num_images`` forwards per profiled timestep
  (``range(0, T, stride)`` plus T-1) per model, plus ``grad_samples`` forward + backward passes
  at each of ``grad_timesteps`` timesteps for the reference.
* ``contribution``: one job; every arm forks from one chain, so the network runs once per chain
  step above the lowest range and once per step below each range (:meth:`Plan.contribution_evaluations`).
* ``optimal_profile``: the closed-form optimal denoiser on the profile bank (no network).
* CPU-only bookkeeping rules (run configs, collection, slots, reports) count jobs only.

It counts work; it knows nothing of devices, rates or prices (see ``throughput``/``table``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from timestep_lab.components import build_diffusion
from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.cost.estimate.flops import NetworkCost, extractor_flops, network_cost
from timestep_lab.cost.estimate.study import Plan
from timestep_lab.metrics.features import FEATURE_NETS
from timestep_lab.processes.solvers import make_solver
from timestep_lab.studies.profile import profile_timesteps
from timestep_lab.workflow import contribution_sample_count, prepared_dir
from timestep_lab.workflow.runs import eval_sample, fid_sample_count

__all__ = ["Work", "RuleCost", "rule_costs", "trained_images", "snapshot_count", "FID_TOOLS"]

FID_TOOLS = 2  # torch-fidelity and clean-fid each run the extractor over every image
FEATURE_DIMS = {"inception-v3": 2048, **{name: net.feature_dim for name, net in FEATURE_NETS.items()}}


@dataclass(frozen=True)
class Work:
    """``images`` passes of one network: ``kind`` is train (forward + backward) or forward.

    ``step`` is what the pass is for, the key of the published throughput anchors
    (:mod:`anchors`): ``train`` (a training image, optimizer included), ``sample`` (one
    network evaluation of a sampling or profiling step) or ``features`` (one image through
    the FID extractor). ``steps`` counts the optimizer steps of training work (0 otherwise)."""

    model: str  # NetworkCost.key, or the extractor's name
    flops_per_image: int
    images: int
    kind: str  # "train" | "forward"
    precision: str | None = None  # None: the device's default (bf16 on a GPU, fp32 on a CPU)
    step: str = "sample"  # "train" | "sample" | "features"
    steps: int = 0

    @property
    def flops(self) -> float:
        return float(self.flops_per_image) * self.images


@dataclass
class RuleCost:
    """One rule's jobs and their work. ``job_work`` maps every job, by the name of its benchmark
    file (``results/<study>/benchmarks/<rule>/<job>.tsv``), to the work it does (empty for a
    bookkeeping job): the calibration matches measured jobs to it (:mod:`calibration`)."""

    rule: str
    jobs: int
    gpu: bool  # a GPU rule: it asks for a GPU when the study's resources.device is cuda
    images_trained: int = 0
    images_sampled: int = 0
    evaluations: int = 0  # diffusion-network evaluations (a training image counts one)
    disk_bytes: int = 0
    work: list[Work] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    job_work: dict[str, list[Work]] = field(default_factory=dict)

    @property
    def flops(self) -> float:
        return sum(w.flops for w in self.work)

    def add(self, job: str, work: Work) -> None:
        self.work.append(work)
        self.job_work.setdefault(job, []).append(work)


def _rule(name: str, jobs: list[str], gpu: bool, **kw) -> RuleCost:
    """A rule of ``jobs`` (benchmark file names), none with work yet."""
    return RuleCost(name, len(jobs), gpu, job_work={j: [] for j in jobs}, **kw)


def trained_images(cfg: RunConfig) -> int:
    """Images a run trains on: whole steps of ``batch_size`` until ``total_kimg`` is reached."""
    total = int(round(cfg.train.total_kimg * 1000))
    return math.ceil(total / cfg.train.batch_size) * cfg.train.batch_size


def snapshot_count(cfg: RunConfig) -> int:
    """EMA snapshots of a run: one per ``snapshot_every_kimg`` crossed, plus the final one."""
    if not cfg.train.snapshot_every_kimg:
        return 0
    every, batch, final = int(round(cfg.train.snapshot_every_kimg * 1000)), cfg.train.batch_size, trained_images(cfg)
    last_crossed = final // every > (final - batch) // every
    return final // every + (0 if last_crossed else 1)


class _Counter:
    """Per-run lookups shared by the rules: configs, networks, sampling steps."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.res, self.ch = plan.image_shape()
        self.img_bytes = self.res * self.res * self.ch  # uint8 NHWC
        self.notes: set[str] = set()

    def cfg(self, rid: str) -> RunConfig:
        return config_from_dict(self.plan.runs[rid].config, f"{self.plan.source} (run {rid})")

    def net(self, rid: str) -> NetworkCost:
        config = self.plan.runs[rid].config
        if (config.get("model") or {}).get("name", "unet") != "unet":  # a pretrained diffusers folder
            config = {**config, "model": self.plan.study["base"].get("model", {})}
            self.notes.add("runs fine-tuning a pretrained folder are counted with base.model's network")
        return network_cost(config, self.res, self.ch)

    def steps(self, rid: str) -> int:
        """Network evaluations per sample: the scoring protocol (``evaluation.sample`` and its
        ``sample_by_kind`` for the run's process) over the run's own ``sample``; Heun takes 2n - 1."""
        config = self.plan.runs[rid].config
        sample = {**(config.get("sample") or {}), **eval_sample(self.plan.evaluation, config)}
        cfg = self.cfg(rid)
        return make_solver(sample.get("method", cfg.sample.method)).evaluations(build_diffusion(cfg), sample.get("steps"))

    def sampling(self, cost: RuleCost, job: str, rid: str, n: int, keep: bool) -> None:
        net, steps = self.net(rid), self.steps(rid)
        cost.images_sampled += n
        cost.evaluations += n * steps
        cost.add(job, Work(net.key, net.forward, n * steps, "forward", step="sample"))
        cost.disk_bytes += n * self.img_bytes if keep else 0

    def features(self, cost: RuleCost, job: str, n: int) -> None:
        name = self.plan.evaluation["extractor"]
        cost.add(job, Work(name, extractor_flops(name), n * FID_TOOLS, "forward", "fp32", step="features"))

    def profile(self, cost: RuleCost, job: str, rid: str, grad: bool) -> None:
        p = (self.plan.study.get("analyses") or {}).get("loss_profile") or {}
        net, T = self.net(rid), self.cfg(rid).diffusion.num_timesteps
        n = int(p.get("num_images", 256)) * len(profile_timesteps(T, int(p.get("stride", 1))))
        cost.evaluations += n
        cost.add(job, Work(net.key, net.forward, n, "forward", step="sample"))
        if grad and int(p.get("grad_timesteps", 0)) > 0:
            ts = {int(round(v)) for v in np.linspace(0, T - 1, int(p["grad_timesteps"]))}  # as loss_profile
            g = len(ts) * max(1, int(p.get("grad_samples", 16)))
            cost.evaluations += g
            cost.add(job, Work(net.key, net.train, g, "train", step="train"))


def rule_costs(plan: Plan) -> list[RuleCost]:
    """One :class:`RuleCost` per rule of the study's default target, in workflow order, each
    job named as its benchmark file is (``workflow/rules/*.smk``: the run id, the t-range label,
    the report name, or the rule's own name for a one-job rule)."""
    c = _Counter(plan)
    out: list[RuleCost] = _data_rules(c)
    train = _train_rule(c)
    out.append(train)
    out += _feature_rules(c)
    out += _scoring_rules(c)
    out += _profile_rules(c)
    out += _contribution_rules(c)
    out += _consistency_rules(c)
    out += [_rule("verdicts", ["verdicts"], False), _rule("report", plan.reports(), False),
            _rule("estimate", ["estimate"], False), _rule("index", ["index"], False),
            RuleCost("all", 1, False)]  # the default target: a job of Snakemake's, no benchmark file
    if c.notes:
        train.notes += sorted(c.notes)
    return out


#: the rules with network work ask for a GPU on a cuda study (train_resources / gpu_resources)
_GPU = True


def _data_rules(c: _Counter) -> list[RuleCost]:
    """``prepare_data`` (one job per split; disk: uint8 images) and ``run_config``."""
    plan = c.plan
    splits = plan.prepared_splits()
    prep = _rule("prepare_data", [Path(prepared_dir(plan.study["data"], s)).name for s in splits], False)
    prep.disk_bytes = sum(plan.split_size(s) * c.img_bytes for s in splits)
    return [prep, _rule("run_config", plan.trained_runs(), False)]


def _train_rule(c: _Counter) -> RuleCost:
    """``train``: every trained run's images, optimizer steps and files (module docstring)."""
    train = _rule("train", c.plan.trained_runs(), _GPU)
    for rid in c.plan.trained_runs():
        cfg, net = c.cfg(rid), c.net(rid)
        images = trained_images(cfg)
        train.images_trained += images
        train.evaluations += images
        precision = None if cfg.train.precision == "auto" else cfg.train.precision
        train.add(rid, Work(net.key, net.train, images, "train", precision, step="train",
                            steps=images // cfg.train.batch_size))
        train.disk_bytes += net.params * 4 * (2 + 4 + snapshot_count(cfg))
    return train


def _feature_rules(c: _Counter) -> list[RuleCost]:
    """``train_features`` (trained extractors only), ``reference_stats`` and ``floor`` (with a
    held-out split): images through the FID extractor."""
    plan, ev, out = c.plan, c.plan.evaluation, []
    extractor = ev["extractor"]
    if extractor in FEATURE_NETS and FEATURE_NETS[extractor].trained:  # the rehearsal's stand-in is written, not trained
        net = FEATURE_NETS[extractor]
        n_train = net.epochs * plan.split_size(plan.study["data"]["train_split"])
        feats = _rule("train_features", ["train_features"], False,
                      notes=[f"{extractor}: {net.epochs} epochs of the train split, on a CPU"])
        feats.add("train_features", Work(extractor, extractor_flops(extractor, train=True), n_train, "train", "fp32",
                                         step="features"))
        out.append(feats)
    ref = _rule("reference_stats", ["reference_stats"], _GPU)
    n_ref = plan.split_size(plan.study["data"]["train_split"])
    n_ref = min(n_ref, ev["reference_max_images"] or n_ref)
    c.features(ref, "reference_stats", n_ref)
    dim = FEATURE_DIMS.get(extractor, 2048)
    ref.disk_bytes = FID_TOOLS * (dim * dim * 8 + n_ref * dim * 4)
    out.append(ref)
    test_split = plan.study["data"].get("test_split")
    if test_split:  # the floor: held-out images through both tools (the bootstrap is CPU linear algebra)
        floor = RuleCost("floor", 1, _GPU, notes=["200 bootstrap Fréchet distances per tool (CPU)"])
        c.features(floor, "floor", min(plan.split_size(test_split), fid_sample_count(ev)))
        out.append(floor)
    return out


def _scoring_rules(c: _Counter) -> list[RuleCost]:
    """``sample_score`` (final FIDs), ``evaluate_progress`` (FID against images seen), ``collect``."""
    plan, ev = c.plan, c.plan.evaluation
    scored = _rule("sample_score", plan.evaluated_runs(), _GPU)  # sampling and scoring in one job
    n_final, n_progress = fid_sample_count(ev), fid_sample_count(ev, progress=True)
    for rid in plan.evaluated_runs():
        c.sampling(scored, rid, rid, n_final, keep=True)
        c.features(scored, rid, n_final)
    progress = _rule("evaluate_progress", plan.progress_runs(), _GPU)
    points = 0
    for rid in plan.progress_runs():
        n = snapshot_count(c.cfg(rid))
        points += n
        c.sampling(progress, rid, rid, n * n_progress, keep=False)
        c.features(progress, rid, n * n_progress)
    if progress.jobs:
        progress.notes.append(f"{points} snapshots x {n_progress} samples")
    return [scored, progress, _rule("collect", ["collect"], False)]


def _profile_rules(c: _Counter) -> list[RuleCost]:
    """``profile_losses``, ``optimal_profile`` (when asked), ``slots``, ``interference`` and its control."""
    plan = c.plan
    prof = _rule("profile_losses", plan.profiled_runs(), _GPU)
    for rid in plan.profiled_runs():
        c.profile(prof, rid, rid, grad=rid == "reference")
    out = [prof]
    if plan.optimal_profile():
        out.append(_rule("optimal_profile", ["optimal_profile"], False,
                         notes=["closed form: N_train x D per bank image and t (CPU)"]))
    out.append(_rule("slots", ["slots"], False))
    if plan.finetune_runs():  # the slot report's input: planned only with fine-tunes (report.smk REPORT_NEEDS)
        out.append(_rule("interference", ["interference"], False))
    if plan.finetune_runs() and plan.control_runs():
        out.append(_rule("interference_control", ["interference_control"], False))
    return out


def _contribution_rules(c: _Counter) -> list[RuleCost]:
    """``contribution`` (when the study has t-ranges: arms "none" and "final" at least) and ``posterior``."""
    plan, out = c.plan, []
    labels = plan.contribution_labels()
    if labels:  # "none" and "final" at least
        contrib = _rule("contribution", ["contribution"], _GPU)
        n_contrib = contribution_sample_count(plan.study)
        evals = plan.contribution_evaluations()
        net = c.net("reference")
        contrib.images_sampled += n_contrib * len(labels)
        contrib.evaluations += n_contrib * evals
        contrib.add("contribution", Work(net.key, net.forward, n_contrib * evals, "forward", step="sample"))
        contrib.disk_bytes += n_contrib * len(labels) * c.img_bytes
        c.features(contrib, "contribution", 2 * n_contrib * len(labels))  # scoring and the bootstrap's features
        contrib.notes.append(f"{len(labels)} arms forked from one {len(plan.contribution_chain())}-step chain: "
                             f"{evals} network evaluations per sample")
        out.append(contrib)
    out.append(_rule("posterior", ["posterior"], False))
    return out


def _consistency_rules(c: _Counter) -> list[RuleCost]:
    """``profile_predictions`` and ``consistency``: every pair of the consistency runs' sample
    sets: pixel distances, and (digits) both sets' digits-CNN features again per pair
    (``timestep_lab consistency``)."""
    plan, extractor, out = c.plan, c.plan.evaluation["extractor"], []
    if plan.prediction_runs():  # each only with its group (workflow/rules/report.smk REPORT_NEEDS)
        pred = _rule("profile_predictions", ["profile_predictions"], _GPU)
        for rid in plan.prediction_runs():
            c.profile(pred, "profile_predictions", rid, grad=False)
        out.append(pred)
    if plan.consistency_runs():
        cons = _rule("consistency", ["consistency"], False, notes=["distances between stored samples (CPU)"])
        n_pairs = math.comb(len(plan.consistency_runs()), 2)
        if n_pairs and extractor == "digits-cnn":
            cons.add("consistency", Work(extractor, extractor_flops(extractor),
                                         n_pairs * 2 * fid_sample_count(plan.evaluation), "forward", "fp32", step="features"))
        out.append(cons)
    return out
