"""One optimizer step: :class:`TrainStep` (built from a run config by :func:`build_train_step`).

Per optimizer step (global batch B = batch_gpu * rounds * world_size)::

    idx            = stream.next(B)                       # shuffled epochs, resumable
    x0             = loader.batch(idx)                    # [B, C, H, W] in [-1, 1]
    t, w_is        = sampler.sample(B, gen.t, x0)         # timesteps, importance weights
    eps            ~ N(0, I)                              # from gen.noise
    x_t            = process.q_sample(x0, t, eps)         # Gaussian or rectified flow (diffusion.kind)
    y              = drop_labels(labels[idx], p, null)    # class-conditional networks only, from gen.labels
    l_i            = prediction.loss(f(x_t, t[, y]), ...) # per-sample, unweighted
    L              = mean_i( w_is_i * w(t_i) * l_i )      # w: loss weighting table [T]
    grad step (clip), EMA update, sampler update(t, l)

Paired runs (common random numbers, docs/methods.md §9.1): the data order (``IndexStream``,
seeded by ``train.seed``), the flips, the timesteps and the noise come from separate streams
derived from ``train.seed`` (:class:`StepGenerators`; a class-conditional network's label dropout
has its own stream too), and the network is initialised from
``train.seed`` before anything else draws. So for one seed every arm of a group starts from the
same weights and sees the same images, flips and noise ``eps`` at every step; only ``t`` (and
what the arm's sampler does with it) differs, however many numbers the sampler draws.

Every rank draws the *global* batch (indices, flips, t, noise) from the same generators and
keeps its own shard, so N processes compute exactly the loss of one process on the same
global batch. :func:`timestep_lab.train.train` drives this very object, so benchmarks time the
real step. The config is taken as checked (the CLI and the study DAG build check it where it
enters). Must not know files, resuming or logging.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from timestep_lab.components import (
    build_conditioning,
    build_diffusion,
    build_model,
    build_prediction,
    build_sampler,
    build_weighting,
)
from timestep_lab.config import RunConfig
from timestep_lab.data import IndexStream, Loader, PreparedData
from timestep_lab.distributed import World, resolve_device
from timestep_lab.latents import LatentData, LatentLoader, open_training_data
from timestep_lab.models.conditioning import NONE, Conditioning
from timestep_lab.models.dit import drop_labels
from timestep_lab.optim import EMA, make_optimizer, make_schedule
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import Prediction
from timestep_lab.train.classes import class_conditioning
from timestep_lab.train.monitor import Accumulators, NonFiniteGuard, bin_of

__all__ = ["StepGenerators", "StepOutput", "TrainStep", "build_train_step"]

log = logging.getLogger(__name__)


def _loss_fn(model: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, autocast: Callable,
             conditioning: Conditioning = NONE):
    """``f(x0, t, noise[, y]) -> LossOutput`` for one micro-batch; the network sees
    ``conditioning.network_input(x_t, conditioning.condition(x0))`` (``x_t`` itself for ``none``)
    and, for a class-conditional network, ``y [B]``: the class labels after label dropout."""

    def fn(x0: Tensor, t: Tensor, noise: Tensor, y: Tensor | None = None):
        x_t = diffusion.q_sample(x0, t, noise)
        with autocast():
            inp = conditioning.network_input(x_t, conditioning.condition(x0))
            out = model(inp, t) if y is None else model(inp, t, y)
        return prediction.loss(out, x0, noise, x_t, t, diffusion)

    return fn


def _vlb_fn(model: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, autocast: Callable,
            conditioning: Conditioning = NONE):
    """``f(x0, t, noise) -> [B]`` VLB term in bits/dim with the current weights, no gradient,
    dropout off (used by loss-aware samplers)."""

    @torch.no_grad()
    def fn(x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        was_training = model.training
        model.eval()
        try:
            x_t = diffusion.q_sample(x0, t, noise)
            with autocast():
                out = model(conditioning.network_input(x_t, conditioning.condition(x0)), t)
            x0_hat, _ = prediction.estimates(out, x_t, t, diffusion)
            # as the adaptive sampler's official code: the x0 estimate unclipped and the KL term
            # at t = 0 (docs/methods.md §1.4); clipping shrinks the terms at large t up to 100x
            return diffusion.vlb_terms(x0, x_t, t, x0_hat, t0_term="kl")
        finally:
            model.train(was_training)

    return fn


def _compile(model: nn.Module, enabled: bool) -> nn.Module:
    """``torch.compile(model)`` when ``enabled``; the eager ``model`` (with a warning) if that raises.

    Most backend failures only show at the first call (compilation is lazy):
    :meth:`TrainStep._forward_backward` guards the first step for those."""
    if not enabled:
        return model
    try:
        return torch.compile(model)
    except Exception as exc:  # noqa: BLE001 - any backend failure falls back to eager
        log.warning("torch.compile failed (%s); training eagerly", exc)
        return model


class StepGenerators:
    """The step's random streams, each a ``torch.Generator`` on the device derived from the run seed:
    ``data`` (horizontal flips; the order of images is :class:`IndexStream`'s), ``t`` (the timestep
    sampler), ``noise`` (``eps`` of ``q_sample``) and ``labels`` (the label dropout of a
    class-conditional network; never drawn from for an unconditional one).

    One stream per purpose makes runs *paired*: an arm whose sampler draws more or fewer numbers
    than uniform's (a Beta sampler draws 16 per sample, inverse-CDF 1) shifts only its own ``t``
    stream, never the noise or flips. ``get_state``/``set_state`` save and restore all three
    (the resume checkpoint's ``generator`` field: ``{"data", "t", "noise", "labels"}`` byte
    tensors; a state saved before the ``labels`` stream existed, by an unconditional run that never
    draws from it, restores the other three).
    """

    STREAMS = ("data", "t", "noise", "labels")

    def __init__(self, seed: int, device: torch.device | str = "cpu") -> None:
        # offsets keep the streams apart from each other and from the network initialisation
        # (torch.manual_seed(seed)); seed + 1 is the data stream, as the single generator was
        self.data, self.t, self.noise, self.labels = (torch.Generator(device=device).manual_seed(int(seed) + k)
                                                      for k in (1, 2, 3, 4))

    def get_state(self) -> dict[str, Tensor]:
        return {k: getattr(self, k).get_state() for k in self.STREAMS}

    def set_state(self, state: dict[str, Tensor]) -> None:
        if not isinstance(state, dict) or not set(self.STREAMS[:3]) <= set(state) <= set(self.STREAMS):
            raise ValueError("the checkpoint holds one generator state, from before paired runs (separate data, t "
                             "and noise streams): delete its train_state/ folder and train the run again")
        for k in self.STREAMS:
            if k in state:
                getattr(self, k).set_state(state[k])


@dataclass
class StepOutput:
    """What one optimizer step returns (device tensors: reading them is the caller's sync).

    ``t [B_local]`` the timesteps, ``loss_raw [B_local]`` the per-sample unweighted losses,
    ``loss`` the float64 scalar objective ``sum_i(w_is_i w(t_i) l_i) / B_local`` that was
    back-propagated (the value train_log.jsonl reports for an interval of one step)."""

    t: Tensor
    loss_raw: Tensor
    loss: Tensor


@dataclass(eq=False)
class TrainStep:
    """Every object one optimizer step touches, built once by :func:`build_train_step`;
    :meth:`step` runs one step. :func:`timestep_lab.train.train` drives exactly this object
    (and only adds logging, checkpoints, snapshots and the final files around it), so a
    benchmark that calls :meth:`step` times the real training step, not a copy of it.

    ``nimg`` (images seen) and ``steps_done`` (optimizer steps) count what :meth:`step` did;
    ``lr`` and ``beta1`` are the values its last call set into the optimizer (the schedule's at
    that ``nimg``; before the first call, at 0 images): the training step owns the learning
    rate, and the loop logs these without asking the schedule again.
    """

    cfg: RunConfig
    world: World
    device: torch.device
    data: PreparedData | LatentData
    loader: Loader | LatentLoader
    diffusion: GaussianDiffusion
    prediction: Prediction
    net: nn.Module
    ddp: nn.parallel.DistributedDataParallel | None
    fwd: nn.Module  # what the loss calls: net or its DDP wrapper, possibly torch.compile'd
    sampler: Any  # TimestepSampler
    weight_table: Tensor  # [T] loss weighting w(t) on the device
    optimizer: torch.optim.Optimizer
    schedule: Any  # OptimSchedule
    ema: EMA
    stream: IndexStream
    gen: StepGenerators  # flips, t, noise, label dropout: separate streams (on the device)
    acc: Accumulators
    guard: NonFiniteGuard
    batch_gpu: int
    rounds: int
    shard: slice
    channels_last: bool
    autocast: Callable[[], Any]
    vlb_fn: Callable
    loss_fn: Callable
    check_compile: bool = False  # fwd is compiled and its first call has not succeeded yet
    labels: Tensor | None = None  # long [N] on the host: the data's classes, for a class-conditional network only
    num_classes: int = 0  # the network's classes (0: unconditional); the null class is num_classes
    class_dropout: float = 0.0  # probability that a label becomes the null class (classifier-free guidance)
    nimg: int = 0
    steps_done: int = 0
    lr: float = 0.0
    beta1: float = 0.0

    def step(self) -> StepOutput:
        """One optimizer step on the global batch (see the module docstring for the equations).

        Sampler draw, ``q_sample``, forward, weighted loss, backward (over ``rounds``
        micro-batches), gradient clipping, optimizer step, EMA update, sampler update, and the
        per-interval sums on the device. Nothing here reads a device tensor on the host, so on
        a GPU the host queues step k+1 while step k runs."""
        B = self.cfg.train.batch_size
        self.lr, self.beta1 = self.schedule.apply(self.optimizer, self.nimg)

        # Draw the global batch; keep this rank's shard.
        idx = self.stream.next(B)
        x0_all = self.loader.batch(idx, self.gen.data)
        t_all, w_all = self.sampler.sample(B, self.gen.t, x0=x0_all)
        noise_all = torch.randn(x0_all.shape, generator=self.gen.noise, device=self.device)
        y = None
        if self.labels is not None:
            y_all = drop_labels(self.labels.index_select(0, idx.to("cpu", torch.long)).to(self.device),
                                self.class_dropout, self.num_classes, self.gen.labels)
            y = y_all[self.shard]
        if self.channels_last:
            x0_all, noise_all = (z.contiguous(memory_format=torch.channels_last) for z in (x0_all, noise_all))
        context = dict(step=self.steps_done, nimg=self.nimg, x0=x0_all, vlb_fn=self.vlb_fn, gather=self.world.gather,
                       world_size=self.world.size, shard=self.shard)
        self.sampler.before_update(**context)
        x0, t, w_is, noise = x0_all[self.shard], t_all[self.shard], w_all[self.shard], noise_all[self.shard]

        # Forward/backward over micro-batches (gradient accumulation).
        loss_raw, weighted_sums, heads = self._forward_backward(x0, t, w_is, noise, y)

        # Optimizer step, EMA, sampler update.
        if self.cfg.optim.grad_clip is not None:
            self.acc.grad_norm += nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.optim.grad_clip,
                                                           foreach=True).double()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.nimg += B
        self.steps_done += 1
        self.ema.update(self.net, B, self.nimg)
        self.sampler.update(t, loss_raw, **{**context, "step": self.steps_done, "nimg": self.nimg})

        # Bookkeeping on the device; train() reads it back once per log interval.
        T = self.diffusion.T
        for r, (s, head) in enumerate(zip(weighted_sums, heads)):
            self.acc.loss += s
            if head is not None:
                mb = slice(r * self.batch_gpu, (r + 1) * self.batch_gpu)
                self.acc.heads.index_put_((head, bin_of(t[mb], T)), torch.ones_like(head, dtype=torch.float64),
                                          accumulate=True)
        self.acc.loss_raw += loss_raw.sum().double()
        b = bin_of(t, T)
        self.acc.bin_sum.index_add_(0, b, loss_raw.double())
        self.acc.bin_count.index_add_(0, b, torch.ones_like(loss_raw, dtype=torch.float64))
        self.acc.steps += 1
        self.guard.observe(self.steps_done - 1, t, loss_raw)
        # float64, summed in the order train()'s log sums it: the logged loss of a one-step interval equals it bitwise
        return StepOutput(t, loss_raw, torch.stack(weighted_sums).double().sum() / (self.batch_gpu * self.rounds))

    def _micro_batches(self, x0: Tensor, t: Tensor, w_is: Tensor, noise: Tensor, y: Tensor | None = None
                       ) -> tuple[Tensor, list[Tensor], list[Tensor | None]]:
        """Forward and backward of each micro-batch; gradients are summed into ``.grad``.

        Returns the raw per-sample losses ``[B_local]``, each micro-batch's weighted-loss sum and
        its mixed-prediction winning heads (None for single-head types)."""
        n = self.batch_gpu * self.rounds
        losses_raw, weighted_sums, heads = [], [], []
        for r in range(self.rounds):
            mb = slice(r * self.batch_gpu, (r + 1) * self.batch_gpu)
            sync = self.ddp is None or r == self.rounds - 1  # DDP all-reduces only after the last one
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                out = (self.loss_fn(x0[mb], t[mb], noise[mb]) if y is None
                       else self.loss_fn(x0[mb], t[mb], noise[mb], y[mb]))
                weighted = out.loss * w_is[mb] * self.weight_table[t[mb]]
                (weighted.sum() / n).backward()
            losses_raw.append(out.loss.detach())
            weighted_sums.append(weighted.detach().sum())
            heads.append(out.head)
        return torch.cat(losses_raw), weighted_sums, heads

    def _forward_backward(self, x0: Tensor, t: Tensor, w_is: Tensor, noise: Tensor, y: Tensor | None = None):
        """:meth:`_micro_batches`, falling back to eager mode if the compiled network fails.

        ``torch.compile`` compiles lazily: a backend that cannot build a kernel (no compiler,
        an unsupported op) raises at the first forward or backward, not at ``torch.compile``.
        The first step is therefore guarded: on failure the partial gradients are dropped, the
        global RNG (dropout) is rewound, and the same micro-batches are redone with the eager
        network, so the run continues exactly as an eager run would have."""
        if not self.check_compile:
            return self._micro_batches(x0, t, w_is, noise, y)
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        try:
            result = self._micro_batches(x0, t, w_is, noise, y)
        except Exception as exc:  # noqa: BLE001 - any backend failure falls back to eager
            log.warning("torch.compile failed at the first training step (%s: %s); training eagerly",
                        type(exc).__name__, (str(exc).strip().splitlines() or [""])[0][:500])
            self.optimizer.zero_grad(set_to_none=True)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)
            self.fwd = self.ddp or self.net
            self.loss_fn = _loss_fn(self.fwd, self.diffusion, self.prediction, self.autocast)
            result = self._micro_batches(x0, t, w_is, noise, y)
        self.check_compile = False
        return result


def build_train_step(cfg: RunConfig, *, world: World = World()) -> TrainStep:
    """Build the objects of one training run from ``cfg`` (fresh: no resume) and return them
    with their :meth:`TrainStep.step`.

    GPU path (``train.device`` cuda): bf16 autocast (``train.precision`` auto/bf16),
    channels_last weights and inputs, fused Adam/AdamW (``optim.fused`` None), cuDNN autotuning,
    ``torch.compile`` when ``train.compile`` (eager fallback if it fails, at once or at the first
    step), the uint8 data set in host memory, gathered per batch into preallocated pinned
    staging buffers and copied non-blocking, the uint8 -> float conversion and flips on the
    device (:class:`~timestep_lab.data.Loader`), EMA with foreach ops, no host-device sync.

    :raises ValueError: when ``batch_size`` is not ``batch_gpu x rounds x world_size``.
    """
    tc = cfg.train
    device = resolve_device(tc.device, world)
    use_bf16 = tc.precision == "bf16" or (tc.precision == "auto" and device.type == "cuda")
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if use_bf16 else contextlib.nullcontext
    channels_last = device.type == "cuda" if tc.channels_last is None else tc.channels_last
    if device.type == "cuda":
        # every step has the same shapes: let cuDNN time its convolution algorithms once and keep the fastest
        torch.backends.cudnn.benchmark = True

    # Batch accounting: batch_size == batch_gpu * rounds * world_size.
    batch_gpu = tc.batch_gpu or tc.batch_size // world.size
    rounds = tc.batch_size // (batch_gpu * world.size)
    if batch_gpu * rounds * world.size != tc.batch_size:
        raise ValueError(f"train.batch_size={tc.batch_size} is not batch_gpu={batch_gpu} x rounds x world_size={world.size}")

    # Data (image or latent folder: fresh posterior samples per read), process, network, research choices.
    data, loader = open_training_data(cfg.data.path, device, cfg.data.hflip)
    diffusion = build_diffusion(cfg)
    prediction = build_prediction(cfg)
    torch.manual_seed(tc.seed)  # network initialisation only; all later randomness uses explicit generators
    net = build_model(cfg, data.resolution, data.channels).to(device)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    sampler = build_sampler(cfg, diffusion.alpha_bar, device)
    weight_table = build_weighting(cfg, diffusion).weights().to(device)
    schedule = make_schedule(cfg.optim)
    optimizer = make_optimizer(net.parameters(), cfg.optim, device, schedule)
    ema = EMA(net, tc.ema_halflife_kimg, tc.ema_rampup_ratio)
    stream = IndexStream(len(data), seed=tc.seed)
    gen = StepGenerators(tc.seed, device)  # flips, t, noise, label dropout: one stream each (paired arms)
    classes = class_conditioning(cfg, data, net)  # labels, num_classes, class_dropout
    cond = build_conditioning(cfg)  # what the network sees beside x_t (none: x_t alone)

    ddp = None
    if world.distributed:
        ddp = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    eager = ddp or net
    fwd = _compile(eager, tc.compile)
    lr, beta1 = schedule.values(0)
    return TrainStep(
        cfg=cfg, world=world, device=device, data=data, loader=loader, diffusion=diffusion, prediction=prediction,
        net=net, ddp=ddp, fwd=fwd, sampler=sampler, weight_table=weight_table, optimizer=optimizer,
        schedule=schedule, ema=ema, stream=stream, gen=gen, acc=Accumulators(device),
        guard=NonFiniteGuard(device, batch_gpu * rounds), batch_gpu=batch_gpu, rounds=rounds,
        shard=world.shard(tc.batch_size), channels_last=channels_last, autocast=autocast,
        vlb_fn=_vlb_fn(net, diffusion, prediction, autocast, cond), loss_fn=_loss_fn(fwd, diffusion, prediction, autocast, cond),
        check_compile=fwd is not eager, lr=lr, beta1=beta1, **classes)
