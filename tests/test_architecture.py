"""The shape of the three distributions, held in CI: no import circles (imports placed inside
functions count: a circle hidden that way is still a circle), one direction of dependency between
the packages, the lab outside the product, and a size budget per module.

The graph is built with `ast` from every import statement of every module (top level, inside
functions, under `TYPE_CHECKING`), not from what a run happens to import.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "paroctl": REPO / "paroctl",
    "paro_vllm": REPO / "plugin" / "paro_vllm",
    "paro_kernels": REPO / "kernels" / "paro_kernels",
}
# What each package must never import (DESIGN.md: one direction of dependency; paroctl talks to
# the plugin only through files and HTTP; the kernels stay importable without vLLM).
FORBIDDEN = {
    "paroctl": ("torch", "triton", "vllm", "paro_vllm", "paro_kernels", "benchmarks"),
    "paro_vllm": ("benchmarks", "paroctl"),
    "paro_kernels": ("vllm", "paro_vllm", "benchmarks", "paroctl"),
}
MAX_LINES = 600
# Modules allowed over MAX_LINES, each with its reason. Keep it empty unless a reason holds.
OVER_BUDGET: dict[str, str] = {}


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of one package."""
    root = PACKAGES[package]
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module `name` (at `path`) imports, as dotted names; relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                yield child if child in known else base


def graph(package: str) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports."""
    mods = modules(package)
    known = set(mods)
    return {
        name: {dep for dep in imported(name, path, known) if dep in known and dep != name}
        for name, path in mods.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(edges[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circles(package: str) -> None:
    assert circles(graph(package)) == []


def test_the_circle_finder_finds_a_circle_closed_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg import high\n")
    (pkg / "high.py").write_text("from . import low\n")
    mods = {"pkg": pkg / "__init__.py", "pkg.low": pkg / "low.py", "pkg.high": pkg / "high.py"}
    edges = {n: set(imported(n, p, set(mods))) & set(mods) - {n} for n, p in mods.items()}
    assert circles(edges) == [["pkg.high", "pkg.low"]]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_forbidden_imports(package: str) -> None:
    mods = modules(package)
    bad = [
        f"{name} imports {dep}"
        for name, path in mods.items()
        for dep in imported(name, path, set(mods))
        if dep.split(".")[0] in FORBIDDEN[package]
    ]
    assert bad == []


def test_the_product_never_imports_the_demo_or_the_test_box_helper() -> None:
    mods = modules("paroctl")
    allowed = {"paroctl.demo", "paroctl.cli.demo"}
    bad = [
        f"{name} imports {dep}"
        for name, path in mods.items()
        if name not in allowed
        for dep in imported(name, path, set(mods))
        if dep in ("paroctl.demo", "paroctl.dockerhost")
    ]
    assert bad == []


def test_kernels_folder_holds_only_the_distribution() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "kernels"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked, "git ls-files found nothing under kernels/"
    stray = [
        f
        for f in tracked
        if f not in ("kernels/README.md", "kernels/pyproject.toml")
        and not f.startswith("kernels/paro_kernels/")
    ]
    assert stray == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_modules_stay_within_the_size_budget(package: str) -> None:
    over = {
        str(path.relative_to(REPO)): lines
        for path in modules(package).values()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
        and str(path.relative_to(REPO)) not in OVER_BUDGET
    }
    assert over == {}
