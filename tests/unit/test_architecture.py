"""The import graph against docs/architecture.md's layers: a package imports only the packages
its paragraph says it may, all below it, at module level, inside a function or for annotations
alone. Read from the sources with ``ast``, nothing imported."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"nvfp4_lab": REPO / "src" / "nvfp4_lab",
         "nvfp4_kernels": REPO / "kernels" / "nvfp4_kernels"}
PACKAGE = re.compile(r"^### `([a-z_0-9]+)/?`\n(.*?)(?=^### |\Z)", re.M | re.S)


def layers() -> dict[str, set[str]]:
    """The packages of the Layers section, bottom first, each with those it may import."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Layers"):].split("\n## ", 1)[0]
    found = {}
    for name, text in PACKAGE.findall(section)[::-1]:
        may = " ".join(text.split("May import: ", 1)[1].split("\n\n", 1)[0].split())
        found[name] = set(re.findall(r"`([a-z_0-9]+)`", may))
    return found


def unit_of(module: list[str]) -> str | None:
    """The layer a dotted module name belongs to: ``nvfp4_kernels``, or the module or package
    right below ``nvfp4_lab`` (None: the package root itself, a name such as ``__version__``)."""
    if module[0] == "nvfp4_kernels":
        return "nvfp4_kernels"
    if module[0] != "nvfp4_lab" or len(module) < 2:
        return None
    top = ROOTS["nvfp4_lab"] / module[1]
    return module[1] if top.is_dir() or top.with_suffix(".py").exists() else None


def imported(source: str, module: list[str], is_package: bool) -> set[tuple[str, ...]]:
    """The dotted names a module's source imports (relative imports resolved; for ``from X
    import a`` both X and X.a, one of which is a module), at module level, inside a function
    or under ``if TYPE_CHECKING:``."""
    here = module if is_package else module[:-1]
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {tuple(a.name.split(".")) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = (*base, *(node.module.split(".") if node.module else []))
            found |= {target} | {(*target, a.name) for a in node.names}
    return found


def imports(source: str, module: list[str], is_package: bool) -> set[str]:
    """The layers that a module's source imports from."""
    units = {unit_of(list(t)) for t in imported(source, module, is_package) if t[0] in ROOTS}
    return {unit for unit in units if unit is not None}


def sources(root_name: str) -> Iterator[tuple[Path, list[str], bool]]:
    """(path, dotted module name as a list, whether it is a package) of each module."""
    root = ROOTS[root_name]
    for path in sorted(root.rglob("*.py")):
        parts = [root_name, *path.relative_to(root).with_suffix("").parts]
        package = parts[-1] == "__init__"
        yield path, parts[:-1] if package else parts, package


def test_the_import_finder_resolves_relative_and_nested_imports() -> None:
    src = ("from ..train import task\nfrom . import rundir\nimport nvfp4_kernels\n"
           "def f():\n    from ...nvfp4_lab.formats import spec\n")
    got = imports(src, ["nvfp4_lab", "analysis", "collect"], is_package=False)
    assert got == {"train", "analysis", "nvfp4_kernels", "formats"}
    assert imports("from . import rundir, __version__\n", ["nvfp4_lab"], is_package=True) == \
        {"rundir"}
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..train import job\n"
    assert imports(typed, ["nvfp4_lab", "analysis", "x"], is_package=False) == {"train"}


def test_every_package_imports_only_what_its_paragraph_allows_all_below_it() -> None:
    allowed = layers()
    order = list(allowed)
    assert order[0] == "lazy" and order[-1] == "cli" and len(order) >= 10
    above = [f"{unit} may import {other}, not below it" for unit, may in allowed.items()
             for other in may if other not in order or order.index(other) > order.index(unit)]
    assert not above, "\n".join(above)
    upward = []
    for root_name in ROOTS:
        for path, module, package in sources(root_name):
            unit = unit_of(module) if root_name == "nvfp4_lab" else "nvfp4_kernels"
            if unit is None:
                continue
            assert unit in order, f"{path}: package {unit} is not in docs/architecture.md"
            for other in imports(path.read_text(), module, package) - {unit}:
                if other not in allowed[unit]:
                    upward.append(f"{path.relative_to(REPO)} ({unit}) imports {other}, which "
                                  "its paragraph in docs/architecture.md does not allow")
    assert not upward, "\n".join(upward)


def test_no_module_imports_itself_through_others() -> None:
    """No circle among the modules: one module builds on another, never both ways (an import
    inside a function counts, and so does one for annotations alone)."""
    modules = {".".join(parts): (path, parts, package)
               for path, parts, package in sources("nvfp4_lab")}
    graph = {name: {m for m in map(".".join, imported(path.read_text(), parts, package))
                    if m in modules and m != name and not name.startswith(m + ".")}
             for name, (path, parts, package) in modules.items()}
    circles = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            circles.append(" -> ".join(trail[trail.index(name):] + [name]))
            return
        for other in graph[name]:
            visit(other, [*trail, name])

    for name in graph:
        visit(name, [])
    assert not circles, "\n".join(sorted(set(circles))[:20])


def test_train_and_analysis_import_neither_each_other() -> None:
    """The Lightning wiring and the reading of results are siblings: the sweep's report is a
    callback of analysis's that the config lists, the dry run's published claims are added by
    the command line; type-only imports count."""
    crossing = [f"{path.relative_to(REPO)} imports {other}"
                for path, module, package in sources("nvfp4_lab")
                if (unit := unit_of(module)) in ("train", "analysis")
                for other in imports(path.read_text(), module, package)
                if {unit, other} == {"train", "analysis"}]
    assert not crossing, "\n".join(crossing)


def test_analysis_sub_packages_import_only_those_listed_before_them() -> None:
    """The order is the one ``analysis/__init__.py`` lists them in; type-only imports count."""
    doc = (ROOTS["nvfp4_lab"] / "analysis" / "__init__.py").read_text()
    order = re.findall(r"^    ([a-z]+) ", doc.split("listed before it:", 1)[1], re.M)
    assert order == sorted(order, key=order.index) and len(order) >= 5
    later = []
    for path, module, package in sources("nvfp4_lab"):
        if module[:2] != ["nvfp4_lab", "analysis"] or len(module) < 3 or module[2] not in order:
            continue
        for target in imported(path.read_text(), module, package):
            if target[:2] == ("nvfp4_lab", "analysis") and len(target) > 2 and \
                    target[2] in order and order.index(target[2]) > order.index(module[2]):
                later.append(f"{path.relative_to(REPO)} imports {'.'.join(target)}")
    assert not later, "\n".join(later)
