"""Pretrained checkpoints from disk (offline): diffusers folders, guided-diffusion state dicts
and our own model files, each written by the test in its real on-disk format."""

from __future__ import annotations

import json

import pytest
import torch

from timestep_lab.artifacts.io import ArtifactError, UnsafeCheckpointError
from timestep_lab.checkpoints import (
    GUIDED_DIFFUSION_256_UNCOND,
    build_guided_diffusion_unet,
    diffusers_schedule,
    infer_guided_diffusion_flags,
    load_pretrained,
)
from timestep_lab.config import config_to_dict
from timestep_lab.models.unet import UNet
from timestep_lab.processes.schedules import get_schedule

# google/ddpm-cifar10-32 scheduler_config.json (DDPMScheduler)
DDPM_SCHEDULER = {"_class_name": "DDPMScheduler", "_diffusers_version": "0.1.1", "beta_end": 0.02,
                  "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": True,
                  "num_train_timesteps": 1000, "trained_betas": None, "variance_type": "fixed_small"}

# Tiny guided-diffusion-style flags (the 256x256 model's structure at toy size).
TINY_GD = dict(image_size=16, channels=32, channel_mult=(1, 2), num_res_blocks=2, attention_resolutions=(8,),
               num_head_channels=16, resblock_updown=True, use_scale_shift_norm=True, learn_sigma=True,
               norm_groups=32)


def _x_t(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g), torch.tensor([0, 17, 999])[: shape[0]]


# ------------------------------------------------------------------------------ diffusers


@pytest.fixture(scope="module")
def diffusers_folder(tmp_path_factory):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, block_out_channels=(32, 64),
                                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"), layers_per_block=1, norm_num_groups=8)
    with torch.no_grad():  # make the output depend on every layer
        for p in unet.parameters():
            p.add_(0.02 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("pretrained") / "ddpm-tiny"
    unet.save_pretrained(folder)
    (folder / "scheduler_config.json").write_text(json.dumps(DDPM_SCHEDULER))
    return folder, unet.eval()


def test_load_diffusers_matches_unet_and_reads_schedule(diffusers_folder):
    folder, unet = diffusers_folder
    net, info = load_pretrained(folder, "diffusers")
    x, t = _x_t((3, 3, 8, 8))
    with torch.no_grad():
        out = net(x, t)
        ref = unet(x, t).sample
    assert out.shape == (3, 3, 8, 8)
    torch.testing.assert_close(out, ref)
    assert not net.training
    assert info["format"] == "diffusers" and info["prediction"] == "eps"
    assert info["num_timesteps"] == 1000 and info["variance"] == "fixed_small"
    assert info["schedule"] == {"name": "linear", "params": {"beta_start": 1e-4, "beta_end": 0.02, "rescale": False}}
    assert info["schedule_error"] is None
    assert info["image_size"] == 8 and info["channels"] == 3 and info["out_channels"] == 3
    assert info["parameters"] == sum(p.numel() for p in unet.parameters())
    assert len(info["sha256"]) == 64 and info["weights"] == ["diffusion_pytorch_model.safetensors"]
    # the mapped schedule is the DDPM one
    s = info["schedule"]
    ab = get_schedule(s["name"], info["num_timesteps"], **s["params"])
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    torch.testing.assert_close(ab, torch.cumprod(1 - betas, 0))


def test_diffusers_schedule_mapping_reports_unsupported():
    assert diffusers_schedule({"beta_schedule": "squaredcos_cap_v2"})["schedule"]["name"] == "cosine"
    assert diffusers_schedule({"beta_schedule": "scaled_linear", "beta_start": 0.001, "beta_end": 0.01})["schedule"] == {
        "name": "scaled_linear", "params": {"beta_start": 0.001, "beta_end": 0.01}}
    bad = diffusers_schedule({"beta_schedule": "sigmoid"})
    assert bad["schedule"] is None and "sigmoid" in bad["schedule_error"]
    trained = diffusers_schedule({"beta_schedule": "linear", "trained_betas": [0.1, 0.2]})
    assert trained["schedule"] is None and "trained_betas" in trained["schedule_error"]
    assert diffusers_schedule({"prediction_type": "v_prediction"})["prediction"] == "v"


def test_load_diffusers_errors(diffusers_folder, tmp_path):
    with pytest.raises(ArtifactError, match="not found"):
        load_pretrained(tmp_path / "nope", "diffusers")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match="config.json"):
        load_pretrained(empty, "diffusers")
    (empty / "config.json").write_text((diffusers_folder[0] / "config.json").read_text())
    with pytest.raises(ArtifactError, match="no weights"):
        load_pretrained(empty, "diffusers")
    with pytest.raises(ValueError, match="unknown pretrained format"):
        load_pretrained(empty, "onnx")


def test_load_diffusers_without_scheduler_config_says_so(diffusers_folder, tmp_path):
    import shutil

    folder = tmp_path / "sub" / "unet-only"
    shutil.copytree(diffusers_folder[0], folder)
    (folder / "scheduler_config.json").unlink()
    _, info = load_pretrained(folder, "diffusers")
    assert info["schedule"] is None and "scheduler_config.json" in info["schedule_error"]
    (folder.parent / "scheduler_config.json").write_text(json.dumps(DDPM_SCHEDULER))  # found in the parent
    _, info = load_pretrained(folder, "diffusers")
    assert info["schedule"]["name"] == "linear" and info["schedule_error"] is None


# ------------------------------------------------------------------------------ guided-diffusion


def _expected_256_shapes(C: int = 256) -> dict[str, tuple[int, ...]]:
    """Key names and shapes of openai/guided-diffusion's 256x256_diffusion_uncond.pt, derived from
    guided_diffusion/unet.py (UNetModel, ResBlock, AttentionBlock) and script_util.create_model with
    the README flags: time_embed = Sequential(linear(C, 4C), SiLU, linear(4C, 4C)); input_blocks[0] =
    conv(3, C, 3); ResBlock = in_layers (GroupNorm32, SiLU, conv), emb_layers (SiLU, linear(4C, 2*out)
    with scale-shift norm), out_layers (norm, SiLU, dropout, conv), skip_connection (1x1 conv when
    the width changes); AttentionBlock = norm, qkv = conv_nd(1, ch, 3ch, 1), proj_out = conv_nd(1, ch,
    ch, 1); out = (normalization, SiLU, conv(C, 6, 3)). The bottom width is 4C (channel_mult[-1])."""
    return {
        "time_embed.0.weight": (4 * C, C),
        "time_embed.2.weight": (4 * C, 4 * C),
        "input_blocks.0.0.weight": (C, 3, 3, 3),
        "input_blocks.1.0.in_layers.0.weight": (C,),
        "input_blocks.1.0.in_layers.2.weight": (C, C, 3, 3),
        "input_blocks.1.0.emb_layers.1.weight": (2 * C, 4 * C),
        "input_blocks.1.0.out_layers.3.weight": (C, C, 3, 3),
        "input_blocks.3.0.in_layers.2.weight": (C, C, 3, 3),  # the resblock_updown down-sampler
        "middle_block.0.emb_layers.1.weight": (8 * C, 4 * C),
        "middle_block.1.norm.weight": (4 * C,),
        "middle_block.1.qkv.weight": (12 * C, 4 * C, 1),
        "middle_block.1.qkv.bias": (12 * C,),
        "middle_block.1.proj_out.weight": (4 * C, 4 * C, 1),
        "output_blocks.0.0.skip_connection.weight": (4 * C, 8 * C, 1, 1),
        "output_blocks.17.0.skip_connection.weight": (C, 2 * C, 1, 1),
        "out.0.weight": (C,),
        "out.2.weight": (6, C, 3, 3),
    }


def test_guided_diffusion_256_flags_give_the_released_key_names_and_shapes():
    with torch.device("meta"):  # no memory: the real 552.8M-parameter architecture
        net = build_guided_diffusion_unet(GUIDED_DIFFUSION_256_UNCOND)
    state = net.state_dict()
    for key, shape in _expected_256_shapes().items():
        assert key in state, key
        assert tuple(state[key].shape) == shape, key
    assert len(state) == 566
    # attention (ds 8, 16, 32 = resolutions 32, 16, 8) in input blocks 10, 11, 13, 14, 16, 17
    assert sorted(k for k in state if k.startswith("input_blocks") and k.endswith("qkv.weight")) == sorted(
        f"input_blocks.{i}.1.qkv.weight" for i in (10, 11, 13, 14, 16, 17))
    assert not any(".h_upd." in k or ".x_upd." in k for k in state)  # parameter-free up/down sampling
    inferred = infer_guided_diffusion_flags(state)
    assert inferred["channels"] == 256 and inferred["channel_mult"] == (1, 1, 2, 2, 4, 4)
    assert inferred["num_res_blocks"] == 2 and inferred["attention_ds"] == (8, 16, 32)
    assert inferred["learn_sigma"] and inferred["use_scale_shift_norm"] and inferred["resblock_updown"]


@pytest.fixture
def tiny_gd_checkpoint(tmp_path):
    """A guided-diffusion-style checkpoint in the released format: a plain fp16 state dict."""
    torch.manual_seed(1)
    net = build_guided_diffusion_unet(TINY_GD)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    state = {k: v.half() for k, v in net.state_dict().items()}
    path = tmp_path / "tiny_diffusion_uncond.pt"
    torch.save(state, path)
    ref = build_guided_diffusion_unet(TINY_GD)
    ref.load_state_dict({k: v.float() for k, v in state.items()})  # the fp16-rounded weights
    return path, ref.eval(), state


def test_tiny_guided_diffusion_keys_follow_the_released_naming(tiny_gd_checkpoint):
    _, _, state = tiny_gd_checkpoint
    C = TINY_GD["channels"]
    expect = {
        "time_embed.0.weight": (4 * C, C),
        "input_blocks.0.0.weight": (C, 3, 3, 3),
        "input_blocks.1.0.in_layers.0.weight": (C,),
        "input_blocks.1.0.emb_layers.1.weight": (2 * C, 4 * C),
        "input_blocks.3.0.in_layers.2.weight": (C, C, 3, 3),
        "middle_block.1.qkv.weight": (6 * C, 2 * C, 1),
        "middle_block.1.proj_out.weight": (2 * C, 2 * C, 1),
        "output_blocks.0.0.skip_connection.weight": (2 * C, 4 * C, 1, 1),
        "out.2.weight": (6, C, 3, 3),
    }
    for key, shape in expect.items():
        assert tuple(state[key].shape) == shape, key
    assert all(v.dtype == torch.float16 for v in state.values())


def test_load_guided_diffusion_returns_eps_channels(tiny_gd_checkpoint):
    path, ref, _ = tiny_gd_checkpoint
    net, info = load_pretrained(path, "guided_diffusion", image_size=16, overrides={"num_head_channels": 16})
    x, t = _x_t((2, 3, 16, 16), seed=3)
    with torch.no_grad():
        out = net(x, t)
        full = ref(x, t)
    assert out.shape == (2, 3, 16, 16) and full.shape == (2, 6, 16, 16)
    torch.testing.assert_close(out, full[:, :3])
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert info["format"] == "guided_diffusion" and info["prediction"] == "eps" and info["learn_sigma"]
    assert info["num_timesteps"] == 1000 and info["schedule"]["name"] == "linear"
    assert info["channels"] == 3 and info["out_channels"] == 6 and info["image_size"] == 16
    assert info["stored_dtypes"] == ["float16"] and len(info["sha256"]) == 64
    assert info["flags"]["channels"] == 32 and info["flags"]["channel_mult"] == [1, 2]
    assert info["flags"]["attention_resolutions"] == [8]
    assert info["parameters"] == sum(p.numel() for p in ref.parameters())


def test_load_guided_diffusion_mismatch_names_file_and_keys(tiny_gd_checkpoint, tmp_path):
    path, _, state = tiny_gd_checkpoint
    broken = dict(state)
    broken["middle_block.1.qkv_renamed.weight"] = broken.pop("middle_block.1.qkv.weight")
    bad = tmp_path / "broken.pt"
    torch.save(broken, bad)
    with pytest.raises(ArtifactError, match=r"broken\.pt.*middle_block\.1\.qkv\.weight"):
        load_pretrained(bad, "guided_diffusion", image_size=16, overrides={"num_head_channels": 16})
    # flags that disagree with the file (attention where the file has none)
    with pytest.raises(ArtifactError, match="tiny_diffusion_uncond.pt"):
        load_pretrained(path, "guided_diffusion", image_size=16,
                        overrides={"num_head_channels": 16, "attention_resolutions": (16, 8)})
    # num_head_channels that does not divide the width is a clear error too
    with pytest.raises(ArtifactError, match="tiny_diffusion_uncond.pt"):
        load_pretrained(path, "guided_diffusion", image_size=16, overrides={"num_head_channels": 24})
    with pytest.raises(ArtifactError, match="not found"):
        load_pretrained(tmp_path / "missing.pt", "guided_diffusion")


class Evil:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_load_guided_diffusion_refuses_code_pickles(tmp_path):
    path = tmp_path / "evil_diffusion.pt"
    torch.save({"input_blocks.0.0.weight": torch.zeros(1), "x": Evil()}, path)
    with pytest.raises(UnsafeCheckpointError, match="evil_diffusion.pt"):
        load_pretrained(path, "guided_diffusion")


def test_load_our_own_model_file(tmp_path):
    from timestep_lab.artifacts.io import save_torch
    from timestep_lab.checkpoints import MODEL_FORMAT
    from timestep_lab.components import build_model
    from timestep_lab.config import config_from_dict, config_to_dict

    cfg = config_from_dict({"model": {"channels": 8, "channel_mult": [1, 2], "num_res_blocks": 1, "norm_groups": 4},
                            "diffusion": {"num_timesteps": 100, "prediction": "v"}}, "test")
    torch.manual_seed(2)
    model = build_model(cfg, 8, 1)
    path = tmp_path / "model.pt"
    save_torch({"format": MODEL_FORMAT, "config": config_to_dict(cfg), "image_size": 8, "channels": 1,
                "model": model.state_dict(), "ema": model.state_dict()}, path)
    net, info = load_pretrained(path, "timestep_lab")
    x = torch.randn(2, 1, 8, 8)
    t = torch.tensor([3, 50])
    with torch.no_grad():
        torch.testing.assert_close(net(x, t), model.eval()(x, t))
    assert info["prediction"] == "v" and info["num_timesteps"] == 100 and info["image_size"] == 8
    assert info["schedule"]["name"] == "linear" and info["channels"] == 1


def test_guided_diffusion_flag_inference_on_other_structures():
    # no resblock_updown, additive time embedding, attention only at the bottom, 3 levels, 1 res block
    flags = dict(image_size=32, channels=32, channel_mult=(1, 2, 2), num_res_blocks=1, attention_resolutions=(8,),
                 num_head_channels=32, resblock_updown=False, use_scale_shift_norm=False, learn_sigma=False,
                 norm_groups=32)
    with torch.device("meta"):
        net = build_guided_diffusion_unet(flags)
    got = infer_guided_diffusion_flags(net.state_dict())
    assert got["channel_mult"] == (1, 2, 2) and got["num_res_blocks"] == 1 and got["attention_ds"] == (4,)
    assert not got["resblock_updown"] and not got["use_scale_shift_norm"] and not got["learn_sigma"]
    assert isinstance(net, UNet)


def test_load_guided_diffusion_with_a_model_config(tiny_gd_checkpoint):
    from timestep_lab.config import ModelConfig

    path, ref, _ = tiny_gd_checkpoint
    cfg = ModelConfig(channels=32, channel_mult=(1, 2), num_res_blocks=2, attention_resolutions=(8,),
                      num_head_channels=16, resblock_updown=True, use_scale_shift_norm=True, norm_groups=32)
    net, info = load_pretrained(path, "guided_diffusion", image_size=16, overrides=cfg)
    x, t = _x_t((1, 3, 16, 16), seed=4)
    with torch.no_grad():
        torch.testing.assert_close(net(x, t), ref(x, t)[:, :3])
    assert info["learn_sigma"]  # from the file, not the config's default
    with pytest.raises(ArtifactError, match="channels=48"):  # a config that disagrees with the file
        load_pretrained(path, "guided_diffusion", image_size=16,
                        overrides=ModelConfig(channels=48, channel_mult=(1, 2), num_res_blocks=2, num_head_channels=16,
                                              attention_resolutions=(8,), resblock_updown=True,
                                              use_scale_shift_norm=True, norm_groups=16))


# ------------------------------------------------------------------------------ fine-tuning a diffusers folder

# A DDPMScheduler config that differs from tiny_config's process (T = 100, linear), so the tests
# see that a fine-tune run takes T, schedule and variance from the folder, not from its base.
TINY_SCHEDULER = {"_class_name": "DDPMScheduler", "_diffusers_version": "0.42.1", "beta_schedule": "squaredcos_cap_v2",
                  "num_train_timesteps": 50, "prediction_type": "epsilon", "trained_betas": None,
                  "variance_type": "fixed_small", "clip_sample": True}


@pytest.fixture(scope="module")
def diffusers_digits_folder(tmp_path_factory):
    """A tiny 1-channel 8x8 UNet2DModel (the digits' shape) saved with save_pretrained, plus a
    scheduler_config.json: the on-disk layout of google/ddpm-cifar10-32 at toy size."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(1)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16),
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"), layers_per_block=1, norm_num_groups=4)
    with torch.no_grad():  # weights no fresh initialisation reproduces, and an output that depends on every layer
        for p in unet.parameters():
            p.add_(0.05 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("pretrained") / "ddpm-digits"
    unet.save_pretrained(folder)
    (folder / "scheduler_config.json").write_text(json.dumps(TINY_SCHEDULER))
    return folder, unet.eval()


def _diffusers_model_cfg(folder, **model):
    from timestep_lab.config import config_from_dict

    return config_from_dict({"model": {"name": "diffusers_unet2d", "pretrained": str(folder),
                                       "pretrained_format": "diffusers", **model},
                             "diffusion": {"num_timesteps": 50}}, "test")


def test_diffusers_unet2d_model_entry_is_the_folders_unet(diffusers_digits_folder):
    from timestep_lab.components import build_model

    folder, unet = diffusers_digits_folder
    net = build_model(_diffusers_model_cfg(folder), 8, 1)
    assert net.training and all(p.requires_grad for p in net.parameters())  # trainable, like our UNet
    assert set(net.state_dict()) == {f"unet.{k}" for k in unet.state_dict()}
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    t = torch.tensor([0, 17, 49])
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x, t), unet(x, t).sample, rtol=0, atol=0)


def test_diffusers_unet2d_rejects_what_does_not_apply(diffusers_digits_folder, tmp_path):
    from timestep_lab.components import build_model
    from timestep_lab.config import ConfigError, config_from_dict

    folder, _ = diffusers_digits_folder
    with pytest.raises(ConfigError, match=r"model.channels, model.dropout: do not apply to model diffusers_unet2d"):
        build_model(_diffusers_model_cfg(folder, channels=128, dropout=0.1), 8, 1)
    with pytest.raises(ConfigError, match="needs model.pretrained"):
        build_model(config_from_dict({"model": {"name": "diffusers_unet2d"}}, "test"), 8, 1)
    with pytest.raises(ConfigError, match="in_channels=1, out_channels=1; this run needs 3 input channels"):
        build_model(_diffusers_model_cfg(folder), 8, 3)  # RGB data on a 1-channel model
    mixed = config_from_dict({**config_to_dict(_diffusers_model_cfg(folder)), "diffusion": {"prediction": "mixed"}})
    with pytest.raises(ConfigError, match="3 output channels"):  # three heads need three times the channels
        build_model(mixed, 8, 1)
    with pytest.raises(ArtifactError, match="diffusers model folder not found"):
        build_model(_diffusers_model_cfg(tmp_path / "nope"), 8, 1)


def test_write_run_config_for_a_diffusers_init_takes_model_and_process_from_the_folder(diffusers_digits_folder,
                                                                                        digits_dir, tmp_path):
    import shutil

    from conftest import tiny_config

    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.components import build_diffusion
    from timestep_lab.config import load_config
    from timestep_lab.workflow import write_run_config

    folder, _ = diffusers_digits_folder
    path = tmp_path / "run.yaml"
    write_run_config(config_to_dict(tiny_config(digits_dir, diffusion={"schedule_params": {"rescale": True}})),
                     str(path), init_from=str(folder))
    cfg = load_config(path)
    assert cfg.train.init_from == str(folder)
    assert (cfg.model.name, cfg.model.pretrained, cfg.model.pretrained_format) == (
        "diffusers_unet2d", str(folder), "diffusers")
    assert cfg.model.channels == 16 and cfg.model.norm_groups == 8  # tiny_config's UNet fields are gone (defaults)
    d = cfg.diffusion
    assert (d.num_timesteps, d.schedule, dict(d.schedule_params), d.prediction, d.variance) == (
        50, "cosine", {"s": 0.008, "max_beta": 0.999}, "eps", "fixed_small")  # linear's rescale did not leak
    # the same process as the folder gets at inference
    reference = load_for_inference(folder, "diffusers")
    torch.testing.assert_close(build_diffusion(cfg).alpha_bar, reference.diffusion.alpha_bar)
    # a folder without a scheduler config cannot be fine-tuned on a known process: say so, naming it
    bare = tmp_path / "bare" / "unet"
    shutil.copytree(folder, bare)
    (bare / "scheduler_config.json").unlink()
    with pytest.raises(ArtifactError, match="no scheduler_config.json"):
        write_run_config(config_to_dict(tiny_config(digits_dir)), str(tmp_path / "bad.yaml"), init_from=str(bare))


def test_finetune_init_from_diffusers_folder_trains_and_reloads(diffusers_digits_folder, digits_dir, tmp_path):
    import subprocess
    import sys

    import numpy as np
    from conftest import tiny_config

    from timestep_lab.checkpoints import load_for_inference, load_model
    from timestep_lab.config import load_config
    from timestep_lab.generate.sampling import load_samples
    from timestep_lab.train import train
    from timestep_lab.workflow import write_run_config

    folder, unet = diffusers_digits_folder
    lr = 1e-4
    # one optimizer step: Adam's first update is lr * g / (|g| + eps), at most lr per weight, so
    # weights within lr of the folder's prove training started from them (a fresh init is far off)
    base = tiny_config(digits_dir, optim={"lr": lr}, train={"total_kimg": 0.032, "log_every_kimg": 0.032})
    write_run_config(config_to_dict(base), str(tmp_path / "run.yaml"), init_from=str(folder))
    cfg = load_config(tmp_path / "run.yaml")
    res = train(cfg, tmp_path / "ft", progress=False)
    assert res.status == "ok"
    stored = torch.load(tmp_path / "ft" / "model.pt", weights_only=True)
    start = {f"unet.{k}": v for k, v in unet.state_dict().items()}
    for key in ("model", "ema"):
        assert stored[key].keys() == start.keys()
        for k, v in stored[key].items():
            assert (v - start[k]).abs().max() <= lr * 1.01, (key, k)  # 1%: float32 rounding
    assert any(not torch.equal(v, start[k]) for k, v in stored["model"].items())  # it did train

    # model.pt rebuilds the network from its config (the folder) and loads the trained weights
    trained = type(unet).from_pretrained(str(folder), local_files_only=True).eval()
    trained.load_state_dict({k.removeprefix("unet."): v for k, v in stored["ema"].items()})
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    t = torch.tensor([0, 10, 30, 49])
    net, run_cfg, _ = load_model(tmp_path / "ft" / "model.pt")
    loaded = load_for_inference(tmp_path / "ft" / "model.pt")
    with torch.no_grad():
        expected = trained(x, t).sample
        torch.testing.assert_close(net(x, t), expected, rtol=0, atol=0)
        torch.testing.assert_close(loaded.net(x, t), expected, rtol=0, atol=0)
    assert run_cfg.model.name == "diffusers_unet2d" and loaded.diffusion.T == 50

    # and the CLI samples from it
    out = tmp_path / "samples.npz"
    r = subprocess.run([sys.executable, "-m", "timestep_lab", "sample", "--model", str(tmp_path / "ft" / "model.pt"),
                        "--out", str(out), "--set", "sample.num_samples=3", "--set", "sample.steps=2",
                        "--set", "sample.batch_size=3", "--device", "cpu", "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    images, seeds, meta = load_samples(out)
    assert images.shape == (3, 8, 8, 1) and images.dtype == np.uint8 and seeds.tolist() == [0, 1, 2]
    assert meta["steps"] == 2


def test_init_from_diffusers_folder_into_our_unet_names_the_fix(diffusers_digits_folder, digits_dir, tmp_path):
    from conftest import tiny_config

    from timestep_lab.train import train

    folder, _ = diffusers_digits_folder
    cfg = tiny_config(digits_dir, train={"init_from": str(folder), "total_kimg": 0.032})  # model.name unet
    with pytest.raises(ArtifactError, match="needs model: {name: diffusers_unet2d"):
        train(cfg, tmp_path / "ft", progress=False)
