"""What a job sees of its process, for tests/test_warmstart.py: run fresh (``python
tests/warm_probe.py MODE ...``) or as the warm-start server's entry (``--entry warm_probe:main``).

Modes: ``report`` prints one JSON object (argv, cwd, environment, temp dir, torch's thread count,
the default generator's next draws, stdin, signal dispositions); ``exit N`` returns N; ``raise``
raises; ``sleep PIDFILE [ignore-term]`` writes its pid and sleeps until a signal ends it (SIGTERM
ignored with ``ignore-term``); ``tick PIDFILE FILE`` writes its pid, then appends a byte to FILE
every 10 ms until a signal ends it (a job that keeps writing).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time


def _dispositions() -> dict[str, str]:
    """Every signal's disposition by name: ignore, default, interrupt (KeyboardInterrupt) or other."""
    names = {signal.SIG_IGN: "ignore", signal.SIG_DFL: "default", signal.default_int_handler: "interrupt"}
    out = {}
    for sig in sorted(signal.valid_signals()):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler = signal.getsignal(sig)
        out[signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(int(sig))] = \
            names.get(handler, "other")
    return out


def main(argv: list[str], start: str | None = None) -> int:
    mode = argv[0]
    if mode == "report":
        import numpy  # noqa: F401 - loads its OpenBLAS, whose pool the job must size
        import scipy.linalg  # noqa: F401
        import torch
        from threadpoolctl import threadpool_info

        print(json.dumps({
            "argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
            "socket_env": "TIMESTEP_LAB_WARM_SOCKET" in os.environ, "tmp": tempfile.gettempdir(),
            "threads": torch.get_num_threads(),
            # each loaded pool's size (the server may have loaded more copies: sklearn's own libgomp)
            "pools": sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()}),
            "draws": torch.rand(4).tolist(), "stdin": sys.stdin.read(),
            "signals": _dispositions(),
            "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ())),
            "path0": sys.path[0] == os.getcwd(),
        }, sort_keys=True))
        print("to stderr", file=sys.stderr)
        return 0
    if mode == "exit":
        return int(argv[1])
    if mode == "raise":
        raise RuntimeError("probe failure")
    if mode in ("sleep", "tick"):
        if argv[2:] == ["ignore-term"]:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(argv[1] + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(argv[1] + ".tmp", argv[1])
        if mode == "sleep":
            time.sleep(600)
        deadline = time.monotonic() + 600
        while mode == "tick" and time.monotonic() < deadline:
            with open(argv[2], "ab") as fh:
                fh.write(b"x")
            time.sleep(0.01)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
