"""A throwaway single-node SLURM cluster on loopback, for tests (needs root).

    cluster = SlurmCluster.start(tmp_dir)     # munged + slurmctld + slurmd, node idle
    subprocess.run(["sinfo"], env={**os.environ, **cluster.env})
    cluster.stop()                            # only the daemons it started, by pid

Everything lives in ``tmp_dir``: slurm.conf, the munge key and socket, state, spool, logs, pid
files and client wrappers; nothing under /etc or /run is written (``ensure_installed`` may
apt-get the Debian packages). Clients find the cluster through ``cluster.env``: ``SLURM_CONF``,
and ``PATH`` with wrappers of the client commands that pin ``SLURM_CONF`` (needed inside jobs,
see ``SlurmCluster.env``). The munge socket is named in slurm.conf (``AuthInfo=socket=...``),
so neither the system's munged nor its key is used. Ports are picked free on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "squeue", "sbatch", "scancel", "srun", "scontrol")
BINARIES = DAEMONS + CLIENTS
APT_PACKAGES = ("slurm-wlm", "munge")
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def which(name: str) -> str | None:
    """The real binary: ``shutil.which`` on PATH without the wrapper folders of clusters
    started here (``<root>/bin``), then in the sbin folders (not on a non-root PATH)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p).parent / "slurm.conf").exists())
    return shutil.which(name, path=path) or shutil.which(name, path=os.pathsep.join(SBIN))


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if which(b) is None]


def ensure_installed(timeout: float = 900) -> str | None:
    """None when SLURM and munge can run here (installing them with apt-get when missing and
    root), else the reason they cannot."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a test SLURM cluster needs root (slurmd runs jobs as their users)"
    missing = missing_binaries()
    if not missing:
        return None
    if shutil.which("apt-get") is None:
        return f"SLURM binaries missing ({', '.join(missing)}) and no apt-get to install them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES]
    try:
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:  # stale package lists: update once and retry
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True, timeout=timeout)
            proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"SLURM binaries missing ({', '.join(missing)}); apt-get failed: {exc}"
    missing = missing_binaries()
    if missing:
        tail = (proc.stdout + proc.stderr)[-2000:]
        return f"SLURM binaries missing ({', '.join(missing)}) after apt-get install:\n{tail}"
    return None


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports free right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def node_hardware() -> dict[str, int]:
    """CPUs and RealMemory (MB) as ``slurmd -C`` reports them (os.cpu_count() as a fallback)."""
    hw = {"CPUs": os.cpu_count() or 1, "RealMemory": 1000}
    try:
        out = subprocess.run([which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for key in hw:
        m = re.search(rf"\b{key}=(\d+)", out)
        if m:
            hw[key] = int(m.group(1))
    return hw


class SlurmStartError(RuntimeError):
    pass


@dataclass
class SlurmCluster:
    root: Path
    node: str = "testnode"
    partition: str = "debug"
    cluster_name: str = "timesteplab"
    min_job_age: int = 3600
    cpus: int = 0
    memory_mb: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    # ---------------------------------------------------------------- paths and environment
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def bin_dir(self) -> Path:
        """Client wrappers (srun, sbatch, ...) that pin ``SLURM_CONF`` to this cluster."""
        return self.root / "bin"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sinfo, sbatch, snakemake's SLURM executor) needs on top of os.environ:
        ``SLURM_CONF``, and ``PATH`` with the client wrappers first. The wrappers matter inside
        jobs: snakemake's slurm-jobstep executor drops every ``SLURM_*`` variable except the
        job's identity (SLURM_CONF included) before its nested ``srun``, which then finds no
        configuration (a real node has /etc/slurm/slurm.conf; this cluster has none there)."""
        return {"SLURM_CONF": str(self.conf), "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def client_env(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        # a cluster inside a SLURM job (CI on SLURM) must not see the outer job's variables
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            if key not in self.env:
                del env[key]
        return env

    def log(self, name: str) -> Path:
        return self.root / "log" / f"{name}.log"

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for name in DAEMONS:
            path = self.log(name)
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            parts.append(f"--- {path} ---\n{text[-tail:]}")
        return "\n".join(parts)

    # ---------------------------------------------------------------- commands
    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A SLURM client command against this cluster."""
        proc = subprocess.run(list(args), env=self.client_env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return proc

    def squeue(self, *extra: str, states: str = "all") -> list[dict[str, str]]:
        """Jobs slurmctld knows (by default finished ones too, kept for MinJobAge): id, name
        (snakemake's run ID), state, comment (``rule_<rule>[_wildcards_<values>]``)."""
        out = self.run("squeue", f"--states={states}", "--noheader", "--format=%i|%j|%T|%k", *extra).stdout
        jobs = []
        for line in out.splitlines():
            if line.strip():
                jid, name, state, comment = (line.split("|", 3) + ["", "", ""])[:4]
                jobs.append({"id": jid.strip(), "name": name.strip(), "state": state.strip(), "comment": comment.strip()})
        return jobs

    def node_state(self) -> str:
        proc = self.run("sinfo", "--noheader", "--nodes", self.node, "--format=%T", check=False, timeout=10)
        return proc.stdout.strip() if proc.returncode == 0 else f"(sinfo failed: {proc.stderr.strip()})"

    # ---------------------------------------------------------------- lifecycle
    def write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o711)  # clients need search permission for the socket
        hw = node_hardware()
        self.cpus = self.cpus or hw["CPUs"]
        self.memory_mb = self.memory_mb or hw["RealMemory"]
        ctld_port, slurmd_port = free_ports(2)
        host = socket.gethostname()
        r = self.root
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={self.log('slurmd')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",  # no cgroups here
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",  # no slurmdbd: no sacct, no sacctmgr
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory",  # one-CPU jobs share the node
            f"MinJobAge={self.min_job_age}",  # finished jobs stay in squeue for status checks
            "ReturnToService=2",
            "SlurmctldTimeout=120",
            "SlurmdTimeout=300",  # a loaded CI box must not mark the node down
            "MessageTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            "MailProg=/bin/true",
            "Waittime=0",
            f"NodeName={self.node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={self.cpus}"
            f" RealMemory={self.memory_mb} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def write_wrappers(self) -> None:
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in CLIENTS + ("sacct", "sacctmgr", "sshare", "salloc", "sstat"):
            real = which(name)
            if real is None:
                continue
            wrapper = self.bin_dir / name
            wrapper.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec "{real}" "$@"\n')
            wrapper.chmod(0o755)

    def _key(self) -> Path:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            mungekey = which("mungekey")
            if mungekey:
                subprocess.run([mungekey, "--create", f"--keyfile={key}"], check=True, capture_output=True)
            else:
                key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o600)
        return key

    def _spawn(self, name: str, args: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "ab")
        self.procs[name] = subprocess.Popen(
            args, env=self.client_env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # the test's Ctrl-C reaches them only through stop()
        )
        out.close()

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise SlurmStartError(f"{name} exited with status {proc.returncode} while starting\n{self.describe()}")

    def describe(self) -> str:
        stdout = []
        for name in self.procs:
            path = self.root / "log" / f"{name}.stdout"
            if path.exists() and path.stat().st_size:
                stdout.append(f"--- {path} ---\n{path.read_text(errors='replace')[-2000:]}")
        return "\n".join([f"slurm.conf: {self.conf}", self.logs(), *stdout])

    def _wait(self, what: str, ok, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                if ok():
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise SlurmStartError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.describe()}")
            time.sleep(0.5)

    @classmethod
    def start(cls, root: Path | str, timeout: float = 180, **kwargs) -> "SlurmCluster":
        cluster = cls(Path(root), **kwargs)
        try:
            cluster._start(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, timeout: float) -> None:
        self.write_config()
        self.write_wrappers()
        key = self._key()
        self._spawn("munged", [
            which("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
            f"--pid-file={self.root / 'run' / 'munged.pid'}", f"--seed-file={self.root / 'munge' / 'munged.seed'}",
            f"--log-file={self.log('munged')}",
        ])
        self._wait("munged's socket", self.munge_socket.exists, timeout)
        self._spawn("slurmctld", [which("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self.run("scontrol", "ping", check=False, timeout=10).stdout.count("UP") > 0,
                   timeout)
        self._spawn("slurmd", [which("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait(f"node {self.node} idle in sinfo", lambda: self.node_state() == "idle", timeout)

    def stop(self, timeout: float = 20) -> None:
        """Cancel the jobs still queued or running, then stop slurmd, slurmctld and munged (the
        processes started here, by pid)."""
        active = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                ids = [j["id"] for j in self.squeue() if j["state"] in active]
                if ids:
                    self.run("scancel", "--full", *ids, check=False, timeout=10)
                deadline = time.monotonic() + timeout
                while ids and time.monotonic() < deadline and any(j["state"] in active for j in self.squeue()):
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._kill_strays()

    def _kill_strays(self) -> list[int]:
        """SIGKILL every process a job of this cluster started that outlived it (returns their pids).
        Without cgroups (``proctrack/linuxproc``) slurmd finds a job's processes by parentage, so a
        process reparented to init escapes a cancel: the scancel test's cancelled step left its
        ``snakemake`` job-step process running after the session (found idle an hour later)."""
        mine = {os.getpid(), os.getppid()}
        killed = []
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit() or int(proc_dir.name) in mine:
                continue
            try:
                env = dict(v.split("=", 1) for v in (proc_dir / "environ").read_bytes().decode(errors="replace")
                           .split("\0") if "=" in v)
            except OSError:  # gone, or not ours to read
                continue
            if env.get("SLURM_CONF") == str(self.conf) and "SLURM_JOB_ID" in env:
                try:
                    os.kill(int(proc_dir.name), signal.SIGKILL)
                    killed.append(int(proc_dir.name))
                except OSError:
                    pass
        return killed
