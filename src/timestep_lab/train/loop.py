"""The training loop: ``train(cfg, out_dir)``.

The loop only wires together objects built from the config (network, diffusion process,
prediction type, timestep sampler, loss weighting, optimizer and its schedule, EMA). Length,
warm-up, EMA half-life, logging, checkpoints and snapshots are all counted in images seen.

Per optimizer step (global batch B = batch_gpu * rounds * world_size)::

    idx            = stream.next(B)                       # shuffled epochs, resumable
    x0             = loader.batch(idx)                    # [B, C, H, W] in [-1, 1]
    t, w_is        = sampler.sample(B, gen, x0)           # timesteps, importance weights
    eps            ~ N(0, I)
    x_t            = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps
    l_i            = prediction.loss(f(x_t, t), ...)      # per-sample, unweighted
    L              = mean_i( w_is_i * w(t_i) * l_i )      # w: loss weighting table [T]
    grad step (clip), EMA update, sampler.update(t, l)

Every rank draws the *global* batch (indices, flips, t, noise) from the same generators and
keeps its own shard, so N processes compute exactly the loss of one process on the same
global batch. Rank 0 writes all files.

Files under ``out_dir``::

    config.yaml                     resolved config (written first)
    train_state/checkpoint.pt       latest full training state (resume point)
    train_state/train_log.jsonl     log so far
    train_state/snapshots/          EMA weights every ``snapshot_every_kimg``: snapshot-{nimg:09d}.pt
    model.pt                        final weights + metadata   } written when training ends,
    train_log.jsonl                 the complete log             } never half-written
    snapshots/                      the snapshots (hard links)  }

The per-step work is :meth:`TrainStep.step` (built by :func:`build_train_step`); ``train`` runs
that same object and adds resuming, logging, checkpoints and snapshots, so benchmarks time the
real step.

A killed run resumes from ``train_state/checkpoint.pt`` and, on CPU, ends with bit-identical
weights to an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from timestep_lab.artifacts import CHECKPOINT_FORMAT, MODEL_FORMAT, SNAPSHOT_FORMAT
from timestep_lab.components import (
    build_diffusion, build_model, build_prediction, build_sampler, build_weighting, check_config,
)
from timestep_lab.config import RunConfig, config_to_dict, dump_config
from timestep_lab.data import IndexStream, Loader, PreparedData, to_float
from timestep_lab.diffusion import GaussianDiffusion
from timestep_lab.distributed import World
from timestep_lab.io import ArtifactError, atomic_path, atomic_write_text, load_torch, save_torch
from timestep_lab.optim import EMA, make_optimizer, make_schedule
from timestep_lab.predictions import HEADS, MixedPrediction, Prediction

__all__ = ["train", "build_train_step", "TrainStep", "StepOutput", "snapshot_name", "TrainResult", "NonFiniteLossError",
           "RunPaths", "resolve_device", "LOG_BINS"]

log = logging.getLogger(__name__)

LOG_BINS = 10
# config keys that may change between a checkpoint and its resumption
RESUMABLE_CHANGES = ("train.total_kimg", "train.log_every_kimg", "train.checkpoint_every_kimg",
                     "train.snapshot_every_kimg", "train.device", "train.compile", "train.on_nonfinite",
                     "sample", "eval", "data.path")


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the timesteps."""


@dataclass(frozen=True)
class RunPaths:
    out: Path

    @property
    def config(self) -> Path: return self.out / "config.yaml"
    @property
    def state(self) -> Path: return self.out / "train_state"
    @property
    def checkpoint(self) -> Path: return self.state / "checkpoint.pt"
    @property
    def state_log(self) -> Path: return self.state / "train_log.jsonl"
    @property
    def state_snapshots(self) -> Path: return self.state / "snapshots"
    @property
    def model(self) -> Path: return self.out / "model.pt"
    @property
    def log(self) -> Path: return self.out / "train_log.jsonl"
    @property
    def snapshots(self) -> Path: return self.out / "snapshots"


@dataclass
class TrainResult:
    out_dir: Path
    model_path: Path
    status: str  # "ok" | "diverged"
    nimg: int
    step: int
    final_loss: float | None
    wall_time_s: float
    message: str = ""


def resolve_device(name: str, world: World = World()) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"train.device={name} but CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", world.local_rank)
    return device


# --------------------------------------------------------------------------------------- state


@dataclass
class _Accumulators:
    """Per-log-interval sums kept on the device (read once per interval: no per-step sync)."""

    device: torch.device
    loss: Tensor = field(init=False)
    loss_raw: Tensor = field(init=False)
    bin_sum: Tensor = field(init=False)
    bin_count: Tensor = field(init=False)
    grad_norm: Tensor = field(init=False)
    heads: Tensor = field(init=False)
    steps: int = 0
    wall: float = 0.0

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        z = lambda *s: torch.zeros(*s, dtype=torch.float64, device=self.device)  # noqa: E731
        self.loss, self.loss_raw, self.grad_norm = z(()), z(()), z(())
        self.bin_sum, self.bin_count, self.heads = z(LOG_BINS), z(LOG_BINS), z(len(HEADS), LOG_BINS)
        self.steps = 0
        self.wall = 0.0

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("loss", "loss_raw", "bin_sum", "bin_count", "grad_norm", "heads",
                                              "steps", "wall")}

    def load_state_dict(self, s: dict) -> None:
        for k, v in s.items():
            setattr(self, k, v.to(self.device) if isinstance(v, Tensor) else v)


class _NonFiniteGuard:
    """Remembers, on the device, the first step whose loss was not finite and its timesteps."""

    def __init__(self, device: torch.device, batch: int):
        self.first_step = torch.full((), -1, dtype=torch.long, device=device)
        self.t = torch.full((batch,), -1, dtype=torch.long, device=device)
        self.bad = torch.zeros(batch, dtype=torch.bool, device=device)

    def observe(self, step: int, t: Tensor, losses: Tensor) -> None:
        bad = ~torch.isfinite(losses)
        new = bad.any() & (self.first_step < 0)
        # masked_fill passes ``step`` to the kernel as a scalar argument; torch.as_tensor(step, device=...)
        # would be a pageable host-to-device copy, which on CUDA waits for the queued work every step
        self.first_step = self.first_step.masked_fill(new, step)
        self.t = torch.where(new, t, self.t)
        self.bad = torch.where(new, bad, self.bad)

    def message(self, world: World | None = None) -> str | None:
        """The first bad step, or None. With ``world`` (a collective: call it on every rank at
        the same point) a bad loss on any rank is reported on all of them."""
        step = int(self.first_step)
        if world is not None and world.distributed:
            worst = world.all_reduce_max(self.first_step.clone().view(1).float())
            if step < 0 and worst.item() >= 0:
                return f"non-finite loss on another rank at optimizer step {int(worst.item())}"
        if step < 0:
            return None
        ts = sorted(set(int(x) for x in self.t[self.bad].tolist()))
        shown = ", ".join(map(str, ts[:20])) + (" ..." if len(ts) > 20 else "")
        return f"non-finite loss at optimizer step {step} (timesteps {shown})"


# --------------------------------------------------------------------------------------- helpers


def _bin_of(t: Tensor, T: int) -> Tensor:
    return (t * LOG_BINS) // T


def _loss_fn(model: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, autocast: Callable):
    """``f(x0, t, noise) -> LossOutput`` for one micro-batch."""

    def fn(x0: Tensor, t: Tensor, noise: Tensor):
        x_t = diffusion.q_sample(x0, t, noise)
        with autocast():
            out = model(x_t, t)
        return prediction.loss(out, x0, noise, x_t, t, diffusion)

    return fn


def _vlb_fn(model: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, autocast: Callable):
    """``f(x0, t, noise) -> [B]`` VLB term in bits/dim with the current weights, no gradient,
    dropout off (used by loss-aware samplers)."""

    @torch.no_grad()
    def fn(x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        was_training = model.training
        model.eval()
        try:
            x_t = diffusion.q_sample(x0, t, noise)
            with autocast():
                out = model(x_t, t)
            x0_hat, _ = prediction.estimates(out, x_t, t, diffusion)
            return diffusion.vlb_terms(x0, x_t, t, x0_hat.clamp(-1, 1))
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


def _config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        key = f"{prefix}{k}"
        if isinstance(va, dict) and isinstance(vb, dict):
            keys += _config_diff(va, vb, key + ".")
        elif va != vb:
            keys.append(key)
    return keys


def _resumable(keys: list[str]) -> list[str]:
    return [k for k in keys if not any(k == r or k.startswith(r + ".") for r in RESUMABLE_CHANGES)]


def _ema_state_dict(model: nn.Module, ema: EMA) -> dict[str, Tensor]:
    sd = {n: p.detach().cpu().clone() for (n, _), p in zip(model.named_parameters(), ema.params)}
    sd.update({n: b.detach().cpu().clone() for (n, _), b in zip(model.named_buffers(), ema.buffers)})
    return sd


@torch.no_grad()
def _mixed_head_profile(model: nn.Module, diffusion: GaussianDiffusion, prediction: MixedPrediction,
                        loader: Loader, device: torch.device, n_images: int = 256, stride: int | None = None,
                        seed: int = 12345) -> tuple[Tensor, Tensor]:
    """Per-t mean x0 error of each head on a fixed bank: ``(errors [3, T], head_per_t [T])``.

    Timesteps are evaluated with ``stride`` (default: about 100 points) and filled in between
    by nearest neighbour."""
    T = diffusion.T
    stride = stride or max(1, T // 100)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randperm(len(loader), generator=gen)[:n_images]
    x0 = to_float(loader.images[idx]).to(device)
    noise = torch.randn(x0.shape, generator=gen).to(device)
    ts = torch.arange(0, T, stride)
    errors = torch.zeros(len(HEADS), len(ts), dtype=torch.float64)
    model.eval()
    for j, tv in enumerate(ts.tolist()):
        t = torch.full((x0.shape[0],), tv, dtype=torch.long, device=device)
        x_t = diffusion.q_sample(x0, t, noise)
        errors[:, j] = prediction.head_errors(model(x_t, t), x0, x_t, t, diffusion).mean(dim=1).double().cpu()
    nearest = torch.clamp(torch.round(torch.arange(T) / stride).long(), max=len(ts) - 1)
    full = errors[:, nearest]
    return full, full.argmin(dim=0)


def _init_weights(net: nn.Module, ema: EMA, path: str, use_ema: bool) -> None:
    """Fine-tuning: load trained weights into the network and the EMA.

    Accepts our ``model.pt``/snapshots (EMA or raw weights), openai guided-diffusion state dicts
    (same parameter names as our UNet; with learned sigma only the eps output channels are kept)
    and diffusers ``UNet2DModel`` folders (the one weight set of the folder; ``use_ema`` does not
    apply), which fit the ``diffusers_unet2d`` network (``write_run_config`` sets it up).
    """
    # A folder is a diffusers UNet2DModel: the only checkpoint format that is not a single file.
    # The diffusers_unet2d network already holds those weights when built from the same folder;
    # loading them again keeps one code path (and works when model.pretrained is another folder).
    is_diffusers = Path(path).is_dir()
    obj = None if is_diffusers else load_torch(path)
    if is_diffusers:
        from timestep_lab.models.pretrained import load_pretrained

        state = load_pretrained(path, "diffusers")[0].state_dict()  # keys unet.*, as DiffusersEps has them
    elif isinstance(obj, dict) and "format" in obj:
        key = "ema" if use_ema else "model"
        if key not in obj:
            raise ArtifactError(f"{path}: train.init_from has no '{key}' weights")
        state = obj[key]
    elif isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        state = {k: v.float() for k, v in obj.items()}  # a guided-diffusion release (possibly fp16)
        w, b = state.get("out.2.weight"), state.get("out.2.bias")
        out_w = net.state_dict().get("out.2.weight")
        if w is not None and out_w is not None and w.shape[0] == 2 * out_w.shape[0]:
            state["out.2.weight"], state["out.2.bias"] = w[: out_w.shape[0]], b[: out_w.shape[0]]
    else:
        raise ArtifactError(f"{path}: train.init_from must be a timestep_lab model.pt/snapshot, a guided-diffusion "
                            f"state dict or a diffusers UNet2DModel folder")
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        hint = ("; a diffusers folder needs model: {name: diffusers_unet2d, pretrained: <folder>, "
                "pretrained_format: diffusers}" if is_diffusers else "")
        raise ArtifactError(f"{path}: weights do not fit this run's network ({str(exc).splitlines()[0]}){hint}") from None
    with torch.no_grad():
        for e, p in zip(ema.params, net.parameters()):
            e.copy_(p)
        for e, b in zip(ema.buffers, net.buffers()):
            e.copy_(b)


def _publish(paths: RunPaths) -> None:
    """Copy the finished log and snapshots next to model.pt (hard links where possible). The log
    always exists afterwards (empty when a run diverged before its first log interval), so a
    consumer never has to tell "not logged yet" from "not finished"."""
    with atomic_path(paths.log) as tmp:
        if paths.state_log.exists():
            shutil.copyfile(paths.state_log, tmp)
    paths.snapshots.mkdir(parents=True, exist_ok=True)
    if paths.state_snapshots.exists():
        for snap in sorted(paths.state_snapshots.glob("*.pt")):
            dst = paths.snapshots / snap.name
            if dst.exists():
                continue
            try:
                os.link(snap, dst)
            except OSError:
                with atomic_path(dst) as tmp:
                    shutil.copyfile(snap, tmp)


# --------------------------------------------------------------------------------------- the step


def snapshot_name(nimg: int) -> str:
    """File name of the EMA snapshot taken after ``nimg`` images: ``snapshot-{nimg:09d}.pt``.

    Named by images seen (not kimg), so snapshots spaced less than 1 kimg apart (small CI
    configs use 0.5 kimg) never collide; zero-padded so names sort in training order. Readers
    take ``nimg`` from the snapshot's metadata, never from the name."""
    return f"snapshot-{int(nimg):09d}.pt"


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
    :meth:`step` runs one step. :func:`train` drives exactly this object (and only adds logging,
    checkpoints, snapshots and the final files around it), so a benchmark that calls
    :meth:`step` times the real training step, not a copy of it.

    ``nimg`` (images seen) and ``steps_done`` (optimizer steps) count what :meth:`step` did;
    ``lr`` and ``beta1`` are the values its last call used.
    """

    cfg: RunConfig
    world: World
    device: torch.device
    data: PreparedData
    loader: Loader
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
    gen: torch.Generator  # flips, t, noise (on the device)
    acc: _Accumulators
    guard: _NonFiniteGuard
    batch_gpu: int
    rounds: int
    shard: slice
    channels_last: bool
    autocast: Callable[[], Any]
    vlb_fn: Callable
    loss_fn: Callable
    check_compile: bool = False  # fwd is compiled and its first call has not succeeded yet
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
        x0_all = self.loader.batch(idx, self.gen)
        t_all, w_all = self.sampler.sample(B, self.gen, x0=x0_all)
        noise_all = torch.randn(x0_all.shape, generator=self.gen, device=self.device)
        if self.channels_last:
            x0_all, noise_all = (z.contiguous(memory_format=torch.channels_last) for z in (x0_all, noise_all))
        context = dict(step=self.steps_done, nimg=self.nimg, x0=x0_all, vlb_fn=self.vlb_fn, gather=self.world.gather,
                       world_size=self.world.size, shard=self.shard)
        self.sampler.before_update(**context)
        x0, t, w_is, noise = x0_all[self.shard], t_all[self.shard], w_all[self.shard], noise_all[self.shard]

        # Forward/backward over micro-batches (gradient accumulation).
        loss_raw, weighted_sums, heads = self._forward_backward(x0, t, w_is, noise)

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
                self.acc.heads.index_put_((head, _bin_of(t[mb], T)), torch.ones_like(head, dtype=torch.float64),
                                          accumulate=True)
        self.acc.loss_raw += loss_raw.sum().double()
        b = _bin_of(t, T)
        self.acc.bin_sum.index_add_(0, b, loss_raw.double())
        self.acc.bin_count.index_add_(0, b, torch.ones_like(loss_raw, dtype=torch.float64))
        self.acc.steps += 1
        self.guard.observe(self.steps_done - 1, t, loss_raw)
        # float64, summed in the order train()'s log sums it: the logged loss of a one-step interval equals it bitwise
        return StepOutput(t, loss_raw, torch.stack(weighted_sums).double().sum() / (self.batch_gpu * self.rounds))

    def _micro_batches(self, x0: Tensor, t: Tensor, w_is: Tensor, noise: Tensor
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
                out = self.loss_fn(x0[mb], t[mb], noise[mb])
                weighted = out.loss * w_is[mb] * self.weight_table[t[mb]]
                (weighted.sum() / n).backward()
            losses_raw.append(out.loss.detach())
            weighted_sums.append(weighted.detach().sum())
            heads.append(out.head)
        return torch.cat(losses_raw), weighted_sums, heads

    def _forward_backward(self, x0: Tensor, t: Tensor, w_is: Tensor, noise: Tensor):
        """:meth:`_micro_batches`, falling back to eager mode if the compiled network fails.

        ``torch.compile`` compiles lazily: a backend that cannot build a kernel (no compiler,
        an unsupported op) raises at the first forward or backward, not at ``torch.compile``.
        The first step is therefore guarded: on failure the partial gradients are dropped, the
        global RNG (dropout) is rewound, and the same micro-batches are redone with the eager
        network, so the run continues exactly as an eager run would have."""
        if not self.check_compile:
            return self._micro_batches(x0, t, w_is, noise)
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        try:
            result = self._micro_batches(x0, t, w_is, noise)
        except Exception as exc:  # noqa: BLE001 - any backend failure falls back to eager
            log.warning("torch.compile failed at the first training step (%s: %s); training eagerly",
                        type(exc).__name__, (str(exc).strip().splitlines() or [""])[0][:500])
            self.optimizer.zero_grad(set_to_none=True)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)
            self.fwd = self.ddp or self.net
            self.loss_fn = _loss_fn(self.fwd, self.diffusion, self.prediction, self.autocast)
            result = self._micro_batches(x0, t, w_is, noise)
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
    check_config(cfg)
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

    # Data, process, network and the research choices, all from the config.
    data = PreparedData(cfg.data.path)
    loader = Loader(data, device, cfg.data.hflip)
    diffusion = build_diffusion(cfg)
    prediction = build_prediction(cfg)
    torch.manual_seed(tc.seed)  # network initialisation only; all later randomness uses explicit generators
    net = build_model(cfg, data.resolution, data.channels).to(device)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    sampler = build_sampler(cfg, diffusion.alpha_bar, device)
    weight_table = build_weighting(cfg, diffusion.alpha_bar).weights().to(device)
    optimizer = make_optimizer(net.parameters(), cfg.optim, device)
    schedule = make_schedule(cfg.optim)
    ema = EMA(net, tc.ema_halflife_kimg, tc.ema_rampup_ratio)
    stream = IndexStream(len(data), seed=tc.seed)
    gen = torch.Generator(device=device).manual_seed(tc.seed + 1)  # flips, t, noise

    ddp = None
    if world.distributed:
        ddp = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    eager = ddp or net
    fwd = _compile(eager, tc.compile)
    lr, beta1 = schedule.values(0)
    return TrainStep(
        cfg=cfg, world=world, device=device, data=data, loader=loader, diffusion=diffusion, prediction=prediction,
        net=net, ddp=ddp, fwd=fwd, sampler=sampler, weight_table=weight_table, optimizer=optimizer,
        schedule=schedule, ema=ema, stream=stream, gen=gen, acc=_Accumulators(device),
        guard=_NonFiniteGuard(device, batch_gpu * rounds), batch_gpu=batch_gpu, rounds=rounds,
        shard=world.shard(tc.batch_size), channels_last=channels_last, autocast=autocast,
        vlb_fn=_vlb_fn(net, diffusion, prediction, autocast), loss_fn=_loss_fn(fwd, diffusion, prediction, autocast),
        check_compile=fwd is not eager, lr=lr, beta1=beta1)


# --------------------------------------------------------------------------------------- train


def train(cfg: RunConfig, out_dir: str | Path, *, resume: bool = True, progress: bool = True,
          world: World = World(), stop_after_kimg: float | None = None) -> TrainResult:
    """Train the run described by ``cfg`` into ``out_dir`` (see the module docstring).

    The per-step work is :meth:`TrainStep.step` of :func:`build_train_step`; this function adds
    resuming, logging, checkpoints, snapshots and the final files.

    :param resume: continue from ``train_state/checkpoint.pt`` if present (else start over).
    :param stop_after_kimg: stop (with a checkpoint, without the final files) once this many
        kimg are done; for tests and time-limited jobs.
    :raises NonFiniteLossError: when the loss becomes NaN/inf and ``train.on_nonfinite`` is ``fail``.
    """
    paths = RunPaths(Path(out_dir))
    tc = cfg.train
    ts = build_train_step(cfg, world=world)
    device, data, loader, diffusion, prediction = ts.device, ts.data, ts.loader, ts.diffusion, ts.prediction
    net, sampler, optimizer, ema, stream, gen, acc, guard = (ts.net, ts.sampler, ts.optimizer, ts.ema, ts.stream,
                                                              ts.gen, ts.acc, ts.guard)
    wall_before = 0.0

    # Resume.
    if resume and paths.checkpoint.exists():
        ckpt = load_torch(paths.checkpoint, map_location="cpu")
        if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
            raise ArtifactError(f"{paths.checkpoint}: not a timestep_lab training checkpoint")
        changed = _resumable(_config_diff(ckpt["config"], config_to_dict(cfg)))
        if changed:
            raise ValueError(f"{paths.checkpoint}: was written with a different config ({', '.join(changed)}); "
                             f"use a new output folder or --no-resume to start over")
        net.load_state_dict(ckpt["model"])
        ema.load_state_dict(ckpt["ema"])
        optimizer.load_state_dict(ckpt["optimizer"])
        sampler.load_state_dict(ckpt["sampler"])
        stream.load_state_dict(ckpt["stream"])
        gen.set_state(ckpt["generator"])
        acc.load_state_dict(ckpt["acc"])
        ts.nimg, ts.steps_done, wall_before = int(ckpt["nimg"]), int(ckpt["step"]), float(ckpt["wall_time_s"])
        _truncate_log(paths.state_log, ts.nimg)
        log.info("resumed %s at %.1f kimg (step %d)", paths.out, ts.nimg / 1000, ts.steps_done)
    else:
        if tc.init_from:
            _init_weights(net, ema, tc.init_from, tc.init_from_ema)
        if world.is_main:
            shutil.rmtree(paths.state, ignore_errors=True)
    if world.is_main:
        dump_config(cfg, paths.config)
        paths.state.mkdir(parents=True, exist_ok=True)
    world.barrier()

    total_nimg = int(round(tc.total_kimg * 1000))
    stop_nimg = total_nimg if stop_after_kimg is None else min(total_nimg, int(round(stop_after_kimg * 1000)))
    every = {k: int(round(getattr(tc, f"{k}_every_kimg") * 1000)) if getattr(tc, f"{k}_every_kimg") else None
             for k in ("log", "checkpoint", "snapshot")}
    check_each_step = device.type == "cpu" and not world.distributed  # reading a CPU tensor costs no sync

    def save_checkpoint() -> None:
        if world.is_main:
            save_torch({
                "format": CHECKPOINT_FORMAT, "config": config_to_dict(cfg), "image_size": data.resolution,
                "channels": data.channels, "model": net.state_dict(), "ema": ema.state_dict(),
                "optimizer": optimizer.state_dict(), "sampler": sampler.state_dict(), "stream": stream.state_dict(),
                "generator": gen.get_state(), "acc": acc.state_dict(), "nimg": ts.nimg, "step": ts.steps_done,
                "wall_time_s": wall_before + (time.perf_counter() - t_start),
            }, paths.checkpoint)
        world.barrier()

    def save_snapshot() -> None:
        if world.is_main:
            save_torch({"format": SNAPSHOT_FORMAT, "config": config_to_dict(cfg), "image_size": data.resolution,
                        "channels": data.channels, "ema": _ema_state_dict(net, ema), "nimg": ts.nimg,
                        "step": ts.steps_done}, paths.state_snapshots / snapshot_name(ts.nimg))

    def write_log(lr: float, beta1: float) -> dict:
        sums = torch.cat([acc.loss.view(1), acc.loss_raw.view(1), acc.grad_norm.view(1) / world.size, acc.bin_sum,
                          acc.bin_count, acc.heads.flatten()])
        sums = world.all_reduce_sum(sums).cpu()  # the one host sync per log interval
        n = max(int(sums[3 + LOG_BINS:3 + 2 * LOG_BINS].sum()), 1)  # samples seen by all ranks
        bins_sum, bins_cnt = sums[3:3 + LOG_BINS], sums[3 + LOG_BINS:3 + 2 * LOG_BINS]
        rec: dict[str, Any] = {
            "kimg": ts.nimg / 1000, "nimg": ts.nimg, "step": ts.steps_done,
            "wall_time_s": round(wall_before + time.perf_counter() - t_start, 3),
            "sec_per_step": acc.wall / max(acc.steps, 1),
            "loss": float(sums[0]) / n, "loss_raw": float(sums[1]) / n,
            "grad_norm": float(sums[2]) / max(acc.steps, 1),
            "loss_bins": [float(s / c) if c > 0 else None for s, c in zip(bins_sum, bins_cnt)],
            "count_bins": [int(c) for c in bins_cnt], "lr": lr, "beta1": beta1,
        }
        if isinstance(prediction, MixedPrediction):
            heads = sums[3 + 2 * LOG_BINS:].view(len(HEADS), LOG_BINS)
            rec["mixed_head_fraction"] = {h: (heads[i] / heads.sum(0).clamp_min(1)).tolist() for i, h in enumerate(HEADS)}
        summary = sampler.log_summary(LOG_BINS)
        if summary:
            rec["sampler"] = summary
        if world.is_main:
            with open(paths.state_log, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        acc.reset()
        return rec

    # The loop.
    t_start = time.perf_counter()
    last_rec: dict | None = None
    net.train()
    bar = None
    if progress and world.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=round(total_nimg / 1000, 3), initial=round(ts.nimg / 1000, 3), unit="kimg",
                   desc=paths.out.name, dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} kimg [{elapsed}<{remaining}{postfix}]")
    status, message = "ok", ""
    ts.lr, ts.beta1 = ts.schedule.values(ts.nimg)
    try:
        while ts.nimg < stop_nimg:
            t0 = time.perf_counter()
            ts.step()
            if check_each_step and (msg := guard.message()):
                raise NonFiniteLossError(msg)
            acc.wall += time.perf_counter() - t0
            nimg = ts.nimg

            crossed = lambda k: every[k] and (nimg // every[k]) > ((nimg - tc.batch_size) // every[k])  # noqa: E731
            if crossed("log") or nimg >= stop_nimg:
                if msg := guard.message(world):
                    raise NonFiniteLossError(msg)
                last_rec = write_log(ts.lr, ts.beta1)
                if bar is not None:
                    bar.set_postfix_str(f"loss {last_rec['loss']:.4f}")
            if crossed("snapshot"):
                save_snapshot()
            if crossed("checkpoint") or nimg >= stop_nimg:
                if msg := guard.message(world):
                    raise NonFiniteLossError(msg)
                save_checkpoint()
            if bar is not None:
                bar.n = round(nimg / 1000, 3)
                bar.refresh()
    except NonFiniteLossError as exc:
        message = f"{paths.out}: {exc}; the last checkpoint ({paths.checkpoint}) holds the weights before it"
        if tc.on_nonfinite == "fail":
            raise NonFiniteLossError(message) from None
        status = "diverged"
        log.error("%s", message)
    finally:
        if bar is not None:
            bar.close()

    nimg, step = ts.nimg, ts.steps_done
    wall = wall_before + time.perf_counter() - t_start
    if last_rec is None and paths.state_log.exists():  # resumed a run that had already finished
        lines = paths.state_log.read_text().splitlines()
        last_rec = json.loads(lines[-1]) if lines else None
    if nimg < total_nimg and status == "ok":  # stopped early on request: no final files
        return TrainResult(paths.out, paths.model, "incomplete", nimg, step, last_rec and last_rec["loss"], wall)

    # Final files: weights (the last good ones if the run diverged), log, snapshots.
    if world.is_main:
        if status == "diverged" and paths.checkpoint.exists():
            good = load_torch(paths.checkpoint)
            net.load_state_dict(good["model"])
            ema.load_state_dict(good["ema"])
        else:
            if every["snapshot"] and not (paths.state_snapshots / snapshot_name(nimg)).exists():
                save_snapshot()
        final = {"format": MODEL_FORMAT, "config": config_to_dict(cfg), "image_size": data.resolution,
                 "channels": data.channels, "model": {k: v.detach().cpu() for k, v in net.state_dict().items()},
                 "ema": _ema_state_dict(net, ema), "nimg": nimg, "step": step, "status": status, "message": message,
                 "wall_time_s": wall, "final_loss": last_rec["loss"] if last_rec else None,
                 "torch_version": str(torch.__version__)}
        if isinstance(prediction, MixedPrediction) and status == "ok":
            ema_net = build_model(cfg, data.resolution, data.channels).to(device)
            ema_net.load_state_dict(final["ema"])
            errors, head = _mixed_head_profile(ema_net, diffusion, prediction, loader, device)
            final["mixed_head_errors"], final["mixed_head_per_t"] = errors, head
        save_torch(final, paths.model)
        _publish(paths)
    world.barrier()
    return TrainResult(paths.out, paths.model, status, nimg, step, last_rec["loss"] if last_rec else None, wall, message)


def _truncate_log(path: Path, nimg: int) -> None:
    """Drop log records written after the checkpoint we resume from (they will be redone)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["nimg"] <= nimg:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a torn last line from the kill
    atomic_write_text(path, "".join(line + "\n" for line in keep))
