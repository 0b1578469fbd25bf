"""Named registries: every research choice is chosen by name from config, never an if-chain.

An entry is a factory plus an optional frozen *params* dataclass. :meth:`Registry.params`
validates a ``{key: value}`` mapping from a config file against that dataclass (unknown keys,
wrong types and the dataclass's own ``__post_init__`` checks) and reports errors under the
config key they came from, e.g. ``timesteps.params.lam``.

Names are added, never repurposed: once a name is committed its meaning is stable.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, Generic, Mapping, TypeVar

from timestep_lab.config import ConfigError, dataclass_from_mapping

T = TypeVar("T")

__all__ = ["Registry", "NoParams", "check_range"]


@dataclasses.dataclass(frozen=True)
class NoParams:
    """Parameters of an entry that takes none."""


def check_range(name: str, value: float, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False) -> None:
    """Raise ``ValueError('name must be ...')`` if ``value`` is outside [lo, hi] (or open ends)."""
    bad = (lo is not None and (value <= lo if lo_open else value < lo)) or (
        hi is not None and (value >= hi if hi_open else value > hi))
    if bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {left}{'-inf' if lo is None else lo}, "
                         f"{'inf' if hi is None else hi}{right}, got {value!r}")


class Registry(Generic[T]):
    """A mapping ``name -> (factory, params dataclass)``."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, tuple[Callable[..., T], type]] = {}

    def register(self, name: str, params: type = NoParams) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._entries:
                raise KeyError(f"{self.kind} '{name}' is already registered")
            self._entries[name] = (factory, params)
            return factory

        return deco

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def _entry(self, name: str, key: str = "name", source: str = "config") -> tuple[Callable[..., T], type]:
        try:
            return self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), self.names(), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{source}: {key}: unknown {self.kind} '{name}'{hint}; choose one of: {', '.join(self.names())}"
            ) from None

    def check(self, name: str, key: str, source: str = "config") -> None:
        """Raise :class:`ConfigError` naming ``key`` (a dotted config key, e.g. ``diffusion.kind``)
        unless ``name`` is registered."""
        self._entry(name, key, source)

    def params(self, name: str, params: Mapping[str, Any] | Any = None, *, key: str = "params",
               source: str = "config") -> Any:
        """Validate ``params`` for entry ``name``; return the frozen params dataclass.

        ``key`` is the dotted config key of the params mapping (e.g. ``timesteps.params``);
        errors name ``<key>.<field>``.
        """
        section = key.rsplit(".", 1)[0] + "." if "." in key else ""
        _, cls = self._entry(name, section + "name", source)
        if dataclasses.is_dataclass(params) and not isinstance(params, type):
            return params
        params = {} if params is None else params
        if not isinstance(params, Mapping):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {type(params).__name__}")
        return dataclass_from_mapping(cls, params, source, prefix=key + ".")

    def build(self, name: str, params: Mapping[str, Any] | Any = None, **context: Any) -> T:
        """Construct entry ``name`` with validated ``params`` and extra context kwargs."""
        factory, _ = self._entry(name)
        return factory(self.params(name, params), **context)
