"""Optimizer schedules (docs/methods.md §4.2: momentum decay, arXiv 2404.07946 reconstruction)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_config

from timestep_lab.components import check_config
from timestep_lab.config import ConfigError
from timestep_lab.optim import OPTIM_SCHEDULES, make_schedule
from timestep_lab.train import train


def schedule(name="momentum_decay", lr=1e-3, beta1=0.9, warmup_kimg=0.0, **params):
    return OPTIM_SCHEDULES.build(name, params, lr=lr, beta1=beta1, warmup_kimg=warmup_kimg)


def test_constant_schedule_with_warmup():
    s = schedule("constant", lr=2e-4, warmup_kimg=10)
    assert s.values(0) == (0.0, 0.9)
    assert s.values(5_000) == pytest.approx((1e-4, 0.9))
    assert s.values(10_000) == pytest.approx((2e-4, 0.9)) and s.values(1e9) == pytest.approx((2e-4, 0.9))


@pytest.mark.parametrize("nimg, beta1", [(0, 0.9), (25_000, 0.8), (50_000, 0.7), (100_000, 0.5), (300_000, 0.5)])
def test_momentum_decay_is_linear_in_images_seen_with_lr_compensation(nimg, beta1):
    s = schedule(beta1_min=0.5, decay_kimg=100, compensate=True)
    lr, b1 = s.values(nimg)
    assert b1 == pytest.approx(beta1, abs=1e-12)
    assert lr == pytest.approx(1e-3 * (1 - 0.9) / (1 - beta1), rel=1e-12)  # lr_s = lr_0 (1 - b0) / (1 - b_s)


def test_momentum_decay_start_offset_no_compensation_and_warmup():
    s = schedule(beta1_min=0.5, decay_kimg=10, start_kimg=20)
    assert s.values(15_000)[1] == 0.9 and s.values(25_000)[1] == pytest.approx(0.7)
    assert s.values(30_000)[1] == pytest.approx(0.5)
    plain = schedule(beta1_min=0.5, decay_kimg=10)  # the default decays beta1 alone (Adam is normalised)
    assert plain.values(10_000) == pytest.approx((1e-3, 0.5))
    warm = schedule(beta1_min=0.5, decay_kimg=10, warmup_kimg=4, compensate=True)
    assert warm.values(2_000) == pytest.approx((0.5 * 1e-3 * 0.1 / (1 - 0.82), 0.82))  # warm-up on top


def test_apply_writes_lr_and_beta1_into_the_optimizer():
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.Adam([p], lr=1.0, betas=(0.9, 0.999))
    lr, b1 = schedule(beta1_min=0.6, decay_kimg=1, compensate=True).apply(opt, 500)
    assert opt.param_groups[0]["lr"] == lr == pytest.approx(1e-3 * 0.1 / 0.25)
    assert opt.param_groups[0]["betas"] == (pytest.approx(0.75), 0.999) and b1 == pytest.approx(0.75)


def test_make_schedule_reads_the_config(digits_dir):
    cfg = tiny_config(digits_dir, optim={"lr": 1e-3, "betas": [0.8, 0.99],
                                         "schedule": {"name": "momentum_decay", "params": {"beta1_min": 0.4, "compensate": True}}})
    s = make_schedule(cfg.optim)
    assert s.values(200_000) == pytest.approx((1e-3 * 0.2 / 0.6, 0.4))


@pytest.mark.parametrize("params, message", [
    ({"beta1_min": 0.95}, r"optim\.schedule\.params: beta1_min must be <= optim\.betas\[0\]=0\.9"),
    ({"beta1_min": 1.0}, r"optim\.schedule\.params\.beta1_min must be in \[0\.0, 1\.0\)"),
    ({"decay_kimg": 0}, r"optim\.schedule\.params\.decay_kimg must be in \(0\.0"),
    ({"start_kimg": -1}, r"optim\.schedule\.params\.start_kimg must be in \[0\.0"),
    ({"beta_min": 0.5}, r"unknown key 'optim\.schedule\.params\.beta_min'"),
])
def test_bad_momentum_decay_parameters_fail_at_config_load(digits_dir, params, message):
    cfg = tiny_config(digits_dir, optim={"schedule": {"name": "momentum_decay", "params": params}})
    with pytest.raises(ConfigError, match=message):
        check_config(cfg, "run.yaml")


def test_training_with_momentum_decay_logs_the_schedule_and_learns(digits_dir, tmp_path):
    cfg = tiny_config(digits_dir, optim={"lr": 2e-3, "schedule": {"name": "momentum_decay",
                                                                  "params": {"beta1_min": 0.5, "decay_kimg": 0.48,
                                                                             "compensate": True}}})
    res = train(cfg, tmp_path / "md", progress=False)
    log = [json.loads(line) for line in (tmp_path / "md" / "train_log.jsonl").read_text().splitlines()]
    assert res.status == "ok" and log[-1]["loss"] < log[0]["loss"]
    # each record holds the values of the interval's last step (nimg before it)
    for rec in log:
        b1 = 0.9 - 0.4 * min(1.0, (rec["nimg"] - 32) / 480)
        assert rec["beta1"] == pytest.approx(b1) and rec["lr"] == pytest.approx(2e-3 * 0.1 / (1 - b1))
    assert log[-1]["beta1"] == pytest.approx(0.5)
