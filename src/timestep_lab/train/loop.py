"""The training loop: ``train(cfg, out_dir)``.

The loop only wires together objects built from the config (network, diffusion process,
prediction type, timestep sampler, loss weighting, optimizer and its schedule, EMA) by
:func:`~timestep_lab.train.step.build_train_step`, runs :meth:`TrainStep.step` and adds
resuming, logging (``train_log.jsonl`` and, when asked, TensorBoard event files:
:mod:`timestep_lab.artifacts.events`), checkpoints, snapshots and the final files (:mod:`.files`). Length,
warm-up, EMA half-life, logging, checkpoints and snapshots are all counted in images seen.
Rank 0 writes all files.

SIGTERM or SIGUSR1 (SLURM's time-limit warning, a cancellation) stops the run after the step in
progress, with its state saved: status ``interrupted`` (:mod:`.stop`).

A killed run resumes from ``train_state/checkpoint.pt`` and, on CPU, ends with bit-identical
weights to an uninterrupted run. ``cfg`` is taken as checked
(:func:`~timestep_lab.components.check_config` runs where a config enters: the CLI, the study
DAG build). Must not know checkpoint formats other than our own (fine-tuning weights come
through :func:`timestep_lab.checkpoints.load_init_weights`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from timestep_lab.artifacts.events import RunEvents
from timestep_lab.artifacts.io import ArtifactError, load_torch, save_torch
from timestep_lab.artifacts.runlock import RunLock
from timestep_lab.checkpoints import (
    CHECKPOINT_FORMAT,
    MODEL_FORMAT,
    SNAPSHOT_FORMAT,
    load_init_weights,
)
from timestep_lab.components import build_conditioning, build_model
from timestep_lab.config import RunConfig, config_to_dict, dump_config
from timestep_lab.distributed import World
from timestep_lab.optim import EMA
from timestep_lab.processes.predictions import HEADS, MixedPrediction
from timestep_lab.train.continuation import continue_run
from timestep_lab.train.files import (
    RunPaths,
    ema_state_dict,
    publish,
    read_resume_checkpoint,
    run_inputs,
    snapshot_name,
    truncate_log,
)
from timestep_lab.train.mixed_heads import mixed_head_profile
from timestep_lab.train.monitor import LOG_BINS, NonFiniteLossError
from timestep_lab.train.step import TrainStep, build_train_step
from timestep_lab.train.stop import StopRequest

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)

SNAPSHOT_HEAD_IMAGES = 64  # bank images of a mixed model's per-snapshot head table (model.pt: 256, every T/100-th t)


@dataclass
class TrainResult:
    """What :func:`train` returns: ``status`` is ``ok``, ``diverged`` (non-finite loss with
    ``train.on_nonfinite: record``; ``model_path`` holds the last good weights), ``incomplete``
    (stopped by ``stop_after_kimg``: no final files yet) or ``interrupted`` (stopped by a signal
    with its state saved; ``message`` says which and where: rerun to continue)."""

    out_dir: Path
    model_path: Path
    status: str  # "ok" | "diverged" | "incomplete" | "interrupted"
    nimg: int
    step: int
    final_loss: float | None
    wall_time_s: float
    message: str = ""


def train(cfg: RunConfig, out_dir: str | Path, *, resume: bool = True, progress: bool = True,
          world: World = World(), stop_after_kimg: float | None = None,
          events: str | Path | None = None, code: Mapping[str, Any] | None = None,
          continue_from: str | Path | None = None) -> TrainResult:
    """Train the run described by ``cfg`` into ``out_dir`` (see the module docstring).

    The per-step work is :meth:`TrainStep.step` of :func:`build_train_step`; this function adds
    resuming, logging, checkpoints, snapshots and the final files.

    :param resume: continue from ``train_state/checkpoint.pt`` if present (else start over).
    :param stop_after_kimg: stop (with a checkpoint, without the final files) once this many
        kimg are done; for tests and time-limited jobs.
    :param events: folder for the run's TensorBoard event files (:mod:`timestep_lab.artifacts.events`);
        None writes none.
    :param continue_from: a shorter run of this config: an empty ``out_dir`` starts from its state (:mod:`.continuation`).
    :param code: the code identity of this process (:mod:`timestep_lab.artifacts.identity`, given by the
        entry point), written into every ``train_log.jsonl`` record: a run resumed under other
        code says so record by record. Not in ``model.pt``, whose bytes depend on the config,
        seed, data and parent model only.
    :raises NonFiniteLossError: when the loss becomes NaN/inf and ``train.on_nonfinite`` is ``fail``.
    """
    # one writer per run folder: rank 0 holds out_dir/.lock for the whole run (a second writer
    # fails at once naming the holder; a dead holder's lock is taken over: timestep_lab.artifacts.runlock)
    with RunLock(out_dir) if world.is_main else contextlib.nullcontext(), StopRequest() as stop:
        return _train(cfg, RunPaths(Path(out_dir)), resume=resume, progress=progress, world=world,
                      stop_after_kimg=stop_after_kimg, stop=stop, events=events, code=code,
                      continue_from=continue_from)


def _train(cfg: RunConfig, paths: RunPaths, *, resume: bool, progress: bool, world: World,
           stop_after_kimg: float | None, stop: StopRequest, events: str | Path | None,
           code: Mapping[str, Any] | None, continue_from: str | Path | None) -> TrainResult:
    """:func:`train` inside its run lock: build the step, resume or start, run the steps, write
    the final files (each part a method of :class:`_Run`, in this order)."""
    tc = cfg.train
    run = _Run(cfg, paths, build_train_step(cfg, world=world), world, code)
    if continue_from is not None and resume:  # the shorter run's state copied in, then resumed as any
        continue_run(paths, continue_from, cfg, run.inputs, world)
    ckpt = run.resume_or_start(resume)
    run.curves = _open_curves(events, cfg, world, run.ts.nimg if ckpt is not None else None)
    world.barrier()

    total_nimg = int(round(tc.total_kimg * 1000))
    stop_nimg = total_nimg if stop_after_kimg is None else min(total_nimg, int(round(stop_after_kimg * 1000)))
    status, message = run.run_steps(total_nimg, stop_nimg, stop, progress)

    ts = run.ts
    nimg, step = ts.nimg, ts.steps_done
    wall = run.wall_before + time.perf_counter() - run.t_start
    last_rec = run.last_record()
    if nimg < total_nimg and status == "ok":  # stopped early on request: no final files
        if nimg < stop_nimg:
            status, message = "interrupted", (f"{paths.out}: stopped by {stop.name} at {nimg / 1000:.3f} kimg (step "
                                               f"{step}); the state is saved in {paths.checkpoint}: rerun to continue")
        return TrainResult(paths.out, paths.model, "incomplete" if status == "ok" else status, nimg, step,
                           last_rec and last_rec["loss"], wall, message)

    if world.is_main:
        run.write_final(status, message, last_rec)
    world.barrier()
    return TrainResult(paths.out, paths.model, status, nimg, step, last_rec["loss"] if last_rec else None, wall, message)


class _Run:
    """One call of :func:`_train`: the :class:`TrainStep` ``ts`` and what the loop adds around it
    (resume, ``train_log.jsonl`` records, checkpoints, snapshots, final files). ``wall_before``:
    seconds of earlier sessions (from the checkpoint); ``t_start``: ``perf_counter`` when this
    session's steps began; ``last_rec``: the last log record written."""

    def __init__(self, cfg: RunConfig, paths: RunPaths, ts: TrainStep, world: World, code: Mapping[str, Any] | None):
        self.cfg, self.paths, self.ts, self.world, self.code = cfg, paths, ts, world, code
        tc = cfg.train
        #: what the run is made from (config, data content, parent model), recorded in every
        #: checkpoint, snapshot and model.pt; a checkpoint resumes only with the same (.files)
        self.inputs = run_inputs(cfg, ts.data.identity, ((code or {}).get("arithmetic") or {}).get("level"))
        #: the log, checkpoint and snapshot intervals in images (None: never)
        self.every = {k: int(round(getattr(tc, f"{k}_every_kimg") * 1000)) if getattr(tc, f"{k}_every_kimg") else None
                      for k in ("log", "checkpoint", "snapshot")}
        self.check_each_step = ts.device.type == "cpu" and not world.distributed  # reading a CPU tensor costs no sync
        self.curves: RunEvents | None = None
        self.wall_before = 0.0
        self.t_start = time.perf_counter()
        self.last_rec: dict | None = None

    def resume_or_start(self, resume: bool) -> dict | None:
        """Load ``train_state/checkpoint.pt`` into every object (a run of another config is set
        aside and this one starts fresh: :mod:`.files`), or start: fine-tuning weights when
        ``train.init_from``, an empty state folder. Writes the resolved config. Returns the
        checkpoint read, or None."""
        cfg, paths, ts, world, tc = self.cfg, self.paths, self.ts, self.world, self.cfg.train
        ckpt = read_resume_checkpoint(paths, cfg, self.inputs, set_aside_stale=world.is_main) if resume else None
        if ckpt is not None:
            ts.net.load_state_dict(ckpt["model"])
            ts.ema.load_state_dict(ckpt["ema"])
            ts.optimizer.load_state_dict(ckpt["optimizer"])
            ts.sampler.load_state_dict(ckpt["sampler"])
            ts.stream.load_state_dict(ckpt["stream"])
            ts.gen.set_state(ckpt["generator"])
            ts.acc.load_state_dict(ckpt["acc"])
            ts.nimg, ts.steps_done, self.wall_before = int(ckpt["nimg"]), int(ckpt["step"]), float(ckpt["wall_time_s"])
            truncate_log(paths.state_log, ts.nimg)
            log.info("resumed %s at %.1f kimg (step %d)", paths.out, ts.nimg / 1000, ts.steps_done)
        else:
            if tc.init_from:
                load_init_weights(ts.net, tc.init_from, tc.init_from_ema)
                _copy_to_ema(ts.net, ts.ema)
            if world.is_main:
                shutil.rmtree(paths.state, ignore_errors=True)
        if world.is_main:
            dump_config(cfg, paths.config)
            paths.state.mkdir(parents=True, exist_ok=True)
        return ckpt

    def run_steps(self, total_nimg: int, stop_nimg: int, stop: StopRequest, progress: bool) -> tuple[str, str]:
        """Step until ``stop_nimg`` images (or a stop signal), logging, snapshotting and
        checkpointing at their intervals. Returns ``(status, message)``: ``ok`` or ``diverged``
        (a non-finite loss with ``train.on_nonfinite: record``; with ``fail`` it raises)."""
        ts, tc, world, paths = self.ts, self.cfg.train, self.world, self.paths
        self.t_start = time.perf_counter()
        ts.net.train()
        bar = self._progress_bar(total_nimg) if progress and world.is_main else None
        status, message = "ok", ""
        try:
            while ts.nimg < stop_nimg and not stop.requested(world, ts.steps_done, ts.device):
                self._one_step(stop_nimg, bar)
                if bar is not None:
                    bar.update(min(ts.nimg, total_nimg) - bar.n)
            if ts.nimg < stop_nimg:  # a signal stopped it between two steps: save the state as it stands
                self._check_finite()
                self.save_checkpoint()
        except NonFiniteLossError as exc:
            message = f"{paths.out}: {exc}; the last checkpoint ({paths.checkpoint}) holds the weights before it"
            if tc.on_nonfinite == "fail":
                raise NonFiniteLossError(message) from None
            status = "diverged"
            log.error("%s", message)
        finally:
            if bar is not None:
                bar.close()
            if self.curves is not None:
                self.curves.close()
        return status, message

    def _one_step(self, stop_nimg: int, bar) -> None:
        """:meth:`TrainStep.step`, then the log record, snapshot and checkpoint whose interval
        (:attr:`every`, in images) the step crossed; the last step logs and checkpoints."""
        ts, every = self.ts, self.every
        t0 = time.perf_counter()
        ts.step()
        if self.check_each_step and (msg := ts.guard.message()):
            raise NonFiniteLossError(msg)
        ts.acc.wall += time.perf_counter() - t0
        nimg, batch = ts.nimg, self.cfg.train.batch_size

        crossed = lambda k: every[k] and (nimg // every[k]) > ((nimg - batch) // every[k])  # noqa: E731
        if crossed("log") or nimg >= stop_nimg:
            self._check_finite()
            self.last_rec = self.write_log()
            if bar is not None:
                bar.set_postfix_str(f"loss {self.last_rec['loss']:.4f}")
        if crossed("snapshot"):
            self.save_snapshot()
        if crossed("checkpoint") or nimg >= stop_nimg:
            self._check_finite()
            self.save_checkpoint()

    def _check_finite(self) -> None:
        if msg := self.ts.guard.message(self.world):
            raise NonFiniteLossError(msg)

    def _progress_bar(self, total_nimg: int):
        from tqdm.auto import tqdm  # only when a progress bar is asked for: keeps `import train` fast

        # counted in images; the last batch may overshoot the length, so updates are clamped to it
        return tqdm(total=total_nimg, initial=min(self.ts.nimg, total_nimg), unit="img", unit_scale=True,
                    desc=self.paths.out.name, dynamic_ncols=True)

    def last_record(self) -> dict | None:
        """The last log record of this session, or of the log when a resumed run had no step left."""
        if self.last_rec is None and self.paths.state_log.exists():  # resumed a run that had already finished
            lines = self.paths.state_log.read_text().splitlines()
            return json.loads(lines[-1]) if lines else None
        return self.last_rec

    def save_checkpoint(self) -> None:
        ts, cfg = self.ts, self.cfg
        if self.world.is_main:
            save_torch({
                "format": CHECKPOINT_FORMAT, "config": config_to_dict(cfg), "image_size": ts.data.resolution,
                "channels": ts.data.channels, "model": ts.net.state_dict(), "ema": ts.ema.state_dict(),
                "optimizer": ts.optimizer.state_dict(), "sampler": ts.sampler.state_dict(),
                "stream": ts.stream.state_dict(), "generator": ts.gen.get_state(), "acc": ts.acc.state_dict(),
                "nimg": ts.nimg, "step": ts.steps_done, "inputs": self.inputs,
                "wall_time_s": self.wall_before + (time.perf_counter() - self.t_start),
            }, self.paths.checkpoint)
        self.world.barrier()

    def save_snapshot(self) -> None:
        ts = self.ts
        if self.world.is_main:
            snap = {"format": SNAPSHOT_FORMAT, "config": config_to_dict(self.cfg), "image_size": ts.data.resolution,
                    "channels": ts.data.channels, "ema": ema_state_dict(ts.net, ts.ema), "nimg": ts.nimg,
                    "step": ts.steps_done, "inputs": self.inputs}
            if isinstance(ts.prediction, MixedPrediction):  # a snapshot samples like model.pt: with its own head table
                snap["mixed_head_errors"], snap["mixed_head_per_t"] = self._snapshot_heads(snap["ema"])
            save_torch(snap, self.paths.state_snapshots / snapshot_name(ts.nimg))

    def _snapshot_heads(self, ema_weights: dict) -> tuple[Tensor, Tensor]:
        """The per-t inference head of the EMA weights, measured as for model.pt on a quarter of its
        bank at a fifth of its timesteps (64 images, every T/20-th t: the table only picks the head
        per t, and a snapshot is scored on fewer samples than model.pt)."""
        ts = self.ts
        ema_net = build_model(self.cfg, ts.data.resolution, ts.data.channels).to(ts.device)
        ema_net.load_state_dict(ema_weights)
        return mixed_head_profile(ema_net, ts.diffusion, ts.prediction, ts.loader, ts.device,
                                  n_images=SNAPSHOT_HEAD_IMAGES, stride=max(1, ts.diffusion.T // 20),
                                  conditioning=build_conditioning(self.cfg))

    def write_log(self) -> dict:
        """Reduce the interval's device sums over ranks (the one host sync per log interval), append
        the record to ``train_log.jsonl`` (rank 0) and the event files, and reset the sums.

        Losses are per-sample means over the interval; ``loss_bins``/``count_bins``: per timestep
        bin (:data:`LOG_BINS` bins); ``sec_per_step`` in seconds; ``lr``/``beta1``: what the last
        step set (:attr:`TrainStep.lr`: the training step owns them)."""
        ts, world, acc = self.ts, self.world, self.ts.acc
        sums = torch.cat([acc.loss.view(1), acc.loss_raw.view(1), acc.grad_norm.view(1) / world.size, acc.bin_sum,
                          acc.bin_count, acc.heads.flatten()])
        sums = world.all_reduce_sum(sums).cpu()  # the one host sync per log interval
        n = max(int(sums[3 + LOG_BINS:3 + 2 * LOG_BINS].sum()), 1)  # samples seen by all ranks
        bins_sum, bins_cnt = sums[3:3 + LOG_BINS], sums[3 + LOG_BINS:3 + 2 * LOG_BINS]
        rec: dict[str, Any] = {
            "kimg": ts.nimg / 1000, "nimg": ts.nimg, "step": ts.steps_done,
            "wall_time_s": round(self.wall_before + time.perf_counter() - self.t_start, 3),
            "sec_per_step": acc.wall / max(acc.steps, 1),
            "loss": float(sums[0]) / n, "loss_raw": float(sums[1]) / n,
            "grad_norm": float(sums[2]) / max(acc.steps, 1),
            "loss_bins": [float(s / c) if c > 0 else None for s, c in zip(bins_sum, bins_cnt)],
            "count_bins": [int(c) for c in bins_cnt], "lr": ts.lr, "beta1": ts.beta1,
        }
        if isinstance(ts.prediction, MixedPrediction):
            heads = sums[3 + 2 * LOG_BINS:].view(len(HEADS), LOG_BINS)
            rec["mixed_head_fraction"] = {h: (heads[i] / heads.sum(0).clamp_min(1)).tolist() for i, h in enumerate(HEADS)}
        summary = ts.sampler.log_summary(LOG_BINS)
        if summary:
            rec["sampler"] = summary
        if self.code is not None:
            rec["code"] = dict(self.code)
        if world.is_main:
            self._append_log(rec)
        if self.curves is not None:
            self.curves.record(rec, ts.sampler.probs().tolist() if ts.sampler.stateful else None)
        acc.reset()
        return rec

    def _append_log(self, rec: dict) -> None:
        """One record appended to ``train_state/train_log.jsonl`` in one write; a full disk (or any
        write error) is an :class:`ArtifactError` naming the file: the state saved at the last
        checkpoint stands, and a rerun resumes there (a torn last line is dropped on resume)."""
        line = json.dumps(rec) + "\n"
        try:
            with open(self.paths.state_log, "a") as fh:
                fh.write(line)
                fh.flush()
        except OSError as exc:
            raise ArtifactError(f"{self.paths.state_log}: write failed ({exc.strerror or exc}); training stopped, its "
                                f"state at the last checkpoint is kept: free space and rerun to resume") from None

    def write_final(self, status: str, message: str, last_rec: dict | None) -> None:
        """``model.pt`` (rank 0): the weights (the last good ones if the run diverged), the EMA, a
        mixed model's per-t head table, and the final snapshot; then publish the run's files."""
        ts, cfg, paths, nimg = self.ts, self.cfg, self.paths, self.ts.nimg
        net, ema, data = ts.net, ts.ema, ts.data
        if status == "diverged" and paths.checkpoint.exists():
            good = load_torch(paths.checkpoint)
            net.load_state_dict(good["model"])
            ema.load_state_dict(good["ema"])
        else:
            if self.every["snapshot"] and not (paths.state_snapshots / snapshot_name(nimg)).exists():
                self.save_snapshot()
        final = {"format": MODEL_FORMAT, "config": config_to_dict(cfg), "image_size": data.resolution,
                 "channels": data.channels, "model": {k: v.detach().cpu() for k, v in net.state_dict().items()},
                 "ema": ema_state_dict(net, ema), "nimg": nimg, "step": ts.steps_done, "status": status,
                 "message": message, "final_loss": last_rec["loss"] if last_rec else None,
                 "torch_version": str(torch.__version__), "inputs": self.inputs}
        # no wall time in model.pt: identical runs must give identical bytes (and hashes); the
        # time is in train_log.jsonl
        if isinstance(ts.prediction, MixedPrediction) and status == "ok":
            ema_net = build_model(cfg, data.resolution, data.channels).to(ts.device)
            ema_net.load_state_dict(final["ema"])
            errors, head = mixed_head_profile(ema_net, ts.diffusion, ts.prediction, ts.loader, ts.device,
                                              conditioning=build_conditioning(cfg))
            final["mixed_head_errors"], final["mixed_head_per_t"] = errors, head
        save_torch(final, paths.model)
        publish(paths)


def _open_curves(events: str | Path | None, cfg: RunConfig, world: World, resume_nimg: int | None) -> RunEvents | None:
    """The run's event-file writer on rank 0 (None without ``events``); ``resume_nimg``: the
    checkpoint's images seen, None for a fresh start (old event files deleted)."""
    if events is None or not world.is_main:
        return None
    return RunEvents(events, batch_size=cfg.train.batch_size, num_timesteps=cfg.diffusion.num_timesteps,
                     resume_nimg=resume_nimg)


def _copy_to_ema(net: nn.Module, ema: EMA) -> None:
    """Start the EMA at the network's (fine-tuning) weights."""
    with torch.no_grad():
        for e, p in zip(ema.params, net.parameters()):
            e.copy_(p)
        for e, b in zip(ema.buffers, net.buffers()):
            e.copy_(b)
