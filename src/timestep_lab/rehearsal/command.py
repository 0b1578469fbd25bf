"""``python -m timestep_lab rehearse STUDY.yaml [--fast-features] [--prepare-only] [--snakemake ARGS]``:
rehearse a study end to end on CPU before paying for it.

``run`` reads and checks the study as the workflow would (:func:`timestep_lab.cost.estimate.load_plan`),
writes the scaled-down copy (:func:`.scale.rehearsal_study`) to ``<dir>/<study>/config.yaml`` and
its stand-ins (:func:`.stand_ins.write_stand_ins`), runs Snakemake on it from the project root
(``--snakemake='--profile cluster'`` rehearses through the cluster profile too), then prints what a real run needs that the rehearsal stood in for
(:func:`.needs.real_run_needs`) and the real run's estimate (``python -m timestep_lab estimate``).

Knows argparse, Snakemake's command line and this package; nothing of the CLI's entry.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from timestep_lab.config import ConfigError
from timestep_lab.config.load import dump_yaml, load_yaml
from timestep_lab.artifacts.io import atomic_write_text

__all__ = ["configure", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="the study config to rehearse, e.g. config/cifar10.yaml")
    p.add_argument("--dir", default="rehearsal", metavar="DIR",
                   help="where the rehearsal's config and stand-ins go, under the project root (default: rehearsal)")
    p.add_argument("--fast-features", action="store_true",
                   help="score with a random 32-d CNN instead of random Inception-v3 weights in both libraries' "
                        "formats: an Inception FID of 2048-d features is slow on a CPU and a rehearsal computes "
                        "dozens (the Inception loaders are then not rehearsed)")
    p.add_argument("--prepare-only", action="store_true",
                   help="write the config and the stand-ins and print the snakemake command; run nothing")
    p.add_argument("--no-estimate", action="store_true", help="do not print the real run's estimate")
    p.add_argument("--snakemake", default="", metavar="ARGS",
                   help="more snakemake arguments, one string, e.g. --snakemake='--profile cluster' to rehearse "
                        "through the cluster profile")


def _snakemake() -> str:
    """The snakemake beside this interpreter (the project's environment), else on PATH."""
    exe = Path(sys.executable).parent / "snakemake"
    return str(exe) if exe.exists() else (shutil.which("snakemake") or "snakemake")


def _estimate(source: str) -> str:
    """``python -m timestep_lab estimate SOURCE``'s table (its error line when it fails)."""
    r = subprocess.run([sys.executable, "-m", "timestep_lab", "estimate", source], capture_output=True, text=True)
    lines = r.stdout if r.returncode == 0 else r.stderr
    return "\n".join(ln for ln in lines.splitlines() if not ln.startswith("timestep_lab usage:"))


def _check_dir(folder: str, root: Path) -> None:
    """``--dir`` must be a folder under the project root: the rehearsal's config names its stand-ins
    by paths relative to the root, and a rehearsal writes nothing outside the project."""
    inside = (root / folder).resolve()
    if Path(folder).is_absolute() or not inside.is_relative_to(root.resolve()) or inside == root.resolve():
        raise ConfigError(f"--dir {folder}: must be a folder under the project root {root} (relative, without "
                          f"'..' out of it): the rehearsal writes its config and stand-ins there")


def run(args: argparse.Namespace) -> int:
    # imported here: the plan checks every run config (torch), and the CLI builds this parser for --help
    from timestep_lab.cost.estimate import load_plan
    from timestep_lab.rehearsal.needs import real_run_needs
    from timestep_lab.rehearsal.paths import RehearsalPaths
    from timestep_lab.rehearsal.scale import rehearsal_study
    from timestep_lab.rehearsal.stand_ins import write_stand_ins

    root = Path.cwd()
    if not (root / "Snakefile").is_file():
        raise ConfigError(f"{root}: no Snakefile here; run rehearse from the project root")
    source = os.path.relpath(args.study) if Path(args.study).is_absolute() else str(args.study)
    raw = load_yaml(source) if Path(source).is_file() else {}
    if isinstance(raw, dict) and isinstance(raw.get("rehearsal"), dict):  # before the (slower) full check
        raise ConfigError(f"{source}: is itself a rehearsal (of {raw['rehearsal'].get('of')}); rehearse the study "
                          f"it copies")
    study = load_plan(source).study
    _check_dir(args.dir, root)
    paths = RehearsalPaths(str(args.dir), str(study["study"]))
    cfg = rehearsal_study(study, source=source, paths=paths, fast_features=args.fast_features)
    for line in cfg["rehearsal"]["stand_ins"]:  # what stands in for what (the index banner's list)
        print(f"rehearse: stand-in: {line}", flush=True)
    for line in write_stand_ins(cfg, paths, root):
        print(f"rehearse: {line}", flush=True)
    header = (f"# A rehearsal of {source}, written by `python -m timestep_lab rehearse`: the same groups, samplers,\n"
              f"# weightings and analyses at tiny sizes on CPU, on fake data and random weights. No number it gives\n"
              f"# is a result (study {cfg['study']}: results/{cfg['study']}/, reports/{cfg['study']}/).\n")
    (root / paths.config).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / paths.config, header + dump_yaml(cfg))
    command = [_snakemake(), "--configfile", str(paths.config), *shlex.split(args.snakemake)]
    print(f"rehearse: {shlex.join(command)}", flush=True)
    if not args.prepare_only:
        status = subprocess.run(command, cwd=root).returncode
        if status != 0:
            print(f"error: the rehearsal of {source} failed (snakemake exit status {status}): a real run would "
                  f"fail the same way; the failed job's log is under logs/{cfg['study']}/", file=sys.stderr)
            return 1
        print(f"\nrehearsal of {source} passed: reports/{cfg['study']}/index.html (every number in it is a "
              f"rehearsal's, not a result)")
    print(f"\nWhat a real run of {source} needs that the rehearsal stood in for:")
    for line in real_run_needs(study, root):
        print(f"  {line}")
    if not args.no_estimate:
        print(f"\nIts cost (python -m timestep_lab estimate {source}):")
        print(_estimate(source))
    return 0
