"""Nested dicts <-> the frozen config dataclasses, checking every key and type on the way in.

:func:`dataclass_from_mapping` follows the annotations of :mod:`timestep_lab.config.schema`
(``int``, ``float``, ``str``, ``bool``, ``X | None``, ``tuple[...]``, ``Mapping``, nested
dataclasses): lists become tuples, an unknown key fails with a "did you mean" hint, and a
``__post_init__`` range check is re-raised as :class:`ConfigError` naming the source and the
dotted key (``config/run.yaml: train.batch_size must be > 0, got 0``).

Knows no file format (YAML lives in :mod:`timestep_lab.config.load`) and no registries.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Mapping

from timestep_lab.config.schema import BudgetConfig, ConfigError, RunConfig

__all__ = ["dataclass_from_mapping", "config_from_dict", "config_to_dict", "budget_config"]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert lists to tuples."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, source)
            except ConfigError as exc:
                errors.append(exc)
        expected = " or ".join(_type_name(a) for a in args)
        raise ConfigError(f"{source}: {key}: expected {expected}, got {type(value).__name__} {value!r}")
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {type(value).__name__} {value!r}")
        return dataclass_from_mapping(tp, value, source, prefix=key + ".")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: {key}: expected a list, got {type(value).__name__} {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{source}: {key}: expected a list of {len(args)} values, got {len(value)}")
        return tuple(_coerce(v, a, f"{key}[{i}]", source) for i, (v, a) in enumerate(zip(value, args)))
    if origin in (collections.abc.Mapping, dict) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {type(value).__name__} {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # .inf / .nan: no length, rate or interval is infinite
                raise ConfigError(f"{source}: {key}: expected a finite number, got {value!r}")
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - a new annotation type was added without support here
        raise TypeError(f"unsupported config annotation {tp!r} for {key}")
    raise ConfigError(f"{source}: {key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


def dataclass_from_mapping(cls: type, data: Mapping[str, Any], source: str, prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in hints:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise ConfigError(f"{source}: unknown key '{prefix}{key}'{hint}; valid keys: {', '.join(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _coerce(data[f.name], hints[f.name], prefix + f.name, source)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{source}: missing required key '{prefix}{f.name}'")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:
        # __post_init__ checks raise "batch_size must be > 0, got 0": name the full key
        msg = str(exc)
        first = msg.split(" ", 1)[0].rstrip(":").split(".")[0]  # "lam", or "base" of "base.params.m" (nested)
        if first in names:
            raise ConfigError(f"{source}: {prefix}{msg}") from None
        where = f"{prefix.rstrip('.')}: " if prefix else ""
        raise ConfigError(f"{source}: {where}{msg}") from None


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>", cls: type = RunConfig) -> Any:
    """Build a (frozen) config dataclass from a nested dict, checking keys and types."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    return dataclass_from_mapping(cls, data, source)


def config_to_dict(cfg: Any) -> Any:
    """Plain nested dict/list version of a config (tuples become lists), YAML-safe."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: config_to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [config_to_dict(v) for v in cfg]
    if isinstance(cfg, Mapping):
        return {str(k): config_to_dict(v) for k, v in cfg.items()}
    return cfg


def budget_config(study: Mapping[str, Any], source: str = "study") -> BudgetConfig | None:
    """The study config's ``budget:`` block checked once (:class:`BudgetConfig`): None when absent
    (the fixed design); a bad key or value raises one :class:`ConfigError` line naming
    ``budget.<key>`` and ``source``."""
    block = study.get("budget") if isinstance(study, Mapping) else None
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise ConfigError(f"{source}: budget: expected a mapping, got {type(block).__name__} {block!r}")
    return dataclass_from_mapping(BudgetConfig, block, source, prefix="budget.")
