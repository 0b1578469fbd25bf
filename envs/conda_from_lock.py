"""Write envs/conda.yaml from envs/requirements.lock (run by `make lock`).

The conda environment (used by the rules' `conda:` directives with
`--software-deployment-method conda` on clusters) installs exactly the pinned pip packages on top
of conda's Python 3.11, so both name the same packages at the same versions.
"""

from pathlib import Path

here = Path(__file__).parent
pins = [ln.strip() for ln in (here / "requirements.lock").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
lines = [
    "# Generated from envs/requirements.lock by envs/conda_from_lock.py; do not edit by hand.",
    "# Used by the workflow's conda: directives (snakemake --software-deployment-method conda).",
    "name: timestep-lab",
    "channels:",
    "  - conda-forge",
    "dependencies:",
    "  - python=3.11",
    "  - pip",
    "  - pip:",
    *[f"      - {p}" for p in pins],
    "      - -e ../",  # the project itself (path relative to this file)
]
(here / "conda.yaml").write_text("\n".join(lines) + "\n")
