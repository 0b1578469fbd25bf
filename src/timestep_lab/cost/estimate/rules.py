"""The work of every job of a study's DAG, in images and network evaluations, by rule kind.

:func:`rule_costs` walks the jobs Snakemake planned (:class:`Plan`: the DAG, its wildcards, the
runs each job reads and the run configs the ``run_config`` jobs write) and gives each job the work
of its rule's kind (:data:`KINDS`); which runs a rule covers is the DAG's answer:

* ``train``: ``ceil(total_kimg * 1000 / batch) * batch`` images of the job's run, one forward +
  backward each; disk: ``model.pt`` (weights + EMA), the resumable checkpoint (weights, EMA, Adam's
  two moments) and one EMA snapshot per ``snapshot_every_kimg`` (plus the final one) when followed.
* ``sample_score``: ``evaluation.num_samples`` images of the job's run, each taking ``steps``
  network evaluations (``evaluation.sample`` over the run's ``sample``; ``steps`` null means all
  T), then one feature pass per FID tool of the run's ``eval.tools``.
* ``evaluate_progress``: the same per snapshot of the job's run with ``progress_num_samples``.
* latent studies (``latent.vae``): a latent run's network is counted on the VAE's latents
  (sd-vae-ft-ema: 32x32x4 at 256 px, :func:`flops.vae_cost`), a pixel run's (the pretrained
  reference's fine-tunes, the super-resolution model: :mod:`timestep_lab.workflow.spaces`) on the
  images; ``encode_latents`` is one encoder pass per training image (two with flips) and every
  image a latent run samples adds one decoder pass.
* ``train_features`` (trained extractors only): ``epochs`` passes over the training split,
  one forward + backward of the classifier per image (a CPU job: priced on ``--gpu cpu`` only).
* ``reference_stats``: the training split (at most ``reference_max_images``) through every tool
  any run scores with (the runs' ``eval.tools``).
* ``floor``: the held-out split (at most ``num_samples`` images) through those tools.
* ``profile_losses`` / ``profile_predictions``: ``--num-images`` forwards per profiled timestep
  (``range(0, T, stride)`` plus T-1) per model the job reads, plus ``--grad-samples`` forward +
  backward passes at each of ``--grad-timesteps`` timesteps when the job's bank asks for them
  (the job's own arguments).
* ``contribution``: one job; every arm forks from one chain, so the network runs once per chain
  step above the lowest range and once per step below each range (:meth:`Plan.contribution_evaluations`).
* ``consistency``: every pair of the runs the job reads: (digits) both sets' features again per pair.
* Every other rule (run configs, collection, slots, reports, the closed-form profile) counts jobs only.

It counts work; it knows nothing of devices, rates or prices (see ``throughput``/``table``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from timestep_lab.components import build_diffusion
from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.cost.estimate.dag import Job
from timestep_lab.cost.estimate.flops import NetworkCost, extractor_flops, network_cost, vae_architecture, vae_cost
from timestep_lab.cost.estimate.study import Plan
from timestep_lab.metrics.features import FEATURE_NETS
from timestep_lab.processes.solvers import make_solver
from timestep_lab.studies.profile import profile_timesteps
from timestep_lab.workflow import LATENT, contribution_ranges, contribution_sample_count, is_latent, run_space
from timestep_lab.workflow.runs import eval_sample, fid_sample_count
from timestep_lab.workflow.spaces import pixel_study

__all__ = ["Work", "RuleCost", "rule_costs", "trained_images", "snapshot_count", "KINDS"]

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
    """Per-run lookups shared by the cost models: configs, networks, sampling steps, FID tools."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.res, self.ch = plan.image_shape()
        self.img_bytes = self.res * self.res * self.ch  # uint8 NHWC
        # a latent study: its latent runs' networks see the VAE's latents; the VAE encodes and decodes
        self.vae = vae_cost(self.res, vae_architecture(plan.vae_config())) if is_latent(plan.study) else None
        self.notes: set[str] = set()
        self._cfgs: dict[str, RunConfig] = {}

    def cfg(self, rid: str) -> RunConfig:
        if rid not in self._cfgs:  # checked once per run: every job of the run asks
            self._cfgs[rid] = config_from_dict(self.plan.runs[rid], f"{self.plan.source} (run {rid})")
        return self._cfgs[rid]

    def latent(self, rid: str) -> bool:
        """Whether run ``rid`` is a latent run (its network sees latents, its samples are decoded)."""
        return self.vae is not None and run_space(self.plan.study, self.plan.runs[rid]) == LATENT

    def net(self, rid: str) -> NetworkCost:
        config = self.plan.runs[rid]
        if (config.get("model") or {}).get("name", "unet") == "diffusers_unet2d":  # a pretrained diffusers folder
            config = {**config, "model": pixel_study(self.plan.study)["base"].get("model", {})}
            self.notes.add("runs fine-tuning a pretrained folder are counted with the pixel base.model's network")
        return network_cost(config, *(self.vae.latent if self.latent(rid) else (self.res, self.ch)))

    def steps(self, rid: str) -> int:
        """Network evaluations per sample: the scoring protocol (``evaluation.sample`` and its
        ``sample_by_kind`` for the run's process) over the run's own ``sample``; Heun takes 2n - 1;
        classifier-free guidance (``guidance_scale`` != 1) evaluates the network twice per step
        (the conditional and the null-class rows of one doubled batch)."""
        config = self.plan.runs[rid]
        sample = {**(config.get("sample") or {}), **eval_sample(self.plan.evaluation, config)}
        cfg = self.cfg(rid)
        guided = 2 if float(sample.get("guidance_scale", cfg.sample.guidance_scale)) != 1.0 else 1
        return guided * make_solver(sample.get("method", cfg.sample.method)).evaluations(build_diffusion(cfg),
                                                                                           sample.get("steps"))

    def tools(self, rid: str | None = None) -> int:
        """FID tools that each extract their own features: the run's ``eval.tools``; without a run
        (the reference and the floor) every tool any run scores with."""
        if rid is not None:
            return len(self.cfg(rid).eval.tools)
        return len({t for r in self.plan.runs for t in self.cfg(r).eval.tools}) or 1

    def sampling(self, cost: RuleCost, job: str, rid: str, n: int, keep: bool) -> None:
        net, steps = self.net(rid), self.steps(rid)
        cost.images_sampled += n
        cost.evaluations += n * steps
        cost.add(job, Work(net.key, net.forward, n * steps, "forward", step="sample"))
        self.decode(cost, job, rid, n)
        cost.disk_bytes += n * self.img_bytes if keep else 0

    def decode(self, cost: RuleCost, job: str, rid: str, n: int) -> None:
        """A latent run's ``n`` generated latents through the VAE's decoder (once per sample)."""
        if self.latent(rid):
            cost.add(job, Work(f"sd-vae-decoder@{self.res}x{self.res}x3", self.vae.decoder, n, "forward",
                               step="sample"))

    def features(self, cost: RuleCost, job: str, n: int, tools: int) -> None:
        name = self.plan.evaluation["extractor"]
        cost.add(job, Work(name, extractor_flops(name), n * tools, "forward", "fp32", step="features"))

    def profile(self, cost: RuleCost, job: Job, rid: str) -> None:
        """The job's bank (its ``--num-images``, ``--stride``, ``--grad-*`` options) through ``rid``'s network."""
        a = job.args
        net, T = self.net(rid), self.cfg(rid).diffusion.num_timesteps
        n = int(a.get("num-images", 256)) * len(profile_timesteps(T, int(a.get("stride", 1))))
        cost.evaluations += n
        cost.add(job.name, Work(net.key, net.forward, n, "forward", step="sample"))
        if int(a.get("grad-timesteps", 0)) > 0:
            ts = {int(round(v)) for v in np.linspace(0, T - 1, int(a["grad-timesteps"]))}  # as loss_profile
            g = len(ts) * max(1, int(a.get("grad-samples", 16)))
            cost.evaluations += g
            cost.add(job.name, Work(net.key, net.train, g, "train", step="train"))


def _run(job: Job) -> str:
    """The run a per-run job works on (its ``run`` wildcard)."""
    return job.wildcards["run"]


def _prepare_data(c: _Counter, cost: RuleCost, job: Job) -> None:
    cost.disk_bytes += c.plan.split_size(job.wildcards["split"]) * c.img_bytes


def _encode_latents(c: _Counter, cost: RuleCost, job: Job) -> None:
    """Every image of the split (and its flip when the runs flip) through the VAE's encoder, once;
    disk: float16 mean and std per encoded image."""
    flips = 2 if ((c.plan.study.get("base") or {}).get("data") or {}).get("hflip") else 1
    n = c.plan.split_size(job.wildcards["split"]) * flips
    cost.notes.append(f"sd-vae-ft-ema encoder, {c.vae.encoder / 1e9:.1f} GFLOP per image"
                      + (" and per flip" if flips == 2 else ""))
    cost.add(job.name, Work(f"sd-vae-encoder@{c.res}x{c.res}x3", c.vae.encoder, n, "forward", step="sample"))
    lat, ch = c.vae.latent
    cost.disk_bytes += n * 2 * lat * lat * ch * 2


def _train(c: _Counter, cost: RuleCost, job: Job) -> None:
    rid = _run(job)
    cfg, net = c.cfg(rid), c.net(rid)
    images = trained_images(cfg)
    cost.images_trained += images
    cost.evaluations += images
    precision = None if cfg.train.precision == "auto" else cfg.train.precision
    cost.add(job.name, Work(net.key, net.train, images, "train", precision, step="train",
                            steps=images // cfg.train.batch_size))
    cost.disk_bytes += net.params * 4 * (2 + 4 + snapshot_count(cfg))


def _train_features(c: _Counter, cost: RuleCost, job: Job) -> None:
    extractor = c.plan.evaluation["extractor"]
    net = FEATURE_NETS[extractor]
    n_train = net.epochs * c.plan.split_size(c.plan.study["data"]["train_split"])
    cost.notes.append(f"{extractor}: {net.epochs} epochs of the train split, on a CPU")
    cost.add(job.name, Work(extractor, extractor_flops(extractor, train=True), n_train, "train", "fp32",
                            step="features"))


def _reference_stats(c: _Counter, cost: RuleCost, job: Job) -> None:
    ev = c.plan.evaluation
    n_ref = c.plan.split_size(c.plan.study["data"]["train_split"])
    n_ref = min(n_ref, ev["reference_max_images"] or n_ref)
    c.features(cost, job.name, n_ref, c.tools())
    dim = FEATURE_DIMS.get(ev["extractor"], 2048)
    cost.disk_bytes += c.tools() * (dim * dim * 8 + n_ref * dim * 4)


def _floor(c: _Counter, cost: RuleCost, job: Job) -> None:
    test_split = c.plan.study["data"].get("test_split") or "test"
    cost.notes.append("200 bootstrap Fréchet distances per tool (CPU)")
    c.features(cost, job.name, min(c.plan.split_size(test_split), fid_sample_count(c.plan.evaluation)), c.tools())


def _sample_score(c: _Counter, cost: RuleCost, job: Job) -> None:
    rid, n = _run(job), fid_sample_count(c.plan.evaluation)
    c.sampling(cost, job.name, rid, n, keep=True)
    c.features(cost, job.name, n, c.tools(rid))


def _evaluate_progress(c: _Counter, cost: RuleCost, job: Job) -> None:
    rid, n = _run(job), fid_sample_count(c.plan.evaluation, progress=True)
    points = snapshot_count(c.cfg(rid))
    c.sampling(cost, job.name, rid, points * n, keep=False)
    c.features(cost, job.name, points * n, c.tools(rid))


def _profile_losses(c: _Counter, cost: RuleCost, job: Job) -> None:
    c.profile(cost, job, _run(job))


def _profile_predictions(c: _Counter, cost: RuleCost, job: Job) -> None:
    for rid in job.runs:  # one model per prediction type, as the job reads them
        c.profile(cost, job, rid)


def _contribution(c: _Counter, cost: RuleCost, job: Job) -> None:
    labels = list(contribution_ranges(c.plan.study))
    n = contribution_sample_count(c.plan.study)
    evals = c.plan.contribution_evaluations()
    # the reference it samples (a pretrained one is read from its own folder, not results/: no run path)
    rid = job.runs[0] if job.runs else "reference"
    net = c.net(rid)
    cost.images_sampled += n * len(labels)
    cost.evaluations += n * evals
    cost.add(job.name, Work(net.key, net.forward, n * evals, "forward", step="sample"))
    cost.disk_bytes += n * len(labels) * c.img_bytes
    c.features(cost, job.name, 2 * n * len(labels), c.tools(rid))  # scoring and the bootstrap's features
    cost.notes.append(f"{len(labels)} arms forked from one {len(c.plan.contribution_chain())}-step chain: "
                      f"{evals} network evaluations per sample")


def _consistency(c: _Counter, cost: RuleCost, job: Job) -> None:
    extractor = c.plan.evaluation["extractor"]
    cost.notes.append("distances between stored samples (CPU)")
    n_pairs = math.comb(len(job.runs), 2)
    if n_pairs and extractor == "digits-cnn":
        cost.add(job.name, Work(extractor, extractor_flops(extractor),
                                n_pairs * 2 * fid_sample_count(c.plan.evaluation), "forward", "fp32", step="features"))


#: rule -> (its cost model per job, whether it asks for a GPU on a cuda study: train_resources /
#: gpu_resources in common.smk). A rule not here counts its jobs only (bookkeeping, reports).
KINDS: dict[str, tuple[Callable[[_Counter, RuleCost, Job], None] | None, bool]] = {
    "prepare_data": (_prepare_data, False),
    "encode_latents": (_encode_latents, True),
    "train": (_train, True),
    "train_features": (_train_features, False),
    "reference_stats": (_reference_stats, True),
    "floor": (_floor, True),
    "sample_score": (_sample_score, True),
    "evaluate_progress": (_evaluate_progress, True),
    "profile_losses": (_profile_losses, True),
    "profile_predictions": (_profile_predictions, True),
    "contribution": (_contribution, True),
    "consistency": (_consistency, False),
}


def rule_costs(plan: Plan) -> list[RuleCost]:
    """One :class:`RuleCost` per rule of the study's DAG (Snakemake's order), each job named as
    its benchmark file is (``results/<study>/benchmarks/<rule>/<job>.tsv``; the rule's own name
    for a job without one, such as ``all``)."""
    c = _Counter(plan)
    out: list[RuleCost] = []
    for rule in plan.rules():
        model, gpu = KINDS.get(rule, (None, False))
        jobs = plan.rule_jobs(rule)
        cost = RuleCost(rule, len(jobs), gpu, job_work={j.name: [] for j in jobs})
        for job in jobs:
            if model is not None:
                model(c, cost, job)
        cost.notes = list(dict.fromkeys(cost.notes))
        out.append(cost)
    if c.notes:
        next(r for r in out if r.rule == "train").notes += sorted(c.notes)
    return out
