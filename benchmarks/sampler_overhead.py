"""Step-time overhead of every timestep sampler relative to ``uniform``, measured in one run.

Trains the digits model (channels 16, channel_mult [1, 2], 1 res block, norm_groups 8, batch 128,
T = 1000; ``adaptive`` at ``update_every = 40``) once per registered sampler through the real
training loop, :func:`timestep_lab.train.train`, unchanged -- all runs at the same time, in
lockstep: each run is a thread, and a baton passed round-robin lets exactly one of them train one
step at a time (uniform, adaptive, clts, ..., uniform, adaptive, ...). The hand-over happens when a
run asks its sampler for the next batch's timesteps, so the time a run holds the baton is exactly
one training step (draw, forward/backward, optimizer, EMA, sampler hooks, bookkeeping; each run
logs and checkpoints only after its last step, which is not measured).

Why lockstep: on a shared machine the speed of identical runs started a minute apart differs by
10-20% (other processes, the hypervisor); interleaving single steps, about 0.1 s apart, exposes
every sampler to the same conditions. The measured steps (after ``--warmup``) are split into
``--rounds`` blocks of ``--steps``; a sampler's ratio in a block is its mean step time over
uniform's in the same block, and the reported ratio is the median over blocks (each block of a
multiple of 40 steps holds ``adaptive``'s updates in proportion: steps 40, 80, ...). All threads
allocate from one malloc arena (``mallopt(M_ARENA_MAX, 1)``, as a single-threaded training process
does); with glibc's per-thread arenas the first thread ran 3-5% faster than the others whatever
its sampler.

    python benchmarks/sampler_overhead.py                       # 5 blocks x 80 steps, 1 thread
    python benchmarks/sampler_overhead.py --quick --json out.json   # CI: checks it runs; ratios rough
    python benchmarks/sampler_overhead.py --device cuda --model cifar10 --samplers uniform adaptive --json out.json

On CUDA the hand-over waits for the GPU (``torch.cuda.synchronize``) before taking the time, so
each run's step time is its GPU time (the training step itself never synchronises: without this
the host would run ahead and a run would be charged for work queued by the run before it). The
extra sync also hides any host-device sync a sampler makes, so a sampler that synchronises shows
its cost only through the time the host spends waiting inside its own step.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import base_parser, machine, median, write_json  # noqa: E402

import timestep_lab.train as training  # noqa: E402
from timestep_lab.config import load_config  # noqa: E402
from timestep_lab.data import prepare  # noqa: E402
from timestep_lab.timesteps import SAMPLERS  # noqa: E402

BATCH = 128
SAMPLER_PARAMS = {"adaptive": {"update_every": 40}}
TARGETS = {"loss_second_moment": 1.05, "adaptive": 1.15}  # every other (stateless) sampler: 1.03


MODELS = {  # --model: the network's config overrides (as in benchmarks/train_step.py)
    "digits": ["model.channels=16", "model.channel_mult=[1,2]", "model.num_res_blocks=1", "model.norm_groups=8"],
    "cifar10": ["model.channels=128", "model.channel_mult=[1,2,2,2]", "model.num_res_blocks=2",
                "model.attention_resolutions=[16]", "model.dropout=0.1", "model.norm_groups=32"],
}


def digits_config(data: Path, sampler: str, steps: int, device: str, params: dict | None = None,
                  model: str = "digits"):
    kimg = steps * BATCH / 1000
    return load_config(None, [
        f"data.path={data}", *MODELS[model], "diffusion.num_timesteps=1000", f"train.batch_size={BATCH}",
        f"train.total_kimg={kimg}", f"train.log_every_kimg={kimg}", f"train.checkpoint_every_kimg={kimg}",
        f"train.device={device}", f"timesteps.name={sampler}",
        f"timesteps.params={json.dumps({**SAMPLER_PARAMS.get(sampler, {}), **(params or {})})}",
    ])


def one_malloc_arena() -> None:
    """glibc: make every thread allocate from the main arena (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX = -8
    except (OSError, AttributeError):
        print("# note: not glibc; per-thread malloc arenas may bias the lockstep timing", file=sys.stderr)


class Baton:
    """Lets one of ``n`` threads run at a time, round-robin over those not finished."""

    def __init__(self, n: int):
        self.cond, self.n, self.turn, self.finished = threading.Condition(), n, 0, set()

    def wait(self, i: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == i)

    def pass_on(self, i: int, finished: bool = False) -> None:
        with self.cond:
            if finished:
                self.finished.add(i)
            nxt = (i + 1) % self.n
            while nxt in self.finished and len(self.finished) < self.n:
                nxt = (nxt + 1) % self.n
            self.turn = nxt
            self.cond.notify_all()


class LockstepRun(threading.Thread):
    """One training run whose sampler draws hand the baton on; ``steps[k]`` is the wall time of
    its step k (from taking the baton at draw k to handing it on at draw k + 1)."""

    def __init__(self, i: int, baton: Baton, cfg, out: Path, build_sampler):
        super().__init__(name=f"run-{i}")
        self.i, self.baton, self.cfg, self.out, self.build = i, baton, cfg, out, build_sampler
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        self.baton.wait(self.i)  # set-up runs one at a time, too
        cuda = str(self.cfg.train.device).startswith("cuda")
        try:
            def timed_build(*args, **kwargs):  # the loop calls it once, at set-up, in this thread
                sampler = self.build(*args, **kwargs)
                draw = sampler.sample

                def sample(*a, **k):
                    if cuda:  # the GPU work queued by this run's step belongs to its time, not the next run's
                        torch.cuda.synchronize()
                    self.ends.append(time.perf_counter())
                    self.baton.pass_on(self.i)
                    self.baton.wait(self.i)
                    self.starts.append(time.perf_counter())
                    return draw(*a, **k)

                sampler.sample = sample
                return sampler

            training.step.build_sampler = timed_build
            training.train(self.cfg, self.out, resume=False, progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            self.baton.pass_on(self.i, finished=True)

    @property
    def steps(self) -> list[float]:
        return [end - start for start, end in zip(self.starts, self.ends[1:])]


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80, help="steps per block (a multiple of 40)")
    p.add_argument("--rounds", type=int, default=5, help="blocks of --steps measured steps")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured steps at the start of each run")
    p.add_argument("--samplers", nargs="*", default=None, help="default: every registered sampler")
    p.add_argument("--adaptive-stride", type=int, default=None, help="adaptive's stride (default: its own)")
    p.add_argument("--model", choices=sorted(MODELS), default="digits",
                   help="digits (the 8x8 digits data) or cifar10 (DDPM's 35.7M UNet on random 32x32x3 images; GPU)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 4, 1, 1
    torch.set_num_threads(args.threads)
    one_malloc_arena()
    names = args.samplers or SAMPLERS.names()
    names = ["uniform"] + [n for n in names if n != "uniform"]
    n_steps = args.warmup + args.rounds * args.steps + 1  # the last step (logging, saving) is not measured

    build = training.step.build_sampler
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.model == "digits":
            data = prepare("digits", None, tmp / "digits")
        else:  # the step time does not depend on the pixels: random CIFAR-sized images, no download
            from common import synthetic_prepared

            data = synthetic_prepared(tmp / "cifar10-like", 4096, 32, 3)
        baton = Baton(len(names))
        extra = {"adaptive": {"stride": args.adaptive_stride}} if args.adaptive_stride else {}
        runs = [LockstepRun(i, baton, digits_config(data, n, n_steps, args.device, extra.get(n), args.model), tmp / n,
                            build)
                for i, n in enumerate(names)]
        try:
            for r in runs:
                r.start()
            for r in runs:
                r.join()
        finally:
            training.step.build_sampler = build
    for n, r in zip(names, runs):
        if r.error is not None:
            raise RuntimeError(f"{n}: {r.error!r}") from r.error

    blocks = {n: [sum(r.steps[args.warmup + b * args.steps:args.warmup + (b + 1) * args.steps]) / args.steps
                  for b in range(args.rounds)] for n, r in zip(names, runs)}
    ratios = {n: [x / u for x, u in zip(blocks[n], blocks["uniform"])] for n in names}
    result = {n: median(ratios[n]) for n in names}
    print(f"# {machine()}; {args.model}, batch {BATCH}, T 1000, lockstep, {args.rounds} blocks x {args.steps} steps "
          f"(+{args.warmup} warm-up); uniform {median(blocks['uniform']) * 1000:.1f} ms/step")
    print(f"{'sampler':<20} {'ms/step':>8} {'ratio':>7} {'target':>7}  per-block ratios")
    for n in names:
        target = TARGETS.get(n, 1.03) if n != "uniform" else 1.0
        flag = "" if result[n] <= target else "  over"
        print(f"{n:<20} {median(blocks[n]) * 1000:8.1f} {result[n]:7.3f} {target:7.2f}  "
              f"{' '.join(f'{x:.3f}' for x in ratios[n])}{flag}")
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
