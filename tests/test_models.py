import pytest
import torch

from timestep_lab.components import build_model
from timestep_lab.config import load_config
from timestep_lab.models.unet import UNet, timestep_embedding


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def test_ddpm_cifar10_configuration_has_35_7m_parameters():
    # Ho et al. 2020: 35.7M; google/ddpm-cifar10-32 has exactly 35,746,307 parameters
    m = UNet(image_size=32, in_channels=3, out_channels=3, channels=128, channel_mult=(1, 2, 2, 2),
             num_res_blocks=2, attention_resolutions=(16,), dropout=0.1)
    assert n_params(m) == 35_746_307


def test_digits_model_is_small_and_shapes_follow_prediction_type():
    cfg = load_config(None)
    m = build_model(cfg, image_size=8, channels=1)
    assert 100_000 <= n_params(m) <= 200_000
    x, t = torch.randn(3, 1, 8, 8), torch.tensor([0, 5, 999])
    assert m(x, t).shape == (3, 1, 8, 8)
    mixed = build_model(load_config(None, ["diffusion.prediction=mixed"]), image_size=8, channels=1)
    assert mixed(x, t).shape == (3, 3, 8, 8)


def test_adm_options_run_and_attention_is_used():
    m = UNet(image_size=16, in_channels=3, out_channels=6, channels=32, channel_mult=(1, 2), num_res_blocks=1,
             attention_resolutions=(8,), num_head_channels=16, resblock_updown=True, use_scale_shift_norm=True)
    out = m(torch.randn(2, 3, 16, 16), torch.tensor([1, 2]))
    assert out.shape == (2, 6, 16, 16)
    names = [n for n, _ in m.named_parameters()]
    assert any(".qkv." in n for n in names) and any("h_upd" in n or "in_layers" in n for n in names)
    assert "out.2.weight" in names and "input_blocks.0.0.weight" in names and "middle_block.1.qkv.weight" in names


def test_output_depends_on_t_and_is_initially_zero():
    m = UNet(image_size=8, in_channels=1, out_channels=1, channels=8, channel_mult=(1, 2), num_res_blocks=1,
             norm_groups=4)
    x = torch.randn(2, 1, 8, 8)
    assert torch.count_nonzero(m(x, torch.tensor([0, 1]))) == 0  # zero-initialised output conv
    for p in m.parameters():  # the zero-initialised convs hide the timestep at init
        torch.nn.init.normal_(p, std=0.1)
    a, b = m(x, torch.tensor([0, 0])), m(x, torch.tensor([500, 500]))
    assert not torch.allclose(a, b)


def test_timestep_embedding_closed_form():
    e = timestep_embedding(torch.tensor([0, 3]), 4)
    # freqs = [1, 1e-2]; [cos(t f), sin(t f)]
    torch.testing.assert_close(e[0], torch.tensor([1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(e[1], torch.tensor([torch.cos(torch.tensor(3.0)), torch.cos(torch.tensor(0.03)),
                                                   torch.sin(torch.tensor(3.0)), torch.sin(torch.tensor(0.03))]))


def test_bad_image_size():
    with pytest.raises(ValueError, match="not divisible"):
        UNet(image_size=10, in_channels=1, out_channels=1, channel_mult=(1, 2, 2))
