"""DiT (timestep_lab.models.dit) against the official definitions: parameters and FLOPs of the
published sizes (DiT paper Table 4), adaLN-Zero, the null class and label dropout, patch layout,
and the ``dit`` model entry chosen by config."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from timestep_lab.components import build_model, check_config
from timestep_lab.config import ConfigError, load_config
from timestep_lab.models.dit import DIT_SIZES, DiT, DiTShape, drop_labels

# DiT paper Table 4: parameters (M) and forward GFLOPs (fvcore: one per multiply-add) at 256 px,
# i.e. 32x32x4 latents, class-conditional on ImageNet's 1000 classes, learned sigma (8 outputs)
TABLE4 = {"S/2": (33, 6.06), "B/2": (130, 23.01), "L/2": (458, 80.71), "XL/2": (675, 118.64)}


def official(size: str) -> DiT:
    return DiT(DIT_SIZES[size], input_size=32, in_channels=4, out_channels=8, num_classes=1000)


def test_s2_has_the_official_33m_parameters():
    with torch.device("meta"):
        net = official("S/2")
    # 32,865,056: the layers of the official models.py DiT_S_2 (which also holds its frozen 256x384
    # pos_embed as a parameter, 98,304 more) -- Table 4: 33M
    assert sum(p.numel() for p in net.parameters()) == 32_865_056


@pytest.mark.parametrize("size", list(TABLE4))
def test_published_sizes_match_table4_parameters_and_flops(size):
    params_m, gflops = TABLE4[size]
    with torch.device("meta"):
        net = official(size).eval()
        x, t, y = torch.randn(1, 4, 32, 32), torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        net(x, t, y)
    assert sum(p.numel() for p in net.parameters()) / 1e6 == pytest.approx(params_m, rel=0.01)
    # our counter: 2 FLOPs per multiply-add, fvcore's (the paper's): 1
    assert counter.get_total_flops() / 2e9 == pytest.approx(gflops, rel=0.002)


def _tiny(num_classes=0, depth=2, class_dropout=0.1, seed=0):
    torch.manual_seed(seed)
    net = DiT(DiTShape(depth, 16, 2), input_size=8, in_channels=3, out_channels=5, num_classes=num_classes,
              class_dropout=class_dropout)
    with torch.no_grad():  # leave adaLN-Zero's zero start so every path carries signal
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net


def test_adaln_zero_starts_at_zero_output_and_shapes():
    net = DiT(DiTShape(2, 16, 2), input_size=8, in_channels=3, out_channels=5, num_classes=10)
    out = net(torch.randn(4, 3, 8, 8), torch.tensor([0, 10, 500, 999]), torch.tensor([1, 2, 3, 4]))
    assert out.shape == (4, 5, 8, 8) and torch.all(out == 0)


def test_patches_map_back_to_their_own_pixels():
    net = _tiny(depth=0).eval()  # no attention: each output patch depends on its own input patch only
    x = torch.randn(1, 3, 8, 8)
    base = net(x, torch.tensor([3]))
    x2 = x.clone()
    x2[0, 1, 5, 2] += 1.0  # row 5, column 2: the patch of rows 4-5, columns 2-3
    changed = (net(x2, torch.tensor([3])) - base).abs().amax(dim=(0, 1)) > 0
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[4:6, 2:4] = True
    assert torch.equal(changed, expected)


def test_null_class_and_time_dependence_and_no_dropout_inside():
    net = _tiny(num_classes=10, class_dropout=0.25)
    x, t = torch.randn(3, 3, 8, 8), torch.tensor([1, 400, 900])
    null = net(x, t, None)
    assert torch.equal(null, net(x, t, torch.full((3,), 10)))
    assert not torch.allclose(null, net(x, t, torch.tensor([0, 1, 2])))
    assert not torch.allclose(null, net(x, t + 50, None))
    # training mode draws nothing: label dropout is the training step's, from its own generator
    y = torch.zeros(1000, dtype=torch.long)
    assert torch.equal(net.train().labels(y, len(y), y.device), y)
    with pytest.raises(ValueError, match="unconditional DiT"):
        _tiny()(x, t, torch.tensor([0, 1, 2]))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_label_dropout_rate_matches_its_closed_form(p):
    """drop_labels turns each label into the null class with probability p: over n = 200,000
    draws the count is Binomial(n, p), within 5 standard deviations sqrt(n p (1 - p)) of n p; the
    kept labels are unchanged; the same generator seed gives the same draws."""
    n = 200_000
    y = torch.arange(n) % 7
    out = drop_labels(y, p, 7, torch.Generator().manual_seed(0))
    dropped = int((out == 7).sum())
    assert abs(dropped - n * p) <= 5 * (n * p * (1 - p)) ** 0.5
    assert torch.equal(out[out != 7], y[out != 7])
    assert torch.equal(out, drop_labels(y, p, 7, torch.Generator().manual_seed(0)))


def test_dit_entry_is_chosen_by_config():
    cfg = load_config(None, ["model.name=dit", "model.params={size: S/2, depth: 1, hidden: 32, heads: 4}"])
    check_config(cfg)
    net = build_model(cfg, image_size=8, channels=1)
    assert isinstance(net, DiT) and net.shape == DiTShape(1, 32, 4, 2) and net.num_classes == 0
    assert net(torch.randn(2, 1, 8, 8), torch.tensor([0, 999])).shape == (2, 1, 8, 8)


@pytest.mark.parametrize("override, key", [
    ("model.params={size: M/3}", "size"),
    ("model.params={size: S/2, heads: 5}", "hidden"),
    ("model.params={class_dropout: 1.5}", "class_dropout"),
])
def test_bad_dit_params_name_the_key(override, key):
    with pytest.raises(ConfigError, match=rf"model\.params.*{key}"):
        check_config(load_config(None, ["model.name=dit", override]))


def test_unet_fields_do_not_apply_to_dit():
    cfg = load_config(None, ["model.name=dit", "model.params={size: S/2, depth: 1, hidden: 32, heads: 4}",
                             "model.channels=64"])
    with pytest.raises(ConfigError, match="model.channels: do not apply to model dit"):
        build_model(cfg, image_size=8, channels=1)
