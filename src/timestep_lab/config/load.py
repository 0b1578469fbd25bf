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

from timestep_lab.artifacts.io import atomic_write_text
from timestep_lab.config.convert import config_from_dict, config_to_dict
from timestep_lab.config.schema import ConfigError, RunConfig

__all__ = ["load_yaml", "parse_scalar", "dump_yaml", "parse_override", "apply_overrides", "load_config",
           "dump_config"]


#: how deep a config may nest (ours nest 6 levels): deeper is refused before Python's recursion limit
MAX_DEPTH = 64
#: how many nodes aliases (``*name``) may add when they are expanded: a few reused blocks, not a
#: "billion laughs" document whose expansion takes gigabytes
MAX_ALIAS_NODES = 10_000


class _StrictYAMLError(yaml.YAMLError):
    """A document this loader refuses: a duplicated key, nesting or alias expansion past the bounds."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``), and reads
    strictly: a key given twice in one mapping (the second would silently win), nesting deeper
    than :data:`MAX_DEPTH`, and aliases that would expand to more than :data:`MAX_ALIAS_NODES`
    nodes are refused, the last before anything is expanded (the node graph is counted, with
    each shared node counted once per use)."""

    def compose_node(self, parent, index):  # noqa: D102 - yaml's own method, depth-counted
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _StrictYAMLError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):  # noqa: D102 - the document's graph, checked before it is constructed
        node = super().get_single_node()
        if node is not None:
            own, expanded = _node_counts(node)
            if expanded - own > MAX_ALIAS_NODES:
                raise _StrictYAMLError(f"its aliases (*name) would expand to {expanded:,} nodes, {expanded - own:,} "
                                       f"more than written (at most {MAX_ALIAS_NODES:,} allowed): refused before any is expanded")
        return node

    def construct_mapping(self, node, deep=False):  # noqa: D102 - duplicate keys refused
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise _StrictYAMLError(f"line {key_node.start_mark.line + 1}: key '{key_node.value}' appears "
                                           f"twice in one mapping (first on line {seen[key].line + 1}); the second "
                                           f"would silently replace the first")
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _node_counts(root: yaml.Node) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded) of a composed document, without
    expanding it: each node's expanded size is computed once and summed over its uses."""
    sizes: dict[int, int] = {}
    pending: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in pending:
            raise _StrictYAMLError(f"line {node.start_mark.line + 1}: an alias refers to the block that contains it "
                                   f"(a recursive structure)")
        pending.add(key)
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[key] = 1 + sum(size(c) for c in children)
        pending.discard(key)
        return sizes[key]

    expanded = size(root)
    return len(sizes), expanded


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
    """Read one YAML file strictly (:class:`_Loader`); a missing file, a syntax error, a duplicated
    key, too deep a nesting or an alias bomb is a :class:`ConfigError` naming the file (and line)."""
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
    except _StrictYAMLError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    return {} if data is None else data


def parse_scalar(text: str) -> Any:
    """Parse one ``--set`` value the way YAML would (numbers, lists, null, strings); a value this
    loader refuses (a duplicated key, too deep, an alias bomb) is a :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _StrictYAMLError as exc:
        raise ConfigError(f"--set value {text[:40]!r}: {exc}") from None
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
