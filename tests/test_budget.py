"""The study config's ``budget:`` block (issue 40): checked once, one error line naming the key."""

from __future__ import annotations

import pytest

from timestep_lab.config import BudgetConfig, ConfigError, budget_config
from timestep_lab.evidence.sequential import PRIOR_SD


def test_the_budget_block_is_checked_once_with_one_line_naming_the_key():
    assert budget_config({"study": "x"}) is None  # absent: the fixed design
    b = budget_config({"budget": {"amount": 100, "unit": "gpu-hours", "gpu": "h100"}}, "config/c.yaml")
    assert b == BudgetConfig(100.0, "gpu-hours", "h100") and b.prior_sd == PRIOR_SD
    assert b.calibration == "skew_envelope"  # the card's promise under skew by default
    with pytest.raises(AttributeError):
        b.amount = 1.0  # frozen
    bad = {"amount": "budget.amount must be > 0", "unit": "budget.unit must be one of",
           "seeds": "unknown key 'budget.seeds'", "max_seeds": "budget.max_seeds must be >= initial_seeds",
           "gpu": "budget.gpu must name a card", "initial_seeds": "budget.initial_seeds: expected int"}
    bad["calibration"] = "budget.calibration must be one of skew_envelope, normal"
    cases = {"calibration": {"amount": 1, "calibration": "student_t"},
             "amount": {"amount": 0}, "unit": {"amount": 1, "unit": "dollars"}, "seeds": {"amount": 1, "seeds": 3},
             "max_seeds": {"amount": 1, "max_seeds": 1}, "gpu": {"amount": 1, "gpu": "h100"},
             "initial_seeds": {"amount": 1, "initial_seeds": 2.5}}
    for key, block in cases.items():
        with pytest.raises(ConfigError) as exc:
            budget_config({"budget": block}, "config/c.yaml")
        msg = str(exc.value)
        assert msg.startswith("config/c.yaml: ") and bad[key] in msg and "\n" not in msg, msg
    with pytest.raises(ConfigError, match="budget: expected a mapping"):
        budget_config({"budget": 5}, "config/c.yaml")


def test_a_study_with_a_budget_passes_the_study_schema():
    """The workflow's schema takes the block (its keys are BudgetConfig's to check): the default
    study with a budget validates, and the block comes back as given."""
    from pathlib import Path

    from snakemake.utils import validate

    from timestep_lab.config import load_yaml

    root = Path(__file__).resolve().parents[1]
    study = load_yaml(root / "config" / "config.yaml")
    study["budget"] = {"amount": 2.5, "max_seeds": 8}
    validate(study, str(root / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    assert study["budget"] == {"amount": 2.5, "max_seeds": 8} and budget_config(study).max_seeds == 8
