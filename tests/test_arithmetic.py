"""The study key ``reproducibility`` (timestep_lab.arithmetic): a level pins the CPU code paths of
torch, oneDNN, numpy, OpenBLAS and MKL in every job, a job refuses to compute under a level it
does not run, records the one it does, and the warm-start server forks only jobs that pin what it
pinned. That the pinned numbers do not depend on the CPU is the smoke study's golden test
(tests/test_pipeline.py) and the emulated CPUs of benchmarks/RESULTS.md, "Portable arithmetic"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from timestep_lab import arithmetic as A

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without any level or pinned variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in (A.LEVEL_ENV, *A.VARIABLES, "TIMESTEP_LAB_WARM_SOCKET")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def test_pin_sets_the_levels_variables_over_the_machines_and_native_leaves_them():
    env = {"OPENBLAS_CORETYPE": "SkylakeX", "NPY_DISABLE_CPU_FEATURES": "X86_V4", "OPENBLAS_L2_SIZE": "512"}
    assert A.pin(env, "portable").name == "portable"
    assert env == {**A.LEVELS["portable"].variables, A.LEVEL_ENV: "portable", "OPENBLAS_L2_SIZE": "512"}
    machine = {"OPENBLAS_CORETYPE": "SkylakeX"}
    A.pin(machine, "native")
    assert machine == {"OPENBLAS_CORETYPE": "SkylakeX", A.LEVEL_ENV: "native"}
    named = {A.LEVEL_ENV: "portable"}  # a command rerun by hand with only the level set
    A.pin(named)
    assert named["ATEN_CPU_CAPABILITY"] == "avx2" and A.pin({}).name == A.DEFAULT == "native"
    with pytest.raises(ValueError, match="unknown reproducibility level 'fast'; one of native, portable"):
        A.pin({}, "fast")


def test_a_cpu_that_cannot_run_the_level_is_refused_before_numpy_would_be():
    zen3 = A.cpu_flags("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert zen3 == frozenset({"fpu", "sse2", "avx", "avx2", "fma", "bmi2"}) and A.cpu_flags("no flags here") is None
    A.pin({}, "portable", machine="x86_64", flags=zen3)
    with pytest.raises(ValueError, match="needs a CPU with AVX2 and FMA; this one lacks AVX2, FMA"):
        A.pin({}, "portable", machine="x86_64", flags=frozenset({"sse2", "avx"}))
    with pytest.raises(ValueError, match="defined for x86_64 CPUs; this one is aarch64"):
        A.pin({}, "portable", machine="aarch64")
    A.pin({}, "native", machine="aarch64", flags=frozenset())  # native runs anywhere


PORTABLE = {"level": "portable", "torch_cpu_capability": "AVX2", "openblas": ["Haswell"], "numpy_simd": ["X86_V3"],
            "machine": "x86_64"}


@pytest.mark.parametrize("change, message", [
    ({}, None),
    ({"torch_cpu_capability": "AVX512"}, "needs torch's AVX2 kernels, but this process runs AVX512"),
    ({"openblas": ["Haswell", "SkylakeX"]}, "needs OpenBLAS's Haswell kernel, but this process runs Haswell, SkylakeX"),
    ({"numpy_simd": ["X86_V3", "X86_V4"]}, "turns numpy's X86_V4 loops off"),
    ({"machine": "aarch64"}, "defined for x86_64"),
])
def test_check_names_what_the_process_runs_against_its_level(change, message):
    record = {**PORTABLE, **change}
    if message is None:
        A.check(record)
        A.check({**record, "level": "native", "torch_cpu_capability": "AVX512"})  # native accepts anything
    else:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            A.check(record)


def test_the_schema_offers_exactly_the_levels_and_the_workflow_pins_the_studys():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    prop = schema["properties"]["reproducibility"]
    assert prop["enum"] == list(A.LEVELS) and prop["default"] == A.DEFAULT
    smk = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert 'ARITHMETIC = config["reproducibility"]' in smk and "pin_arithmetic(os.environ, ARITHMETIC)" in smk
    for name in ("smoke", "config", "mnist", "digits-full"):  # the CPU studies: numbers every AVX2 CPU reproduces
        assert yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())["reproducibility"] == "portable", name


def _train(tmp_path: Path, digits_dir: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    from conftest import tiny_config

    from timestep_lab.config import dump_config

    dump_config(tiny_config(digits_dir, train={"total_kimg": 0.4, "log_every_kimg": 0.2}), tmp_path / "run.yaml")
    return subprocess.run([sys.executable, "-m", "timestep_lab", "train", "--config", str(tmp_path / "run.yaml"),
                           "--out", str(tmp_path / name), "--no-progress", "--threads", "1"],
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_command_named_portable_pins_itself_over_the_machines_variables(digits_dir, tmp_path):
    """Only the level set, and a machine's own OpenBLAS kernel in the way: the command pins its
    libraries before they load and records what it ran in every training log record."""
    r = _train(tmp_path, digits_dir, "run", _env(**{A.LEVEL_ENV: "portable", "OPENBLAS_CORETYPE": "SkylakeX",
                                                   "NPY_DISABLE_CPU_FEATURES": "X86_V4"}))
    assert r.returncode == 0, r.stderr
    records = [json.loads(line)["code"]["arithmetic"] for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert records and all(rec == records[0] for rec in records)
    assert {k: records[0][k] for k in PORTABLE} == PORTABLE
    assert records[0]["variables"] == A.LEVELS["portable"].variables


def test_a_process_that_computed_before_the_level_was_set_refuses_with_one_line(tmp_path):
    """torch chose its kernels at its first operation (here: told the widest is 'default'); naming
    the level afterwards cannot change them, so a command refuses instead of mislabelling numbers."""
    code = ("import os, sys, torch; torch.ones(2).sum(); "
            f"os.environ[{A.LEVEL_ENV!r}] = 'portable'; "
            "from timestep_lab.cli import main; "
            f"sys.exit(main(['train', '--out', {str(tmp_path / 'x')!r}, '--threads', '1', '--no-progress']))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(ATEN_CPU_CAPABILITY="default"), capture_output=True,
                       text=True, timeout=300)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert errors == [errors[0]] and "needs torch's AVX2 kernels, but this process runs DEFAULT" in errors[0], r.stderr
    assert not (tmp_path / "x").exists()


def test_the_warm_start_server_forks_only_jobs_that_pin_what_it_pinned(tmp_path):
    """A job asking for other CPU code paths than the server's libraries loaded with starts itself
    (here the real CLI, which has no command 'exit'); one asking for the same is forked."""
    from test_warmstart import _Server

    from timestep_lab.warmstart import SOCKET_ENV

    for server_level in ("native", "portable"):
        folder = tmp_path / server_level
        folder.mkdir()
        server = _Server(folder, "--entry", "warm_probe:main", "--no-preload", env=_env(**{A.LEVEL_ENV: server_level}))
        try:
            for job_level in ("native", "portable"):
                r = subprocess.run([sys.executable, "-m", "timestep_lab", "exit", "0"], capture_output=True, text=True,
                                   env=_env(**{A.LEVEL_ENV: job_level, SOCKET_ENV: server.socket}), timeout=120)
                forked = job_level == server_level
                assert r.returncode == (0 if forked else 2), (server_level, job_level, r.stderr)
                assert forked or "invalid choice: 'exit'" in r.stderr, r.stderr
        finally:
            assert server.stop() == 0
        log = server.log.read_text()
        assert log.count("exit 0 after") == 1 and log.count("asks for other arithmetic") == 1, log


def test_the_index_says_which_level_computed_the_study_and_when_records_disagree():
    from timestep_lab.reporting.index import arithmetic_lines

    code = {"commit": "a" * 40, "dirty": False, "source_sha256": "b" * 64, "lock_sha256": "c" * 64}
    native = {"level": "native", "torch_cpu_capability": "AVX512", "openblas": ["SkylakeX"]}

    def summary(*records):
        return {"code": {"identities": [{"identity": {**code, **({"arithmetic": r} if r else {})}} for r in records]}}

    one = arithmetic_lines(summary(PORTABLE), "portable")
    assert one == [f"Arithmetic: portable (torch AVX2, OpenBLAS Haswell) in every record: {A.LEVELS['portable'].summary}."]
    mixed = arithmetic_lines(summary(PORTABLE, native), "portable")
    assert mixed[0].startswith("Arithmetic: the records were computed with 2 different CPU code paths "
                               "(native (torch AVX512, OpenBLAS SkylakeX); portable (torch AVX2, OpenBLAS Haswell))")
    assert "reproducibility: portable; records computed otherwise come from an earlier setting" in mixed[1]
    assert arithmetic_lines(summary(None), "native") == ["Arithmetic: not recorded (records made before the code "
                                                         "recorded it)."]
    assert "some not recorded" in arithmetic_lines(summary(PORTABLE, None))[0]


class _CpuSqrtCalls:
    """A dispatch mode that lists every torch square root taken on the CPU (the op and where it
    was called from): torch's CPU sqrt is MKL's VML, whose last bit depends on the CPU vendor
    (timestep_lab/processes/exact.py), so no numeric path may take one."""

    def __init__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        ops = {aten.sqrt.default, aten.sqrt.out, aten.sqrt_.default, aten._foreach_sqrt.default,
               aten._foreach_sqrt_.default}
        calls = self.calls = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                flat = [a for a in args if isinstance(a, torch.Tensor)] + [
                    t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
                root = func is aten.pow.Tensor_Scalar and abs(args[1]) == 0.5
                if (func in ops or root) and any(t.device.type == "cpu" for t in flat):
                    import traceback

                    here = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in traceback.extract_stack()
                            if "timestep_lab" in f.filename or "torch_fidelity" in f.filename or "cleanfid" in f.filename]
                    calls.append((str(func), here[-1:]))
                return func(*args, **kwargs)

        self.mode = Mode()


@pytest.mark.parametrize("sections", [
    {},  # eps, uniform t
    {"timesteps": {"name": "adaptive", "params": {"update_every": 2}}},
    {"timesteps": {"name": "loss_second_moment"}, "weighting": {"name": "speed"}},
    {"diffusion": {"kind": "flow", "prediction": "v"}, "timesteps": {"name": "logit_normal"},
     "sample": {"method": "heun", "steps": 3}},
], ids=["uniform", "adaptive", "loss-second-moment", "flow"])
def test_training_sampling_and_scoring_take_no_cpu_sqrt_of_torchs(digits_dir, digits_test_dir, tiny_artifacts, tmp_path,
                                                                  sections):
    """Train (Adam included), sample and score a tiny run, and (once) train the digits CNN, with
    every path's square roots watched: none may be torch's CPU sqrt, which would make the numbers
    depend on the CPU vendor."""
    from conftest import tiny_config

    from timestep_lab.cli import main
    from timestep_lab.config import dump_config

    cfg = tiny_config(digits_dir, train={"total_kimg": 0.128, "log_every_kimg": 0.064, "checkpoint_every_kimg": 0.064,
                                         "snapshot_every_kimg": 0.064}, **sections)
    dump_config(cfg, tmp_path / "run.yaml")
    watch = _CpuSqrtCalls()
    common = ["--threads", "1", "--no-progress"]
    with watch.mode:
        assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run"), *common]) == 0
        assert main(["sample-score", "--model", str(tmp_path / "run" / "model.pt"), "--out", str(tmp_path / "s.npz"),
                     "--reference", str(tiny_artifacts.reference), "--weights", str(tiny_artifacts.cnn),
                     "--metrics", str(tmp_path / "m.json"), "--set", "sample.num_samples=8", *common]) == 0
        if not sections:
            assert main(["train-features", "--data", str(digits_dir), "--test-data", str(digits_test_dir),
                         "--out", str(tmp_path / "cnn.pt"), "--epochs", "1", "--threads", "1"]) == 0
    assert watch.calls == [], watch.calls[:10]


def test_a_training_state_of_another_level_is_not_resumed(digits_dir):
    """The level is in no file the training reads, yet its state's numbers depend on it: a state
    computed at another level is set aside, never resumed (a switched study retrains)."""
    from conftest import tiny_config

    from timestep_lab.config import config_to_dict
    from timestep_lab.train.files import not_this_run, run_inputs

    cfg = tiny_config(digits_dir)
    data = {"images_sha256": "a" * 64, "labels_sha256": "b" * 64}
    state = {"config": config_to_dict(cfg), "nimg": 0, "inputs": run_inputs(cfg, data, "native")}
    assert not_this_run(state, cfg, run_inputs(cfg, data, "native")) is None
    assert not_this_run(state, cfg, run_inputs(cfg, data, "portable")) == \
        "was computed at another reproducibility level (native, now portable)"
