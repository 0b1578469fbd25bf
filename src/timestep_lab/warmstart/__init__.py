"""Warm start: a local study's jobs fork from one process that has imported torch already.

Every job of a study is a fresh ``python -m timestep_lab COMMAND``. On the CPU, before any work,
such a process pays 2.0 CPU-s to import python, torch (the CUDA build PyPI's torchvision needs)
and the CLI, and up to 3.5 with torchvision, torch-fidelity and clean-fid: a quarter to a third
of a digits study's CPU (``benchmarks/RESULTS.md``, "Study cost"). On a local run (not on a
cluster, where each job lands on some node, except inside a group job's allocation) the workflow
starts one server instead
(:mod:`.server`): it imports all of that once, listens on a Unix socket, and the workflow puts
the socket's path in the jobs' environment (:data:`SOCKET_ENV`). ``python -m timestep_lab``
then hands its command line, working directory, environment and standard streams to the
server (:mod:`.client`) before it imports anything heavy; the server forks a worker that
becomes the job (:mod:`.worker`: the job's streams, cwd, environment, thread count) and runs
the command exactly as a fresh process would; the client exits with the worker's status and
forwards the signals it gets (Snakemake cancelling a job) to it.

The worker's numbers are a fresh process's numbers: it starts from a process that imported
modules and nothing else (no tensor op, no CUDA, no thread pool, no random draw), and
``tests/test_warmstart.py`` checks outputs byte for byte against fresh processes. The libraries'
CPU code paths are chosen when they load, so the server forks only jobs that ask for the ones it
loaded with (the reproducibility level, :mod:`timestep_lab.arithmetic`); another job starts fresh. Where no
server answers, ``python -m timestep_lab`` starts normally; nothing but speed depends on it.

============  =================================================================  =============
module        holds                                                              imports
============  =================================================================  =============
``protocol``  the request (argv, cwd, env, three file descriptors) and replies   stdlib
``client``    ``forward``: send a command, relay signals, return its status      stdlib
``worker``    what the forked child does to become the job                       threadpoolctl
``server``    the accept/fork/wait loop and ``python -m ...server``              ``worker``
``launch``    the workflow's side: start, wait for and stop one local run's server stdlib
============  =================================================================  =============

Outside this package only the entry (``__main__``: :func:`forward_if_asked`, one call) and the
workflow's rule file ``workflow/rules/warmstart.smk`` know it. A worker's usage line says
``start=warm`` and the server's last line is a named usage line (``timestep_lab warm-start server
usage: ...``): the cost accounting reads both as generic lines (:mod:`timestep_lab.cost.usage`).
"""

import os

#: the environment variable that gives jobs the server's socket (set by the workflow only)
SOCKET_ENV = "TIMESTEP_LAB_WARM_SOCKET"

__all__ = ["SOCKET_ENV", "forward_if_asked"]


def forward_if_asked() -> int | None:
    """What ``python -m timestep_lab`` calls first: when the workflow named a server
    (:data:`SOCKET_ENV`) and this is not a torchrun rank (``LOCAL_RANK``: every rank starts itself,
    as torchrun expects), the command runs in a worker forked from that server, and this returns
    its exit status; None when none is named or none takes the job: the caller runs it itself."""
    path = os.environ.get(SOCKET_ENV)
    if not path or "LOCAL_RANK" in os.environ:
        return None
    from timestep_lab.warmstart.client import forward  # only in a job the workflow started

    return forward(path)
