"""Live curves: the TensorBoard event files a run writes while it trains (timestep_lab.artifacts.events),
read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from conftest import tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from timestep_lab.artifacts.events import add_fid_point, fid_events, p_t_buckets
from timestep_lab.train import train


def read_events(folder) -> EventAccumulator:
    """What TensorBoard shows for one run folder (every sample kept; purged steps dropped)."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def read_log(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_event_files_carry_the_logged_curves_against_images_seen(digits_dir, tmp_path):
    """Every log record becomes scalars at its images seen (the same numbers as train_log.jsonl,
    in float32), the stateful sampler's p(t) a histogram over t whose buckets sum to one."""
    cfg = tiny_config(digits_dir, timesteps={"name": "clts", "params": {"horizon_kimg": 0.64, "mu": 30, "sigma": 20}})
    train(cfg, tmp_path / "run", progress=False, events=tmp_path / "ev")
    log = read_log(tmp_path / "run" / "train_log.jsonl")
    acc = read_events(tmp_path / "ev")
    steps = [r["nimg"] for r in log]
    assert steps == [160, 320, 480, 640]
    f32 = lambda xs: pytest.approx(xs, rel=1e-6)  # noqa: E731  (TensorBoard stores float32)
    assert [s for s, _ in scalars(acc, "loss/weighted")] == steps
    assert [v for _, v in scalars(acc, "loss/weighted")] == f32([r["loss"] for r in log])
    assert [v for _, v in scalars(acc, "loss/raw")] == f32([r["loss_raw"] for r in log])
    assert [v for _, v in scalars(acc, "optim/lr")] == f32([r["lr"] for r in log])
    assert [v for _, v in scalars(acc, "optim/beta1")] == f32([r["beta1"] for r in log])
    assert [v for _, v in scalars(acc, "speed/images_per_s")] == f32([32 / r["sec_per_step"] for r in log])
    # ten t-bins of T = 100: t=00-09 ... t=90-99, each the logged per-bin raw loss
    bins = sorted(t for t in acc.Tags()["scalars"] if t.startswith("loss_by_t/"))
    assert bins == [f"loss_by_t/t={10 * b:02d}-{10 * b + 9:02d}" for b in range(10)]
    for b, tag in enumerate(bins):
        logged = [(r["nimg"], r["loss_bins"][b]) for r in log if r["loss_bins"][b] is not None]
        assert [s for s, _ in scalars(acc, tag)] == [n for n, _ in logged]
        assert [v for _, v in scalars(acc, tag)] == f32([v for _, v in logged])
    hist = acc.Histograms("sampler/p_t")
    assert [h.step for h in hist] == steps
    last = hist[-1].histogram_value
    assert len(last.bucket) == 100 and math.isclose(sum(last.bucket), 1.0, rel_tol=1e-9)
    assert list(last.bucket_limit) == [float(t) for t in range(1, 101)]
    p_bins = [sum(last.bucket[10 * b:10 * b + 10]) for b in range(10)]
    assert p_bins == pytest.approx(log[-1]["sampler"]["p_bins"], rel=1e-9)
    assert hist[0].histogram_value.bucket[30] < last.bucket[30]  # p(t) moved toward t = mu = 30 over training


def test_a_resumed_run_draws_no_step_twice_and_a_fresh_one_starts_clean(digits_dir, tmp_path):
    """A kill after a log record but before the next checkpoint: the rerun redoes those steps;
    its event file starts with TensorBoard's purge marker at the checkpoint, so each step is
    drawn once, with the rerun's value. A fresh start deletes the folder's old event files."""
    cfg = tiny_config(digits_dir)  # log every 160 images, checkpoint every 320
    out, ev = tmp_path / "run", tmp_path / "ev"
    train(cfg, out, progress=False, stop_after_kimg=0.32, events=ev)
    at_320 = tmp_path / "checkpoint-320.pt"
    shutil.copy(out / "train_state" / "checkpoint.pt", at_320)
    train(cfg, out, progress=False, stop_after_kimg=0.48, events=ev)  # logs 480, then "killed":
    shutil.copy(at_320, out / "train_state" / "checkpoint.pt")  # back to the checkpoint at 320
    train(cfg, out, progress=False, events=ev)
    assert len(list(ev.glob("events.out.tfevents.*.train"))) == 3
    acc = read_events(ev)
    log = read_log(out / "train_log.jsonl")
    assert [s for s, _ in scalars(acc, "loss/weighted")] == [r["nimg"] for r in log] == [160, 320, 480, 640]
    assert [v for _, v in scalars(acc, "loss/weighted")] == pytest.approx([r["loss"] for r in log], rel=1e-6)

    train(tiny_config(digits_dir, optim={"lr": 1e-3}), out, progress=False, stop_after_kimg=0.16, events=ev)
    assert len(list(ev.glob("events.out.tfevents.*"))) == 1  # another config: a fresh run, a fresh curve
    assert [s for s, _ in scalars(read_events(ev), "loss/weighted")] == [160]


def test_no_event_files_unless_asked_and_identical_runs_keep_identical_bytes(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, train={"total_kimg": 0.16})
    train(cfg, tmp_path / "a", progress=False)
    train(cfg, tmp_path / "b", progress=False, events=tmp_path / "b" / "tensorboard")
    assert not list((tmp_path / "a").rglob("events.out.tfevents.*"))
    assert len(list((tmp_path / "b" / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert (tmp_path / "a" / "model.pt").read_bytes() == (tmp_path / "b" / "model.pt").read_bytes()


def test_fid_points_are_curves_against_images_seen(tmp_path):
    """What evaluate-snapshots writes with --events: fid/<tool> per snapshot, at its images seen;
    a rerun replaces the earlier FID file (and leaves the training curves alone)."""
    points = [{"nimg": 500, "fid": {"torch-fidelity": 80.5, "clean-fid": 81.0}},
              {"nimg": 1000, "fid": {"torch-fidelity": 40.25, "clean-fid": float("nan")}}]
    (tmp_path / "events.out.tfevents.1.host.1.1.train").write_bytes(b"")
    for _ in range(2):
        writer = fid_events(tmp_path)
        for point in points:
            add_fid_point(writer, point)
        writer.close()
    assert len(list(tmp_path.glob("*.fid"))) == 1 and len(list(tmp_path.glob("*.train"))) == 1
    acc = read_events(tmp_path)
    assert scalars(acc, "fid/torch-fidelity") == [(500, 80.5), (1000, 40.25)]
    assert scalars(acc, "fid/clean-fid") == [(500, 81.0)]  # a non-finite FID is not drawn


def test_p_t_buckets_sum_the_mass_in_equal_t_ranges():
    assert p_t_buckets([0.1, 0.2, 0.3, 0.4]) == ([1.0, 2.0, 3.0, 4.0], [0.1, 0.2, 0.3, 0.4])
    limits, mass = p_t_buckets([1 / 1000] * 1000)
    assert len(mass) == 100 and limits[:2] == [10.0, 20.0] and limits[-1] == 1000.0
    assert mass == pytest.approx([0.01] * 100)
