"""The house rules, checked on the tree: small modules and functions, no import circles, every cited document
and section exists (docs/design.md §2)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "timestep_lab"
CITING = [p for pattern in ("src/**/*.py", "workflow/**/*.smk", "workflow/**/*.yaml", "config/*.yaml",
                            "reports/*.py", "reports/*.j2", "benchmarks/*.py", "README.md", "Snakefile",
                            "dvc.yaml", "tests/*.py") for p in ROOT.glob(pattern)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Package modules imported at module level (function-local imports are lazy by intent)."""
    tree = ast.parse(path.read_text())
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in tree.body:  # top level only; `if TYPE_CHECKING:` blocks are not imports at run time
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name in MODULES and name != me:
                out.add(name)
    return out


def test_no_source_file_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_function_over_60_lines():
    long = {f"{p.relative_to(ROOT)}:{n.lineno} {n.name}": n.end_lineno - n.lineno + 1
            for p in PKG.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60}
    assert not long, long


def test_no_import_circle_in_the_package():
    graph = {m: _imports(p) for m, p in MODULES.items()}
    # a package's __init__ importing its own submodules is how re-exports work, not a circle
    def deps(m):
        return {d for d in graph[m] if not (m and d.startswith(m + ".") and MODULES[m].name == "__init__.py")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in deps(m):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_every_cited_document_and_section_exists():
    headings = {}
    for doc in (ROOT / "docs").glob("*.md"):
        nums = re.findall(r"^#{2,4} (\d+(?:\.\d+)*)\b", doc.read_text(), flags=re.M)
        anchors = re.findall(r'<a id="([^"]+)"', doc.read_text())
        headings[f"docs/{doc.name}"] = (set(nums), set(anchors))
    missing = []
    for path in CITING:
        text = path.read_text(errors="replace")
        where = path.relative_to(ROOT)
        for old in re.findall(r"\b(?:METHODS|DESIGN)\.md\b", text):
            if not (ROOT / old).exists():
                missing.append(f"{where}: cites {old}, which is not in the repo")
        for doc, sep, ref in re.findall(r"(docs/[a-z_]+\.md)(?:(\s*§\s*|#)([0-9][0-9.]*[0-9]|[0-9]|[a-z0-9-]+))?", text):
            if doc not in headings:
                missing.append(f"{where}: cites {doc}, which does not exist")
            elif ref and "§" in sep and ref not in headings[doc][0]:
                missing.append(f"{where}: cites {doc} §{ref}, no such section")
            elif ref and sep == "#" and ref not in headings[doc][1]:
                missing.append(f"{where}: cites {doc}#{ref}, no such anchor")
    assert not missing, "\n".join(missing)


def test_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert "docs/methods.md" in readme and "docs/design.md" in readme


def test_the_package_root_holds_at_most_ten_modules():
    """The root shows the design (docs/design.md §2.1): the rest lives in packages named by concern."""
    root = sorted(p.name for p in PKG.glob("*.py"))
    assert len(root) <= 10, root
