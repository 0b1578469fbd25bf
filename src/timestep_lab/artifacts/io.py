"""Atomic file writes, hashing, checked artifacts and safe checkpoint loading.

Every artifact is written to a temporary file in the destination folder, flushed and
fsync'ed, then renamed over the destination: a reader never sees a half-written file, and a
failed write (disk full, kill) leaves the previous version in place.

Every artifact the pipeline writes and reads back carries the sha256 of its content inside
itself, and loading checks it (docs/design.md §6): a dict saved by :func:`save_torch` (model,
snapshots, training state, the digits CNN) gets :data:`CHECKSUM_KEY`, the sha256 of the rest of
the dict (:func:`timestep_lab.artifacts.checksums.content_sha256`: every key, value, and tensor's dtype,
shape and bytes); an ``.npz`` written by :func:`save_npz` (samples, reference statistics) gets
a member :data:`~timestep_lab.artifacts.checksums.NPZ_CHECKSUMS` holding each other member's sha256, checked when
that member is read (:func:`read_npz_member`). A flipped bit or a truncated file is an
:class:`ArtifactError` naming the file, never a different result. The checksum is a function of
the content only, so the same content still gives the same bytes.

Checkpoints are loaded with ``torch.load(..., weights_only=True)`` only: a pickle that tries
to run code is refused with :class:`UnsafeCheckpointError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from timestep_lab.artifacts.checksums import CHECKSUM_KEY, NPZ_CHECKSUMS, array_sha256, content_sha256
from timestep_lab.artifacts.unpickle import refused_pickle

__all__ = [
    "peek_torch",
    "ArtifactError",
    "UnsafeCheckpointError",
    "atomic_path",
    "check_writable",
    "canonical_json",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "sha256_file",
    "save_torch",
    "load_torch",
    "read_json",
    "save_npz",
    "npz_checksums",
    "read_npz_member",
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


def check_writable(path: str | Path, folder: bool = False) -> None:
    """Fail now, naming ``path``, if it could not be written later: ``path`` (a file, or a folder
    when ``folder``) must not be the other kind, and its nearest existing ancestor must be a
    writable folder (not a regular file). Creates nothing. Commands call this before their work
    so a bad ``--out`` does not cost a whole computation first.

    :raises ArtifactError: naming ``path`` and the reason.
    """
    path = Path(path)
    if path.is_dir() and not folder:
        raise ArtifactError(f"{path}: is a folder; give the file name to write")
    if path.exists() and not path.is_dir() and folder:
        raise ArtifactError(f"{path}: is a file; give a folder to write into")
    start = path if folder and path.is_dir() else path.parent
    for anc in (start, *start.parents):
        if anc.exists():
            if not anc.is_dir():
                raise ArtifactError(f"{path}: cannot be written: {anc} is a file, not a folder")
            if not os.access(anc, os.W_OK | os.X_OK):
                raise ArtifactError(f"{path}: cannot be written: folder {anc} is not writable")
            return
        if anc.is_symlink():  # a dangling link where a folder should be
            raise ArtifactError(f"{path}: cannot be written: {anc} is a broken link")


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
    """``obj`` as JSON, atomically; a NaN or infinity (not JSON, and never a result) is refused:
    :class:`ArtifactError` naming the file and the key, nothing written."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default, allow_nan=False)
    except ValueError:
        where = _non_finite(json.loads(json.dumps(obj, default=_json_default)))
        raise ArtifactError(f"{path}: not written: {where or 'a value'} is not a finite number") from None
    atomic_write_text(path, text + "\n")


def _non_finite(obj: Any, where: str = "") -> str | None:
    """The dotted key of the first NaN or infinity in ``obj`` (a JSON value), or None."""
    if isinstance(obj, float) and not (obj == obj and abs(obj) != float("inf")):
        return where or "the value"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        found = _non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


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
    except UnicodeDecodeError:
        raise ArtifactError(f"{path}: not a JSON file (its bytes are not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupted JSON ({exc})") from None
    except RecursionError:
        raise ArtifactError(f"{path}: corrupted JSON (nested too deeply)") from None
    except OSError as exc:  # a folder, no permission
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None


def canonical_json(obj: Any) -> str:
    """``obj`` as JSON with sorted keys and no spaces (non-JSON values by ``str``): equal configs
    give equal text, so its sha256 names a config (run-config check record, stale run folders)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def _stable_serialization_id(buf: bytearray) -> None:
    """Replace torch's random ``.data/serialization_id`` record by a digest of the other records.

    torch >= 2.4 writes a random 40-digit id into every archive, so two saves of the same object
    differ in bytes (and hashes). The id is only logged on load; we overwrite its 40 bytes in
    place with 40 digits of the SHA-256 of every other record, and patch the CRC-32 wherever the
    zip stores it (local header, data descriptor, central directory). Sizes and offsets are
    unchanged, so the archive keeps torch's 64-byte record alignment.
    """
    zf = zipfile.ZipFile(io.BytesIO(bytes(buf)))
    infos = zf.infolist()
    target = next((i for i in infos if i.filename.endswith("/.data/serialization_id")), None)
    if target is None:
        return
    digest = hashlib.sha256()
    for info in infos:
        if info is not target:
            digest.update(info.filename.encode())
            digest.update(zf.read(info))
    old = zf.read(target)
    new = str(int(digest.hexdigest(), 16)).encode()[: len(old)].rjust(len(old), b"0")
    old_crc, new_crc = struct.pack("<I", target.CRC), struct.pack("<I", zlib.crc32(new))
    off = target.header_offset
    name_len, extra_len = struct.unpack_from("<HH", buf, off + 26)
    start = off + 30 + name_len + extra_len
    places = [off + 14]  # local file header
    desc = start + len(old)
    places.append(desc + 4 if buf[desc:desc + 4] == b"PK\x07\x08" else desc)  # data descriptor
    pos = zf.start_dir  # central directory (zip64 archives included): walk its entries
    while pos >= 0 and buf[pos:pos + 4] == b"PK\x01\x02":
        n, x, c = struct.unpack_from("<HHH", buf, pos + 28)
        if bytes(buf[pos + 46:pos + 46 + n]) == target.filename.encode():
            places.append(pos + 16)
            break
        pos += 46 + n + x + c
    buf[start:start + len(old)] = new
    for p in places:
        if buf[p:p + 4] == old_crc:
            buf[p:p + 4] = new_crc


def save_npz(path: str | Path, arrays: Mapping[str, Any]) -> None:
    """``np.savez`` atomically, with the member :data:`NPZ_CHECKSUMS` (each array's sha256)."""
    import numpy as np

    if NPZ_CHECKSUMS in arrays:
        raise ValueError(f"'{NPZ_CHECKSUMS}' is reserved for the checksums")
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    digests = {k: array_sha256(v) for k, v in arrays.items()}
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays, **{NPZ_CHECKSUMS: np.array(json.dumps(digests, sort_keys=True))})


def npz_checksums(path: str | Path, z: Any) -> dict[str, str]:
    """The checksums recorded in the open ``np.load`` archive ``z`` of ``path``.

    :raises ArtifactError: none recorded (not written by :func:`save_npz`) or unreadable."""
    if NPZ_CHECKSUMS not in z.files:
        raise ArtifactError(f"{path}: carries no checksums (not written by this version of timestep_lab); "
                            f"write it again")
    try:
        digests = json.loads(str(z[NPZ_CHECKSUMS]))
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{path}: corrupted (its checksums cannot be read: {exc})") from None
    if not isinstance(digests, dict) or set(digests) != set(z.files) - {NPZ_CHECKSUMS}:
        raise ArtifactError(f"{path}: corrupted (its checksums do not list its members)")
    return digests


def read_npz_member(path: str | Path, z: Any, name: str, digests: Mapping[str, str]) -> Any:
    """Member ``name`` of the open archive ``z``, checked against ``digests`` (:func:`npz_checksums`).

    :raises ArtifactError: missing, unreadable, or not the bytes that were written."""
    try:
        arr = z[name]
    except KeyError:
        raise ArtifactError(f"{path}: has no '{name}'") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{path}: corrupted ('{name}' cannot be read: {exc})") from None
    except MemoryError:  # its header claims a size no machine holds
        raise ArtifactError(f"{path}: corrupted ('{name}' claims more memory than this machine has)") from None
    if array_sha256(arr) != digests.get(name):
        raise ArtifactError(f"{path}: corrupted: the sha256 of '{name}' differs from the one recorded when it was "
                            f"written")
    return arr


def save_torch(obj: Any, path: str | Path, *, checksum: bool = True) -> None:
    """``torch.save`` atomically (tensors, dicts, lists and plain Python values only), byte for
    byte the same for the same object. A dict gets :data:`CHECKSUM_KEY`, the
    :func:`content_sha256` of its other items, which :func:`load_torch` checks and removes;
    ``checksum=False`` leaves it out, for a file in another program's format (a state dict that
    torch-fidelity or guided-diffusion loads strictly would reject the extra key).

    The archive is built in memory from a file object, not a path: given a path, torch names
    the zip's root folder after the (random) temporary file name; given a file object the root
    is always ``archive``. Its random serialization id is made a digest of the content
    (:func:`_stable_serialization_id`).
    """
    import torch

    if isinstance(obj, dict) and checksum:
        if CHECKSUM_KEY in obj:
            raise ValueError(f"'{CHECKSUM_KEY}' is reserved for the checksum")
        obj = {**obj, CHECKSUM_KEY: content_sha256(obj)}
    mem = io.BytesIO()
    torch.save(obj, mem)
    buf = bytearray(mem.getbuffer())
    _stable_serialization_id(buf)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf)  # ENOSPC/EFBIG surface here as OSError, named by atomic_path's caller


def load_torch(path: str | Path, map_location: Any = "cpu", check: Callable[[Any], None] | None = None) -> Any:
    """Load a checkpoint with ``weights_only=True``; a dict's :data:`CHECKSUM_KEY` is checked
    and removed (one of our formats, ``format: timestep_lab.*``, must have one; a foreign
    checkpoint has none).

    Raises :class:`ArtifactError` naming the file when it is missing, truncated or corrupted
    (its content differs from the checksum recorded when it was written), and
    :class:`UnsafeCheckpointError` when it contains pickled code.
    """
    path = Path(path)
    obj = _torch_load(path, map_location=map_location)
    if isinstance(obj, dict):
        want = obj.pop(CHECKSUM_KEY, None)
        if want is None and str(obj.get("format", "")).startswith("timestep_lab."):
            raise ArtifactError(f"{path}: carries no content checksum (not written by this version of "
                                f"timestep_lab); write it again")
        if want is not None and _content_sha256(path, obj) != want:
            raise ArtifactError(f"{path}: corrupted: the sha256 of its content differs from the one recorded when "
                                f"it was written")
    if check is not None:
        check(obj)
    return obj


def _content_sha256(path: Path, obj: Any) -> str:
    """:func:`content_sha256` of a loaded dict; a tensor that a damaged pickle rebuilt with
    impossible strides is an :class:`ArtifactError` naming the file."""
    try:
        return content_sha256(obj)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{path}: corrupted checkpoint (a tensor cannot be read back: "
                            f"{str(exc).splitlines()[0][:200]})") from None


def peek_torch(path: str | Path) -> Any:
    """What :func:`load_torch` returns, without reading its tensors: they are memory-mapped, not
    read (the plain items, a run's embedded ``config`` say, cost only the archive's pickle). The
    checksum is NOT checked: for settings read before the file is loaded in full by
    :func:`load_torch`, which checks it. Same errors as :func:`load_torch` otherwise."""
    obj = _torch_load(Path(path), map_location="cpu", mmap=True)
    if isinstance(obj, dict):
        obj.pop(CHECKSUM_KEY, None)
    return obj


def _torch_load(path: Path, **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True, **kwargs)`` with every failure an error naming the
    file: :class:`UnsafeCheckpointError` when the pickle names a Python object (code could run on
    load), :class:`ArtifactError` for anything else (truncated, a flipped bit, not a checkpoint)."""
    import pickle

    import torch

    if not path.is_file():
        raise ArtifactError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, weights_only=True, **kwargs)
    except pickle.UnpicklingError as exc:
        unsafe, detail = refused_pickle(str(exc))
        if unsafe:
            raise UnsafeCheckpointError(
                f"{path}: refused to load: the file contains pickled Python objects that could run "
                f"code on load (only tensors and plain containers are allowed; found {detail}). If you "
                f"trust it, convert it to a plain state dict first."
            ) from None
        raise ArtifactError(f"{path}: corrupted checkpoint (its pickle cannot be read: {detail or 'unreadable'})") from None
    except MemoryError:
        raise ArtifactError(f"{path}: corrupted checkpoint (it claims more memory than this machine has)") from None
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in any of pickle's own ways (KeyError, IndexError, ...)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArtifactError(f"{path}: corrupted or truncated checkpoint, or not a checkpoint ({first[:200]})") from None
