"""Why ``torch.load(weights_only=True)`` refused a file: a pickle that would run code, or damage.

torch's restricted unpickler raises one ``UnpicklingError`` for both, wrapped in its own advice
to load the file with ``weights_only=False`` (never ours). :func:`refused_pickle` reads its
message: a pickle that names a Python object it will not build is *unsafe*, unless that name
names nothing that exists here (a flipped bit in ``torch._utils._rebuild_tensor_v2``); anything
else (an unknown opcode, a bad memo index, a "function" that is a string) is *damage*. Nothing is
imported to find out. Stdlib only; :func:`timestep_lab.artifacts.io.load_torch` raises the errors.
"""

from __future__ import annotations

import builtins
import importlib.util
import re
import sys

__all__ = ["refused_pickle"]


#: what torch's restricted unpickler says when a pickle names a Python object it will not build
#: (code could run on load); any other complaint of it (an unknown opcode, a bad memo index, a
#: "function" that is a string) is a damaged file
_UNSAFE_MARKERS = ("unsupported global", "was not an allowed global", "unsupported class", "whose module")
#: torch's own lines around that complaint: its advice to load with weights_only=False (never ours)
_TORCH_PREAMBLE = ("weights only load failed", "weights_only", "please file an issue", "check the documentation")


def _detail(msg: str) -> str:
    """The restricted unpickler's own complaint inside torch's message, without torch's preamble
    (which advises loading with ``weights_only=False``)."""
    text = msg.partition("WeightsUnpickler error:")[2] or msg
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not any(p in ln.lower() for p in _TORCH_PREAMBLE)]
    return (lines[0] if lines else "").split(" was not an allowed global")[0][:200]


def _names_nothing(detail: str) -> bool:
    """Whether the global a pickle names (``Unsupported global: GLOBAL pkg.mod.name``) names
    nothing that exists: a flipped bit in ``torch._utils._rebuild_tensor_v2``, say, which is a
    damaged file rather than a pickle that would run code. Nothing is imported to find out: a
    top-level package is looked up without importing it, and a dotted name is resolved only
    through modules this process has already imported (anything else counts as existing)."""
    found = re.search(r"GLOBAL\s+(\S+)", detail)
    name = found.group(1) if found else ""
    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        return bool(name)
    if len(parts) == 1:  # torch names a builtin without its module: GLOBAL print
        return not hasattr(builtins, name)
    try:
        if importlib.util.find_spec(parts[0]) is None:
            return True
    except (ImportError, ValueError):
        return True
    for i in range(len(parts) - 1, 0, -1):  # the longest prefix that is an imported module
        module = sys.modules.get(".".join(parts[:i]))
        if module is not None:
            obj = module
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return True
                obj = getattr(obj, attr)
            return False
    return False


def refused_pickle(msg: str) -> tuple[bool, str]:
    """``(unsafe, detail)`` of torch's ``UnpicklingError`` message ``msg``: whether the pickle names
    a Python object that exists (code could run on load), and the unpickler's own complaint
    without torch's preamble."""
    detail = _detail(msg)
    return any(m in msg.lower() for m in _UNSAFE_MARKERS) and not _names_nothing(detail), detail
