"""The ``report`` command: execute a report notebook (jupytext .py) with papermill -> HTML.

The rendering is ``timestep_lab.reporting``. Must not know the entry (``timestep_lab.cli``) or
other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.cli.common import command, log
from timestep_lab.config import ConfigError
from timestep_lab.reporting import render_notebook


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--notebook", type=Path, required=True, help="reports/<name>.py")
    p.add_argument("--out", type=Path, required=True, help="HTML to write")
    p.add_argument("-p", dest="parameters", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="notebook parameter (string value)")
    p.add_argument("--banner", default=None, help="a warning shown above the report (a rehearsal's: not a result)")


@command("report", "execute a report notebook with papermill and write self-contained HTML", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    """Run reports/<name>.py (jupytext) with -p NAME VALUE parameters -> HTML."""
    if not args.notebook.is_file():
        raise ConfigError(f"{args.notebook}: report notebook not found")
    if args.notebook.suffix != ".py":
        raise ConfigError(f"{args.notebook}: a report notebook is a jupytext .py file (reports/<name>.py)")
    params = {}
    for name, value in args.parameters:
        params[name] = value
    render_notebook(args.notebook, args.out, params, banner=args.banner)
    log.info("report %s -> %s", args.notebook, args.out)
    return 0
