"""Training K seeds of one arm in one process with ``torch.func`` model ensembling vs K models
stepped one after the other, interleaved in one run (CPU, the digits model by default).

    python benchmarks/ensemble_step.py                     # K = 5 seeds (the default study's arms), batch 64
    python benchmarks/ensemble_step.py --seeds 3 --batch 128
    python benchmarks/ensemble_step.py --quick --json out.json

``separate``  K copies of the UNet, each stepped in turn as the study trains its seeds today (one
              process per seed, minus the process start): ``x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps``,
              eps MSE, backward, per-model ``clip_grad_norm_``, foreach Adam, foreach EMA.
``ensemble``  the same K networks' parameters stacked along a new leading axis, one forward and
              backward through ``torch.func.vmap(functional_call)`` (batched convolutions become
              one grouped convolution per layer), per-model gradient clipping computed on the
              stacked gradients, one foreach Adam and EMA over the stacked tensors.

Both draw their own ``x0``, ``t`` and noise per model from the same generators, so they do the same
arithmetic up to operation order; the benchmark prints the largest difference of the losses after
the timed rounds as a check that the ensemble trains the same K models. Reported: the median over
rounds of the per-round ratio of images/s (ensemble / separate) and CPU-ms per image of each.
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import base_parser, interleaved, machine, median, synthetic_prepared, write_json  # noqa: E402
from train_step import our_config  # noqa: E402

from timestep_lab.components import build_model  # noqa: E402

T = 1000
LR, CLIP, EMA_BETA = 2e-3, 1.0, 0.99


def schedule() -> tuple[torch.Tensor, torch.Tensor]:
    betas = torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
    ab = torch.cumprod(1.0 - betas, 0)
    return ab.sqrt().float(), (1.0 - ab).sqrt().float()


class Separate:
    """K networks, each with its own Adam and EMA, stepped in turn."""

    def __init__(self, nets: list[torch.nn.Module]):
        self.nets = nets
        self.opts = [torch.optim.Adam(n.parameters(), lr=LR, foreach=True) for n in nets]
        self.emas = [[p.detach().clone() for p in n.parameters()] for n in nets]

    def step(self, x0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor, sa, s1) -> torch.Tensor:
        losses = []
        for k, (net, opt, ema) in enumerate(zip(self.nets, self.opts, self.emas)):
            xt = sa[t[k]].view(-1, 1, 1, 1) * x0[k] + s1[t[k]].view(-1, 1, 1, 1) * eps[k]
            loss = F.mse_loss(net(xt, t[k]), eps[k])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(ema, list(net.parameters()), 1.0 - EMA_BETA)
            losses.append(loss.detach())
        return torch.stack(losses)


class Ensemble:
    """The same K networks as stacked parameters, one vmapped forward/backward per step."""

    def __init__(self, nets: list[torch.nn.Module]):
        params, buffers = stack_module_state(nets)
        self.names = list(params)
        self.params = [params[n].detach().requires_grad_() for n in self.names]
        self.buffers = buffers
        self.base = copy.deepcopy(nets[0]).to("meta")
        self.opt = torch.optim.Adam(self.params, lr=LR, foreach=True)
        self.ema = [p.detach().clone() for p in self.params]

        def one(params, buffers, x, t):
            return functional_call(self.base, ({**params, **buffers}), (x, t))

        self.forward = vmap(one)

    def step(self, x0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor, sa, s1) -> torch.Tensor:
        K, B = t.shape
        xt = sa[t].view(K, B, 1, 1, 1) * x0 + s1[t].view(K, B, 1, 1, 1) * eps
        out = self.forward(dict(zip(self.names, self.params)), self.buffers, xt, t)
        per_model = (out - eps).square().flatten(1).mean(1)  # [K]: each model's own mean
        self.opt.zero_grad(set_to_none=True)
        per_model.sum().backward()  # gradients of model k depend on its loss only
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            norms = torch.stack([g.flatten(1).square().sum(1) for g in grads]).sum(0).sqrt()  # [K]
            scale = (CLIP / (norms + 1e-6)).clamp(max=1.0)  # clip_grad_norm_, model by model
            for g in grads:
                g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
        self.opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.ema, self.params, 1.0 - EMA_BETA)
        return per_model.detach()


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5, help="K: seeds of one arm trained together")
    p.add_argument("--batch", type=int, default=64, help="images per model per step")
    p.add_argument("--steps", type=int, default=10, help="steps per round")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.rounds = 2, 2, 3
    torch.set_num_threads(args.threads)
    K, B = args.seeds, args.batch
    with tempfile.TemporaryDirectory() as tmp:
        cfg = our_config(synthetic_prepared(Path(tmp) / "d", 16, 8, 1), "digits", B, "cpu", False, "uniform")
        nets = []
        for k in range(K):
            torch.manual_seed(k)
            nets.append(build_model(cfg, 8, 1).train())
    sep = Separate(nets)
    ens = Ensemble([copy.deepcopy(n) for n in nets])
    sa, s1 = schedule()
    gen = {"separate": torch.Generator().manual_seed(0), "ensemble": torch.Generator().manual_seed(0)}
    last: dict[str, torch.Tensor] = {}

    def batch(g: torch.Generator):
        return (torch.rand(K, B, 1, 8, 8, generator=g) * 2 - 1, torch.randint(0, T, (K, B), generator=g),
                torch.randn(K, B, 1, 8, 8, generator=g))

    def timed(name: str, runner) -> float:
        c = time.process_time()
        for _ in range(args.steps):
            last[name] = runner.step(*batch(gen[name]), sa, s1)
        return (time.process_time() - c) / (args.steps * K * B)  # CPU-s per image

    for name, runner in (("separate", sep), ("ensemble", ens)):  # warm-up, unmeasured
        runner.step(*batch(torch.Generator().manual_seed(99)), sa, s1)
    rounds = interleaved({"separate": lambda: timed("separate", sep), "ensemble": lambda: timed("ensemble", ens)},
                         args.rounds)
    ratios = [s / e for s, e in zip(rounds["separate"], rounds["ensemble"])]
    diff = (last["separate"] - last["ensemble"]).abs().max().item()
    res = {"machine": machine(), "seeds": K, "batch": B, "steps": args.steps, "rounds": args.rounds,
           "cpu_ms_per_image": {k: median(v) * 1e3 for k, v in rounds.items()},
           "images_per_cpu_s_ensemble_over_separate": median(ratios), "per_round": ratios,
           "max_loss_difference": diff}
    print(f"K={K} seeds, batch {B}/model, {args.rounds} rounds x {args.steps} steps, {args.threads} thread(s)")
    for k, v in res["cpu_ms_per_image"].items():
        print(f"  {k:9s} {v:.3f} CPU-ms/image")
    print(f"  ensemble / separate images per CPU-s: {res['images_per_cpu_s_ensemble_over_separate']:.3f}"
          f"  (rounds {' '.join(f'{r:.3f}' for r in ratios)})")
    print(f"  largest loss difference after the last round: {diff:.2e}")
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
