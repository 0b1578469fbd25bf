"""``run-config`` writes a run's run.yaml (what ``train`` reads); ``train`` trains one run (config +
overrides) into an output folder, resuming by default.

SIGTERM or SIGUSR1 (a SLURM time limit, a cancellation) stops training after the step in progress
with its state saved; the command then exits with status 75 (``EXIT_RESUMABLE``): run it again to
continue (Snakemake resubmits it). TensorBoard event files go to ``--events`` (default
``<out>/tensorboard``; ``--no-events``: none).

Reads torchrun's environment through :func:`timestep_lab.cli.common.world`; the loop itself is
``timestep_lab.train``. Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError, read_json
from timestep_lab.cli.common import (
    code_identity,
    command,
    config_args,
    finite_at_least,
    json_object,
    load_run_config,
    log,
    runtime_args,
    world,
)
from timestep_lab.errors import EXIT_RESUMABLE, InputError


def _run_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-json", type=json_object, required=True,
                   help="the run's whole config as a JSON object (the workflow's run table row: every hyperparameter)")
    p.add_argument("--out", type=Path, required=True, help="run.yaml to write")
    p.add_argument("--init", default=None, help="the model the run starts from (a model.pt; a diffusers folder is read now)")
    p.add_argument("--slots", type=Path, default=None, help="analyses/slots.json: the slots measured on the reference")


@command("run-config", "a run's config, with what is only known at run time (init model, slots) -> run.yaml",
         _run_config_args)
def cmd_run_config(args: argparse.Namespace) -> int:
    """Write the run's run.yaml: --config-json, plus the model it starts from (a diffusers folder
    also sets its model and diffusion sections) and, for slot fine-tuning, the slot's timestep
    ranges read from --slots (timestep_lab.workflow.write_run_config)."""
    from timestep_lab.workflow import write_run_config

    if args.slots is not None:
        slots = read_json(args.slots)
        if not isinstance(slots, dict) or not isinstance(slots.get("slots"), list):
            raise ArtifactError(f"{args.slots}: not a slots file (the slots job writes {{\"slots\": [[lo, hi], ...]}})")
    write_run_config(args.config_json, str(args.out), init_from=args.init,
                     slots_file=str(args.slots) if args.slots else None)
    log.info("run config -> %s", args.out)
    return 0


def _train_args(p: argparse.ArgumentParser) -> None:
    config_args(p)
    runtime_args(p)
    p.add_argument("--out", type=Path, required=True, help="run folder")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint and start over")
    p.add_argument("--continue-from", type=Path, default=None, metavar="RUN_DIR",
                   help="a shorter run of this config (only train.total_kimg and logging may differ): an empty --out "
                        "starts from its training state, not from image 0; the final weights are those of training "
                        "from scratch (docs/methods.md §14.5)")
    p.add_argument("--stop-after-kimg", type=finite_at_least(0), default=None, help="stop (resumably) after this many kimg")
    p.add_argument("--events", type=Path, default=None,
                   help="folder for TensorBoard event files (live curves; default: OUT/tensorboard)")
    p.add_argument("--no-events", action="store_true", help="write no TensorBoard event files")


@command("train", "train one run into an output folder (resumes automatically)", _train_args, out_folder=True)
def cmd_train(args: argparse.Namespace) -> int:
    """Train the run described by --config (plus --set overrides) into --out."""
    from timestep_lab.train import train

    if args.continue_from is not None and args.no_resume:
        raise InputError("--continue-from resumes the shorter run's state: it cannot be combined with --no-resume")
    cfg = load_run_config(args)
    group = world()
    events = None if args.no_events else (args.events or args.out / "tensorboard")
    result = train(cfg, args.out, resume=not args.no_resume, progress=not args.no_progress, world=group,
                   stop_after_kimg=args.stop_after_kimg, events=events, code=code_identity(),
                   continue_from=args.continue_from)
    if result.status == "interrupted":
        if group.is_main:
            log.warning("%s", result.message)
        return EXIT_RESUMABLE
    if group.is_main:
        if result.status == "incomplete":
            log.info("stopped at %.1f kimg as asked; rerun to continue", result.nimg / 1000)
        else:
            log.info("%s: %s after %.1f kimg, %d steps, %.1f s, final loss %s -> %s", result.out_dir.name, result.status,
                     result.nimg / 1000, result.step, result.wall_time_s,
                     f"{result.final_loss:.5f}" if result.final_loss is not None else "n/a", result.model_path)
    if result.status == "diverged":
        log.error("%s", result.message)
    return 0
