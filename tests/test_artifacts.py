"""Every artifact the pipeline writes and reads back is checked on load (issue: hardening round 2).

Model, snapshot, training state, digits-CNN weights (torch archives: a content sha256 inside
the saved dict) and samples, reference statistics (``.npz``: a member with each array's
sha256). A bit flipped inside a data record, with the zip's CRC-32 fixed so that the archive is
still valid, or a truncated file, gives one ``error:`` line naming the file; before, a flipped
model loaded, sampled other images and exited 0. Non-finite or ill-shaped reference statistics
and non-finite metrics are refused, never written as "ok".
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from timestep_lab.artifacts.io import ArtifactError, load_torch, save_npz
from timestep_lab.cli import main


def flip_bit(src: Path, dst: Path, member: str) -> str:
    """Copy ``src`` to ``dst`` with one bit flipped in the middle of the first zip member whose
    name contains ``member``, and its CRC-32 recomputed wherever the zip stores it (local
    header, data descriptor, central directory): a valid archive with one changed bit."""
    buf = bytearray(src.read_bytes())
    zf = zipfile.ZipFile(io.BytesIO(bytes(buf)))
    info = next(i for i in zf.infolist() if member in i.filename and i.file_size >= 16)
    assert info.compress_type == zipfile.ZIP_STORED
    name_len, extra_len = struct.unpack_from("<HH", buf, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    old = struct.pack("<I", info.CRC)
    buf[start + info.file_size - 8] ^= 0x10  # in the data (past an .npy header), away from the ends
    new = struct.pack("<I", zlib.crc32(bytes(buf[start:start + info.file_size])))
    places = [info.header_offset + 14]
    desc = start + info.compress_size
    places.append(desc + 4 if buf[desc:desc + 4] == b"PK\x07\x08" else desc)
    pos = zf.start_dir
    while buf[pos:pos + 4] == b"PK\x01\x02":
        n, x, c = struct.unpack_from("<HHH", buf, pos + 28)
        if bytes(buf[pos + 46:pos + 46 + n]) == info.filename.encode():
            places.append(pos + 16)
        pos += 46 + n + x + c
    for p in places:
        if buf[p:p + 4] == old:
            buf[p:p + 4] = new
    dst.write_bytes(bytes(buf))
    assert zipfile.ZipFile(dst).testzip() is None  # every CRC-32 matches: only our sha256 can tell
    return info.filename


def _snapshot(a) -> Path:
    return sorted((a.run / "snapshots").glob("snapshot-*.pt"))[0]


# artifact: (the file, a zip member to damage, the command that reads it given the damaged copy)
def _cases(a, digits_dir, tmp: Path) -> dict:
    evaluate = lambda samples=a.samples, ref=a.reference, cnn=a.cnn: [  # noqa: E731
        "evaluate", "--samples", samples, "--reference", ref, "--weights", cnn, "--out", tmp / "m.json",
        "--set", "eval.num_samples=16", "--no-progress", "--threads", "1"]
    sample = lambda model: ["sample", "--model", model, "--out", tmp / "s.npz", "--set", "sample.num_samples=4",  # noqa: E731
                            "--set", "sample.steps=2", "--no-progress"]

    def resume(ckpt: Path) -> list:
        run = tmp / "resume"
        (run / "train_state").mkdir(parents=True, exist_ok=True)
        (run / "train_state" / "checkpoint.pt").write_bytes(ckpt.read_bytes())
        return ["train", "--config", a.config, "--out", run, "--no-progress", "--threads", "1"]

    return {
        "model": (a.run / "model.pt", "/data/", sample),
        "snapshot": (_snapshot(a), "/data/", sample),
        "training state": (a.run / "train_state" / "checkpoint.pt", "/data/", resume),
        "digits-CNN weights": (a.cnn, "/data/", lambda f: evaluate(cnn=f)),
        "samples": (a.samples, "images", lambda f: evaluate(samples=f)),
        "reference statistics": (a.reference, "tf_sigma", lambda f: evaluate(ref=f)),
    }


def _one_error(capsys, argv) -> str:
    rc = main([str(x) for x in argv])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err, (rc, err)
    return errors[0]


def test_a_flipped_bit_or_a_truncated_file_is_one_error_line_naming_it(tiny_artifacts, digits_dir, tmp_path, capsys):
    cases = _cases(tiny_artifacts, digits_dir, tmp_path)
    assert set(cases) == {"model", "snapshot", "training state", "digits-CNN weights", "samples",
                          "reference statistics"}
    for name, (good, member, command) in cases.items():
        named = (lambda f: "resume/train_state/checkpoint.pt") if name == "training state" else (lambda f: f.name)
        bad = tmp_path / f"flipped-{good.name}"
        flip_bit(good, bad, member)
        line = _one_error(capsys, command(bad))
        assert "corrupted" in line and named(bad) in line, (name, line)
        short = tmp_path / f"short-{good.name}"
        short.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
        line = _one_error(capsys, command(short))
        assert named(short) in line, (name, line)
        assert not (tmp_path / "m.json").exists() and not (tmp_path / "s.npz").exists(), name
        assert not (tmp_path / "resume" / "model.pt").exists(), name


def test_our_files_without_a_checksum_are_refused(tiny_artifacts, tmp_path, capsys):
    """A model saved by plain torch.save (no content checksum) is not taken for ours."""
    obj = torch.load(tiny_artifacts.run / "model.pt", weights_only=True)
    obj.pop("content_sha256")
    torch.save(obj, tmp_path / "plain.pt")
    with pytest.raises(ArtifactError, match="plain.pt: carries no content checksum"):
        load_torch(tmp_path / "plain.pt")
    z = dict(np.load(tiny_artifacts.samples))
    z.pop("sha256")
    np.savez(tmp_path / "plain.npz", **z)
    line = _one_error(capsys, ["evaluate", "--samples", tmp_path / "plain.npz", "--reference", tiny_artifacts.reference,
                               "--weights", tiny_artifacts.cnn, "--out", tmp_path / "m.json", "--no-progress"])
    assert "plain.npz: carries no checksums" in line


def test_saved_content_loads_back_exactly_and_byte_for_byte(tmp_path):
    from timestep_lab.artifacts.io import save_torch

    obj = {"format": "timestep_lab.model/1", "w": torch.randn(3, 4).t(), "h": torch.zeros(2, dtype=torch.bfloat16),
           "opt": {0: {"step": torch.tensor(3.0)}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
           "names": ("a", "b"), "n": None, "ok": True, "dtype": torch.float32}
    save_torch(obj, tmp_path / "a.pt")
    save_torch(obj, tmp_path / "b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    back = load_torch(tmp_path / "a.pt")
    assert set(back) == set(obj) and torch.equal(back["w"], obj["w"]) and back["names"] == ("a", "b")


# ------------------------------------------------------------------------------- non-finite, wrong shape


def _rewrite_reference(src: Path, dst: Path, change) -> Path:
    """A reference file with ``change(arrays, meta)`` applied, written with valid checksums."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files if k not in ("meta", "sha256")}
        meta = json.loads(str(z["meta"]))
    change(arrays, meta)
    save_npz(dst, {"meta": np.array(json.dumps(meta)), **arrays})
    return dst


def test_consistency_controls_carry_checksums_and_a_changed_image_is_named(tmp_path):
    """Before: consistency_controls.npz was a plain np.savez, read by the consistency report unchecked."""
    from timestep_lab.artifacts.samples_file import load_controls, save_controls

    rng = np.random.default_rng(0)
    controls = {"gaussian": rng.integers(0, 256, (5, 4, 4, 1), dtype=np.uint8),
                "dataset": rng.integers(0, 256, (5, 4, 4, 1), dtype=np.uint8)}
    path = tmp_path / "consistency_controls.npz"
    save_controls(path, np.arange(5), controls)
    seeds, back = load_controls(path)
    assert seeds.tolist() == list(range(5)) and list(back) == ["gaussian", "dataset"]
    assert all(np.array_equal(back[k], v) for k, v in controls.items())
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["gaussian"] = arrays["gaussian"] ^ np.uint8(1)  # one bit of every pixel, checksums kept
    np.savez(path, **arrays)
    with pytest.raises(ArtifactError, match="sha256 of 'gaussian' differs"):
        load_controls(path)


def test_nan_or_wrong_dimension_reference_statistics_are_refused(tiny_artifacts, tmp_path, capsys):
    """Were "fid": NaN with "status": "ok", and an AssertionError traceback."""
    a = tiny_artifacts

    def nan(arrays, meta):
        arrays["tf_mu"] = arrays["tf_mu"].copy()
        arrays["tf_mu"][3] = np.nan

    def narrow(arrays, meta, keep_meta=False):
        for k in list(arrays):
            kind = k.split("_", 1)[1]
            arrays[k] = {"mu": lambda x: x[:32], "sigma": lambda x: x[:32, :32], "features": lambda x: x[:, :32]}[kind](
                arrays[k])
        if not keep_meta:
            meta["feature_dim"] = 32

    cases = {"nan.npz": (nan, "'tf_mu' holds 1 NaN or infinite values"),
             "narrow.npz": (narrow, "holds 32-dimensional features, but the digits-cnn extractor gives 64"),
             "lying.npz": (lambda ar, m: narrow(ar, m, keep_meta=True), "'tf_mu' is [32], expected [64]")}
    for name, (change, says) in cases.items():
        ref = _rewrite_reference(a.reference, tmp_path / name, change)
        line = _one_error(capsys, ["evaluate", "--samples", a.samples, "--reference", ref, "--weights", a.cnn,
                                   "--out", tmp_path / "m.json", "--set", "eval.num_samples=16", "--no-progress"])
        assert name in line and says in line, line
        assert not (tmp_path / "m.json").exists()


def test_non_finite_statistics_are_never_written(tiny_artifacts, digits_dir, tmp_path, monkeypatch):
    """compute_reference refuses NaN features; a non-finite metric is an error, not a record."""
    import timestep_lab.metrics.reference as reference
    import timestep_lab.metrics.score as score
    from timestep_lab.data import PreparedData
    from timestep_lab.metrics import evaluate_file, load_feature_extractor
    from timestep_lab.metrics.reference import compute_reference

    spec = load_feature_extractor("digits-cnn", tiny_artifacts.cnn, tools=("torch-fidelity",))
    real = reference.tf_features
    monkeypatch.setattr(reference, "tf_features", lambda *a: np.where(np.arange(64) == 5, np.nan, real(*a)))
    with pytest.raises(ArtifactError, match="'tf_features' holds"):
        compute_reference(np.asarray(PreparedData(digits_dir).images[:32]), tmp_path / "r.npz", spec)
    assert not (tmp_path / "r.npz").exists()
    monkeypatch.setattr(score, "clean_fid_metrics", lambda *a: {"fid": math.inf, "kid_mean": 0.1})
    with pytest.raises(ArtifactError, match="clean-fid gives non-finite fid=inf"):
        evaluate_file(tiny_artifacts.samples, tiny_artifacts.reference, tmp_path / "m.json",
                      weights=tiny_artifacts.cnn)
    assert not (tmp_path / "m.json").exists()


def test_json_writers_refuse_non_finite_numbers(tmp_path):
    """NaN is not JSON and never a result: every JSON artifact (metrics, profiles, slots, ...)
    goes through atomic_write_json, which names the file and the key and writes nothing."""
    from timestep_lab.artifacts.io import atomic_write_json

    with pytest.raises(ArtifactError, match=r"p\.json: not written: a\.b\.1 is not a finite number"):
        atomic_write_json(tmp_path / "p.json", {"a": {"b": [1.0, float("nan")]}, "c": 2})
    with pytest.raises(ArtifactError, match="the value"):
        atomic_write_json(tmp_path / "p.json", float("-inf"))
    assert not (tmp_path / "p.json").exists()

