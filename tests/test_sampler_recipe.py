"""The README's recipe for a new timestep sampler is complete: a dummy sampler added to a copy of
the repo by steps 1-4 of the recipe alone (its module, the import and table row in
``timesteps/__init__.py``, its ``docs/methods.md`` entry, its ``IID_CASES`` case) is found by every
sampler test and passes them, the docs checks included. Step 5 (a study config's catalogue) runs
nothing of its own.

One subprocess: pytest on the copy's ``tests/test_samplers.py``, restricted to the dummy (its
short training run included) and the docs-table check."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from worktree import ROOT, copy_worktree

NAME = "recipe_dummy"

# step 1: the module (a frozen params dataclass checked in __post_init__, registered by name)
MODULE = '''"""``recipe_dummy``: p(t) proportional to (t + 1)^power, weight 1 (a test's sampler)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TabulatedSampler
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class RecipeDummyParams:
    power: float = 1.0

    def __post_init__(self) -> None:
        check_range("power", self.power, 0.0, None)


@SAMPLERS.register("recipe_dummy", RecipeDummyParams)
class RecipeDummySampler(TabulatedSampler):
    def __init__(self, params: RecipeDummyParams, *, num_timesteps: int, device="cpu", **_):
        p = (torch.arange(num_timesteps, dtype=torch.float64) + 1) ** params.power
        super().__init__(p / p.sum(), num_timesteps, device)
'''


def _recipe_steps() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("### Adding a timestep sampler"):text.index("### Adding a data set")]


def _follow_the_recipe(repo) -> None:
    """Steps 1-4 of the README's recipe, on the copy at ``repo``."""
    pkg = repo / "src" / "timestep_lab" / "timesteps"
    (pkg / f"{NAME}.py").write_text(MODULE)
    init = pkg / "__init__.py"  # step 2: the import and the table row
    text = init.read_text()
    text, n = re.subn(r"(from timestep_lab\.timesteps import \(  # noqa: F401\n)", rf"\1    {NAME},\n", text)
    assert n == 1
    rule = next(line for line in text.splitlines() if line.startswith("===="))
    text, n = re.subn(r"(\ncurriculum .*\n)", rf"\1{NAME:<{len(rule.split()[0])}}  (t + 1)^power / Z    1\n", text)
    assert n == 1
    init.write_text(text)
    methods = repo / "docs" / "methods.md"  # step 3: a section of §1
    text = methods.read_text()
    section = f"### 1.8 `{NAME}` <a id=\"sampler-recipe-dummy\"></a>\n\n`p(t) = (t + 1)^power / Z`, weight 1; " \
              "`timesteps.params.power` (1). A test's sampler.\n\n"
    methods.write_text(text.replace("## 2 Loss weightings", section + "## 2 Loss weightings", 1))
    tests = repo / "tests" / "test_samplers.py"  # step 4: a case in IID_CASES
    text = tests.read_text()
    text, n = re.subn(r"(IID_CASES = \{  # case: \(sampler, params, T\)\n)", rf'\1    "{NAME}": ("{NAME}", {{"power": 2.0}}, T),\n',
                      text)
    assert n == 1
    tests.write_text(text)


def test_the_readme_recipe_names_every_place_a_sampler_is_added():
    steps = _recipe_steps()
    for place in ("src/timestep_lab/timesteps/my_sampler.py", "src/timestep_lab/timesteps/__init__.py",
                  "table in the module docstring", "docs/methods.md", "tests/test_samplers.py", "IID_CASES",
                  "`samplers:` catalogue"):
        assert place in steps, place


def test_a_sampler_added_by_the_recipe_alone_is_in_every_sampler_test_and_the_docs(tmp_path):
    repo = copy_worktree(tmp_path / "repo")
    _follow_the_recipe(repo)
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    # the dummy's tests, and the check that the docs table names only registered samplers
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-v",
                           "tests/test_samplers.py", "-k", f"{NAME} or test_the_docs_table_names_only_registered_samplers"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = set(re.findall(rf"::(test_\w+)\[{NAME}\] PASSED", done.stdout))
    every = {"test_probs_is_a_distribution_and_sample_has_the_interface_shape", "test_sample_uses_only_the_given_generator",
             "test_histogram_matches_probs", "test_every_sampler_is_in_the_docs_table_methods_and_a_histogram_test",
             "test_short_digits_run_with_every_sampler_learns_and_logs_p"}
    assert every <= passed, (every - passed, done.stdout[-3000:])
    assert "test_the_docs_table_names_only_registered_samplers PASSED" in done.stdout
