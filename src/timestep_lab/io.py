"""Atomic file writes, hashing and safe checkpoint loading.

Every artifact is written to a temporary file in the destination folder, flushed and
fsync'ed, then renamed over the destination: a reader never sees a half-written file, and a
failed write (disk full, kill) leaves the previous version in place.

Checkpoints are loaded with ``torch.load(..., weights_only=True)`` only: a pickle that tries
to run code is refused with :class:`UnsafeCheckpointError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = [
    "ArtifactError",
    "UnsafeCheckpointError",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "sha256_file",
    "save_torch",
    "load_torch",
    "read_json",
]


class ArtifactError(RuntimeError):
    """An artifact on disk is missing, truncated, corrupted or of the wrong kind."""


class UnsafeCheckpointError(ArtifactError):
    """A checkpoint would need arbitrary code execution (a non-weights pickle) to load."""


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give the file normal permissions
    try:
        try:
            yield tmp_path
            with open(tmp_path, "rb+") as fh:  # make the bytes durable before the rename
                os.fsync(fh.fileno())
            os.replace(tmp_path, path)
        except OSError as exc:  # disk full, quota, file-size limit: say which artifact, keep the old one
            raise ArtifactError(f"{path}: write failed ({exc.strerror or exc}); "
                                f"{'the previous file is unchanged' if path.exists() else 'nothing was written'}") from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupted JSON ({exc})") from None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def save_torch(obj: Any, path: str | Path) -> None:
    """``torch.save`` atomically (tensors, dicts, lists and plain Python values only)."""
    import torch

    with atomic_path(path) as tmp:
        try:
            torch.save(obj, tmp)
        except RuntimeError as exc:  # torch's zip writer reports ENOSPC/EFBIG as a RuntimeError
            raise OSError(f"torch.save failed: {str(exc).splitlines()[0]}") from exc


def load_torch(path: str | Path, map_location: Any = "cpu", check: Callable[[Any], None] | None = None) -> Any:
    """Load a checkpoint with ``weights_only=True``.

    Raises :class:`ArtifactError` naming the file when it is missing, truncated or corrupted,
    and :class:`UnsafeCheckpointError` when it contains pickled code.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: checkpoint not found")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        msg = str(exc)
        if "weights_only" in msg.lower() or "Unsupported global" in msg or "GLOBAL" in msg:
            detail = next((ln.strip() for ln in msg.splitlines() if "Unsupported" in ln or "GLOBAL" in ln),
                          msg.splitlines()[0] if msg else "")
            detail = detail.split(" was not an allowed global")[0].replace("WeightsUnpickler error: ", "")
            raise UnsafeCheckpointError(
                f"{path}: refused to load: the file contains pickled Python objects that could run "
                f"code on load (only tensors and plain containers are allowed; found {detail}). If you "
                f"trust it, convert it to a plain state dict first."
            ) from None
        raise ArtifactError(f"{path}: corrupted checkpoint ({msg.splitlines()[0] if msg else exc!r})") from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ArtifactError(f"{path}: corrupted or truncated checkpoint ({first})") from None
    if check is not None:
        check(obj)
    return obj
