"""The latent data path through a tiny random AutoencoderKL saved in diffusers' format: the
encoding's moments and flips, the scaling factor, fresh posterior samples, the decode round trip,
the VAE's identity in the manifest, and one-line errors."""

import json

import numpy as np
import pytest
import torch

from timestep_lab.artifacts.io import ArtifactError, sha256_file
from timestep_lab.data import DataError, prepare
from timestep_lab.data.prepared import to_float
from timestep_lab.latents import (
    DEFAULT_SCALING,
    LatentData,
    decode_latents,
    encode_folder,
    encode_moments,
    load_vae,
    open_training_data,
    vae_info,
)

diffusers = pytest.importorskip("diffusers")


def tiny_vae(folder, scaling_factor=None):
    """A random AutoencoderKL of sd-vae-ft-ema's family: 2 levels (downsample 2), 4 latent channels."""
    torch.manual_seed(0)
    kw = {} if scaling_factor is None else {"scaling_factor": scaling_factor}
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16),
                                  down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                                  layers_per_block=1, norm_num_groups=4, sample_size=8, **kw)
    vae.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("latents")
    data = prepare("digits", None, root / "digits-train", split="train")  # 1438 8x8x1 images
    # the VAE takes RGB: a 3-channel copy of 24 digits
    images = np.repeat(np.array(np.load(data / "images.npy")[:24]), 3, axis=3)
    rgb = root / "rgb"
    rgb.mkdir()
    np.save(rgb / "images.npy", images)
    manifest = {"dataset": "digits", "split": "train", "count": 24, "shape": [8, 8, 3],
                "images_sha256": sha256_file(rgb / "images.npy")}
    (rgb / "manifest.json").write_text(json.dumps(manifest))
    vae = tiny_vae(root / "vae")
    out = encode_folder(rgb, vae, root / "rgb-latents", flip=True, batch_size=10)
    return rgb, vae, out, images


def test_moments_flips_scaling_and_identity(folders):
    rgb, vae_dir, out, images = folders
    vae, info = load_vae(vae_dir)
    assert info.scaling_factor == DEFAULT_SCALING and info.downsample == 2 and info.latent_channels == 4
    data = LatentData(out)
    assert (len(data), data.channels, data.resolution) == (24, 4, 4)
    x = to_float(torch.from_numpy(images).permute(0, 3, 1, 2))
    mean, std = encode_moments(vae, x)
    fmean, _ = encode_moments(vae, x.flip(3))
    np.testing.assert_allclose(data.arrays["mean"], mean.numpy(), rtol=2e-3, atol=1e-4)  # float16 storage
    np.testing.assert_allclose(data.arrays["std"], std.numpy(), rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(data.arrays["flip_mean"], fmean.numpy(), rtol=2e-3, atol=1e-4)
    assert not np.allclose(data.arrays["flip_mean"], data.arrays["mean"])  # a flip of latents is not the latent of a flip
    record = data.manifest["vae"]
    assert record["sha256"] == sha256_file(vae_dir / "diffusion_pytorch_model.safetensors")
    assert record["scaling_factor"] == DEFAULT_SCALING and data.identity["vae_sha256"] == record["sha256"]


def test_batches_are_scaled_fresh_posterior_samples(folders):
    _, _, out, _ = folders
    data, loader = open_training_data(out)
    idx = torch.arange(24)
    g = torch.Generator().manual_seed(3)
    z1, z2 = loader.batch(idx, g), loader.batch(idx, g)
    assert z1.shape == (24, 4, 4, 4) and not torch.equal(z1, z2)  # fresh noise per read
    assert torch.equal(z1, loader.batch(idx, torch.Generator().manual_seed(3)))  # same seed, same bytes
    mean = torch.from_numpy(np.array(data.arrays["mean"])).float()
    std = torch.from_numpy(np.array(data.arrays["std"])).float()
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(z1, DEFAULT_SCALING * (mean + std * noise))


def test_decode_round_trip_and_folder_scaling(folders, tmp_path):
    rgb, vae_dir, out, images = folders
    vae, info = load_vae(vae_dir)
    data = LatentData(out)
    z = DEFAULT_SCALING * torch.from_numpy(np.array(data.arrays["mean"][:5])).float()
    x_hat = decode_latents(vae, z, info.scaling_factor)
    # decoding divides by the factor: the VAE's own decode of the unscaled mean
    torch.testing.assert_close(x_hat, vae.decode(z / DEFAULT_SCALING).sample)
    assert x_hat.shape == (5, 3, 8, 8)
    other = tiny_vae(tmp_path / "vae2", scaling_factor=0.5)  # the folder's config says otherwise
    assert vae_info(other).scaling_factor == 0.5 and vae_info(other, 0.3).scaling_factor == 0.3


def test_errors_name_the_file(folders, tmp_path):
    rgb, vae_dir, out, _ = folders
    with pytest.raises(ArtifactError, match="VAE folder not found"):
        encode_folder(rgb, tmp_path / "nope", tmp_path / "x", flip=False)
    bad = tmp_path / "copy"
    bad.mkdir()
    for f in out.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    arr = np.load(bad / "std.npy")
    arr[0, 0, 0, 0] += 1
    np.save(bad / "std.npy", arr)
    with pytest.raises(DataError, match="std.npy: sha256 does not match"):
        LatentData(bad)
    plain = encode_folder(rgb, vae_dir, tmp_path / "noflip", flip=False)
    with pytest.raises(DataError, match="encoded without flipped"):
        open_training_data(plain, hflip=True)


def test_encode_latents_command(folders, tmp_path, capsys):
    from timestep_lab.cli import main

    rgb, vae_dir, out, _ = folders
    assert main(["encode-latents", f"--data={rgb}", f"--vae={vae_dir}", f"--out={tmp_path / 'z'}", "--flip", "--batch-size=10",
                 "--device=cpu", "--no-progress"]) == 0
    assert LatentData(tmp_path / "z").manifest["sha256"] == LatentData(out).manifest["sha256"]  # same bytes
    assert main(["encode-latents", f"--data={rgb}", f"--vae={tmp_path / 'none'}", f"--out={tmp_path / 'y'}"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "VAE folder not found" in err[0]


def test_a_dit_trains_on_latents_and_records_the_vae(folders, tmp_path):
    from timestep_lab.artifacts.io import load_torch
    from timestep_lab.config import SampleConfig, config_from_dict
    from timestep_lab.generate.sampling import generate
    from timestep_lab.train import train

    _, _, out, _ = folders
    cfg = config_from_dict({
        "data": {"name": "latents", "path": str(out), "hflip": True},
        "model": {"name": "dit", "params": {"size": "S/2", "depth": 1, "hidden": 16, "heads": 2}},
        "diffusion": {"num_timesteps": 50},
        "train": {"batch_size": 8, "total_kimg": 0.016, "log_every_kimg": 0.008, "checkpoint_every_kimg": 0.016,
                  "ema_halflife_kimg": 0.01, "device": "cpu", "seed": 0},
    }, "latent run")
    train(cfg, tmp_path / "run", progress=False)
    model = load_torch(tmp_path / "run" / "model.pt")
    assert (model["image_size"], model["channels"], model["status"]) == (4, 4, "ok")
    recorded = model["inputs"]["data"]
    assert recorded["vae_sha256"] == LatentData(out).manifest["vae"]["sha256"]
    assert recorded["scaling_factor"] == DEFAULT_SCALING
    # generation decodes the latents through the same VAE and records it
    info = generate(tmp_path / "run" / "model.pt", tmp_path / "samples.npz",
                    SampleConfig(num_samples=3, method="ddim", steps=4, batch_size=3, clip_x0=False), progress=False)
    images = np.load(tmp_path / "samples.npz")["images"]
    assert images.shape == (3, 8, 8, 3) and images.dtype == np.uint8
    assert info["vae"]["sha256"] == recorded["vae_sha256"] and info["vae"]["scaling_factor"] == DEFAULT_SCALING


def test_a_latent_study_trains_on_the_encoded_split():
    from timestep_lab.workflow import is_latent, latent_dir, run_config

    study = {"data": {"dataset": "imagenet", "resolution": 256, "train_split": "train"}, "base": {},
             "latent": {"vae": "data/weights/sd-vae-ft-ema"}}
    assert is_latent(study) and latent_dir(study["data"], "train") == "data/prepared/imagenet-256-train-latents"
    assert run_config(study, {})["data"]["path"] == "data/prepared/imagenet-256-train-latents"
    pixel = {**study, "latent": {"vae": None}}
    assert not is_latent(pixel) and run_config(pixel, {})["data"]["path"] == "data/prepared/imagenet-256-train"
