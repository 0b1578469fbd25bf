"""DiT (Peebles & Xie 2023, "Scalable Diffusion Models with Transformers"): a ViT on latent
patches with adaLN-Zero conditioning, ``f(x_t [B, C, H, W], t [B], y [B] | None) -> [B, C_out, H, W]``.

Written here after the official ``facebookresearch/DiT`` ``models.py`` (not diffusers'
``DiTTransformer2DModel``, whose every block carries its own timestep and label embedder:
docs/methods.md "DiT" says why and by how many parameters it differs):

* patchify: ``Conv2d(C, D, p, stride=p)`` -> ``N = (H/p)(W/p)`` tokens plus a fixed 2-D
  sin-cos position embedding (a buffer, not trained);
* conditioning ``c = MLP(sincos_256(t)) + E[y]`` (``E`` has ``num_classes + 1`` rows, the last
  the null class of classifier-free guidance; unconditional networks have no ``E``, ``c =
  MLP(sincos(t))``);
* ``depth`` blocks: ``x += g1 * Attn(LN(x)(1 + s1) + b1)``, ``x += g2 * MLP(LN(x)(1 + s2) + b2)``
  with ``(b1, s1, g1, b2, s2, g2) = Linear(SiLU(c))``, zero-initialised (adaLN-Zero: every block
  starts as the identity); the MLP is ``D -> 4D -> D`` with tanh-GELU;
* final layer: ``Linear(LN(x)(1 + s) + b) -> p^2 C_out`` per token (zero-initialised), unpatchified.

Published sizes (:data:`DIT_SIZES`, Table 1 of the paper): depth / hidden / heads, patch 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from timestep_lab.models.unet import timestep_embedding

__all__ = ["DIT_SIZES", "DiT", "DiTParams", "DiTShape", "drop_labels", "sincos_2d"]


@dataclass(frozen=True)
class DiTShape:
    """A DiT's widths: ``depth`` blocks of ``hidden`` channels in ``heads`` heads on ``patch`` x
    ``patch`` patches."""

    depth: int
    hidden: int
    heads: int
    patch: int = 2


#: DiT paper Table 1 (the ``/2`` is the patch size)
DIT_SIZES: dict[str, DiTShape] = {
    "S/2": DiTShape(12, 384, 6), "B/2": DiTShape(12, 768, 12),
    "L/2": DiTShape(24, 1024, 16), "XL/2": DiTShape(28, 1152, 16),
}



@dataclass(frozen=True)
class DiTParams:
    """``model.params`` of the ``dit`` entry: a published ``size`` (:data:`DIT_SIZES`), whose
    ``depth`` / ``hidden`` / ``heads`` / ``patch`` a non-zero field here replaces (tiny rehearsal
    networks); ``num_classes`` 0 for an unconditional network, else the number of classes (one
    more embedding row is the null class); ``class_dropout`` the training-time probability of
    replacing a label by the null class (DiT: 0.1)."""

    size: str = "XL/2"
    depth: int = 0
    hidden: int = 0
    heads: int = 0
    patch: int = 0
    num_classes: int = 0
    class_dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.size not in DIT_SIZES:
            raise ValueError(f"size must be one of {', '.join(DIT_SIZES)}, got {self.size!r}")
        for name in ("depth", "hidden", "heads", "patch", "num_classes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.class_dropout < 1.0:
            raise ValueError(f"class_dropout must be in [0, 1), got {self.class_dropout}")
        shape = self.shape()
        if shape.hidden % shape.heads or shape.hidden % 4:
            raise ValueError(f"hidden ({shape.hidden}) must be divisible by heads ({shape.heads}) and by 4")

    def shape(self) -> DiTShape:
        base = DIT_SIZES[self.size]
        return DiTShape(*(getattr(self, f) or getattr(base, f) for f in ("depth", "hidden", "heads", "patch")))


_FREQ_DIM = 256  # sinusoidal timestep features, as in the official TimestepEmbedder


def sincos_2d(dim: int, grid: int) -> Tensor:
    """Fixed 2-D position embedding ``[grid^2, dim]`` (MAE's ``get_2d_sincos_pos_embed``, which
    DiT uses): half the channels encode the column, half the row, each ``[sin(p w), cos(p w)]``
    with ``w_i = 10000^(-i / (dim/4))``."""
    if dim % 4:
        raise ValueError(f"DiT hidden size must be divisible by 4, got {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim / 4.0))
    pos = torch.arange(grid, dtype=torch.float64)
    rows, cols = torch.meshgrid(pos, pos, indexing="ij")

    def one(p: Tensor) -> Tensor:
        out = p.reshape(-1)[:, None] * omega[None]
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

    # MAE's grid is (w, h)-major: its first half of channels encodes the column index
    return torch.cat([one(cols), one(rows)], dim=1).float()


def drop_labels(y: Tensor, p: float, null: int, generator: torch.Generator) -> Tensor:
    """Label dropout of classifier-free guidance (DiT's ``LabelEmbedder.token_drop``): each label
    of ``y [B]`` becomes the null class ``null`` with probability ``p``, independently:
    ``drop_i = u_i < p``, ``u ~ U[0, 1)`` drawn from ``generator`` (``B`` numbers whatever ``p``,
    so the stream's position does not depend on ``p``)."""
    u = torch.rand(y.shape, generator=generator, device=generator.device).to(y.device)
    return torch.where(u < p, torch.full_like(y, null), y)


def _modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class _Attention(nn.Module):
    """Multi-head self-attention ``[B, N, D] -> [B, N, D]`` (qkv with bias, as timm's)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class _Block(nn.Module):
    """One adaLN-Zero block (paper Fig. 3): attention and MLP, each modulated and gated by ``c``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        b1, s1, g1, b2, s2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(_modulate(self.norm1(x), b1, s1))
        return x + g2.unsqueeze(1) * self.mlp(_modulate(self.norm2(x), b2, s2))


class DiT(nn.Module):
    """DiT on ``in_channels x input_size x input_size`` inputs (latents: 4 x 32 x 32 at 256 px).

    ``num_classes`` > 0: class-conditional; ``forward(x, t, y)`` takes labels ``y [B]`` in
    ``[0, num_classes)``, ``y = None`` (or the label ``num_classes``) is the null class. The
    label dropout that classifier-free guidance needs (each label replaced by the null class with
    probability ``class_dropout``) is the training step's, drawn from the run's own generator
    (:func:`drop_labels`). ``num_classes == 0``: unconditional, and labels are a ValueError.
    ``t`` is the process' timestep (an index in ``[0, T)`` or a float), embedded as in ADM.
    """

    def __init__(self, shape: DiTShape, *, input_size: int, in_channels: int, out_channels: int,
                 num_classes: int = 0, class_dropout: float = 0.1):
        super().__init__()
        if input_size % shape.patch:
            raise ValueError(f"DiT input size {input_size} is not divisible by the patch size {shape.patch}")
        if shape.hidden % shape.heads:
            raise ValueError(f"DiT hidden size {shape.hidden} is not divisible by {shape.heads} heads")
        self.shape, self.in_channels, self.out_channels = shape, in_channels, out_channels
        self.num_classes, self.class_dropout = num_classes, class_dropout
        d, p = shape.hidden, shape.patch
        self.grid = input_size // p
        self.x_embedder = nn.Conv2d(in_channels, d, p, stride=p)
        # in the state dict as in the official checkpoints (and every EMA copy of the buffers)
        self.register_buffer("pos_embed", sincos_2d(d, self.grid)[None])
        self.t_embedder = nn.Sequential(nn.Linear(_FREQ_DIM, d), nn.SiLU(), nn.Linear(d, d))
        self.y_embedder = nn.Embedding(num_classes + 1, d) if num_classes > 0 else None
        self.blocks = nn.ModuleList(_Block(d, shape.heads) for _ in range(shape.depth))
        self.norm_final = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.final = nn.Linear(d, p * p * out_channels)
        self._init_weights()

    def _init_weights(self) -> None:
        """The official initialisation: Xavier-uniform linears (and patch projection) with zero
        bias, N(0, 0.02) timestep MLP and label table, zero adaLN modulations and output layer."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        w = self.x_embedder.weight
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(self.x_embedder.bias)
        for i in (0, 2):
            nn.init.normal_(self.t_embedder[i].weight, std=0.02)
        if self.y_embedder is not None:
            nn.init.normal_(self.y_embedder.weight, std=0.02)
        for mod in [b.adaLN_modulation[-1] for b in self.blocks] + [self.final_modulation[-1], self.final]:
            nn.init.zeros_(mod.weight)
            nn.init.zeros_(mod.bias)

    def labels(self, y: Tensor | None, batch: int, device: torch.device) -> Tensor:
        """Labels ``[B]`` long, the null class (``num_classes``) where ``y`` is None. Label dropout
        is not drawn here but by the training step from the run's own generator
        (:func:`drop_labels`), so no number depends on the global RNG."""
        if y is None:
            return torch.full((batch,), self.num_classes, dtype=torch.long, device=device)
        return y.long()

    def forward(self, x: Tensor, t: Tensor, y: Tensor | None = None) -> Tensor:
        b, _, h, w = x.shape
        if y is not None and self.y_embedder is None:
            raise ValueError("an unconditional DiT (num_classes 0) takes no class labels")
        t = torch.as_tensor(t, device=x.device)
        if t.ndim == 0:
            t = t.expand(b)
        tokens = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed  # [B, N, D]
        c = self.t_embedder(timestep_embedding(t, _FREQ_DIM).to(x.dtype))
        if self.y_embedder is not None:
            c = c + self.y_embedder(self.labels(y, b, x.device))
        for block in self.blocks:
            tokens = block(tokens, c)
        shift, scale = self.final_modulation(c).chunk(2, dim=1)
        out = self.final(_modulate(self.norm_final(tokens), shift, scale))  # [B, N, p*p*C_out]
        p, g = self.shape.patch, self.grid
        out = out.reshape(b, g, g, p, p, self.out_channels).permute(0, 5, 1, 3, 2, 4)
        return out.reshape(b, self.out_channels, g * p, g * p)
