"""The analyses behind the reports that are not training: files in, files out.

Each function here is tested on its own; notebooks only read their outputs and plot.
"""

from timestep_lab.studies.consistency import paired_distance
from timestep_lab.studies.contribution import posterior_coefficients, replacement_ranges
from timestep_lab.studies.interference import interference_matrix
from timestep_lab.studies.prediction_types import x0_error_profile
from timestep_lab.studies.profile import full_profile, load_profile, loss_profile, profile_per_t, save_profile
from timestep_lab.studies.slots import PAPER_SLOTS, equal_loss_slots, load_slots, scale_slots, slot_sums

__all__ = [
    "equal_loss_slots",
    "load_slots",
    "slot_sums",
    "scale_slots",
    "PAPER_SLOTS",
    "loss_profile",
    "full_profile",
    "profile_per_t",
    "save_profile",
    "load_profile",
    "interference_matrix",
    "paired_distance",
    "x0_error_profile",
    "posterior_coefficients",
    "replacement_ranges",
]
