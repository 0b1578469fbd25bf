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
* ``reference_stats``: the training split (at most ``reference_max_images``) through both tools.
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

import numpy as np

from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.estimate.flops import NetworkCost, extractor_flops, network_cost
from timestep_lab.estimate.study import REPORTS, Plan
from timestep_lab.sampling import respaced_timesteps
from timestep_lab.studies.profile import profile_timesteps

__all__ = ["Work", "RuleCost", "rule_costs", "trained_images", "snapshot_count", "FID_TOOLS"]

FID_TOOLS = 2  # torch-fidelity and clean-fid each run the extractor over every image
FEATURE_DIMS = {"inception-v3": 2048, "digits-cnn": 64}


@dataclass(frozen=True)
class Work:
    """``images`` passes of one network: ``kind`` is train (forward + backward) or forward."""

    model: str  # NetworkCost.key, or the extractor's name
    flops_per_image: int
    images: int
    kind: str  # "train" | "forward"
    precision: str | None = None  # None: the device's default (bf16 on a GPU, fp32 on a CPU)

    @property
    def flops(self) -> float:
        return float(self.flops_per_image) * self.images


@dataclass
class RuleCost:
    rule: str
    jobs: int
    gpu: bool  # a GPU rule: it asks for a GPU when the study's resources.device is cuda
    images_trained: int = 0
    images_sampled: int = 0
    evaluations: int = 0  # diffusion-network evaluations (a training image counts one)
    disk_bytes: int = 0
    work: list[Work] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return sum(w.flops for w in self.work)


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
        """Network evaluations per sample: ``evaluation.sample`` over the run's own ``sample``."""
        sample = {**(self.plan.runs[rid].config.get("sample") or {}), **self.plan.evaluation["sample"]}
        return len(respaced_timesteps(self.cfg(rid).diffusion.num_timesteps, sample.get("steps")))

    def sampling(self, cost: RuleCost, rid: str, n: int, keep: bool) -> None:
        net, steps = self.net(rid), self.steps(rid)
        cost.images_sampled += n
        cost.evaluations += n * steps
        cost.work.append(Work(net.key, net.forward, n * steps, "forward"))
        cost.disk_bytes += n * self.img_bytes if keep else 0

    def features(self, cost: RuleCost, n: int) -> None:
        name = self.plan.evaluation["extractor"]
        cost.work.append(Work(name, extractor_flops(name), n * FID_TOOLS, "forward", "fp32"))

    def profile(self, cost: RuleCost, rid: str, grad: bool) -> None:
        p = (self.plan.study.get("analyses") or {}).get("loss_profile") or {}
        net, T = self.net(rid), self.cfg(rid).diffusion.num_timesteps
        n = int(p.get("num_images", 256)) * len(profile_timesteps(T, int(p.get("stride", 1))))
        cost.evaluations += n
        cost.work.append(Work(net.key, net.forward, n, "forward"))
        if grad and int(p.get("grad_timesteps", 0)) > 0:
            ts = {int(round(v)) for v in np.linspace(0, T - 1, int(p["grad_timesteps"]))}  # as loss_profile
            g = len(ts) * max(1, int(p.get("grad_samples", 16)))
            cost.evaluations += g
            cost.work.append(Work(net.key, net.train, g, "train"))


def rule_costs(plan: Plan) -> list[RuleCost]:
    """One :class:`RuleCost` per rule of the study's default target, in workflow order."""
    c = _Counter(plan)
    gpu = True  # the rules with network work ask for a GPU on a cuda study (train_resources / gpu_resources)
    ev = plan.evaluation
    out: list[RuleCost] = []

    prep = RuleCost("prepare_data", len(plan.prepared_splits()), False)
    prep.disk_bytes = sum(plan.split_size(s) * c.img_bytes for s in plan.prepared_splits())
    out.append(prep)
    out.append(RuleCost("run_config", len(plan.trained_runs()), False))

    train = RuleCost("train", len(plan.trained_runs()), gpu)
    for rid in plan.trained_runs():
        cfg, net = c.cfg(rid), c.net(rid)
        images = trained_images(cfg)
        train.images_trained += images
        train.evaluations += images
        precision = None if cfg.train.precision == "auto" else cfg.train.precision
        train.work.append(Work(net.key, net.train, images, "train", precision))
        train.disk_bytes += net.params * 4 * (2 + 4 + snapshot_count(cfg))
    out.append(train)

    extractor = ev["extractor"]
    if extractor == "digits-cnn":
        out.append(RuleCost("train_features", 1, False, notes=["a small CNN on the digits (seconds)"]))
    ref = RuleCost("reference_stats", 1, gpu)
    n_ref = plan.split_size(plan.study["data"]["train_split"])
    n_ref = min(n_ref, ev["reference_max_images"] or n_ref)
    c.features(ref, n_ref)
    dim = FEATURE_DIMS.get(extractor, 2048)
    ref.disk_bytes = FID_TOOLS * (dim * dim * 8 + n_ref * dim * 4)
    out.append(ref)

    scored = RuleCost("sample_score", len(plan.evaluated_runs()), gpu)  # sampling and scoring in one job
    for rid in plan.evaluated_runs():
        c.sampling(scored, rid, ev["num_samples"], keep=True)
        c.features(scored, ev["num_samples"])
    out.append(scored)

    progress = RuleCost("evaluate_progress", len(plan.progress_runs()), gpu)
    points = 0
    for rid in plan.progress_runs():
        n = snapshot_count(c.cfg(rid))
        points += n
        c.sampling(progress, rid, n * ev["progress_num_samples"], keep=False)
        c.features(progress, n * ev["progress_num_samples"])
    if progress.jobs:
        progress.notes.append(f"{points} snapshots x {ev['progress_num_samples']} samples")
    out += [progress, RuleCost("collect", 1, False)]

    prof = RuleCost("profile_losses", len(plan.profiled_runs()), gpu)
    for rid in plan.profiled_runs():
        c.profile(prof, rid, grad=rid == "reference")
    out += [prof, RuleCost("slots", 1, False), RuleCost("interference", 1, False)]
    if plan.finetune_runs() and plan.control_runs():
        out.append(RuleCost("interference_control", 1, False))

    if plan.optimal_profile():
        opt = RuleCost("optimal_profile", 1, False, notes=["closed form: N_train x D per bank image and t (CPU)"])
        out.insert(next(i for i, r in enumerate(out) if r.rule == "slots"), opt)

    labels = plan.contribution_labels()
    if labels:  # "none" and "final" at least
        contrib = RuleCost("contribution", 1, gpu)
        spec = (plan.study.get("analyses") or {}).get("timestep_contribution") or {}
        n_contrib = int(spec.get("num_samples", 500))
        evals = plan.contribution_evaluations()
        net = c.net("reference")
        contrib.images_sampled += n_contrib * len(labels)
        contrib.evaluations += n_contrib * evals
        contrib.work.append(Work(net.key, net.forward, n_contrib * evals, "forward"))
        contrib.disk_bytes += n_contrib * len(labels) * c.img_bytes
        c.features(contrib, 2 * n_contrib * len(labels))  # scoring and the bootstrap's features
        contrib.notes.append(f"{len(labels)} arms forked from one {len(plan.contribution_chain())}-step chain: "
                             f"{evals} network evaluations per sample")
        out.append(contrib)
    out.append(RuleCost("posterior", 1, False))

    pred = RuleCost("profile_predictions", 1, gpu)
    for rid in plan.prediction_runs():
        c.profile(pred, rid, grad=False)
    out += [pred, RuleCost("consistency", 1, False, notes=["distances between stored samples (CPU)"])]
    out += [RuleCost("verdicts", 1, False), RuleCost("report", len(REPORTS), False), RuleCost("index", 1, False), RuleCost("all", 1, False)]
    if c.notes:
        train.notes += sorted(c.notes)
    return out
