"""The sha256 of an artifact's content, which the artifact carries inside itself (:mod:`timestep_lab.artifacts.io`).

A file's own sha256 cannot be stored in the file, and a sidecar can be lost or copied apart from
it; so a checksum here covers the content, not the bytes: :func:`content_sha256` of a saved dict
(every key and value, tensors by dtype, shape and raw bytes), :func:`array_sha256` of an array.
Recomputed from what was loaded, it says whether that is what was written. Pure functions of the
content: the same content gives the same digest (and, saved, the same bytes).

Only stdlib at import; numpy and torch are used when given their objects. Must not know files.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

__all__ = ["CHECKSUM_KEY", "NPZ_CHECKSUMS", "content_sha256", "array_sha256"]

#: the key of the content sha256 in every dict :func:`timestep_lab.artifacts.io.save_torch` writes
#: (removed again on load)
CHECKSUM_KEY = "content_sha256"
#: the member of an ``.npz`` written by :func:`timestep_lab.artifacts.io.save_npz` that holds the other
#: members' :func:`array_sha256` (JSON)
NPZ_CHECKSUMS = "sha256"


def _feed(h: "hashlib._Hash", obj: Any) -> None:
    """Update ``h`` with a canonical, type-tagged encoding of ``obj`` (see :func:`content_sha256`)."""
    torch = sys.modules.get("torch")  # only a loaded torch can have made a tensor
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(obj, dict):
        h.update(b"D%d:" % len(obj))
        for k, v in obj.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(obj, (list, tuple)):
        h.update(b"%s%d:" % (b"L" if isinstance(obj, list) else b"U", len(obj)))
        for v in obj:
            _feed(h, v)
    elif isinstance(obj, str):
        b = obj.encode("utf-8", "surrogatepass")
        h.update(b"S%d:" % len(b) + b)
    elif isinstance(obj, (bytes, bytearray)):
        h.update(b"Y%d:" % len(obj) + bytes(obj))
    elif obj is None or isinstance(obj, bool):
        h.update(f"{obj};".encode())
    elif isinstance(obj, int):
        h.update(b"I%d;" % obj)
    elif isinstance(obj, float):
        h.update(b"F" + obj.hex().encode() + b";")
    else:  # torch.dtype, torch.device, ...: what weights_only allows has a stable repr
        h.update(f"R{type(obj).__qualname__}:{obj!r};".encode())


def content_sha256(obj: Any) -> str:
    """sha256 of ``obj``'s content: dicts (keys in order), lists, tuples, strings, numbers,
    ``None`` and tensors (dtype, shape and raw bytes, on the CPU), each tagged with its type. The
    same content gives the same digest whatever device or memory layout it had."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


def array_sha256(arr: Any) -> str:
    """sha256 of a numpy array: its dtype, shape and C-order bytes."""
    import numpy as np

    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}:".encode())
    h.update(a.data if a.size else b"")
    return h.hexdigest()
