"""Executing a report notebook in this process: IPython's shell runs the cells, no kernel.

A Jupyter kernel is a second Python process that imports pandas, matplotlib and this package
again before the first cell runs: ~2.8 CPU-s of a report job's ~4 s on a 2-core machine, paid by
every report of every study. Here the cells run in the calling process through IPython's
``InteractiveShell`` (the shell a kernel wraps), with what a kernel's client would have recorded
collected as nbformat outputs, in order:

- ``stream``: what a cell printed (stdout, stderr; warnings included);
- ``display_data``: every ``display(...)``, and each open matplotlib figure at the cell's end
  (matplotlib-inline's PNG, as in a kernel);
- ``execute_result``: the cell's last expression, when it has a value;
- ``error``: the exception that stopped a cell (:class:`CellError` is then raised, and the
  notebook keeps the outputs up to it).

Parameters are injected as papermill does: a code cell tagged ``injected-parameters`` right after
the cell tagged ``parameters`` (at the top when there is none), one ``name = repr(value)`` each.

Each notebook starts from an empty namespace, in ``cwd`` when given, and leaves the process as it
found it: working folder, matplotlib backend and rcParams, stdout/stderr, the shell's display
hooks. Must not know what a notebook computes or how it is rendered to HTML.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["CellError", "inject_parameters", "execute_notebook"]


class CellError(Exception):
    """A cell raised: ``count`` is its execution count (1-based, code cells only)."""

    def __init__(self, count: int, ename: str, evalue: str):
        super().__init__(f"cell {count} failed with {ename}: {evalue}")
        self.count, self.ename, self.evalue = count, ename, evalue


def inject_parameters(nb: Any, parameters: dict[str, Any]) -> None:
    """Insert the ``injected-parameters`` cell (``name = repr(value)`` per parameter) after the
    cell tagged ``parameters``, or first when no cell is; nothing when ``parameters`` is empty."""
    import nbformat

    if not parameters:
        return
    source = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in parameters.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    nb.cells.insert(tagged[0] + 1 if tagged else 0, cell)


class _Outputs:
    """The current cell's output list, fed by the stream writers and the display hooks."""

    def __init__(self) -> None:
        self.cell: list = []

    def stream(self, name: str, text: str) -> None:
        import nbformat

        if not text:
            return
        last = self.cell[-1] if self.cell else None
        if last is not None and last.output_type == "stream" and last.name == name:
            last.text += text  # one stream output per run of writes, as a kernel's client merges them
        else:
            self.cell.append(nbformat.v4.new_output("stream", name=name, text=text))

    def rich(self, kind: str, data: dict, metadata: dict | None, count: int | None = None) -> None:
        import nbformat

        extra = {"execution_count": count} if kind == "execute_result" else {}
        self.cell.append(nbformat.v4.new_output(kind, data=dict(data), metadata=dict(metadata or {}), **extra))


class _Stream:
    """A text file object whose writes become the current cell's stream output ``name``."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, outputs: _Outputs, name: str) -> None:
        self.outputs, self.name = outputs, name

    def write(self, text: str) -> int:
        self.outputs.stream(self.name, text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _hooks(shell: Any, outputs: _Outputs) -> tuple[Any, Any]:
    """A display publisher and a display hook that append to ``outputs`` (classes built here:
    IPython is imported only when a notebook runs)."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            outputs.rich("display_data", data, metadata)

        def clear_output(self, wait=False):
            outputs.cell.clear()

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass  # a notebook has no "Out[n]:" text

        def write_format_data(self, format_dict, md_dict=None):
            outputs.rich("execute_result", format_dict, md_dict, self.shell.execution_count)

        def finish_displayhook(self):
            self._is_active = False

    return Publisher(shell=shell), Hook(shell=shell, cache_size=0)


def _shell() -> Any:
    """IPython's process-wide shell (``display()`` finds it as the singleton), history in memory."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    if InteractiveShell.initialized():
        return InteractiveShell.instance()
    return InteractiveShell.instance(config=Config({"HistoryManager": {"enabled": False}}))


#: matplotlib-inline's backend, a kernel's default: each figure open at a cell's end is displayed
INLINE = "module://matplotlib_inline.backend_inline"


@contextlib.contextmanager
def _process_state(shell: Any, cwd: str | Path | None):
    """Inside: ``cwd``, the inline backend. After: the working folder, matplotlib's backend,
    interactive mode and rcParams, and stdout/stderr as they were."""
    import matplotlib
    import matplotlib.pyplot as plt
    from IPython.core import pylabtools
    from matplotlib_inline.backend_inline import configure_inline_support

    here, backend, interactive = os.getcwd(), matplotlib.get_backend(), matplotlib.is_interactive()
    stdout, stderr = sys.stdout, sys.stderr
    try:
        with matplotlib.rc_context():
            pylabtools.activate_matplotlib(INLINE)
            configure_inline_support(shell, INLINE)
            if cwd is not None:
                os.chdir(cwd)
            yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        os.chdir(here)
        plt.close("all")
        configure_inline_support(shell, backend)  # its post-execute hook off
        plt.switch_backend(backend)
        matplotlib.interactive(interactive)


def _fresh_namespace(shell: Any) -> None:
    """An empty user namespace (what ``shell.reset`` leaves, without its two full garbage
    collections: 0.27 s each in a process that has imported torch)."""
    shell.user_ns.clear()
    shell.user_ns_hidden.clear()
    shell.init_user_ns()


def _quiet(*args: Any, **kwargs: Any) -> None:
    pass


def execute_notebook(nb: Any, cwd: str | Path | None = None) -> Any:
    """Run ``nb``'s code cells in order in a fresh namespace; fill each cell's ``outputs`` and
    ``execution_count`` (1, 2, ... over code cells). Returns ``nb``; raises :class:`CellError` at
    the first cell that raises, its ``error`` output recorded."""
    import nbformat

    shell = _shell()
    outputs = _Outputs()
    publisher, hook = _hooks(shell, outputs)
    saved = shell.display_pub, shell.displayhook, shell.display_trap.hook
    _fresh_namespace(shell)
    try:
        with _process_state(shell, cwd):
            shell.display_pub, shell.displayhook, shell.display_trap.hook = publisher, hook, hook
            shell.showtraceback = _quiet  # a kernel sends the traceback as the error output, not as text
            sys.stdout, sys.stderr = _Stream(outputs, "stdout"), _Stream(outputs, "stderr")
            count = 0
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                count += 1
                outputs.cell = cell.outputs = []
                shell.execution_count = cell.execution_count = count  # what the display hook numbers
                result = shell.run_cell(cell.source, store_history=False, silent=False)
                exc = result.error_before_exec or result.error_in_exec
                if exc is not None:
                    cell.outputs.append(nbformat.v4.new_output(
                        "error", ename=type(exc).__name__, evalue=str(exc),
                        traceback=traceback.format_exception(type(exc), exc, exc.__traceback__)))
                    raise CellError(count, type(exc).__name__, str(exc))
    finally:
        shell.display_pub, shell.displayhook, shell.display_trap.hook = saved
        vars(shell).pop("showtraceback", None)
        _fresh_namespace(shell)  # the notebook's objects are not kept alive by the singleton
    return nb
