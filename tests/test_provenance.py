"""Hardening round 3 (issue 38): no silent wrong result, because every artifact names its inputs
and every reader checks them. One test per defect class of the held-out probes: prepared data
verified wherever it is read, checkpoints whose damage reads as damage, a training state resumed
only by the run it belongs to, a model scored only as its own run, strict study configs, and
the degenerate values and malformed files that must end in one ``error:`` line.

In process (``main(argv)``) and on tiny files: no Snakemake study here.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_config
from timestep_lab.cli import main


def _error_line(argv: list, capsys) -> str:
    """Run the command line in process: it must fail with exit status 2 and exactly one
    ``error:`` line, no traceback; that line is returned."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err[-3000:])
    return lines[0]


def _flip_byte(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


# ------------------------------------------------------------------ 5: prepared data, verified where read


def test_damaged_prepared_data_is_refused_by_every_reader(tiny_artifacts, digits_dir, tmp_path, capsys):
    """Train, profile, contribution and sampling refuse a prepared folder whose images no longer
    match their manifest, as reference-stats does (before: all four used the damaged images)."""
    bad = shutil.copytree(digits_dir, tmp_path / "damaged")
    _flip_byte(bad / "images.npy", -5)  # a pixel, not the header: the array still loads
    a, out = tiny_artifacts, tmp_path / "never"
    model = a.run / "model.pt"
    cases = {
        "train": ["train", "--config", a.config, "--set", f"data.path={bad}", "--out", out / "run", "--no-progress"],
        "profile": ["profile", "--model", model, "--data", bad, "--out", out / "p.json", "--num-images", "8",
                    "--stride", "20", "--no-progress"],
        "contribution": ["contribution", "--model", model, "--gt-data", bad, "--ranges", "1", "500", "--num-samples",
                         "4", "--method", "ddim", "--steps", "10", "--min-steps", "1", "--bootstrap", "2",
                         "--reference", a.reference, "--weights", a.cnn, "--out-dir", out / "ct", "--out",
                         out / "ct.json", "--no-progress"],
        "sample --gt-data": ["sample", "--model", model, "--out", out / "s.npz", "--gt-data", bad, "--gt-range", "0",
                             "5", "--set", "sample.num_samples=4", "--no-progress"],
        "reference-stats": ["reference-stats", "--data", bad, "--extractor", "digits-cnn", "--weights", a.cnn,
                            "--out", out / "r.npz", "--no-progress"],
    }
    for case, argv in cases.items():
        line = _error_line(argv, capsys)
        assert f"{bad / 'images.npy'}: sha256 does not match" in line, (case, line)
    assert [p for p in out.rglob("*") if p.is_file()] == []  # nothing written (train leaves its empty folder)


def test_a_manifest_that_is_not_an_object_is_one_error_line(tiny_artifacts, digits_dir, tmp_path, capsys):
    from timestep_lab.data import DataError, PreparedData

    for name, manifest in {"list": [1, 2], "count": {"count": "9", "shape": [8, 8, 1], "images_sha256": "x"},
                           "shape": {"count": 1438, "shape": [8, 8], "images_sha256": "x"}}.items():
        folder = shutil.copytree(digits_dir, tmp_path / name)
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(DataError, match=r"manifest.json: "):
            PreparedData(folder)
    line = _error_line(["train", "--config", tiny_artifacts.config, "--set", f"data.path={tmp_path / 'list'}",
                        "--out", tmp_path / "run", "--no-progress"], capsys)
    assert f"{tmp_path / 'list' / 'manifest.json'}: not a manifest" in line  # before: AttributeError, a traceback
