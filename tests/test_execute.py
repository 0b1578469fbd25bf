"""Report notebooks executed in-process (reporting/execute.py): what a kernel's client would have
recorded, in order; the parameters injected where papermill puts them; a failing cell named with
its outputs kept; nothing left behind in the process (namespace, folder, matplotlib, streams)."""

from __future__ import annotations

import base64
import os
import sys

import jupytext
import matplotlib
import pytest

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.reporting.execute import CellError, execute_notebook, inject_parameters
from timestep_lab.reporting.render import render_notebook

NOTEBOOK = '''# %% [markdown]
# # A title

# %% tags=["parameters"]
n = "1"

# %%
import matplotlib.pyplot as plt
from IPython.display import HTML, Markdown, display

print("first", n)
print("second")
display(HTML("<b>bold</b>"))
display(Markdown("*md*"))
int(n) * 7

# %%
plt.plot([0, 1], [1, 0])
None

# %%
import os
import sys

print("to stderr", file=sys.stderr)
os.getcwd()
'''


def _nb(text: str = NOTEBOOK):
    return jupytext.reads(text, fmt="py:percent")


def test_outputs_in_order_with_parameters_injected_after_the_tagged_cell(tmp_path):
    nb = _nb()
    inject_parameters(nb, {"n": "3"})
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert tags[1] == ["parameters"] and tags[2] == ["injected-parameters"] and nb.cells[2].source.endswith("n = '3'\n")
    execute_notebook(nb, cwd=tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3, 4, 5]
    out = code[2].outputs
    assert [o.output_type for o in out] == ["stream", "display_data", "display_data", "execute_result"]
    assert out[0].name == "stdout" and out[0].text == "first 3\nsecond\n"  # one stream output per run of prints
    assert out[1].data["text/html"] == "<b>bold</b>" and out[2].data["text/markdown"] == "*md*"
    assert out[3].data["text/plain"] == "21" and out[3].execution_count == 3
    fig = code[3].outputs  # the open figure, displayed at the cell's end as a kernel's inline backend does
    assert [o.output_type for o in fig] == ["display_data"]
    assert base64.b64decode(fig[0].data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    last = code[4].outputs
    assert (last[0].name, last[0].text) == ("stderr", "to stderr\n")
    assert last[1].data["text/plain"] == repr(str(tmp_path))  # ran in cwd


def test_no_parameters_inject_nothing_and_no_tagged_cell_puts_them_first():
    nb = _nb()
    inject_parameters(nb, {})
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    nb = _nb("# %%\nx = 1\n")
    inject_parameters(nb, {"x": "2", "y": "a'b"})
    assert nb.cells[0].metadata["tags"] == ["injected-parameters"]
    execute_notebook(nb)
    assert nb.cells[0].source == "# Parameters\nx = '2'\ny = \"a'b\"\n"


def test_the_process_is_left_as_it_was(tmp_path):
    import matplotlib.pyplot as plt

    here, backend, rc = os.getcwd(), matplotlib.get_backend(), matplotlib.rcParams["axes.grid"]
    stdout, stderr = sys.stdout, sys.stderr
    execute_notebook(_nb("# %%\nimport matplotlib.pyplot as plt\nplt.rcParams['axes.grid'] = "
                         f"{not rc}\nleft_behind = 1\nplt.figure()\n"), cwd=tmp_path)
    assert (os.getcwd(), matplotlib.get_backend(), matplotlib.rcParams["axes.grid"]) == (here, backend, rc)
    assert (sys.stdout, sys.stderr) == (stdout, stderr) and plt.get_fignums() == []
    nb = _nb("# %%\nleft_behind\n")  # each notebook starts from an empty namespace
    with pytest.raises(CellError, match="cell 1 failed with NameError"):
        execute_notebook(nb)


def test_a_failing_cell_keeps_its_outputs_and_the_page_is_not_written(tmp_path):
    src = tmp_path / "fails.py"
    src.write_text('# %% tags=["parameters"]\nn = "2"\n\n# %%\nprint("before")\nassert int(n) == 2, f"shape {n}"\n')
    out = tmp_path / "out" / "fails.html"
    with pytest.raises(ArtifactError) as err:
        render_notebook(src, out, {"n": "3"})
    assert str(err.value) == (f"{src}: cell 3 failed with AssertionError: shape 3 (executed notebook: "
                              f"{out.with_suffix('.ipynb')})")
    assert not out.exists()
    kept = jupytext.read(out.with_suffix(".ipynb"))
    failed = kept.cells[-1].outputs
    assert failed[0].text == "before\n" and failed[-1].output_type == "error" and failed[-1].evalue == "shape 3"


def test_the_page_is_the_same_bytes_twice(tmp_path):
    src = tmp_path / "nb.py"
    src.write_text(NOTEBOOK.replace("os.getcwd()", "None"))
    a = render_notebook(src, tmp_path / "a" / "nb.html", {"n": "2"}).read_bytes()
    b = render_notebook(src, tmp_path / "b" / "nb.html", {"n": "2"}).read_bytes()
    assert a == b and b"<title>A title</title>" in a and b"data:image/png;base64," in a
