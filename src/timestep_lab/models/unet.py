"""ADM-style UNet (Ho et al. 2020; Dhariwal & Nichol 2021): ``f(x_t, t) -> [B, out_channels, H, W]``.

The network knows nothing about diffusion: ``t`` is just a number per sample, embedded
sinusoidally. It scales from a ~100k-parameter model for 8x8 digits to the 35.7M DDPM CIFAR-10
configuration (``channels=128, channel_mult=(1,2,2,2), num_res_blocks=2,
attention_resolutions=(16,), dropout=0.1``) and the guided-diffusion models (scale-shift norm,
resblock up/down sampling, multi-head attention).

Module and parameter names follow guided-diffusion's ``UNetModel`` (``input_blocks``,
``middle_block``, ``output_blocks``, ``in_layers``/``emb_layers``/``out_layers``, ``qkv``,
``proj_out``, legacy head ordering), so its released state dicts load without renaming.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["UNet", "timestep_embedding"]


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal embedding ``[B] -> [B, dim]``: ``[cos(t w_i), sin(t w_i)]``,
    ``w_i = max_period^(-i / (dim/2))`` (Transformer / ADM convention)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class GroupNorm32(nn.GroupNorm):
    """GroupNorm computed in float32 (stable under bf16 autocast)."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.float()).type(x.dtype)


def normalization(channels: int, groups: int) -> nn.GroupNorm:
    # fewer channels than groups (tiny models): one group per channel
    g = math.gcd(channels, groups) if channels % groups else groups
    return GroupNorm32(min(g, channels), channels)


def zero_module(module: nn.Module) -> nn.Module:
    for p in module.parameters():
        nn.init.zeros_(p)
    return module


class TimestepEmbedSequential(nn.Sequential):
    """A sequence whose residual blocks also receive the timestep embedding."""

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:  # type: ignore[override]
        for layer in self:
            x = layer(x, emb) if isinstance(layer, ResBlock) else layer(x)
        return x


class Upsample(nn.Module):
    """Nearest-neighbour x2, then an optional 3x3 convolution."""

    def __init__(self, channels: int, use_conv: bool):
        super().__init__()
        self.use_conv = use_conv
        if use_conv:
            self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.conv(x) if self.use_conv else x


class Downsample(nn.Module):
    """Strided 3x3 convolution, or 2x2 average pooling."""

    def __init__(self, channels: int, use_conv: bool):
        super().__init__()
        self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1) if use_conv else nn.AvgPool2d(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x)


class ResBlock(nn.Module):
    """GN-SiLU-conv, + timestep embedding (added, or scale-shift on the second norm),
    GN-SiLU-dropout-conv(zero init), plus a (1x1 conv) skip. Optional up/down sampling inside."""

    def __init__(self, channels: int, emb_channels: int, dropout: float, out_channels: int, *,
                 use_scale_shift_norm: bool = False, up: bool = False, down: bool = False, groups: int = 32):
        super().__init__()
        self.use_scale_shift_norm = use_scale_shift_norm
        self.in_layers = nn.Sequential(normalization(channels, groups), nn.SiLU(), nn.Conv2d(channels, out_channels, 3, padding=1))
        self.updown = up or down
        if up:
            self.h_upd, self.x_upd = Upsample(channels, False), Upsample(channels, False)
        elif down:
            self.h_upd, self.x_upd = Downsample(channels, False), Downsample(channels, False)
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, 2 * out_channels if use_scale_shift_norm else out_channels))
        self.out_layers = nn.Sequential(
            normalization(out_channels, groups), nn.SiLU(), nn.Dropout(p=dropout),
            zero_module(nn.Conv2d(out_channels, out_channels, 3, padding=1)),
        )
        self.skip_connection = nn.Identity() if out_channels == channels else nn.Conv2d(channels, out_channels, 1)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        if self.updown:
            h = self.in_layers[:-1](x)
            h, x = self.h_upd(h), self.x_upd(x)
            h = self.in_layers[-1](h)
        else:
            h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)[:, :, None, None]
        if self.use_scale_shift_norm:
            scale, shift = emb_out.chunk(2, dim=1)
            h = self.out_layers[0](h) * (1 + scale) + shift
            h = self.out_layers[1:](h)
        else:
            h = self.out_layers(h + emb_out)
        return self.skip_connection(x) + h


class AttentionBlock(nn.Module):
    """Multi-head self-attention over pixels with a residual connection.

    ``qkv`` is a 1x1 conv to 3C channels laid out per head as [q, k, v] (guided-diffusion's
    "legacy" order); attention uses ``scaled_dot_product_attention`` (flash/efficient kernels)."""

    def __init__(self, channels: int, num_heads: int = 1, num_head_channels: int = -1, groups: int = 32):
        super().__init__()
        if num_head_channels == -1:
            self.num_heads = num_heads
        else:
            if channels % num_head_channels:
                raise ValueError(f"channels {channels} not divisible by num_head_channels {num_head_channels}")
            self.num_heads = channels // num_head_channels
        self.norm = normalization(channels, groups)
        self.qkv = nn.Conv1d(channels, channels * 3, 1)
        self.proj_out = zero_module(nn.Conv1d(channels, channels, 1))

    def forward(self, x: Tensor) -> Tensor:
        b, c, *spatial = x.shape
        x_flat = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x_flat))  # [B, 3C, L]
        L = qkv.shape[-1]
        ch = c // self.num_heads
        # legacy order: per head [q; k; v] blocks of ch channels
        q, k, v = qkv.reshape(b, self.num_heads, 3 * ch, L).split(ch, dim=2)  # each [B, H, ch, L]
        h = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
        h = h.transpose(-1, -2).reshape(b, c, L)
        return (x_flat + self.proj_out(h)).reshape(b, c, *spatial)


class UNet(nn.Module):
    """ADM UNet.

    :param image_size: input resolution (square), used to place attention.
    :param in_channels, out_channels: image channels in; network output channels.
    :param channels: base width; level ``i`` has ``channels * channel_mult[i]``.
    :param num_res_blocks: residual blocks per level (the decoder has one more).
    :param attention_resolutions: feature-map resolutions (pixels) that get self-attention.
    :param resblock_updown: down/up-sample inside residual blocks (ADM) instead of conv layers.
    :param use_scale_shift_norm: FiLM-style timestep conditioning (ADM) instead of addition.
    ``forward(x [B, in, H, W], t [B]) -> [B, out, H, W]``.
    """

    def __init__(self, *, image_size: int, in_channels: int, out_channels: int, channels: int = 128,
                 channel_mult: tuple[int, ...] = (1, 2, 2, 2), num_res_blocks: int = 2,
                 attention_resolutions: tuple[int, ...] = (16,), dropout: float = 0.0, num_heads: int = 1,
                 num_head_channels: int = -1, resblock_updown: bool = False, use_scale_shift_norm: bool = False,
                 norm_groups: int = 32):
        super().__init__()
        if image_size % (2 ** (len(channel_mult) - 1)):
            raise ValueError(f"image_size {image_size} is not divisible by 2^{len(channel_mult) - 1} "
                             f"(channel_mult has {len(channel_mult)} levels)")
        self.image_size, self.in_channels, self.out_channels = image_size, in_channels, out_channels
        self.model_channels = channels
        emb_dim = channels * 4
        self.time_embed = nn.Sequential(nn.Linear(channels, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        attn_ds = {image_size // r for r in attention_resolutions}

        def res(cin: int, cout: int, **kw) -> ResBlock:
            return ResBlock(cin, emb_dim, dropout, cout, use_scale_shift_norm=use_scale_shift_norm, groups=norm_groups, **kw)

        def attn(c: int) -> AttentionBlock:
            return AttentionBlock(c, num_heads, num_head_channels, norm_groups)

        self.input_blocks = nn.ModuleList([TimestepEmbedSequential(nn.Conv2d(in_channels, channels, 3, padding=1))])
        skip_chans, ch, ds = [channels], channels, 1
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                layers: list[nn.Module] = [res(ch, channels * mult)]
                ch = channels * mult
                if ds in attn_ds:
                    layers.append(attn(ch))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                skip_chans.append(ch)
            if level != len(channel_mult) - 1:
                down = res(ch, ch, down=True) if resblock_updown else Downsample(ch, True)
                self.input_blocks.append(TimestepEmbedSequential(down))
                skip_chans.append(ch)
                ds *= 2
        self.middle_block = TimestepEmbedSequential(res(ch, ch), attn(ch), res(ch, ch))
        self.output_blocks = nn.ModuleList()
        for level, mult in list(enumerate(channel_mult))[::-1]:
            for i in range(num_res_blocks + 1):
                layers = [res(ch + skip_chans.pop(), channels * mult)]
                ch = channels * mult
                if ds in attn_ds:
                    layers.append(attn(ch))
                if level and i == num_res_blocks:
                    layers.append(res(ch, ch, up=True) if resblock_updown else Upsample(ch, True))
                    ds //= 2
                self.output_blocks.append(TimestepEmbedSequential(*layers))
        self.out = nn.Sequential(normalization(ch, norm_groups), nn.SiLU(), zero_module(nn.Conv2d(ch, out_channels, 3, padding=1)))

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        emb = self.time_embed(timestep_embedding(t, self.model_channels).to(x.dtype))
        h, skips = x, []
        for block in self.input_blocks:
            h = block(h, emb)
            skips.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
        return self.out(h)
