"""Live curves: TensorBoard event files of one run, written while it trains.

A run's event folder (the workflow's is ``logs/<study>/tensorboard/<run>/``; a hand-run
``train`` defaults to ``<out>/tensorboard/``) gets two kinds of file, both read by
``tensorboard --logdir <folder of run folders>`` while they grow:

- ``*.train`` from the training job, one record per log interval (the same numbers as that
  interval's ``train_log.jsonl`` line, methods.md section 7.1);
- ``*.fid`` from the snapshot evaluation (``evaluate-snapshots --events``): FID against images
  seen, one point per snapshot as it is scored.

Every value's step is **images seen** (``nimg``), so curves of runs with different batch sizes
line up. Tags:

==============================  =================================================================
``loss/weighted``               the objective L = mean_i w_is_i w(t_i) l_i of the interval
``loss/raw``                    the unweighted per-sample loss l_i, mean over the interval
``loss_by_t/t=<lo>-<hi>``       raw loss of the samples whose t fell in [lo, hi] (10 equal bins)
``optim/lr``, ``optim/beta1``   the learning rate and Adam's beta1 at the end of the interval
``optim/grad_norm``             mean gradient norm before clipping
``speed/images_per_s``          global batch / mean step time (the step only: no logging, no I/O)
``sampler/p_t``                 histogram over t of the sampler's p(t) (stateful samplers only;
                                their p(t) changes with training), at most 100 buckets
``fid/<tool>``                  FID of the EMA snapshot (digits: FID on digits-CNN features)
==============================  =================================================================

The event files are a view: ``train_log.jsonl`` and ``fid_progress.json`` stay the records
(event files carry wall times and host names, so they never take part in byte comparisons).
A run that starts fresh deletes the folder's old event files; a resumed run writes a new file
that starts with TensorBoard's purge marker at the resume point, so steps redone after a kill are
not drawn twice. torch.utils.tensorboard is imported when a writer is made (``--help`` and
commands without event files never load it). Must not know the training loop or the scoring.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from timestep_lab.artifacts.io import ArtifactError

__all__ = ["RunEvents", "clear_events", "fid_events", "p_t_buckets", "TRAIN_SUFFIX", "FID_SUFFIX", "MAX_BUCKETS"]

log = logging.getLogger(__name__)

TRAIN_SUFFIX, FID_SUFFIX = ".train", ".fid"
MAX_BUCKETS = 100


def clear_events(folder: Path, suffix: str = "") -> None:
    """Delete the event files in ``folder`` (only those ending in ``suffix`` when given)."""
    for f in Path(folder).glob(f"events.out.tfevents.*{suffix}"):
        f.unlink(missing_ok=True)


def p_t_buckets(p: Sequence[float], max_buckets: int = MAX_BUCKETS) -> tuple[list[float], list[float]]:
    """p(t) of ``T`` timesteps summed into ``min(T, max_buckets)`` buckets of equal t-width:
    (upper bucket edges in t, mass per bucket). Bucket k holds t in [edge_{k-1}, edge_k)."""
    T = len(p)
    n = min(T, max_buckets)
    edges = [round(k * T / n) for k in range(n + 1)]
    return [float(e) for e in edges[1:]], [float(sum(p[edges[k]:edges[k + 1]])) for k in range(n)]


class RunEvents:
    """Writes one run's training curves (module docstring) into ``folder``.

    :param folder: the run's event folder (created).
    :param batch_size: the global batch (images per optimizer step), for ``speed/images_per_s``.
    :param num_timesteps: T, for the t-ranges of the ``loss_by_t`` tags.
    :param resume_nimg: None when the run starts fresh (old event files are deleted), else the
        images seen at the checkpoint it resumes from (later steps of earlier files are purged).
    """

    def __init__(self, folder: str | Path, *, batch_size: int, num_timesteps: int, resume_nimg: int | None):
        from torch.utils.tensorboard import SummaryWriter  # only when event files are asked for

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if resume_nimg is None:
            clear_events(self.folder)
        self.batch_size, self.T = batch_size, num_timesteps
        # flush_secs: a record is flushed when written (flush()); this only bounds a forgotten one
        _quiet_writer_thread()
        with _named(self.folder):
            self.writer = SummaryWriter(str(self.folder), purge_step=None if resume_nimg is None else resume_nimg + 1,
                                        flush_secs=30, filename_suffix=TRAIN_SUFFIX)

    def bin_tag(self, b: int, bins: int) -> str:
        """``loss_by_t/t=<lo>-<hi>``: the t-range of log bin ``b`` (``bin = t * bins // T``)."""
        lo, hi = math.ceil(b * self.T / bins), math.ceil((b + 1) * self.T / bins) - 1
        width = len(str(self.T - 1))
        return f"loss_by_t/t={lo:0{width}d}-{hi:0{width}d}"

    def record(self, rec: Mapping[str, Any], p_t: Sequence[float] | None = None) -> None:
        """One log interval: ``rec`` is its train_log.jsonl record; ``p_t`` the sampler's p(t) [T]
        (None: no histogram). A failed write is an :class:`ArtifactError` naming the folder."""
        with _named(self.folder):
            self._record(rec, p_t)

    def _record(self, rec: Mapping[str, Any], p_t: Sequence[float] | None) -> None:
        w, step = self.writer, int(rec["nimg"])
        w.add_scalar("loss/weighted", rec["loss"], step)
        w.add_scalar("loss/raw", rec["loss_raw"], step)
        bins = rec["loss_bins"]
        for b, value in enumerate(bins):
            if value is not None:  # no sample fell in this bin during the interval
                w.add_scalar(self.bin_tag(b, len(bins)), value, step)
        w.add_scalar("optim/lr", rec["lr"], step)
        w.add_scalar("optim/beta1", rec["beta1"], step)
        w.add_scalar("optim/grad_norm", rec["grad_norm"], step)
        if rec.get("sec_per_step"):
            w.add_scalar("speed/images_per_s", self.batch_size / rec["sec_per_step"], step)
        if p_t is not None:
            add_p_t(w, "sampler/p_t", p_t, step)
        w.flush()  # visible to a watching TensorBoard now, not at the next 30-s flush

    def close(self) -> None:
        with _named(self.folder):
            self.writer.close()


def _quiet_writer_thread() -> None:
    """TensorBoard writes from a thread of its own; when a write fails there (a full disk) the
    thread's traceback would be printed, and the error is raised again by the next flush on the
    main thread, which reports it as one line (:func:`_named`). So an OSError in one of
    TensorBoard's threads is not printed; anything else goes to the previous hook."""
    previous = threading.excepthook
    if getattr(previous, "_timestep_lab", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, OSError) and type(args.thread).__module__.startswith("tensorboard."):
            return
        previous(args)

    hook._timestep_lab = True  # type: ignore[attr-defined]
    threading.excepthook = hook


@contextlib.contextmanager
def _named(folder: Path) -> Iterator[None]:
    """A failed event-file write (a full disk: TensorBoard's writer thread raises it at the next
    flush) as an :class:`ArtifactError` naming the folder, never a traceback."""
    try:
        yield
    except OSError as exc:
        raise ArtifactError(f"{folder}: writing the TensorBoard event file failed ({exc.strerror or exc}); free space "
                            f"and rerun (or train with --no-events)") from None


def add_p_t(writer, tag: str, p_t: Sequence[float], step: int) -> None:
    """p(t) as a TensorBoard histogram over t: each bucket's count is its probability mass."""
    limits, mass = p_t_buckets([float(x) for x in p_t])
    mean = sum((k + 0.5) * float(x) for k, x in enumerate(p_t))
    second = sum((k + 0.5) ** 2 * float(x) for k, x in enumerate(p_t))
    writer.add_histogram_raw(tag, min=0.0, max=float(len(p_t)), num=1, sum=mean, sum_squares=second,
                             bucket_limits=limits, bucket_counts=mass, global_step=step)


def fid_events(folder: str | Path):
    """A writer for FID points of one run (``*.fid`` files; earlier ones are deleted, since the
    snapshot evaluation rescores every snapshot). Use :func:`add_fid_point` on it, then close()."""
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    clear_events(folder, FID_SUFFIX)
    _quiet_writer_thread()
    with _named(folder):
        return SummaryWriter(str(folder), flush_secs=30, filename_suffix=FID_SUFFIX)


def add_fid_point(writer, point: Mapping[str, Any]) -> None:
    """One snapshot's scores (an ``evaluate_models`` point): ``fid/<tool>`` at its images seen."""
    with _named(Path(writer.log_dir)):
        for tool, value in sorted(point.get("fid", {}).items()):
            if value is not None and math.isfinite(value):
                writer.add_scalar(f"fid/{tool}", value, int(point["nimg"]))
        writer.flush()
