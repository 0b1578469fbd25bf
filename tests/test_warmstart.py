"""Warm start (timestep_lab.warmstart): a job forked from the server is the job a fresh process
would be (same streams, cwd, environment, threads, random draws, exit status, output bytes), a
signal to the client reaches the job, and nothing outlives the server or the client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_config

from timestep_lab.config import dump_config
from timestep_lab.warmstart import SOCKET_ENV
from timestep_lab.warmstart.launch import ENTRY, WarmStart, group_job_size, supported

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not supported(), reason="warm start needs fork and pidfd_open (Linux)")


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (SOCKET_ENV, "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


class _Server:
    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None):
        self.socket, self.log = str(tmp / "s"), tmp / "server.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "timestep_lab.warmstart.server", "--socket", self.socket,
                                          *args], stdin=subprocess.PIPE, stdout=log, stderr=log, env=env or _env(),
                                         start_new_session=True)
        deadline = time.time() + 120
        while not os.path.exists(self.socket):
            assert self.proc.poll() is None and time.time() < deadline, self.log.read_text()
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
    """A server whose jobs run tests/warm_probe.py, with the real preload (torch and every module)."""
    server = _Server(tmp_path_factory.mktemp("warm"), "--entry", "warm_probe:main")
    yield server
    server.stop()


def _run(args, sock=None, **kw):
    env = _env(**({SOCKET_ENV: sock} if sock else {}), **kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", *args], env=env, capture_output=True, text=True, timeout=120, **kw)


def _started_with(ignored: tuple[int, ...]):
    """A ``preexec_fn`` that gives the child SIGINT and SIGHUP as a shell would: ``ignored`` ones
    ignored (``nohup``, ``&``), the others default, whatever this test process itself inherited
    (the suite may run under nohup or in the background)."""
    def preexec():
        for sig in (signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return preexec


@pytest.mark.parametrize("threads, ignored", [(None, ()), ("1", ()), ("2", ()),
                                              (None, (signal.SIGINT, signal.SIGHUP))],
                         ids=["threads-unset", "threads-1", "threads-2", "sigint-sighup-ignored"])
def test_a_forked_job_sees_what_a_fresh_process_sees(probe_server, tmp_path, threads, ignored):
    """Streams, cwd, environment, threads, temp dir, sys.path[0], every signal's disposition and the
    signal mask: the same as a fresh process started in the client's place. With SIGINT and SIGHUP
    ignored in the client (a job started under ``nohup`` or with ``&``), they stay ignored in the job."""
    extra = {"PROBE": "x y", "TMPDIR": str(tmp_path)} | ({"OMP_NUM_THREADS": threads} if threads else {})
    start = _started_with(ignored)
    fresh = _run(["warm_probe", "report", "a b", "--c"], cwd=tmp_path, input="in put", env=extra, preexec_fn=start)
    warm = _run(["timestep_lab", "report", "a b", "--c"], probe_server.socket, cwd=tmp_path, input="in put", env=extra,
                preexec_fn=start)
    assert fresh.returncode == warm.returncode == 0, (fresh.stderr, warm.stderr)
    seen, expected = json.loads(warm.stdout), json.loads(fresh.stdout)
    for name in ("SIGINT", "SIGHUP"):
        assert expected["signals"][name] == ("ignore" if getattr(signal, name) in ignored else
                                             "interrupt" if name == "SIGINT" else "default")
    # torch's default generator is seeded from the OS in a fresh process: so in each forked job
    again = _run(["timestep_lab", "report", "a b", "--c"], probe_server.socket, cwd=tmp_path, input="", env=extra,
                 preexec_fn=start)
    assert seen.pop("draws") != json.loads(again.stdout)["draws"] != expected.pop("draws")
    assert seen == expected
    assert json.loads(warm.stdout)["threads"] == (int(threads) if threads else json.loads(fresh.stdout)["threads"])
    assert warm.stderr == fresh.stderr == "to stderr\n"
    assert "exit 0 after" in probe_server.log.read_text()  # it really ran in the server


def test_exit_status_and_failures_come_back_as_from_a_fresh_process(probe_server):
    for args in (["exit", "3"], ["raise"], ["nonsense"]):
        fresh = _run(["warm_probe", *args])
        warm = _run(["timestep_lab", *args], probe_server.socket)
        assert warm.returncode == fresh.returncode != 0, args
        assert warm.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:], args  # the error or the exception


def _pid_from(path: Path, proc: subprocess.Popen) -> int:
    deadline = time.time() + 60
    while not path.exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    return int(path.read_text())


def _dead(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _gone(pid: int, within_s: float = 15) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_signal_to_the_client_reaches_the_job(probe_server, tmp_path):
    """Snakemake cancels a job with SIGTERM to its shell's processes: the forked job must end."""
    client = subprocess.Popen([sys.executable, "-m", "timestep_lab", "sleep", str(tmp_path / "pid")],
                              env=_env(**{SOCKET_ENV: probe_server.socket}))
    job = _pid_from(tmp_path / "pid", client)
    assert job != client.pid
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 128 + signal.SIGTERM  # as a shell reports a job killed by it
    assert _gone(job)


def test_a_killed_client_takes_its_job_with_it(probe_server, tmp_path):
    client = subprocess.Popen([sys.executable, "-m", "timestep_lab", "sleep", str(tmp_path / "pid")],
                              env=_env(**{SOCKET_ENV: probe_server.socket}))
    job = _pid_from(tmp_path / "pid", client)
    client.kill()
    client.wait()
    assert _gone(job), "the job outlived its SIGKILLed client"


def test_the_server_ends_with_its_parent_and_takes_running_jobs(tmp_path):
    server = _Server(tmp_path, "--entry", "warm_probe:main", "--no-preload")
    client = subprocess.Popen([sys.executable, "-m", "timestep_lab", "sleep", str(tmp_path / "pid")],
                              env=_env(**{SOCKET_ENV: server.socket}))
    job = _pid_from(tmp_path / "pid", client)
    assert server.stop() == 0  # stdin closed: what happens when the snakemake holding it ends
    assert _gone(job) and client.wait(timeout=30) == 128 + signal.SIGTERM
    assert not os.path.exists(server.socket)
    assert "timestep_lab warm-start server usage: cpu_s=" in server.log.read_text()


def test_a_killed_server_takes_its_worker_before_the_client_returns(tmp_path):
    """The server SIGKILLed mid-job (issue: its worker ran on and wrote model.pt after snakemake
    had failed): the worker dies with it, and the client reports the failure only once the
    worker is dead, so nothing is written after Snakemake sees the job end."""
    server = _Server(tmp_path, "--entry", "warm_probe:main", "--no-preload")
    out, err = tmp_path / "ticks", tmp_path / "client.err"
    with open(err, "w") as fh:  # a file, not a pipe: the worker holds the client's stderr too
        client = subprocess.Popen([sys.executable, "-m", "timestep_lab", "tick", str(tmp_path / "pid"), str(out)],
                                  env=_env(**{SOCKET_ENV: server.socket}), stderr=fh)
    job = _pid_from(tmp_path / "pid", client)
    while not out.exists() or out.stat().st_size < 3:  # it is writing
        time.sleep(0.01)
    server.proc.kill()
    server.proc.wait()
    try:
        assert client.wait(timeout=60) == 1 and "closed the connection" in err.read_text()
        assert _dead(job), "the worker outlived its server"  # already when the client returned
    finally:
        if not _dead(job):
            os.kill(job, signal.SIGKILL)
    size = out.stat().st_size
    time.sleep(0.3)
    assert out.stat().st_size == size


def test_a_job_ignoring_sigterm_dies_with_its_killed_client(probe_server, tmp_path):
    client = subprocess.Popen([sys.executable, "-m", "timestep_lab", "sleep", str(tmp_path / "pid"), "ignore-term"],
                              env=_env(**{SOCKET_ENV: probe_server.socket}))
    job = _pid_from(tmp_path / "pid", client)
    client.kill()
    client.wait()
    try:
        assert _gone(job), "the job outlived its SIGKILLed client"
    finally:
        if not _dead(job):
            os.kill(job, signal.SIGKILL)


def test_the_server_stops_forking_once_a_file_of_the_package_changes(tmp_path):
    """Jobs forked after an edit would run the server's old code: once any file of the package
    differs, every request is answered 'fresh' and the job runs in its own process."""
    import shutil

    pkg = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "timestep_lab", pkg / "timestep_lab", ignore=shutil.ignore_patterns("__pycache__"))
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(pkg), str(TESTS)])
    server = _Server(tmp_path, "--entry", "warm_probe:main", "--no-preload", env=env)
    try:
        job = lambda: subprocess.run([sys.executable, "-m", "timestep_lab", "exit", "0"], capture_output=True,  # noqa: E731
                                     text=True, env={**env, SOCKET_ENV: server.socket}, timeout=120)
        assert job().returncode == 0  # forked: the probe entry knows "exit"
        stats_py = pkg / "timestep_lab" / "evidence" / "stats.py"
        stats_py.write_text(stats_py.read_text() + "# edited\n")
        fresh = job()  # fresh: the real CLI has no command "exit"
        assert fresh.returncode == 2 and "invalid choice: 'exit'" in fresh.stderr, fresh.stderr
        assert job().returncode == 2  # and stays so
    finally:
        assert server.stop() == 0
    log = server.log.read_text()
    assert log.count("exit 0 after") == 1 and "package changed since the server started (evidence/stats.py)" in log, log


def test_the_socket_folder_goes_when_snakemake_is_killed_and_stale_ones_at_the_next_start(tmp_path):
    """A SIGKILLed snakemake never calls stop: the server removes its folder when it ends; a
    folder left by a dead maker (both killed) is removed by the next start."""
    from timestep_lab.warmstart.launch import FOLDER_PREFIX

    holder = subprocess.run([sys.executable, "-c", (
        "import os, signal; from timestep_lab.warmstart.launch import WarmStart; "
        f"w = WarmStart({str(tmp_path / 'w.log')!r}, tmp_dir={str(tmp_path)!r}, preload=False); w.start(); "
        "print(w.dir, flush=True); os.kill(os.getpid(), signal.SIGKILL)")], env=_env(), capture_output=True, text=True,
        timeout=120)
    folder = Path(holder.stdout.strip())
    assert holder.returncode == -signal.SIGKILL and folder.name.startswith(FOLDER_PREFIX), holder
    deadline = time.time() + 60
    while folder.exists() and time.time() < deadline:  # the server saw its stdin close
        time.sleep(0.05)
    assert not folder.exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale, live = tmp_path / f"{FOLDER_PREFIX}{int(dead.stdout)}-x", tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-y"
    for d in (stale, live):
        d.mkdir()
        (d / "socket").touch()
    w = WarmStart(tmp_path / "w.log", tmp_dir=tmp_path, preload=False)
    w.start()
    own = Path(w.dir)
    w.stop()
    assert not stale.exists() and live.exists() and not own.exists()


def test_a_server_that_cannot_listen_says_why_and_leaves_no_folder(tmp_path):
    """A socket path over AF_UNIX's ~107 bytes (a deep temporary folder) cannot be bound: the
    server says so in one line and, like on every other exit, removes its folder."""
    folder = tmp_path / ("d" * max(1, 112 - len(str(tmp_path))))
    folder.mkdir()
    r = subprocess.run([sys.executable, "-m", "timestep_lab.warmstart.server", "--socket", str(folder / "socket"),
                        "--entry", "timestep_lab.cli:run_command", "--no-preload", "--remove-folder"],
                       stdin=subprocess.DEVNULL, env=_env(), capture_output=True, text=True, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "too long" in errors[0], r.stderr
    assert not folder.exists()


def test_without_a_server_the_command_starts_itself(tmp_path):
    r = _run(["timestep_lab", "prepare", "nonsense", "--split", "test", "--out", str(tmp_path / "d")],
             str(tmp_path / "no-such-socket"))
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr


def test_the_cli_trains_the_same_bytes_warm_and_fresh(digits_dir, tmp_path):
    """The real server (CLI entry, full preload) against a fresh process: a short training run
    writes the same model file byte for byte, and its usage line says it started warm."""
    cfg = tiny_config(digits_dir, train={"total_kimg": 1.6, "checkpoint_every_kimg": 0.8, "log_every_kimg": 0.4})
    dump_config(cfg, tmp_path / "run.yaml")
    server = _Server(tmp_path, "--entry", ENTRY)
    try:
        runs = {}
        for name, sock in (("fresh", None), ("warm", server.socket)):
            args = ["timestep_lab", "train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / name),
                    "--no-progress", "--threads", "1"]
            runs[name] = _run(args, sock, env={"OMP_NUM_THREADS": "1"})
            assert runs[name].returncode == 0, runs[name].stderr
    finally:
        assert server.stop() == 0
    assert runs["warm"].stderr.rstrip().endswith("start=warm") and not runs["fresh"].stderr.rstrip().endswith("warm")
    assert (tmp_path / "warm" / "model.pt").read_bytes() == (tmp_path / "fresh" / "model.pt").read_bytes()
    def log(name):
        return [{k: v for k, v in json.loads(line).items() if "time" not in k and not k.startswith("sec")}
                for line in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]
    assert log("warm") == log("fresh")


def test_the_workflow_starts_no_server_when_told_not_to_or_on_a_cluster(tmp_path):
    off = WarmStart(tmp_path / "w.log", enabled=False)
    off.start()
    assert off.proc is None and SOCKET_ENV not in os.environ
    off.stop()
    # on a cluster the check is made in onstart, once Snakemake has its executor (test_slurm.py
    # runs a study through SLURM and asserts that its submitting snakemake started no server)
    smk = (ROOT / "workflow" / "rules" / "warmstart.smk").read_text()
    onstart = smk[smk.index("onstart:"):smk.index("onsuccess:")]
    assert "workflow.local_exec" in onstart and "workflow.is_main_process" in onstart, onstart
    assert "_warm_start_wanted()" in onstart and 'TIMESTEP_LAB_WARM_START", "1") != "0"' in smk
    # a cluster group job's snakemake starts one while the Snakefile is read (no hooks run there)
    before = smk[:smk.index("onstart:")]
    assert "_warm_start_wanted() and group_job_size(_sys.argv, workflow.remote_exec) >= MIN_JOBS" in before


def test_only_a_cluster_group_jobs_snakemake_is_a_group_of_jobs():
    """What the SLURM executor gives the snakemake of a group job's batch script (recorded from a
    run through the test cluster), of the job step under it, and of a job of its own."""
    group = ["snakemake/__main__.py", "--snakefile", "/r/Snakefile", "--target-jobs", "floor:",
             "prepare_data:name=cifar10-32,split=test", "reference_stats:", "--allowed-rules", "prepare_data",
             "reference_stats", "floor", "--local-groupid", "c980e200", "--cores", "1", "--mode", "remote"]
    step = ["snakemake/__main__.py", "--snakefile", "/r/Snakefile", "--target-jobs",
            "prepare_data:name=cifar10-32,split=test", "--allowed-rules", "prepare_data", "--cores", "all",
            "--mode", "remote"]
    single = ["snakemake/__main__.py", "--target-jobs", "train:run=a", "--allowed-rules", "train", "--mode", "remote"]
    assert group_job_size(group, remote=True) == 3
    assert group_job_size(group[:5] + group[7:], remote=True) == 1  # a group of one job
    assert group_job_size(group, remote=False) == 0  # only in remote mode
    assert group_job_size(step, remote=True) == 0 and group_job_size(single, remote=True) == 0
    assert group_job_size(["snakemake", "--configfile", "config/smoke.yaml"], remote=False) == 0


def test_the_workflow_server_listens_when_start_returns(tmp_path):
    """``start`` waits for the real server (full preload), so the run's first job is forked too;
    ``stop`` ends it and its usage line is logged."""
    on = WarmStart(tmp_path / "w.log")
    on.start()
    try:
        assert on.proc is not None and on.proc.poll() is None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(os.environ[SOCKET_ENV])  # no wait, no retry: listening already
        sock.close()
    finally:
        on.stop()
    assert SOCKET_ENV not in os.environ and on.proc is None
    log = (tmp_path / "w.log").read_text()
    assert "ready in" in log and "warm-start server usage" in log and "warm start:" not in log, log


def test_a_server_not_ready_in_time_is_logged_and_jobs_start_fresh(tmp_path):
    late = WarmStart(tmp_path / "w.log")
    late.start(ready_timeout_s=0.0)
    try:
        # jobs still get the variable: one started before the server listens falls back to a
        # fresh start (test_without_a_server_the_command_starts_itself), later ones are forked
        assert late.proc.poll() is None and not os.path.exists(os.environ[SOCKET_ENV])
    finally:
        late.stop()
    assert "warm start: the server is not listening after 0 s" in (tmp_path / "w.log").read_text()


def test_a_job_that_cannot_become_the_request_fails_with_its_reason(probe_server, tmp_path):
    """A request naming a working directory that does not exist (gone between the job's start and
    the fork): exit 1 with the reason on the job's stderr, and the server goes on serving. (The
    request carries this process's environment, as a client's does: the server forks only jobs
    whose environment pins the code paths its own does, OPENBLAS_CORETYPE a machine sets included.)"""
    code = ("import socket, sys; from timestep_lab.warmstart.protocol import send_request; "
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "import os; send_request(s, ['x', 'exit', '0'], sys.argv[2], dict(os.environ)); "
            "print(b''.join(iter(lambda: s.recv(64), b'')).decode().strip().splitlines()[-1])")
    r = subprocess.run([sys.executable, "-c", code, probe_server.socket, str(tmp_path / "gone")], env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "exit 1" and "FileNotFoundError" in r.stderr, (r.stdout, r.stderr)
    assert _run(["timestep_lab", "exit", "0"], probe_server.socket).returncode == 0


def test_the_preload_holds_what_training_and_scoring_import_inside_functions(tmp_path):
    """A forked job should import nothing heavy itself: the event writers of every training and
    progress job (TensorBoard's, 0.1-0.2 CPU-s a job) come with the server's preload."""
    code = ("import sys; from timestep_lab.warmstart.server import preload; preload(); before = set(sys.modules)\n"
            "from timestep_lab.artifacts.events import RunEvents, fid_events\n"
            f"RunEvents({str(tmp_path / 'a')!r}, batch_size=4, num_timesteps=10, resume_nimg=None).close()\n"
            f"fid_events({str(tmp_path / 'b')!r}).close()\n"
            "print(' '.join(sorted(m for m in set(sys.modules) - before if not m.startswith('timestep_lab'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert not [m for m in r.stdout.split() if "tensorboard" in m], r.stdout
