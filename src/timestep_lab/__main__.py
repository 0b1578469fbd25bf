"""``python -m timestep_lab``: the command line of :mod:`timestep_lab.cli`."""

import sys

from timestep_lab.cli import main

sys.exit(main())
