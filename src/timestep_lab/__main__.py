import sys

from timestep_lab.cli import main

sys.exit(main())
