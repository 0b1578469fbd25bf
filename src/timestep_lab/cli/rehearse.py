"""The ``rehearse`` command: registered here, implemented in ``timestep_lab.rehearsal.command``
(its ``configure(parser)`` adds the options, its ``run(args)`` does the work).

Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

from timestep_lab.cli.common import command
from timestep_lab.rehearsal.command import configure, run

command("rehearse", "a scaled-down copy of a study on fake data and random weights, run end to end on CPU",
        configure)(run)
