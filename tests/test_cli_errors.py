"""Every command, driven with empty, out-of-range, garbled and wrong-shape inputs, fails with one
``error:`` line and exit status 2, never a traceback (issue: hardening round 2; the entry
``timestep_lab.cli.main`` is the one place that makes the line). Before, train-features and
profile on an empty data set, ``slots --n-slots 0`` or a NaN profile, and interference with a
slot number out of range ended in a traceback.

In process (``main(argv)``): a fresh process per case would cost ~3 CPU-s of imports each.
The table must list every registered command (a new command gets its rows here).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from timestep_lab.artifacts.samples_file import save_samples
from timestep_lab.cli import COMMANDS, main

KINDS = ("empty", "out of range", "garbled", "wrong shape")


def _prepared(folder: Path, images: np.ndarray) -> Path:
    """A prepared folder holding ``images`` (uint8 NHWC), labels 0..9 and a matching manifest."""
    folder.mkdir(parents=True)
    np.save(folder / "images.npy", images)
    np.save(folder / "labels.npy", np.arange(len(images), dtype=np.int64) % 10)
    (folder / "manifest.json").write_text(json.dumps({
        "dataset": "digits", "split": "train", "count": len(images), "shape": list(images.shape[1:]),
        "images_sha256": hashlib.sha256((folder / "images.npy").read_bytes()).hexdigest()}))
    return folder


def _huge_npz(dst: Path, src: Path) -> None:
    """``src`` (a samples file) with its images' .npy header claiming 10^12 images (10 bytes
    follow): reading it would need terabytes."""
    import io
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False, "shape": (10**12, 8, 8, 1)})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, head.getvalue() + b"0123456789" if name == "images.npy" else zin.read(name))


@pytest.fixture(scope="module")
def inputs(tiny_artifacts, digits_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-inputs")
    a = tiny_artifacts
    f = {
        "a": a, "data": digits_dir, "tmp": tmp,
        "empty_file": tmp / "empty.bin", "garbled": tmp / "garbled.bin", "empty_dir": tmp / "empty-dir",
        "empty_data": _prepared(tmp / "empty-data", np.zeros((0, 8, 8, 1), np.uint8)),
        "rgb_data": _prepared(tmp / "rgb-data", np.full((12, 4, 4, 3), 7, np.uint8)),
        "list_yaml": tmp / "list.yaml", "rgb_samples": tmp / "rgb.npz", "t50_profile": tmp / "t50.json",
        "nan_profile": tmp / "nan.json", "uneven_profile": tmp / "uneven.json",
    }
    f["empty_file"].write_bytes(b"")
    f["garbled"].write_bytes(bytes(range(256)) * 8)
    f["empty_dir"].mkdir()
    for name, text in (("garbled_vae", bytes(range(256)) * 8), ("list_vae", b"[1, 2]")):  # AutoencoderKL folders
        f[name] = tmp / name
        f[name].mkdir()
        (f[name] / "config.json").write_bytes(text)
    f["list_yaml"].write_text("- a\n- b\n")
    f["zero_threads_yaml"] = tmp / "zero-threads.yaml"
    f["zero_threads_yaml"].write_text("study: z\nresources: {threads: 0}\n")
    for name, text in (("garbled_results", bytes(range(256)) * 8), ("list_results", b"[1, 2]")):
        f[name] = tmp / name
        f[name].mkdir()
        (f[name] / "verdicts.json").write_bytes(text)
    f["garbled_py"], f["failing_py"] = tmp / "garbled.py", tmp / "failing.py"
    f["garbled_py"].write_bytes(bytes(range(256)) * 8)
    f["failing_py"].write_text("# %% tags=[\"parameters\"]\nn = 2\n\n# %%\nassert int(n) == 2, f\"shape {n}\"\n")
    save_samples(f["rgb_samples"], np.zeros((16, 4, 4, 3), np.uint8), list(range(16)), {"method": "ddim"})
    f["huge_samples"], f["deep_json"] = tmp / "huge.npz", tmp / "deep.json"
    _huge_npz(f["huge_samples"], f["rgb_samples"])
    f["deep_json"].write_text("[" * 100_000 + "]" * 100_000)
    prof = json.loads(a.profile.read_text())
    f["nan_profile"].write_text(json.dumps({**prof, "eps_mse": [float("nan")] * len(prof["eps_mse"])}))
    f["uneven_profile"].write_text(json.dumps({**prof, "eps_mse": prof["eps_mse"][:-1]}))
    f["t50_profile"].write_text(json.dumps({**prof, "T": 50, "timesteps": [t // 2 for t in prof["timesteps"]]}))
    return f


def _table(f) -> dict[tuple[str, str], list]:
    """(command, kind) -> argv. Output paths go to a folder that never gets a file."""
    a, out = f["a"], f["tmp"] / "never"
    model, cnn, ref, smp = a.run / "model.pt", a.cnn, a.reference, a.samples
    ev = ["--weights", cnn, "--no-progress", "--threads", "1"]
    smp_set = ["--set", "sample.num_samples=4", "--set", "sample.steps=2", "--no-progress"]
    bank = ["--num-images", "8", "--stride", "20", "--no-progress"]
    prof, slots = a.profile, a.slots
    ic = lambda ref_=prof, ft=f"0:2={prof}", ctl=f"0={prof}", sl=slots: [  # noqa: E731
        "interference-control", "--reference", ref_, "--finetuned", ft, "--controls", ctl, "--slots", sl,
        "--out", out / "ic.json"]
    ct = lambda model_=model, gt=f["data"], extra=(): [  # noqa: E731
        "contribution", "--model", model_, "--gt-data", gt, "--ranges", "1", "500", "--num-samples", "4",
        "--method", "ddim", "--steps", "10", "--min-steps", "1", "--bootstrap", "2", "--reference", ref, *ev,
        "--out-dir", out / "ct", "--out", out / "ct.json", *extra]
    coll = [f"--metrics={out / 'metrics.csv'}", f"--runs={out / 'runs.csv'}", f"--summary={out / 'summary.json'}"]
    dvc = lambda summary=prof, profile=prof, metrics=f["list_yaml"]: [  # noqa: E731
        "dvc-export", f"--summary={summary}", f"--metrics-csv={metrics}", f"--profile={profile}",
        f"--metrics-out={out / 'dvc.json'}", f"--fid-progress-out={out / 'fp.csv'}", f"--loss-profile-out={out / 'lp.csv'}"]
    idx = lambda template="reports/index.html.j2", summary=prof, verdicts=prof: [  # noqa: E731
        "index", f"--template={template}", f"--out={out / 'index.html'}", "--study=x", "--config-source=x.yaml",
        f"--summary={summary}", f"--verdicts={verdicts}"]
    plan = lambda study='{"study": "x", "budget": {"amount": 1}}', verdicts=prof, estimate=prof, extra=(): [  # noqa: E731
        "plan-stage", f"--study={study}", f"--verdicts={verdicts}", f"--estimate={estimate}", "--stage=0",
        f"--out={out / 'next.json'}", *extra]
    return {
        ("prepare", "empty"): ["prepare", "celebahq", "--source", f["empty_dir"], "--out", out / "p", "--resolution", "8"],
        ("prepare", "out of range"): ["prepare", "celebahq", "--source", f["empty_dir"], "--out", out / "p",
                                      "--resolution", "0"],
        ("prepare", "garbled"): ["prepare", "cifar10", "--source", f["garbled"], "--out", out / "p"],
        ("prepare", "wrong shape"): ["prepare", "imagenet", "--source", f["empty_dir"], "--out", out / "p",
                                     "--resolution", "8"],
        ("train-features", "empty"): ["train-features", "--data", f["empty_data"], "--test-data", f["data"], "--out",
                                      out / "c.pt"],
        ("train-features", "out of range"): ["train-features", "--data", f["data"], "--test-data", f["data"], "--out",
                                             out / "c.pt", "--epochs", "0"],
        ("train-features", "garbled"): ["train-features", "--data", f["garbled"], "--test-data", f["data"], "--out",
                                        out / "c.pt"],
        ("train-features", "wrong shape"): ["train-features", "--data", f["rgb_data"], "--test-data", f["data"],
                                            "--out", out / "c.pt"],
        ("encode-latents", "empty"): ["encode-latents", "--data", f["empty_data"], "--vae", f["list_vae"], "--out", out / "z"],
        ("encode-latents", "out of range"): ["encode-latents", "--data", f["data"], "--vae", f["list_vae"], "--out", out / "z",
                                             "--batch-size", "0"],
        ("encode-latents", "garbled"): ["encode-latents", "--data", f["data"], "--vae", f["garbled_vae"], "--out", out / "z"],
        ("encode-latents", "wrong shape"): ["encode-latents", "--data", f["data"], "--vae", f["list_vae"], "--out", out / "z"],
        ("reference-stats", "empty"): ["reference-stats", "--data", f["empty_data"], "--extractor", "digits-cnn",
                                       "--out", out / "r.npz", *ev],
        ("reference-stats", "out of range"): ["reference-stats", "--data", f["data"], "--extractor", "digits-cnn",
                                              "--out", out / "r.npz", "--max-images", "1", *ev],
        ("reference-stats", "garbled"): ["reference-stats", "--data", f["data"], "--extractor", "digits-cnn",
                                         "--out", out / "r.npz", "--weights", f["garbled"]],
        ("reference-stats", "wrong shape"): ["reference-stats", "--data", f["rgb_data"], "--extractor", "digits-cnn",
                                             "--out", out / "r.npz", *ev],
        ("train", "empty"): ["train", "--config", a.config, "--set", f"data.path={f['empty_data']}", "--out",
                             out / "run", "--no-progress"],
        ("train", "out of range"): ["train", "--config", a.config, "--out", out / "run", "--stop-after-kimg", "nan"],
        ("train", "garbled"): ["train", "--config", f["garbled"], "--out", out / "run"],
        ("train", "wrong shape"): ["train", "--config", f["list_yaml"], "--out", out / "run"],
        ("sample", "empty"): ["sample", "--model", f["empty_file"], "--out", out / "s.npz", *smp_set],
        ("sample", "out of range"): ["sample", "--model", model, "--out", out / "s.npz", "--set", "sample.steps=0"],
        ("sample", "garbled"): ["sample", "--model", f["garbled"], "--out", out / "s.npz", *smp_set],
        ("sample", "wrong shape"): ["sample", "--model", cnn, "--out", out / "s.npz", *smp_set],
        ("sample-score", "empty"): ["sample-score", "--model", model, "--out", out / "s.npz", "--reference",
                                    f["empty_file"], "--metrics", out / "m.json", *smp_set],
        ("sample-score", "out of range"): ["sample-score", "--model", model, "--out", out / "s.npz", "--reference", ref,
                                           "--metrics", out / "m.json", *smp_set, "--set", "eval.num_samples=99"],
        ("sample-score", "garbled"): ["sample-score", "--model", model, "--out", out / "s.npz", "--reference",
                                      f["garbled"], "--metrics", out / "m.json", *smp_set],
        ("sample-score", "wrong shape"): ["sample-score", "--model", model, "--out", out / "s.npz", "--reference", ref,
                                          "--metrics", out / "m.json", "--weights", model, *smp_set],
        ("evaluate", "empty"): ["evaluate", "--samples", f["empty_file"], "--reference", ref, "--out", out / "m.json", *ev],
        ("evaluate", "out of range"): ["evaluate", "--samples", smp, "--reference", ref, "--out", out / "m.json",
                                       "--set", "eval.num_samples=1000", *ev],
        ("evaluate", "garbled"): ["evaluate", "--samples", f["huge_samples"], "--reference", ref, "--out",
                                  out / "m.json", *ev],
        ("evaluate", "wrong shape"): ["evaluate", "--samples", f["rgb_samples"], "--reference", ref, "--out",
                                      out / "m.json", *ev],
        ("evaluate-snapshots", "empty"): ["evaluate-snapshots", "--snapshots", f["empty_dir"], "--reference", ref,
                                          "--out", out / "p.json", *ev],
        ("evaluate-snapshots", "out of range"): ["evaluate-snapshots", "--models", model, "--reference", ref, "--out",
                                                 out / "p.json", "--set", "sample.num_samples=1", *ev],
        ("evaluate-snapshots", "garbled"): ["evaluate-snapshots", "--models", f["garbled"], "--reference", ref,
                                            "--out", out / "p.json", *ev],
        ("evaluate-snapshots", "wrong shape"): ["evaluate-snapshots", "--models", cnn, "--reference", ref, "--out",
                                                out / "p.json", *ev],
        ("profile", "empty"): ["profile", "--model", model, "--data", f["empty_data"], "--out", out / "p.json", *bank],
        ("profile", "out of range"): ["profile", "--model", model, "--data", f["data"], "--out", out / "p.json",
                                      "--stride", "0"],
        ("profile", "garbled"): ["profile", "--model", f["garbled"], "--data", f["data"], "--out", out / "p.json", *bank],
        ("profile", "wrong shape"): ["profile", "--model", model, "--data", f["rgb_data"], "--out", out / "p.json", *bank],
        ("slots", "empty"): ["slots", "--profile", f["empty_file"], "--out", out / "s.json"],
        ("slots", "out of range"): ["slots", "--profile", prof, "--n-slots", "0", "--out", out / "s.json"],
        ("slots", "garbled"): ["slots", "--profile", f["nan_profile"], "--out", out / "s.json"],
        ("slots", "wrong shape"): ["slots", "--profile", f["uneven_profile"], "--out", out / "s.json"],
        ("interference", "empty"): ["interference", "--reference", prof, "--finetuned", f"2={f['empty_file']}",
                                    "--slots", slots, "--out", out / "i.json"],
        ("interference", "out of range"): ["interference", "--reference", prof, "--finetuned", f"99={prof}",
                                           "--slots", slots, "--out", out / "i.json"],
        ("interference", "garbled"): ["interference", "--reference", prof, "--finetuned", f"2={prof}", "--slots",
                                      f["garbled"], "--out", out / "i.json"],
        ("interference", "wrong shape"): ["interference", "--reference", prof, "--finetuned", f"2={f['t50_profile']}",
                                          "--slots", slots, "--out", out / "i.json"],
        ("interference-control", "empty"): ic(ctl="0="),
        ("interference-control", "out of range"): ic(ft=f"0:9={prof}"),
        ("interference-control", "garbled"): ic(ref_=f["deep_json"]),
        ("interference-control", "wrong shape"): ic(ft=f"0:x={prof}"),
        ("predictions-profile", "empty"): ["predictions-profile", "--models", f"eps={model}", "--data",
                                           f["empty_data"], "--out", out / "pp.json", *bank],
        ("predictions-profile", "out of range"): ["predictions-profile", "--models", f"eps={model}", "--data",
                                                  f["data"], "--out", out / "pp.json", "--batch-size", "0"],
        ("predictions-profile", "garbled"): ["predictions-profile", "--models", f"eps={f['garbled']}", "--data",
                                             f["data"], "--out", out / "pp.json", *bank],
        ("predictions-profile", "wrong shape"): ["predictions-profile", "--models", f"eps={model}", "--data",
                                                 f["rgb_data"], "--out", out / "pp.json", *bank],
        ("consistency", "empty"): ["consistency", "--samples", f"a={f['empty_file']}", f"b={smp}", "--out",
                                   out / "c.json"],
        ("consistency", "out of range"): ["consistency", "--samples", f"a={smp}", "--out", out / "c.json"],
        ("consistency", "garbled"): ["consistency", "--samples", f"a={f['garbled']}", f"b={smp}", "--out",
                                     out / "c.json"],
        ("consistency", "wrong shape"): ["consistency", "--samples", f"a={smp}", f"b={f['rgb_samples']}", "--out",
                                         out / "c.json"],
        ("posterior", "empty"): ["posterior", "--model", f["empty_file"], "--out", out / "po.json"],
        ("posterior", "out of range"): ["posterior", "--model", model, "--ranges", "1", "5000", "--out", out / "po.json"],
        ("posterior", "garbled"): ["posterior", "--model", f["garbled"], "--out", out / "po.json"],
        ("posterior", "wrong shape"): ["posterior", "--model", model, "--ranges", "1", "2", "3", "--out", out / "po.json"],
        ("report", "empty"): ["report", "--notebook", "", "--out", out / "r.html"],
        ("report", "out of range"): ["report", "--notebook", f["tmp"] / "no-such.py", "--out", out / "r.html",
                                     "-p", "x"],
        ("report", "garbled"): ["report", "--notebook", f["garbled_py"], "--out", out / "r.html"],
        # a notebook whose cell fails (the kernel runs: the one slow case)
        ("report", "wrong shape"): ["report", "--notebook", f["failing_py"], "--out", out / "r.html", "-p", "n", "3"],
        ("floor", "empty"): ["floor", "--data", f["empty_data"], "--reference", ref, "--out", out / "f.json", *ev],
        ("floor", "out of range"): ["floor", "--data", f["data"], "--reference", ref, "--out", out / "f.json",
                                    "--replicates", "0", *ev],
        ("floor", "garbled"): ["floor", "--data", f["data"], "--reference", f["garbled"], "--out", out / "f.json", *ev],
        ("floor", "wrong shape"): ["floor", "--data", f["rgb_data"], "--reference", ref, "--out", out / "f.json", *ev],
        ("optimal-profile", "empty"): ["optimal-profile", "--model", model, "--data", f["empty_data"], "--out",
                                       out / "o.json", "--num-images", "8", "--stride", "20"],
        ("optimal-profile", "out of range"): ["optimal-profile", "--model", model, "--data", f["data"], "--out",
                                              out / "o.json", "--num-images", "0"],
        ("optimal-profile", "garbled"): ["optimal-profile", "--model", f["garbled"], "--data", f["data"], "--out",
                                         out / "o.json", "--num-images", "8", "--stride", "20"],
        ("optimal-profile", "wrong shape"): ["optimal-profile", "--model", model, "--data", f["rgb_data"], "--out",
                                             out / "o.json", "--num-images", "8", "--stride", "20"],
        ("contribution", "empty"): ct(gt=f["empty_data"]),
        ("contribution", "out of range"): ct(extra=["--num-samples", "0"]),
        ("contribution", "garbled"): ct(model_=f["garbled"]),
        ("contribution", "wrong shape"): ct(gt=f["rgb_data"]),
        ("rehearse", "empty"): ["rehearse", f["empty_file"], "--dir", out / "reh", "--prepare-only"],
        ("rehearse", "out of range"): ["rehearse", f["zero_threads_yaml"], "--dir", out / "reh", "--prepare-only"],
        ("rehearse", "garbled"): ["rehearse", f["garbled"], "--dir", out / "reh", "--prepare-only"],
        ("rehearse", "wrong shape"): ["rehearse", f["list_yaml"], "--dir", out / "reh", "--prepare-only"],
        ("scorecard", "empty"): ["scorecard", f["empty_dir"], "--out", out / "sc.html"],
        ("scorecard", "out of range"): ["scorecard", f["empty_dir"], "--out", out / "sc.html", "--template",
                                        f["tmp"] / "no-such.j2"],
        ("scorecard", "garbled"): ["scorecard", f["garbled_results"], "--out", out / "sc.html"],
        ("scorecard", "wrong shape"): ["scorecard", f["list_results"], "--out", out / "sc.html"],
        ("verdicts", "empty"): ["verdicts", f"--metrics-csv={f['empty_dir']}", f"--out={out / 'v.json'}"],
        ("verdicts", "out of range"): ["verdicts", f"--metrics-csv={f['list_yaml']}", "--base=[64]", f"--out={out / 'v.json'}"],
        ("verdicts", "garbled"): ["verdicts", f"--metrics-csv={f['garbled']}", f"--out={out / 'v.json'}"],
        ("verdicts", "wrong shape"): ["verdicts", f"--metrics-csv={f['list_yaml']}", f"--out={out / 'v.json'}"],
        ("plan-stage", "empty"): plan(verdicts=f["empty_file"]),
        ("plan-stage", "out of range"): plan(extra=["--stage=-1"]),
        ("plan-stage", "garbled"): plan(estimate=f["garbled"]),
        ("plan-stage", "wrong shape"): plan(study='{"study": "x", "groups": {}}'),
        ("run-config", "empty"): ["run-config", "--config-json={}", f"--slots={f['empty_file']}", f"--out={out / 'run.yaml'}"],
        ("run-config", "out of range"): ["run-config", '--config-json={"train": {"batch_size": 0}}', f"--out={out / 'run.yaml'}"],
        ("run-config", "garbled"): ["run-config", "--config-json={}", f"--slots={f['garbled']}", f"--out={out / 'run.yaml'}"],
        ("run-config", "wrong shape"): ["run-config", "--config-json={}", f"--slots={prof}", f"--out={out / 'run.yaml'}"],
        ("collect", "empty"): ["collect", "--study={}", f"--results={f['empty_dir']}", *coll],
        ("collect", "out of range"): ["collect", "--study=[64]", f"--results={f['empty_dir']}", *coll],
        ("collect", "garbled"): ["collect", '--study={"study": "x"}', f"--results={f['garbled']}", *coll],
        ("collect", "wrong shape"): ["collect", '--study={"study": "x", "groups": 5}', f"--results={f['empty_dir']}",
                                     *coll],
        ("dvc-export", "empty"): dvc(summary=f["empty_file"]),
        ("dvc-export", "out of range"): dvc(profile=f["uneven_profile"]),
        ("dvc-export", "garbled"): dvc(summary=f["garbled"]),
        ("dvc-export", "wrong shape"): dvc(metrics=f["list_yaml"]),
        ("index", "empty"): idx(summary=f["empty_file"]),
        ("index", "out of range"): idx(template=f["tmp"] / "no-such.j2"),
        ("index", "garbled"): idx(summary=f["garbled"]),
        ("index", "wrong shape"): idx(verdicts=prof),
        ("estimate", "empty"): ["estimate", f["empty_file"]],
        ("estimate", "out of range"): ["estimate", "config/smoke.yaml", "--gpu", "z9000"],
        ("estimate", "garbled"): ["estimate", f["garbled"]],
        ("estimate", "wrong shape"): ["estimate", f["list_yaml"]],
    }


def test_the_table_covers_every_command_and_kind(inputs):
    table = _table(inputs)
    assert {c for c, _ in table} == set(COMMANDS)
    assert all((c, k) in table for c in COMMANDS for k in KINDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_fails_with_one_error_line(command, inputs, capsys, monkeypatch):
    from worktree import ROOT

    monkeypatch.chdir(ROOT)  # estimate reads config/smoke.yaml
    table = _table(inputs)
    for kind in KINDS:
        rc = main([str(x) for x in table[(command, kind)]])
        err = capsys.readouterr().err
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert rc == 2 and len(errors) == 1 and "Traceback" not in err, (command, kind, rc, err[-3000:])
    never = inputs["tmp"] / "never"  # no output of any case; a failed report keeps its executed notebook
    assert [q for q in never.rglob("*") if q.is_file() and q.suffix != ".ipynb"] == []
