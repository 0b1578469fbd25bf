"""Hardening round 3 (issue 38): no silent wrong result, because every artifact names its inputs
and every reader checks them. One test per defect class of the held-out probes: prepared data
verified wherever it is read, checkpoints whose damage reads as damage, a training state resumed
only by the run it belongs to, a model scored only as its own run, strict study configs, and
the degenerate values and malformed files that must end in one ``error:`` line.

In process (``main(argv)``) and on tiny files: no Snakemake study here.
"""

from __future__ import annotations

import hashlib
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


# ------------------------------------------------------------------ 9: damaged checkpoints read as damage


def _pickle_offset(model: Path) -> int:
    """Where the pickle (``archive/data.pkl``, stored uncompressed) starts in a torch archive."""
    info = next(i for i in zipfile.ZipFile(model).infolist() if i.filename.endswith("data.pkl"))
    raw = model.read_bytes()
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    return info.header_offset + 30 + name_len + extra_len


def test_a_flipped_bit_in_a_model_pickle_is_corruption_not_an_unsafe_pickle(tiny_artifacts, tmp_path, capsys):
    """Before: a bit flip in a global's name or an opcode was "refused to load: ... pickled Python
    objects that could run code" (torch's message advises weights_only=False); some flips ended
    in a KeyError/IndexError/TypeError traceback."""
    from timestep_lab.artifacts.io import ArtifactError, UnsafeCheckpointError, load_torch

    model = tiny_artifacts.run / "model.pt"
    raw, start = model.read_bytes(), _pickle_offset(model)
    pkl = zipfile.ZipFile(model).read("archive/data.pkl")
    flips = {"global name": pkl.index(b"_rebuild_tensor_v2") + 3, "protocol": 0, "opcode": pkl.index(b"X\x06"),
             "string length": pkl.index(b"X\x06") + 1}
    for case, pos in flips.items():
        bad = tmp_path / f"{case.replace(' ', '-')}.pt"
        bad.write_bytes(raw[:start + pos] + bytes([raw[start + pos] ^ 0x01]) + raw[start + pos + 1:])
        with pytest.raises(ArtifactError) as caught:
            load_torch(bad)
        assert not isinstance(caught.value, UnsafeCheckpointError), (case, caught.value)
        assert "corrupted" in str(caught.value) and "weights_only" not in str(caught.value), (case, caught.value)
    # a text file as a fine-tuning source (before: KeyError from pickle's memo, a traceback)
    (tmp_path / "notes.pt").write_text("hello\n")
    line = _error_line(["train", "--config", tiny_artifacts.config, "--set", f"train.init_from={tmp_path / 'notes.pt'}",
                        "--out", tmp_path / "ft", "--no-progress"], capsys)
    assert f"{tmp_path / 'notes.pt'}: corrupted or truncated checkpoint, or not a checkpoint" in line


def test_bad_model_metadata_is_one_error_line_naming_the_item(tiny_artifacts, tmp_path, capsys):
    """A model.pt re-saved (valid checksum) with metadata of the wrong type: before, a TypeError or
    AttributeError traceback from the network code, or a sample drawn from nimg -3."""
    from timestep_lab.artifacts.io import load_torch, save_torch

    obj = load_torch(tiny_artifacts.run / "model.pt")
    for key, value in {"image_size": "8", "config": [1], "nimg": -3, "ema": 5, "channels": 0}.items():
        bad = tmp_path / f"{key}.pt"
        save_torch({**obj, key: value}, bad)
        line = _error_line(["sample", "--model", bad, "--out", tmp_path / "s.npz", "--set", "sample.num_samples=2",
                            "--no-progress"], capsys)
        assert f"{bad}: bad metadata: '{key}'" in line, line
    assert not (tmp_path / "s.npz").exists()


# ------------------------------------------------------------------ 1: a training state resumes only its own run


def _remake_with_other_content(folder: Path) -> None:
    """``folder`` prepared again with other images under the same path and image count (the images
    in reverse order), as `prepare` writes it: a new images.npy and a manifest naming its sha256."""
    from timestep_lab.artifacts.io import sha256_file

    images = np.load(folder / "images.npy")[::-1].copy()
    np.save(folder / "images.npy", images)
    np.save(folder / "labels.npy", np.load(folder / "labels.npy")[::-1].copy())
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(images_sha256=sha256_file(folder / "images.npy"), labels_sha256=sha256_file(folder / "labels.npy"))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _outputs_deleted(out: Path) -> None:
    """What Snakemake does before it reruns a train job: its outputs go, train_state/ stays."""
    (out / "model.pt").unlink()
    (out / "train_log.jsonl").unlink()
    shutil.rmtree(out / "snapshots", ignore_errors=True)


def test_a_training_state_resumes_only_with_its_data_config_and_parent(digits_dir, tmp_path, caplog):
    """Before: the state was keyed to the config alone, so a rerun after the data was re-made
    "resumed" the finished state and republished the old weights after 0 steps; a shorter
    total_kimg kept the longer model under the shorter label; a fine-tune whose parent was
    retrained resumed on the old parent's weights."""
    from timestep_lab.artifacts.io import load_torch
    from timestep_lab.train import train

    data = shutil.copytree(digits_dir, tmp_path / "data")
    cfg = tiny_config(data, train={"total_kimg": 0.32})
    out = tmp_path / "run"
    assert train(cfg, out, progress=False).nimg == 320
    first = (out / "model.pt").read_bytes()
    inputs = load_torch(out / "model.pt")["inputs"]
    assert inputs["data"]["images_sha256"] == json.loads((data / "manifest.json").read_text())["images_sha256"]
    assert load_torch(out / "train_state" / "checkpoint.pt")["inputs"] == inputs and inputs["init_sha256"] is None

    _remake_with_other_content(data)
    _outputs_deleted(out)
    with caplog.at_level("WARNING", logger="timestep_lab"):
        res = train(cfg, out, progress=False)
    assert "train_state/ was trained on other data (images sha256" in caplog.text and "set aside" in caplog.text
    assert res.nimg == 320 and (out / "model.pt").read_bytes() != first  # trained afresh on the new images
    assert len(Path(out / "train_log.jsonl").read_text().splitlines()) == 2  # both log intervals: not 0 steps

    caplog.clear()
    with caplog.at_level("WARNING", logger="timestep_lab"):
        short = train(tiny_config(data, train={"total_kimg": 0.16}), out, progress=False)
    assert "is at 0.32 kimg, past train.total_kimg=0.16" in caplog.text
    assert short.nimg == 160 and load_torch(out / "model.pt")["nimg"] == 160

    # a fine-tune resumes only from a state of the same parent model
    parent, ft = tmp_path / "parent.pt", tmp_path / "ft"
    shutil.copyfile(out / "model.pt", parent)
    ft_cfg = tiny_config(data, train={"total_kimg": 0.32, "init_from": str(parent)})
    train(ft_cfg, ft, progress=False, stop_after_kimg=0.16)
    parent.write_bytes(first)  # the parent retrained: other weights under the same path
    caplog.clear()
    with caplog.at_level("WARNING", logger="timestep_lab"):
        train(ft_cfg, ft, progress=False)
    assert "train_state/ started from another model (train.init_from sha256" in caplog.text
    assert load_torch(ft / "model.pt")["inputs"]["init_sha256"] == hashlib.sha256(first).hexdigest()


# ------------------------------------------------------------------ 2: a model is scored only as its own run


def test_a_model_is_scored_only_as_the_run_it_was_trained_as(tiny_artifacts, digits_dir, tmp_path, capsys):
    """Before: nothing compared the model's embedded config with the run's run.yaml, so a model file
    of another run (or a longer run, or one trained on other data) was scored as this run."""
    import yaml

    from timestep_lab.artifacts.io import ArtifactError
    from timestep_lab.checkpoints.provenance import check_run_model
    from timestep_lab.train import train

    a = tiny_artifacts
    run = yaml.safe_load(a.config.read_text())
    data = {"images_sha256": json.loads((digits_dir / "manifest.json").read_text())["images_sha256"]}
    # its own model passes, as trained (train.on_nonfinite and the sample section do not name the run)
    check_run_model(a.run / "model.pt", {**run, "train": {**run["train"], "on_nonfinite": "record"},
                                         "sample": {"num_samples": 7}}, "run.yaml", data=data)
    for snap in sorted((a.run / "snapshots").glob("snapshot-*.pt")):
        check_run_model(snap, run, "run.yaml", data=data)
    other = tmp_path / "other"
    train(tiny_config(digits_dir, train={"total_kimg": 0.032, "seed": 5}), other, progress=False)
    line = _error_line(["sample-score", "--model", other / "model.pt", "--out", tmp_path / "s.npz", "--reference",
                        a.reference, "--weights", a.cnn, "--metrics", tmp_path / "m.json", "--run-config", a.config,
                        "--set", "sample.num_samples=4", "--no-progress"], capsys)
    assert f"{other / 'model.pt'}: not a model of the run {a.config}: its config differs (train.seed: 5 here, 0" in line
    assert "train.total_kimg: 0.032 here, 0.32 in the run" in line
    assert not (tmp_path / "s.npz").exists() and not (tmp_path / "m.json").exists()
    line = _error_line(["evaluate-snapshots", "--models", other / "model.pt", "--reference", a.reference, "--weights",
                        a.cnn, "--out", tmp_path / "p.json", "--run-config", a.config, "--no-progress"], capsys)
    assert "not a model of the run" in line
    with pytest.raises(ArtifactError, match="trained on other data than the reference statistics describe"):
        check_run_model(a.run / "model.pt", run, "run.yaml", data={"images_sha256": "0" * 64})
    longer = {**run, "train": {**run["train"], "total_kimg": 0.16}}  # the run is shorter than its snapshots
    with pytest.raises(ArtifactError, match="past the run's train.total_kimg=0.16"):
        check_run_model(a.run / "snapshots" / "snapshot-000000320.pt", longer, "run.yaml", data=data)


# ------------------------------------------------------------------ 6: study configs read strictly, checked at DAG build


def _bomb(levels: int) -> str:
    """A YAML "billion laughs": each level lists the one below nine times (9**(levels+1) leaves)."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "study: smoke\n" + "\n".join(lines) + "\n"


def test_yaml_is_read_strictly_duplicates_deep_nesting_and_alias_bombs(tmp_path, capsys):
    """Before: a second `groups:` block silently replaced the first; an alias bomb expanded to
    gigabytes when the schema check formatted it; 5,000 nested lists ended in a RecursionError."""
    import time

    from timestep_lab.config import ConfigError, load_yaml

    (tmp_path / "dup.yaml").write_text("study: a\ngroups: {g1: {}}\nbase: {}\ngroups: {g2: {}}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: line 4: key 'groups' appears twice in one mapping \(first on "
                                          r"line 2\)"):
        load_yaml(tmp_path / "dup.yaml")
    (tmp_path / "bomb.yaml").write_text(_bomb(9))  # 9**10 = 3.5e9 leaves
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml: its aliases \(\*name\) would expand to 4,412,961,518 nodes"):
        load_yaml(tmp_path / "bomb.yaml")
    assert time.perf_counter() - t0 < 2.0
    (tmp_path / "loop.yaml").write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="refers to the block that contains it"):
        load_yaml(tmp_path / "loop.yaml")
    # a few reused blocks and a merge key that an explicit key overrides are ordinary YAML
    (tmp_path / "ok.yaml").write_text("base: &b {lr: 1, bs: 2}\nother: {<<: *b, lr: 3}\nlist: [*b, *b]\n")
    assert load_yaml(tmp_path / "ok.yaml")["other"] == {"lr": 3, "bs": 2}
    (tmp_path / "deep.yaml").write_text("train: " + "[" * 5000 + "]" * 5000 + "\n")
    line = _error_line(["train", "--config", tmp_path / "deep.yaml", "--out", tmp_path / "r"], capsys)
    assert line == f"error: {tmp_path / 'deep.yaml'}: line 1: nested deeper than 64 levels"


def test_reserved_run_ids_and_what_the_analyses_need_are_refused_at_dag_build():
    """Before: a group's run with the id `reference` or `finetune_slot3` was silently replaced by
    the derived run; a study without its consistency group failed only after all its training."""
    import copy

    import yaml
    from worktree import ROOT

    from timestep_lab import workflow as W
    from timestep_lab.config import ConfigError

    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    W.check_analysis_needs(smoke, W.study_runs(smoke))
    for rid in ("reference", "finetune_slot3", "finetune_uniform_s1", "toward_zero_from-x", "uniform_from-y"):
        study = copy.deepcopy(smoke)
        study["groups"]["schedules"]["list"] = [{"id": rid, "sampler": "speed"}]
        with pytest.raises(ConfigError, match=rf"groups.schedules: run id '{rid}' is reserved for a run the analyses"):
            W.study_runs(study)
    one = copy.deepcopy(smoke)  # a consistency group with one model of a constant schedule compares nothing
    one["groups"]["consistency"]["list"] = [{"seed": 0}]
    with pytest.raises(ConfigError, match=r"groups.consistency: .*at least 2 needed, the study has 1"):
        W.check_analysis_needs(one, W.study_runs(one), "s.yaml")


@pytest.mark.workflow
def test_a_study_without_a_groups_plans_none_of_its_analyses(tmp_path):
    """A study without the consistency, prediction_types and batch_size groups and without slot
    fine-tunes plans none of their analyses or reports (it would fail after all the training):
    the dry run of the whole study lists the other reports only, and the verdicts job."""
    import re

    import yaml
    from worktree import ROOT, copy_worktree, run, study_env

    study = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    for group in ("consistency", "prediction_types", "batch_size"):
        study["groups"].pop(group)
    study["analyses"].pop("batch_size")
    study["analyses"]["slots"]["finetune"] = []
    root = copy_worktree(tmp_path / "repo")
    (root / "few.yaml").write_text(yaml.safe_dump(study))
    r = run(["snakemake", "-n", "--configfile", "few.yaml"], root, study_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", r.stdout.split("Job stats:")[-1], re.M))
    assert planned.get("report") == "5" and "verdicts" in planned, planned  # sampler, schedules, loss, contribution, flow
    for rule in ("consistency", "profile_predictions", "interference", "interference_control"):
        assert rule not in planned, (rule, planned)


# ------------------------------------------------------------------ 3: reference statistics that are no statistics


def test_a_reference_covariance_that_is_not_one_is_refused_by_name(tiny_artifacts, tmp_path, capsys):
    """Before: a reference whose covariance was replaced (and its checksum rewritten) gave FID
    -5774 with status ok, and a negated one a traceback from the matrix square root."""
    from timestep_lab.artifacts.io import ArtifactError, save_npz
    from timestep_lab.metrics import load_reference

    a = tiny_artifacts
    with np.load(a.reference) as z:
        arrays = {k: z[k] for k in z.files if k != "sha256"}
    load_reference(a.reference).arrays["tf_sigma"]  # the real one passes
    sigma = arrays["tf_sigma"]
    rng = np.random.default_rng(0)
    for case, bad in {"negated": -sigma, "not symmetric": sigma + np.triu(rng.random(sigma.shape), 1),
                      "indefinite": sigma - 2 * np.abs(sigma).max() * np.eye(len(sigma))}.items():
        ref = tmp_path / f"{case.replace(' ', '-')}.npz"
        save_npz(ref, {**arrays, "tf_sigma": bad})
        with pytest.raises(ArtifactError, match=rf"{ref}: 'tf_sigma' is not a covariance matrix \(not "):
            load_reference(ref).arrays["tf_sigma"]
    line = _error_line(["evaluate", "--samples", a.samples, "--reference", tmp_path / "negated.npz", "--out",
                        tmp_path / "m.json", "--weights", a.cnn, "--no-progress"], capsys)
    assert "'tf_sigma' is not a covariance matrix (not positive semi-definite" in line
    assert not (tmp_path / "m.json").exists()


# ------------------------------------------------------------------ 8: degenerate values, refused with the allowed range


def test_degenerate_values_are_refused_with_the_allowed_range(tiny_artifacts, digits_dir, digits_test_dir, tmp_path,
                                                               capsys):
    """Before: total_kimg 0.0004 trained 0 steps and wrote status ok; an FID of 2 samples was ok;
    duplicate seeds, slots and NAME=PATH arguments were merged (the last won); train-features took
    one class, and its training split as its test split; a seed of 2**64 was a traceback."""
    import copy

    import yaml
    from worktree import ROOT

    from timestep_lab import workflow as W
    from timestep_lab.artifacts.samples_file import save_samples
    from timestep_lab.config import ConfigError

    a, out = tiny_artifacts, tmp_path / "never"
    two = tmp_path / "two.npz"
    save_samples(two, np.load(digits_dir / "images.npy")[:2], [0, 1], {"method": "ddim"})
    one_class = shutil.copytree(digits_dir, tmp_path / "one-class")
    labels = np.zeros(1438, np.int64)
    np.save(one_class / "labels.npy", labels)
    manifest = json.loads((one_class / "manifest.json").read_text())
    manifest["labels_sha256"] = hashlib.sha256((one_class / "labels.npy").read_bytes()).hexdigest()
    (one_class / "manifest.json").write_text(json.dumps(manifest))
    cases = {  # argv: what the one error line must say
        "total_kimg below one image": (["train", "--config", a.config, "--set", "train.total_kimg=0.0004", "--out",
                                        out / "r"], "train.total_kimg must be >= 0.001 (one image), got 0.0004"),
        "a seed of 2**64": (["train", "--config", a.config, "--set", f"train.seed={2**64}", "--out", out / "r"],
                            "seed must be in [0, 2**63 - 1]"),
        "a bank seed of 2**63": (["profile", "--model", a.run / "model.pt", "--data", digits_dir, "--out",
                                  out / "p.json", "--seed", str(2**63)], "--seed: must be in [0, 2**63 - 1]"),
        "an FID of 2 samples": (["evaluate", "--samples", two, "--reference", a.reference, "--weights", a.cnn,
                                 "--out", out / "m.json", "--no-progress"], "FID needs at least 4 samples"),
        "eval.num_samples 2": (["evaluate", "--samples", a.samples, "--reference", a.reference, "--weights", a.cnn,
                                "--out", out / "m.json", "--set", "eval.num_samples=2"], "num_samples must be >= 4"),
        "a slot twice": (["interference", "--reference", a.profile, "--finetuned", f"2={a.profile}",
                          f"2={tmp_path / 'other.json'}", "--slots", a.slots, "--out", out / "i.json"],
                         "--finetuned: 2 is given twice"),
        "one class": (["train-features", "--data", one_class, "--test-data", digits_test_dir, "--out", out / "c.pt"],
                      "labels of 1 class"),
        "test split = training split": (["train-features", "--data", digits_dir, "--test-data",
                                         shutil.copytree(digits_dir, tmp_path / "same"), "--out", out / "c.pt"],
                                        "the test split holds the training images"),
    }
    for case, (argv, says) in cases.items():
        line = _error_line(argv, capsys)
        assert says in line, (case, line)
    assert [p for p in out.rglob("*") if p.is_file()] == []

    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    for where, change in {"groups.schedules.seeds": lambda s: s["groups"]["schedules"].update(seeds=[0, 0]),
                          "groups.schedules.grid.sampler": lambda s: s["groups"]["schedules"]["grid"].update(
                              sampler=["speed", "speed"]),
                          "analyses.slots.finetune": lambda s: s["analyses"]["slots"].update(finetune=[3, 3])}.items():
        study = copy.deepcopy(smoke)
        change(study)
        with pytest.raises(ConfigError, match=rf"{where}: .* repeats a"):
            W.study_runs(study)


# ------------------------------------------------------------------ 7: operations


def test_a_stale_lock_whose_pid_was_reused_is_taken_over(tmp_path, caplog):
    """Before: a lock whose writer was gone but whose pid a new, unrelated process had taken blocked
    the run for good, and the error told the user to stop that unrelated process."""
    import os
    import socket
    import subprocess
    import sys

    from timestep_lab.artifacts.runlock import RunLock, RunLockedError, _started

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = tmp_path / "run"
        run.mkdir()
        lock = {"pid": other.pid, "host": socket.gethostname(), "boot_id": None}
        (run / ".lock").write_text(json.dumps({**lock, "started": _started(other.pid)}))  # the writer itself
        with pytest.raises(RunLockedError, match=f"pid {other.pid}"):
            RunLock(run).__enter__()
        (run / ".lock").write_text(json.dumps({**lock, "started": "1"}))  # a writer that started at another time
        with caplog.at_level("WARNING", logger="timestep_lab"):
            with RunLock(run):
                held = json.loads((run / ".lock").read_text())
                assert held["pid"] == os.getpid() and held["started"] == _started(os.getpid())
        assert "its pid now belongs to another process" in caplog.text
    finally:
        other.kill()
        other.wait()


def test_operations_refuse_paths_that_would_write_where_they_must_not(tmp_path):
    """Before: `rehearse --dir /elsewhere` wrote outside the project; `data.prepared: ''` put the
    prepare rule's outputs at the file-system root; a study config stored in results/<study>/ was
    overwritten by `collect`; digits ignored data.source; the README's `snakemake --configfile X
    scorecard` read `scorecard` as a second config file; a right-to-left override passed the path
    pattern."""
    import re

    from worktree import ROOT

    from timestep_lab import workflow as W
    from timestep_lab.config import ConfigError
    from timestep_lab.data import DataError, prepare
    from timestep_lab.rehearsal.command import _check_dir
    from timestep_lab.workflow.snakefile import PATH_PATTERN

    for bad in ("/tmp/elsewhere", "../outside", "."):
        with pytest.raises(ConfigError, match=rf"--dir {re.escape(bad)}: must be a folder under the project root"):
            _check_dir(bad, ROOT)
    _check_dir("rehearsal", ROOT)
    for bad in ("", "/", "//"):
        with pytest.raises(ConfigError, match="data.prepared: .* would put the prepared data at the file-system root"):
            W.prepared_dir({"dataset": "digits", "prepared": bad}, "train")
    assert W.prepared_dir({"dataset": "digits"}, "train") == "data/prepared/digits-train"
    outputs = ["results/s", "reports/s", "logs/s", "dvc/s", "data/prepared"]
    assert "lies in results/s/" in W.config_in_outputs("results/s/summary.json", outputs)
    assert W.config_in_outputs("config/s.yaml", outputs) is None and W.config_in_outputs("results/s2.yaml", outputs) is None
    (tmp_path / "mine.csv").write_text("x\n")
    with pytest.raises(DataError, match="digits is scikit-learn's bundled set and reads no source"):
        prepare("digits", tmp_path / "mine.csv", tmp_path / "out")
    assert re.search(PATH_PATTERN, "data/\u202egnp.exe") is None and re.search(PATH_PATTERN, "ünï/ф.pt")
    # every documented snakemake command names its target before --configfile (which takes several files)
    for doc in (ROOT / "README.md", ROOT / "docs" / "methods.md", ROOT / "reports" / "index.html.j2",
                ROOT / "reports" / "scorecard.html.j2", ROOT / "workflow" / "rules" / "scorecard.smk"):
        for m in re.finditer(r"snakemake[^\n`<]*?--configfile[ =](?:\{\{[^}]*\}\}|[^\s`<{]+) +([A-Za-z_]\w*)", doc.read_text()):
            pytest.fail(f"{doc.name}: '{m.group(0)}': snakemake would read '{m.group(1)}' as a config file")


def test_dvc_keeps_the_tracked_metrics_when_a_repro_fails():
    """Before: the metrics and plots outputs were not persisted, so DVC deleted the tracked
    dvc/<study>/metrics.json before running the stage, and a failed `dvc repro` left none."""
    import yaml
    from dvc.schema import COMPILED_MULTI_STAGE_SCHEMA
    from worktree import ROOT

    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    COMPILED_MULTI_STAGE_SCHEMA(dvc)  # DVC accepts the file
    for stage in dvc["stages"].values():
        for kind in ("outs", "metrics", "plots"):
            for entry in stage.get(kind, []):
                (path, props), = entry.items()
                assert props.get("persist") is True, (kind, path)



def test_dvc_stage_depends_on_every_report_and_config_section():
    """Before: dvc.yaml listed the report notebooks by hand and missed reports/flow_matching.py and
    reports/scorecard.html.j2, so `dvc repro` did not rerun when they changed; its params missed
    config sections. The expected deps come from the repository: every notebook and template under
    reports/, every repository file a rule names as input (``"reports/..."`` in workflow/rules)."""
    import re

    import yaml
    from worktree import ROOT

    stage, = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].values()
    deps = set(stage["deps"])
    for dep in deps:
        assert (ROOT / dep).exists(), f"dvc.yaml names {dep}, which does not exist"
    expected = {p.relative_to(ROOT).as_posix() for pattern in ("*.py", "*.j2") for p in (ROOT / "reports").glob(pattern)}
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        expected |= {m for m in re.findall(r'"(reports/[\w.]+\.(?:py|j2))"', smk.read_text())}
    assert not expected - deps, f"dvc.yaml's stage misses {sorted(expected - deps)}"
    assert {"Snakefile", "workflow/rules", "workflow/schemas", "src/timestep_lab"} <= deps
    # `scorecard:` configures the page across studies (its own target), not this study's results, and a
    # study config without it (the smoke study's params.yaml) would make `dvc repro` fail on a missing param
    sections = set(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())) - {"scorecard"}
    assert sections == set(stage["params"]), f"params differ from config/config.yaml: {sections ^ set(stage['params'])}"

# ------------------------------------------------------------------ 9: tracebacks that are one error line now


def test_a_full_disk_at_the_log_or_the_event_files_is_one_error_line_and_the_run_resumes(tiny_artifacts, tmp_path,
                                                                                         capsys, monkeypatch):
    """Before: ENOSPC when appending to train_log.jsonl or writing an event file was a traceback
    (the event file's failure came first and left the log empty)."""
    import builtins
    import errno

    import timestep_lab.artifacts.events as events
    import timestep_lab.train.loop as loop

    out = tmp_path / "run"
    argv = ["train", "--config", tiny_artifacts.config, "--set", "train.total_kimg=0.64", "--set",
            "train.log_every_kimg=0.16", "--out", out, "--no-progress"]
    real_open, appended = builtins.open, []

    def full_disk(path, mode="r", *args, **kwargs):
        if str(path).endswith("train_log.jsonl") and "a" in mode:
            appended.append(path)
            if len(appended) == 3:  # after the checkpoint at 320 images, the record of 480
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(loop, "open", full_disk, raising=False)
    line = _error_line(argv, capsys)
    assert f"{out / 'train_state' / 'train_log.jsonl'}: write failed (No space left on device)" in line
    monkeypatch.undo()
    assert main([str(a) for a in argv]) == 0  # resumed from the checkpoint at 320 images
    assert [json.loads(r)["nimg"] for r in (out / "train_log.jsonl").read_text().splitlines()] == [160, 320, 480, 640]

    def no_space(self, rec, p_t):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(events.RunEvents, "_record", no_space)
    line = _error_line([*argv[:-3], "--out", tmp_path / "run2", "--events", tmp_path / "tb", "--no-progress"], capsys)
    assert f"{tmp_path / 'tb'}: writing the TensorBoard event file failed (No space left on device)" in line


def test_malformed_verdicts_are_one_error_line_or_left_out_with_skip_missing(tmp_path, capsys, monkeypatch):
    """Before: a verdicts.json whose claims were not objects, or held text where numbers belong, was
    an AttributeError or ValueError traceback, with --skip-missing too."""
    from worktree import ROOT

    monkeypatch.chdir(ROOT)  # the default template, reports/scorecard.html.j2
    fmt = "timestep_lab.verdicts/2"
    cases = {"not-objects": ({"format": fmt, "claims": [1, 2]}, "claims[0] is not a claim"),
             "text-n": ({"format": fmt, "claims": [{"id": "x", "verdict": "reproduced", "n": "three"}]},
                        "claim 'x': 'n' must be a number or null, got 'three'"),
             "text-kimg": ({"format": fmt, "claims": [{"id": "x", "regime": {"train_kimg": "long"}}]},
                           "'regime.train_kimg' must be a number or null"),
             "list-log": ({"format": fmt, "claims": [{"id": "x", "verdict": "reproduced", "log": [1], "diff": 2}]},
                          "'log' must be an object or null")}
    for name, (verdicts, says) in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "verdicts.json").write_text(json.dumps(verdicts))
        line = _error_line(["scorecard", tmp_path / name, "--out", tmp_path / "sc.html"], capsys)
        assert says in line, (name, line)
        line = _error_line(["scorecard", tmp_path / name, "--out", tmp_path / "sc.html", "--skip-missing"], capsys)
        assert "holds a readable verdicts.json" in line
    assert not (tmp_path / "sc.html").exists()


def test_the_fid_sample_floor_is_where_every_metric_of_the_protocol_is_defined():
    from timestep_lab.config.schema import MIN_FID_SAMPLES
    from timestep_lab.metrics.fid import PRC_NEIGHBORHOOD

    assert MIN_FID_SAMPLES == PRC_NEIGHBORHOOD + 1  # precision/recall's k-NN balls need k + 1 points
