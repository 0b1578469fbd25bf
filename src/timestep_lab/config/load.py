"""The project's only YAML reader and writer, ``--set`` overrides, and run-config files.

YAML run-config files hold only the values that differ from the defaults (deltas);
``--set section.key=value`` overrides are applied on top and parsed the way YAML would parse the
value. The loader reads ``1e-4`` as a float (YAML 1.1 would read a string). Every error is a
:class:`ConfigError` naming the file (or ``--set``) and the dotted key, for example
``config/run.yaml: train.batch_size: expected int, got str 'big'``.

Knows nothing of studies (the study YAML's meaning is :mod:`timestep_lab.workflow`'s) or of
registries. No torch: the Snakefile imports it at DAG build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from timestep_lab.config.convert import config_from_dict, config_to_dict
from timestep_lab.config.schema import ConfigError, RunConfig
from timestep_lab.artifacts.io import atomic_write_text

__all__ = ["load_yaml", "parse_scalar", "dump_yaml", "parse_override", "apply_overrides", "load_config",
           "dump_config"]


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``)."""


_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in list("-+0123456789."):
    _Loader.yaml_implicit_resolvers[_first] = [
        (tag, rx) for tag, rx in _Loader.yaml_implicit_resolvers.get(_first, []) if tag != "tag:yaml.org,2002:float"
    ]
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def load_yaml(path: str | Path) -> Any:
    """Read one YAML file; a missing file or a syntax error names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a YAML text file (its bytes are not UTF-8 text)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    return {} if data is None else data


def parse_scalar(text: str) -> Any:
    """Parse one ``--set`` value the way YAML would (numbers, lists, null, strings)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"train.batch_size=64"`` -> ``(["train", "batch_size"], 64)``."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected section.key=value")
    key, _, raw = text.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(f"--set {text}: empty key component in '{key}'")
    return parts, parse_scalar(raw)


def apply_overrides(data: Mapping[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Return a deep copy of ``data`` with each ``section.key=value`` override applied.

    Keys are validated later against the dataclasses, so a typo still fails with its name.
    """

    def copy(d: Any) -> Any:
        return {k: copy(v) for k, v in d.items()} if isinstance(d, Mapping) else d

    out = copy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"--set {text}: '{'.'.join(parts[: i + 1])}' is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    cls: type = RunConfig,
) -> Any:
    """Load a run config from YAML (deltas over the defaults) plus ``--set`` overrides.

    Overridden keys are reported with the source ``--set`` so a bad override is easy to find.
    """
    data: Mapping[str, Any] = {} if path is None else load_yaml(path)
    source = str(path) if path is not None else "<defaults>"
    # validate the file on its own first so its errors name the file, then the overrides
    base = config_from_dict(data, source, cls)
    if not overrides:
        return base
    merged = apply_overrides(config_to_dict(base), list(overrides))
    return config_from_dict(merged, f"{source} + --set {' '.join(overrides)}", cls)


def dump_config(cfg: Any, path: str | Path) -> None:
    """Write the fully resolved config as YAML, atomically."""
    atomic_write_text(path, dump_yaml(config_to_dict(cfg)))
