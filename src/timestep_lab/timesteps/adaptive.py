"""``adaptive``: a learned, image-conditioned Beta timestep sampler trained by REINFORCE.

Source: Kim et al., "Adaptive Non-uniform Timestep Sampling for Accelerating Diffusion Model
Training", arXiv 2411.09998 (paper + official code); docs/methods.md §1.4.

Sampling. A small network pi_phi maps the clean image to Beta parameters; per sample::

    (alpha_i, beta_i) = softplus(pi_phi(x0_i)) + 1e-5,   u_i ~ Beta(alpha_i, beta_i),   t_i = round(u_i (T - 1))

weight 1. pi_phi: three blocks conv 3x3 (32, 64, 128 channels) + ReLU + 2x2 max-pool (ceil mode,
so any resolution >= 1 works), an adaptive average pool of maps larger than 4x4 down to 4x4
(32x32 input: exactly the official 2048 features; 8x8 digits: 128 features, nothing upsampled),
and an MLP -> 256 -> 256 -> 2 with ReLU; the output layer starts at weight 0, bias 0.5
(alpha = beta = 0.974, nearly uniform). Any number of channels and any resolution (digits
1x8x8, CIFAR 3x32x32, CelebA/ImageNet 3x64x64 and up); built at the first draw, from ``seed``.

u is drawn with the caller's generator only: Beta = X / (X + Y) from two Gamma variates drawn by
Marsaglia & Tsang's method (shape a + 1, boosted by U^(1/a)) with 8 vectorised proposals per
variate (probability that all are rejected < 1e-10; the last proposal is then used), all in log
space, so tiny alpha or beta cannot underflow. ``logit(u)`` is kept for the update, where
``log pi(u) = (alpha-1) log u + (beta-1) log(1-u) - log B(alpha, beta)`` is recomputed with gradient.

Update, every ``update_every`` (f_S = 40) optimizer steps (``step % update_every == 0``), around
the diffusion update (``before_update`` / ``update``), with delta = L(before) - L(after)::

    1. before: choose x^ in the batch; L_t(x^) at the timesteps 0, stride, 2 stride, ... (all T
       for stride 1; default stride T // 100) and L_tau(x_i) for every batch image at the
       |S| = 3 timesteps tau in S (per-sample VLB terms, bits/dim, current network, dropout off)
    2. the diffusion update
    3. after: the same evaluations with the *same* noise; delta_t(x^) -> ring buffer of
       ``capacity`` (20) entries (delta [n_t], Y = sum_t delta_t)
    4. reward r_i = sum_{tau in S} [L_tau(x_i, before) - L_tau(x_i, after)]   (the old S)
    5. if the buffer holds > 1 entry: S = the 3 grid timesteps whose buffer column best predicts
       Y by a univariate F-test (scikit-learn ``SelectKBest(f_regression, k=3)``); S starts {0, 1, 2}
    6. REINFORCE: loss = -mean_i[ log pi(u_i) (r_i + c_H H_i) ], c_H = 0.01, H_i the entropy of
       Beta(alpha_i, beta_i) (differentiated too, as the official code does: only r_i is a constant);
       Adam lr 1e-2, gradient-norm clip 1.0

Differences from the official code (deliberate, docs/methods.md §1.4): fixed noise for the before/after
pair (one noise image per batch image, shared by all of its evaluated timesteps; the official code
draws fresh noise, which makes delta noisy); the T + |S| B evaluations are batched (chunks of
``eval_batch`` items, one forward each) and use a timestep ``stride`` (S is then chosen among
the evaluated grid; Y sums the grid); x^ and the noise come from a generator seeded by
``(seed, step)``, so they need no state and a resumed run repeats them exactly.

Cost and the default stride. An update evaluates ``2 (ceil(T / stride) + |S| B)`` images without
gradient; the |S| B part is the method's floor. On the digits model (B = 128, T = 1000) all T
timesteps cost about 20% of training time at f_S = 40, stride 10 about 6% (plus ~3% per step for
pi_phi's forward). On 39 updates of a digits run, the 3 columns the F-test picks on the stride-10
grid explain the full-resolution Y as well as those picked at stride 1 (R^2 0.974 vs 0.973 on the
20-entry buffer), although the strided sum itself tracks the full Y less closely (correlation
0.92; Y is dominated by the first few timesteps). Hence the default of about 100 evaluated
timesteps; ``stride: 1`` is the literal method.

``probs()``: the marginal of t under the Beta mixture over the images of the last batch drawn,
``mean_i P(t | alpha_i, beta_i)`` with the exact discretised Beta pmf (regularised incomplete
beta at the rounding edges ``(i -+ 0.5) / (T - 1)``); before any draw, the initial Beta.

Checkpoint (``state_dict``): the network and Adam state dicts, S, the ring buffer and its
position, and the last batch's (alpha, beta), all tensors or plain Python values.

DDP: every rank draws the global batch with identical weights and generator, so t agrees. The
update's evaluations are split across ranks (contiguous chunks of the item list, padded) and
concatenated with ``gather``; each rank computes the REINFORCE gradient on its shard of the
batch, and the flattened gradients are gathered and summed in rank order on every rank, so every
rank applies the bitwise-identical Adam step and the F-test sees identical buffers.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from timestep_lab.processes import exact
from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, discrete_cdf_pmf
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["AdaptiveParams", "AdaptiveSampler", "BetaPolicy", "sample_beta_logit", "beta_log_prob", "beta_entropy"]

GAMMA_PROPOSALS = 8
INITIAL_S = (0, 1, 2)


@dataclass(frozen=True)
class AdaptiveParams:
    update_every: int = 40  # f_S: optimizer steps between sampler updates
    capacity: int = 20  # ring buffer of (delta, Y)
    subset_size: int = 3  # |S|
    stride: int | None = None  # evaluate L_t(x^) at every stride-th timestep; None: about 100 of them (T // 100)
    lr: float = 1e-2
    entropy_coef: float = 0.01  # c_H
    grad_clip: float = 1.0
    eval_batch: int = 256  # items per forward pass of the before/after evaluations
    seed: int = 0  # policy initialisation, choice of x^ and the fixed noise

    def __post_init__(self) -> None:
        check_range("update_every", self.update_every, 1, None)
        check_range("capacity", self.capacity, 2, None)
        check_range("subset_size", self.subset_size, 1, None)
        if self.stride is not None:
            check_range("stride", self.stride, 1, None)
        check_range("lr", self.lr, 0.0, None, lo_open=True)
        check_range("entropy_coef", self.entropy_coef, 0.0, None)
        check_range("grad_clip", self.grad_clip, 0.0, None, lo_open=True)
        check_range("eval_batch", self.eval_batch, 1, None)


class BetaPolicy(nn.Module):
    """pi_phi: image ``[B, C, H, W]`` -> Beta parameters ``(alpha [B], beta [B])``.

    The conv stack leaves a ``ceil(H/8) x ceil(W/8)`` map; maps larger than 4x4 are average-pooled
    to 4x4 (32x32 inputs give exactly the official 128 x 4 x 4 = 2048 features), smaller ones are
    flattened as they are (8x8 digits: 128 features), so no resolution pays for an upsampled MLP
    input. Runs in channels-last memory format (several times faster pooling on CPU)."""

    def __init__(self, in_channels: int, height: int, width: int):
        super().__init__()
        layers: list[nn.Module] = []
        for c_in, c_out in ((in_channels, 32), (32, 64), (64, 128)):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, ceil_mode=True)]
        h, w = height, width
        for _ in range(3):
            h, w = -(-h // 2), -(-w // 2)
        pooled = (min(h, 4), min(w, 4))
        if (h, w) != pooled:
            layers.append(nn.AdaptiveAvgPool2d(pooled))
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.head = nn.Sequential(nn.Linear(128 * pooled[0] * pooled[1], 256), nn.ReLU(inplace=True),
                                  nn.Linear(256, 256), nn.ReLU(inplace=True), nn.Linear(256, 2))
        self.to(memory_format=torch.channels_last)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases) drawn
        from ``generator`` (CPU, so every device gets the same network), then the output layer at
        weight 0, bias 0.5."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                bound = 1.0 / math.sqrt(m.weight[0].numel())
                for p in (m.weight, m.bias):
                    p.copy_(torch.empty(p.shape, dtype=p.dtype).uniform_(-bound, bound, generator=generator))
        self.head[-1].weight.zero_()
        self.head[-1].bias.fill_(0.5)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        o = F.softplus(self.head(self.features(x.contiguous(memory_format=torch.channels_last)))) + 1e-5
        return o[:, 0], o[:, 1]


def _log_gamma_variate(a: Tensor, generator: torch.Generator) -> Tensor:
    """log of Gamma(a, 1) variates (Marsaglia & Tsang 2000 for shape a + 1, then U^(1/a))."""
    shape = a.shape + (GAMMA_PROPOSALS,)
    d = (a + 1.0 - 1.0 / 3.0).unsqueeze(-1)
    c = 1.0 / exact.sqrt(9.0 * d)
    x = torch.randn(shape, generator=generator, device=a.device, dtype=a.dtype)
    u = torch.rand(shape, generator=generator, device=a.device, dtype=a.dtype)
    v = (1.0 + c * x) ** 3
    log_v = torch.log(v.clamp_min(1e-300))
    ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * log_v)
    ok[..., -1] = True  # fallback: the last proposal (all rejected has probability < 1e-10)
    first = torch.argmax(ok.to(torch.uint8), dim=-1, keepdim=True)  # first accepted proposal
    log_g = (torch.log(d) + log_v).gather(-1, first).squeeze(-1)
    boost = torch.rand(a.shape, generator=generator, device=a.device, dtype=a.dtype)
    return log_g + torch.log(boost) / a


def sample_beta_logit(alpha: Tensor, beta: Tensor, generator: torch.Generator) -> Tensor:
    """``logit(u)`` for ``u ~ Beta(alpha, beta)`` (float64, drawn from ``generator`` only)."""
    alpha, beta = alpha.double(), beta.double()
    return _log_gamma_variate(alpha, generator) - _log_gamma_variate(beta, generator)


def beta_log_prob(alpha: Tensor, beta: Tensor, logit_u: Tensor) -> Tensor:
    """log density of Beta(alpha, beta) at ``u = sigmoid(logit_u)``, exact in log space."""
    log_u, log_1mu = F.logsigmoid(logit_u), F.logsigmoid(-logit_u)
    log_b = torch.lgamma(alpha) + torch.lgamma(beta) - torch.lgamma(alpha + beta)
    return (alpha - 1.0) * log_u + (beta - 1.0) * log_1mu - log_b


def beta_entropy(alpha: Tensor, beta: Tensor) -> Tensor:
    """Differential entropy of Beta(alpha, beta)."""
    dg = torch.digamma
    log_b = torch.lgamma(alpha) + torch.lgamma(beta) - torch.lgamma(alpha + beta)
    return log_b - (alpha - 1.0) * dg(alpha) - (beta - 1.0) * dg(beta) + (alpha + beta - 2.0) * dg(alpha + beta)


def _f_test_top_k(X, y, k: int):
    """Column indices of the ``k`` best univariate F-test scores of ``X [n, d]`` against ``y [n]``
    (scikit-learn's ``SelectKBest(f_regression)``); with ``k = 0`` only imports scikit-learn."""
    from sklearn.feature_selection import SelectKBest, f_regression

    if k == 0:
        return None
    return SelectKBest(f_regression, k=k).fit(X, y).get_support(indices=True)


def _derived_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + 12_345) % (2**63 - 1)


@SAMPLERS.register("adaptive", AdaptiveParams)
class AdaptiveSampler(TimestepSampler):
    stateful = True

    def __init__(self, params: AdaptiveParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.params = params
        self.stride = params.stride or max(1, self.T // 100)
        if params.subset_size > math.ceil(self.T / self.stride):
            raise ValueError(f"subset_size must be <= the number of evaluated timesteps ceil(T / stride) = "
                             f"{math.ceil(self.T / self.stride)}, got {params.subset_size}")
        self.grid = torch.arange(0, self.T, self.stride, device=self.device)  # timesteps where L_t(x^) is measured
        self.S = torch.tensor(INITIAL_S[:params.subset_size] if params.subset_size <= len(INITIAL_S)
                              else range(params.subset_size), device=self.device)
        self.buf_delta = torch.zeros(params.capacity, len(self.grid), dtype=torch.float64, device=self.device)
        self.buf_y = torch.zeros(params.capacity, dtype=torch.float64, device=self.device)
        self.count, self.pos = 0, 0
        self.policy: BetaPolicy | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        a0 = F.softplus(torch.tensor([0.5], dtype=torch.float64)) + 1e-5
        self.last_alpha, self.last_beta = a0.clone(), a0.clone()  # what probs() mixes over
        self._logit_u: Tensor | None = None  # of the last batch, for the REINFORCE update
        self._pending: dict[str, Any] | None = None

    # ------------------------------------------------------------------ policy

    def _build(self, shape: tuple[int, int, int]) -> None:
        """Create pi_phi for images of ``shape = (C, H, W)`` and its Adam. The weights come from a
        generator seeded with ``seed`` (the global RNG is never touched: built on the meta device)."""
        with torch.device("meta"):
            policy = BetaPolicy(*shape)
        self.policy = policy.to_empty(device=self.device)
        self.policy.reset_parameters(torch.Generator().manual_seed(self.params.seed))
        _f_test_top_k(None, None, 0)  # imports scikit-learn (~2 s) here, not inside a timed update
        self.image_shape = tuple(int(s) for s in shape)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.params.lr, fused=True)  # exact sqrt (optim.py)

    def sample(self, batch_size, generator, x0=None):
        if x0 is None:
            raise ValueError("the adaptive sampler needs the clean batch x0 (sample(B, generator, x0=...))")
        if x0.shape[0] != batch_size:
            raise ValueError(f"x0 has {x0.shape[0]} images for a batch of {batch_size}")
        if self.policy is None:
            self._build(tuple(x0.shape[1:]))
        elif tuple(x0.shape[1:]) != self.image_shape:
            raise ValueError(f"the adaptive sampler was built for images {self.image_shape}, got {tuple(x0.shape[1:])}")
        with torch.no_grad():
            alpha, beta = self.policy(x0.to(self.device, torch.float32))
        logit_u = sample_beta_logit(alpha.to(generator.device), beta.to(generator.device), generator)
        self._logit_u = logit_u
        self.last_alpha, self.last_beta = alpha.detach(), beta.detach()
        t = torch.round(torch.sigmoid(logit_u) * (self.T - 1)).long()
        return t, torch.ones(batch_size, device=generator.device)

    def probs(self) -> Tensor:
        from scipy.special import betainc

        a = self.last_alpha.double().cpu().numpy()[:, None]
        b = self.last_beta.double().cpu().numpy()[:, None]
        edges = ((torch.arange(self.T + 1, dtype=torch.float64) - 0.5) / (self.T - 1)).clamp(0.0, 1.0).numpy()
        pmf = discrete_cdf_pmf(torch.from_numpy(betainc(a, b, edges[None, :]))).mean(dim=0)
        return pmf / pmf.sum()

    # ------------------------------------------------------------------ update

    def _evaluate(self, pend: dict[str, Any], vlb_fn: Callable, x0: Tensor) -> Tensor:
        """VLB terms of this rank's slice of the items with the fixed noise, ``[n_local]`` float64."""
        img, t = pend["img"][pend["local"]], pend["t"][pend["local"]]
        out = []
        for i in range(0, len(t), self.params.eval_batch):
            j = slice(i, i + self.params.eval_batch)
            out.append(vlb_fn(x0[img[j]], t[j], pend["noise"][img[j]]).to(self.device, torch.float64))
        return torch.cat(out)

    def before_update(self, **context: Any) -> None:
        self._pending = None
        step = int(context["step"])
        if step % self.params.update_every != 0 or self.policy is None:
            return
        x0 = context["x0"]
        B, world, k = x0.shape[0], int(context.get("world_size", 1)), len(self.S)
        shard = context.get("shard")
        rank = 0 if shard is None else shard.start // max(shard.stop - shard.start, 1)
        seed = _derived_seed(self.params.seed, step)
        xhat = int(torch.randint(B, (1,), generator=torch.Generator().manual_seed(seed)))
        noise = torch.randn(x0.shape, generator=torch.Generator(device=x0.device).manual_seed(seed),
                            device=x0.device, dtype=x0.dtype)
        # the items: x^ over the grid, then every image over S; this rank takes a contiguous (padded) slice
        img = torch.cat([torch.full((len(self.grid),), xhat), torch.arange(B).repeat_interleave(k)]).to(x0.device)
        t = torch.cat([self.grid, self.S.repeat(B)]).to(x0.device)
        n_local = -(-len(t) // world)
        local = torch.arange(rank * n_local, (rank + 1) * n_local, device=x0.device).clamp_(max=len(t) - 1)
        pend = {"noise": noise, "img": img, "t": t, "local": local, "k": k}
        pend["before"] = self._evaluate(pend, context["vlb_fn"], x0)
        self._pending = pend

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        pend, self._pending = self._pending, None
        if pend is None:
            return
        x0 = context["x0"]
        B, world = x0.shape[0], int(context.get("world_size", 1))
        gather = context.get("gather") or (lambda z: z)
        shard = context.get("shard") or slice(0, B)
        diff = gather(pend["before"] - self._evaluate(pend, context["vlb_fn"], x0))[:len(pend["t"])]
        if not bool(torch.isfinite(diff).all()):  # one sync per update (every f_S steps), not per sample
            # a non-finite loss decrease would turn pi_phi into NaN for the rest of the run: skip it
            warnings.warn(f"adaptive sampler: non-finite loss decrease at step {context.get('step')}; update skipped")
            return
        n_t = len(self.grid)
        delta = diff[:n_t]
        rewards = diff[n_t:].view(B, pend["k"]).sum(dim=1)  # with the old S
        self.buf_delta[self.pos] = delta
        self.buf_y[self.pos] = delta.sum()
        self.pos = (self.pos + 1) % self.params.capacity
        self.count = min(self.count + 1, self.params.capacity)
        if self.count > 1:
            self.S = self._select_subset()
        self._reinforce(x0, rewards, shard, gather, world)

    def _select_subset(self) -> Tensor:
        """The ``subset_size`` grid timesteps whose buffer column best predicts Y (univariate F-test,
        scikit-learn's ``SelectKBest(f_regression)``)."""
        X = self.buf_delta[:self.count].cpu().numpy()
        y = self.buf_y[:self.count].cpu().numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constant columns / two-entry buffers: sklearn warns, scores 0
            cols = _f_test_top_k(X, y, self.params.subset_size)
        return self.grid[torch.as_tensor(cols, device=self.device)]

    def _reinforce(self, x0: Tensor, rewards: Tensor, shard: slice, gather: Callable, world: int) -> None:
        B = x0.shape[0]
        alpha, beta = self.policy(x0[shard].to(self.device, torch.float32))
        alpha, beta = alpha.double(), beta.double()
        logp = beta_log_prob(alpha, beta, self._logit_u[shard].to(self.device))
        reward = rewards[shard].to(self.device) + self.params.entropy_coef * beta_entropy(alpha, beta)  # official: H keeps its gradient
        loss = -(logp * reward).sum() / B  # summed over ranks: the mean over the global batch
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        params = list(self.policy.parameters())
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        flat = gather(flat).view(world, -1).sum(dim=0)  # identical on every rank
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        nn.utils.clip_grad_norm_(params, self.params.grad_clip)
        self.optimizer.step()

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        built = self.policy is not None
        return {
            "image_shape": list(self.image_shape) if built else None,
            "policy": {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()} if built else None,
            "optimizer": self.optimizer.state_dict() if built else None,
            "S": self.S.cpu().clone(), "buf_delta": self.buf_delta.cpu().clone(), "buf_y": self.buf_y.cpu().clone(),
            "count": self.count, "pos": self.pos,
            "last_alpha": self.last_alpha.cpu().clone(), "last_beta": self.last_beta.cpu().clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["buf_delta"].shape != self.buf_delta.shape:
            raise ValueError(f"adaptive sampler state has a buffer of shape {tuple(state['buf_delta'].shape)}, "
                             f"expected {tuple(self.buf_delta.shape)} (capacity x evaluated timesteps)")
        if state["policy"] is not None:
            self._build(tuple(state["image_shape"]))
            self.policy.load_state_dict(state["policy"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.S = state["S"].to(self.device)
        self.buf_delta.copy_(state["buf_delta"])
        self.buf_y.copy_(state["buf_y"])
        self.count, self.pos = int(state["count"]), int(state["pos"])
        self.last_alpha, self.last_beta = state["last_alpha"].to(self.device), state["last_beta"].to(self.device)
