"""``python -m timestep_lab estimate STUDY.yaml [--gpu h100] [--json]``: the cost of a study
before it runs. ``configure`` adds the options to the command's parser, ``run`` prints the table
(or the JSON) and returns the exit status; a bad study config raises :class:`ConfigError`, which
the CLI turns into one ``error:`` line.

Knows argparse and this package; knows nothing of the CLI's entry or other commands.
"""

from __future__ import annotations

import argparse
import json

from timestep_lab.estimate.throughput import DEVICES, device_for
from timestep_lab.io import atomic_write_json

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="a study config, e.g. config/cifar10.yaml")
    parser.add_argument("--gpu", default=None, choices=sorted(DEVICES), metavar="DEVICE",
                        help=f"price on this device ({', '.join(DEVICES)}); default: the study's "
                             "resources (cuda: gpu_model or h100; cpu: cpu)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON instead of a table")
    parser.add_argument("--out", default=None, help="also write the estimate as JSON to this file (atomically; "
                                                    "the study index shows it beside the measured cost)")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: they load torch, and the CLI builds this command's parser
    # for every invocation (``--help`` included)
    from timestep_lab.estimate.study import load_plan
    from timestep_lab.estimate.table import estimate, format_table, to_json

    plan = load_plan(args.study)
    est = estimate(plan, device_for(plan.study["resources"], args.gpu))
    print(json.dumps(to_json(est), indent=2) if args.json else format_table(est))
    if args.out:
        atomic_write_json(args.out, to_json(est))
    return 0
