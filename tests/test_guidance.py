"""Class labels end to end: label dropout in the training step (from the run's own generator),
classifier-free guidance at sampling (the formula on a toy network, scale 1 = the conditional
output exactly), one class per sample from its own seed, determinism, and the one-line errors of
a conditional model without labels and of guidance on an unconditional model."""

import json
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from timestep_lab.cli import main
from timestep_lab.config import SampleConfig, config_from_dict
from timestep_lab.generate.guidance import guided_output, sample_classes
from timestep_lab.generate.sampling import Denoiser, StackedGenerator, generate
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import make_prediction
from timestep_lab.processes.schedules import get_schedule


class Toy(nn.Module):
    """``f(x, t, y) = a[y] x + b[y]`` per sample (``y`` in 0..3, 3 the null class)."""

    def __init__(self):
        super().__init__()
        self.a = torch.tensor([0.5, -1.0, 2.0, 0.25])
        self.b = torch.tensor([1.0, 0.0, -3.0, 0.5])
        self.calls = []

    def forward(self, x, t, y=None):
        self.calls.append(len(x))
        return self.a[y][:, None, None, None] * x + self.b[y][:, None, None, None]


def test_guidance_formula_on_a_toy_network():
    x, t, y = torch.randn(3, 1, 2, 2), torch.tensor([5, 6, 7]), torch.tensor([0, 1, 2])
    net = Toy()
    s = 1.5
    got = guided_output(net, x, t, y, 3, s)
    a, b = net.a, net.b
    cond = a[y][:, None, None, None] * x + b[y][:, None, None, None]
    uncond = a[3] * x + b[3]
    assert torch.allclose(got, uncond + s * (cond - uncond), atol=1e-6)
    assert net.calls == [6]  # one call on the doubled batch
    assert torch.allclose(guided_output(net, x, t, y, 3, 0.0), uncond)  # scale 0: the unconditional model


def test_guidance_one_is_the_conditional_prediction_exactly():
    torch.manual_seed(0)
    from timestep_lab.models.dit import DiT, DiTShape

    net = DiT(DiTShape(1, 16, 2), input_size=4, in_channels=2, out_channels=2, num_classes=5).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    diffusion = GaussianDiffusion(get_schedule("linear", 50))
    x, t, y = torch.randn(4, 2, 4, 4), torch.tensor([1, 10, 20, 49]), torch.tensor([0, 1, 4, 2])
    den = Denoiser(net, make_prediction("eps"), diffusion, clip_x0=False, num_classes=5, guidance_scale=1.0)
    x0, eps = den.with_labels(y)(x, t)
    assert torch.equal(eps, net(x, t, y))
    x0_g, eps_g = den.__class__(net, make_prediction("eps"), diffusion, clip_x0=False, num_classes=5,
                                guidance_scale=2.0).with_labels(y)(x, t)
    assert not torch.allclose(eps_g, eps)  # the labels matter, so guidance moves the prediction
    with pytest.raises(ValueError, match="with labels"):
        den(x, t)


def test_each_sample_draws_its_class_from_its_own_seed():
    whole = sample_classes(StackedGenerator(list(range(10, 22))).gens, 1000)
    parts = torch.cat([sample_classes(StackedGenerator(list(range(s, s + 4))).gens, 1000) for s in (10, 14, 18)])
    assert torch.equal(whole, parts) and whole.dtype == torch.long and len(set(whole.tolist())) > 6


def _dit_run(path, num_classes, total_kimg=0.064, class_dropout=0.1):
    return config_from_dict({
        "data": {"name": "digits", "path": str(path)},
        "model": {"name": "dit", "params": {"size": "S/2", "depth": 1, "hidden": 16, "heads": 2,
                                            "num_classes": num_classes, "class_dropout": class_dropout}},
        "diffusion": {"num_timesteps": 50}, "optim": {"lr": 2e-3},
        "train": {"batch_size": 32, "total_kimg": total_kimg, "log_every_kimg": 0.032,
                  "checkpoint_every_kimg": 0.064, "ema_halflife_kimg": 0.01, "device": "cpu", "seed": 0},
    }, "dit run")


def test_training_passes_labels_with_dropout_from_its_own_stream(digits_dir):
    from timestep_lab.data import PreparedData
    from timestep_lab.train.step import build_train_step

    labels = torch.from_numpy(np.asarray(PreparedData(digits_dir).labels))
    seen = []
    for _ in range(2):
        ts = build_train_step(_dit_run(digits_dir, 10, class_dropout=0.5))
        got, inner = [], ts.loss_fn
        ts.loss_fn = lambda x0, t, noise, y, inner=inner, got=got: (got.append(y.clone()), inner(x0, t, noise, y))[1]
        idx = ts.stream.state_dict()
        ts.step()
        seen.append(got[0])
    ts.stream.load_state_dict(idx)
    truth = labels[ts.stream.next(32)]
    assert torch.equal(seen[0], seen[1])  # the same seed: the same dropped labels
    kept = seen[0] != 10
    assert torch.equal(seen[0][kept], truth[kept]) and 0 < int((~kept).sum()) < 32


def test_conditional_dit_trains_and_samples_with_guidance_deterministically(digits_dir, tmp_path, capsys):
    from timestep_lab.config import dump_config

    dump_config(_dit_run(digits_dir, 10), tmp_path / "run.yaml")
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    cfg = SampleConfig(num_samples=5, method="ddim", steps=3, eta=0.0, batch_size=5, guidance_scale=1.5, clip_x0=True)
    info = generate(tmp_path / "run" / "model.pt", tmp_path / "a.npz", cfg, progress=False)
    generate(tmp_path / "run" / "model.pt", tmp_path / "b.npz", cfg, progress=False)
    assert (info["guidance_scale"], info["num_classes"]) == (1.5, 10)
    a, b = (np.load(tmp_path / f"{k}.npz")["images"] for k in "ab")
    assert a.shape == (5, 8, 8, 1) and a.tobytes() == b.tobytes()

    # an unconditional model refuses guidance; a conditional one refuses a folder without labels
    dump_config(_dit_run(digits_dir, 0, total_kimg=0.032), tmp_path / "uncond.yaml")
    assert main(["train", "--config", str(tmp_path / "uncond.yaml"), "--out", str(tmp_path / "u"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["sample", "--model", str(tmp_path / "u" / "model.pt"), "--out", str(tmp_path / "c.npz"),
                 "--set", "sample.guidance_scale=1.5", "--set", "sample.num_samples=2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: sample.guidance_scale") and "unconditional" in err[0]
    bare = tmp_path / "unlabelled"
    bare.mkdir()
    shutil.copy(digits_dir / "images.npy", bare / "images.npy")
    manifest = json.loads((digits_dir / "manifest.json").read_text())
    (bare / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if "label" not in k}))
    for path, nc, says in ((bare, 10, "has no class labels"), (digits_dir, 5, "holds labels 0..9")):
        dump_config(_dit_run(path, nc), tmp_path / "bad.yaml")
        assert main(["train", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: model.params.num_classes") and says in err[0], err
