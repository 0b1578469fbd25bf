"""The ``estimate`` command: registered here, implemented in ``timestep_lab.cost.estimate.command``
(its ``configure(parser)`` adds the options, its ``run(args)`` does the work).

Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

from timestep_lab.cli.common import command
from timestep_lab.cost.estimate.command import configure, run

command("estimate", "cost of a study before running it: jobs, images, FLOPs, GPU-hours per rule", configure)(run)
