"""Reports: notebooks rendered to self-contained HTML, the study index, and the notebooks' helpers.

| module | holds | must not know |
|---|---|---|
| ``render`` | a jupytext notebook, executed, through nbconvert -> one HTML page, no network references | what a notebook computes |
| ``execute`` | a notebook's cells run in this process (IPython's shell), outputs as a kernel records them | rendering |
| ``index`` | the jinja2 study index: scorecard, family, floor, the papers' numbers beside ours | how numbers are computed |
| ``notebook`` | what every ``reports/*.py`` opens with: plotting style, a group's tables | rendering; training, sampling, scoring |

``notebook`` imports pandas, matplotlib and IPython, so it is not re-exported here: the ``report``
command and the Snakemake index rule import this package without them. Notebooks import
``timestep_lab.reporting.notebook`` directly.
"""

from timestep_lab.reporting.index import (
           family_lines,
           headline_rows,
           protocol_lines,
           render_index,
)
from timestep_lab.reporting.render import PAGE_CSS, network_references, render_notebook

__all__ = ["render_notebook", "render_index", "network_references", "headline_rows", "protocol_lines", "PAGE_CSS",
           "family_lines"]
