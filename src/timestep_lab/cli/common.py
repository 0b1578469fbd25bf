"""What every command module shares: the command registry, argument helpers, config loading,
torch/world/device set-up.

A run config is loaded and checked (``check_config``) once, here, where it enters the program;
the library trusts it afterwards. This module must not know any particular command, nor import
the entry (``timestep_lab.cli``) or a command module.

Start-up time: ``python -m timestep_lab --help`` must not import torch. So everything that pulls
in torch (the library's network, training, sampling and metric modules, ``timestep_lab.distributed``)
is imported inside the function that needs it, here and in every command module; module level
imports stay torch-free (stdlib, ``timestep_lab.config``, ``timestep_lab.artifacts.io``).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Callable

from timestep_lab.artifacts.io import peek_torch
from timestep_lab.config import (
    ConfigError,
    EvalConfig,
    SampleConfig,
    apply_overrides,
    config_from_dict,
    load_config,
    load_yaml,
)

__all__ = [
    "COMMANDS", "FORMATS", "OUTPUT_OPTIONS", "command", "named_paths", "checkpoint_args", "config_args",
    "runtime_args", "load_run_config", "eval_config",
    "sample_config", "setup_torch", "world", "device", "log", "at_least", "finite_at_least", "code_identity",
    "arithmetic_in_effect", "run_config_arg", "check_run_models", "seed_arg", "json_object",
]

log = logging.getLogger("timestep_lab")

Configure = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]

#: name -> (add the sub-parser to an ``add_subparsers()`` object, run function); in registration order.
COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Run]] = {}

#: option destinations that name files (or, for ``out`` with ``out_folder``, folders) a command writes.
OUTPUT_OPTIONS = ("out", "grid", "metrics")

#: checkpoint formats a ``--format`` option accepts.
FORMATS = ("timestep_lab", "diffusers", "guided_diffusion")


def command(name: str, help: str, configure: Configure, out_folder: bool = False) -> Callable[[Run], Run]:
    """Register the decorated ``run(args) -> exit status`` as command ``name``; ``configure(parser)``
    adds its options. The run function's docstring becomes the command's ``--help`` description.
    ``out_folder``: the command's ``--out`` is a folder (else a file); the entry checks every
    output (:data:`OUTPUT_OPTIONS`) is writable before the command runs."""

    def deco(fn: Run) -> Run:
        def add(sub) -> None:
            p = sub.add_parser(name, help=help, description=(fn.__doc__ or help).strip())
            configure(p)
            p.set_defaults(_run=fn, _out_folder=out_folder)

        COMMANDS[name] = (add, fn)
        return fn

    return deco


# ------------------------------------------------------------------------------- arguments


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``minimum`` (else argparse's usage error, which the
    entry turns into one ``error:`` line naming the option)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def seed_arg(text: str) -> int:
    """An argparse ``type``: a seed in [0, 2**63 - 1] (a torch generator's; sums like seed + i stay in 64 bits)."""
    from timestep_lab.config.schema import SEED_MAX

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63 - 1], got {value}")
    return value


seed_arg.__name__ = "seed"


def json_object(text: str) -> dict:
    """An argparse ``type``: a JSON object (what the workflow passes as one quoted word: a study's
    or a run's config, column values), else argparse's one-line usage error."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a JSON object: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text[:80]!r}")
    return value


json_object.__name__ = "JSON object"


def checkpoint_args(p: argparse.ArgumentParser, help: str = "checkpoint format of --model") -> None:
    """``--format`` and ``--image-size``: how to read a model file. A guided-diffusion state dict
    does not record its resolution (the network is convolutional; the attention layers sit at
    resolutions of it), so ``--image-size`` says it (default 256, the release's ImageNet model;
    the workflow passes ``data.resolution``); the other formats record theirs."""
    p.add_argument("--format", default="timestep_lab", choices=FORMATS, help=help)
    p.add_argument("--image-size", type=at_least(1), default=None,
                   help="resolution a guided_diffusion checkpoint is used at (default 256; ignored by the other formats)")


def finite_at_least(minimum: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number >= ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {minimum:g}, got {text}")
        return value

    parse.__name__ = f"number >= {minimum:g}"
    return parse


def config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--config", type=Path, required=required, help="run config YAML (deltas over the defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable), e.g. --set train.batch_size=64")


def runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=at_least(1), default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--device", default=None, help="override train.device (auto, cpu, cuda, cuda:N)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# ------------------------------------------------------------------------------- configs


def load_run_config(args: argparse.Namespace):
    """The checked RunConfig of ``--config`` + ``--set`` (+ ``--device``): the one place a run's config
    is checked."""
    from timestep_lab.components import check_config  # builds networks/samplers: torch

    overrides = list(args.overrides)
    if getattr(args, "device", None):
        overrides.append(f"train.device={args.device}")
    cfg = load_config(args.config, overrides)
    return check_config(cfg, source=str(args.config or "<defaults>"))


def eval_config(args: argparse.Namespace, allowed: tuple[str, ...] = ("eval",)) -> EvalConfig:
    """EvalConfig from --config's eval section plus eval.* overrides (other sections refused)."""
    bad = [o for o in args.overrides if o.split("=", 1)[0].split(".", 1)[0] not in allowed]
    if bad:
        raise ConfigError(f"--set {bad[0]}: this command takes only {' and '.join(s + '.*' for s in allowed)} overrides")
    data = dict(load_yaml(args.config).get("eval", {}) or {}) if args.config else {}
    data = apply_overrides({"eval": data}, [o for o in args.overrides if o.startswith("eval.")])["eval"]
    source = f"{args.config or '<defaults>'}" + (f" + --set {' '.join(args.overrides)}" if args.overrides else "")
    return config_from_dict(data, f"{source} (eval)", EvalConfig)


def sample_config(model: Path, config: Path | None, overrides: list[str], fmt: str = "timestep_lab") -> SampleConfig:
    """The model's own ``sample:`` settings (timestep_lab files only), changed by ``config``'s sample
    section and then by ``overrides`` (``sample.KEY=VALUE``). The model file's embedded config is
    read without its weights (:func:`~timestep_lab.artifacts.io.peek_torch`: the tensors are mapped, not
    read); the sampler then loads the file once, and checks its checksum."""
    for o in overrides:  # before any work: an override this command would not use is an error, not a no-op
        key = o.split("=", 1)[0].strip()
        if key.split(".", 1)[0] != "sample":
            leaf = key.rsplit(".", 1)[-1]
            hint = f" (did you mean sample.{leaf}?)" if leaf in {f.name for f in fields(SampleConfig)} else ""
            raise ConfigError(f"--set {o}: sampling takes only sample.* overrides; '{key}' is not used here{hint}")
    data, kind = {}, "gaussian"  # pretrained formats are Gaussian diffusions
    if fmt == "timestep_lab":
        obj = peek_torch(model)
        embedded = obj.get("config") if isinstance(obj, dict) else None
        embedded = embedded if isinstance(embedded, dict) else {}  # a bad one is refused by name when loaded
        sample = embedded.get("sample")
        data = dict(sample) if isinstance(sample, dict) else {}
        diffusion = embedded.get("diffusion")
        kind = diffusion.get("kind", "gaussian") if isinstance(diffusion, dict) else "gaussian"
    if config:
        data.update(load_yaml(config).get("sample", {}) or {})
    data = apply_overrides({"sample": data}, overrides)["sample"]
    cfg = config_from_dict(data, f"{model} sample settings", SampleConfig)
    from timestep_lab.components import check_method  # imports torch: kept out of start-up (module docstring)

    check_method(cfg.method, kind, f"{model} sample settings")
    return cfg


def run_config_arg(p: argparse.ArgumentParser) -> None:
    """``--run-config``: the run a model file is scored as (the workflow passes the run's run.yaml)."""
    p.add_argument("--run-config", type=Path, default=None,
                   help="the run's run.yaml: score the model only if it was trained as this run (its embedded "
                        "config, and its data is the reference's)")


def check_run_models(models, run_config: Path | None, reference, fmt: str = "timestep_lab") -> None:
    """With ``--run-config``: every model file must be a model of that run trained on the data the
    ``reference`` statistics describe (:func:`timestep_lab.checkpoints.provenance.check_run_model`);
    the first that is not fails the command, naming itself and what differs."""
    if run_config is None:
        return
    if fmt != "timestep_lab":
        raise ConfigError(f"--run-config {run_config}: only a timestep_lab model records the run it belongs to "
                          f"(--format {fmt})")
    from timestep_lab.checkpoints.provenance import check_run_model  # imports torch: not at start-up

    run = load_yaml(run_config)
    if not isinstance(run, dict):
        raise ConfigError(f"{run_config}: not a run config (a mapping is expected)")
    for model in models:
        check_run_model(model, run, str(run_config), data=reference.meta.get("data"))


def code_identity() -> dict:
    """The code identity of this process (:func:`timestep_lab.artifacts.identity.current`) and, under
    ``arithmetic``, the CPU code paths it computes with (:func:`arithmetic_in_effect`): read here,
    at the entry, and passed to the library functions that record them."""
    from timestep_lab.artifacts.identity import current

    return {**current(), "arithmetic": arithmetic_in_effect()}


def arithmetic_in_effect() -> dict:
    """The reproducibility level this process runs (:func:`timestep_lab.arithmetic.in_effect`),
    checked against the level its environment names: a ``ConfigError`` (one ``error:`` line)
    when the CPU or the process cannot run it, before any number is computed."""
    from timestep_lab import arithmetic

    record = arithmetic.in_effect(os.environ)
    try:
        arithmetic.check(record)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return record


# ------------------------------------------------------------------------------- torch


def setup_torch(args: argparse.Namespace) -> None:
    """Before a command that computes: its thread count, and a check that it runs the
    reproducibility level its environment names (:func:`arithmetic_in_effect`)."""
    import torch

    arithmetic_in_effect()
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # for child processes (a DataLoader worker)


def world():
    """The process group from torchrun's environment (one process when not launched by it)."""
    from timestep_lab.distributed import World

    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    import torch
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    return World(rank=rank, size=size, local_rank=local_rank)


def device(args: argparse.Namespace):
    """The torch device of ``--device`` (default ``auto``: CUDA when available)."""
    from timestep_lab.distributed import resolve_device

    return resolve_device(args.device or "auto")


def named_paths(items: list[str], what: str) -> dict[str, str]:
    """``["a=x", "b=y"] -> {"a": "x", "b": "y"}``: the ``NAME=PATH`` arguments of the analysis
    commands; a malformed item or a name given twice is a :class:`ConfigError` naming the option ``what``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{what}: expected NAME=PATH, got {item!r}")
        if key in out:  # the last would silently win
            raise ConfigError(f"{what}: {key} is given twice ({key}={out[key]} and {item}); each name once")
        out[key] = value
    return out
