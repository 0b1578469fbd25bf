"""Typed, frozen run configuration and the project's only YAML reader.

* :mod:`~timestep_lab.config.schema`: the dataclasses (:class:`RunConfig` and its sections) and
  :class:`ConfigError`;
* :mod:`~timestep_lab.config.convert`: nested dict <-> dataclass with key and type checks;
* :mod:`~timestep_lab.config.load`: YAML files, ``--set`` overrides, :func:`load_config`.

The package imports nothing from ``timestep_lab`` but :mod:`timestep_lab.artifacts.io`, and no torch: the
Snakefile imports it when it builds the DAG.
"""

from timestep_lab.config import schema
from timestep_lab.config.convert import budget_config, config_from_dict, config_to_dict, dataclass_from_mapping
from timestep_lab.config.load import (
    apply_overrides,
    dump_config,
    dump_yaml,
    load_config,
    load_yaml,
    parse_override,
    parse_scalar,
)
from timestep_lab.config.schema import (
    FEATURE_EXTRACTORS,
    BudgetConfig,
    ComponentConfig,
    ConfigError,
    DataConfig,
    DiffusionConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
)

__all__ = [
    *schema.__all__,
    "load_yaml",
    "load_config",
    "config_from_dict",
    "budget_config",
    "dataclass_from_mapping",
    "config_to_dict",
    "apply_overrides",
    "parse_override",
    "parse_scalar",
    "dump_config",
    "dump_yaml",
]
