"""Imports run one way: a module imports its own layer and the layers below it, never one above, and no
modules import each other round in a circle.  Function-local (lazy) and ``TYPE_CHECKING`` imports count:
each is still a dependency, and a circle hidden in a function is still a circle.

Layers, lowest first (README, "What is in the box"): utils < mocked_model < workload_generator < topo <
simulator, log_analyzer < replay < profiling < aicb, workload_applyer, visualize.  Two packages of one layer may import each
other one way only.  tests/, bench/, examples/ and scripts/ use the layers and are not part of them.

On any checkout, ``python tests/test_imports.py [ROOT]`` lists what breaks the rules (exit status 1).
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = (("utils",), ("mocked_model",), ("workload_generator",), ("topo",), ("simulator", "log_analyzer"),
          ("replay",), ("profiling",), ("aicb", "workload_applyer", "visualize"))
LAYER = {name: rank for rank, names in enumerate(LAYERS) for name in names}
NOT_LAYERED = frozenset({"tests", "bench", "examples", "scripts", "make"})
"""Top-level folders and modules that use the layers (tests, benchmarks, examples, make.py)."""
ORDER = " < ".join(", ".join(names) for names in LAYERS)

Graph = dict[str, set[str]]


def modules(root: Path) -> dict[str, Path]:
    """Every module of the layered packages and entry modules under ``root``: dotted name -> file."""
    found: dict[str, Path] = {}
    for name in LAYER:
        if (root / f"{name}.py").is_file():
            found[name] = root / f"{name}.py"
        for path in sorted((root / name).rglob("*.py")) if (root / name).is_dir() else ():
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its file (its own packages excluded)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                out.add(name)
    return out


def module_graph(root: Path) -> Graph:
    known = modules(root)
    return {name: imported(name, path, known) for name, path in known.items()}


def package_graph(graph: Graph) -> Graph:
    """Top-level package (or entry module) -> the others it imports."""
    out: Graph = {}
    for module, targets in graph.items():
        top = module.split(".")[0]
        out.setdefault(top, set()).update(t.split(".")[0] for t in targets if t.split(".")[0] != top)
    return out


def upward(graph: Graph) -> list[str]:
    """Every import of a module in a higher layer, as ``importer -> imported``."""
    return sorted(f"{m} -> {n}" for m, targets in graph.items() for n in targets
                  if LAYER[n.split(".")[0]] > LAYER[m.split(".")[0]])


def circles(graph: Graph) -> list[str]:
    """Each strongly connected set of two or more nodes (Tarjan's algorithm), as its shortest cycle through
    its first member, ``a -> b -> a``, and the whole set when it holds more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: set[str] = set()
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for component in components:
        cycle = _cycle(graph, component)
        rest = f" (all of: {', '.join(sorted(component))})" if len(component) > len(cycle) - 1 else ""
        out.append(" -> ".join(cycle) + rest)
    return sorted(out)


def _cycle(graph: Graph, component: set[str]) -> list[str]:
    """The shortest cycle from the component's first member back to itself (breadth first, inside it)."""
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle in {component}")


def unlayered(root: Path) -> list[str]:
    """Top-level packages and modules with Python code that no layer names."""
    names = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir()
                                                  if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.py"))}
    return sorted(names - set(LAYER) - NOT_LAYERED)


def problems(root: Path) -> list[str]:
    """Everything that breaks the layering under ``root``, one line each (empty when it holds)."""
    graph = module_graph(root)
    return ([f"not in a layer: {name}" for name in unlayered(root)]
            + [f"upward import: {edge}" for edge in upward(graph)]
            + [f"package circle: {cycle}" for cycle in circles(package_graph(graph))]
            + [f"import circle: {cycle}" for cycle in circles(graph)])


# ---- the tests -------------------------------------------------------------------------------------

def test_every_package_and_entry_module_has_a_layer():
    assert not unlayered(ROOT), f"give these a layer in LAYERS (and the README's table): {unlayered(ROOT)}"


def test_no_module_imports_a_higher_layer():
    found = upward(module_graph(ROOT))
    assert not found, f"imports of a higher layer (layers: {ORDER}):\n  " + "\n  ".join(found)


def test_packages_import_each_other_one_way():
    found = circles(package_graph(module_graph(ROOT)))
    assert not found, "packages importing each other:\n  " + "\n  ".join(found)


def test_no_import_circles():
    found = circles(module_graph(ROOT))
    assert not found, ("import circles (move the piece both sides need down to a module both can import):\n  "
                       + "\n  ".join(found))


SIMULATOR_LAYERS = (
    ("cfloat", "repeat", "result", "options", "inputs", "inference_header", "report"),  # shared types and writers
    ("simai",), ("topo",), ("profiles",), ("api", "plot", "cli"), ("search", "serve"),
    ("validation", "__main__", "__init__"),
)
"""simulator/'s folders and root modules, lowest first (issue 27: the CLI at the top, the shared result types at the
bottom, each model's folder importing only below it; search and serve share a layer and import one way)."""
SIMULATOR_LAYER = {name: rank for rank, names in enumerate(SIMULATOR_LAYERS) for name in names}
DEPRECATION_FORWARDS = {("simulator.result", "simulator.topo.result"), ("simulator.result", "simulator.topo")}
"""Old import paths kept for one release: ``simulator.result`` still hands out the topo model's types (lazily, with a
warning).  The aliases at the moved modules' old paths (``simulator/engine.py`` ...) sit in the top layer."""


def simulator_part(module: str) -> str | None:
    """The folder or root module of ``simulator`` that ``module`` belongs to; old-path aliases count as the top."""
    parts = module.split(".")
    if parts[0] != "simulator":
        return None
    if len(parts) == 1:
        return "__init__"
    name = parts[1]
    if name in SIMULATOR_LAYER:
        return name
    return "__main__"  # a deprecation alias at an old path: imported by nobody inside, the top layer


def test_simulator_folders_import_one_way():
    """simai/, topo/, profiles/, search/ and serve/ import only what is below them (issue 27, item 7)."""
    graph = module_graph(ROOT)
    bad = []
    for module, targets in graph.items():
        here = simulator_part(module)
        if here is None:
            continue
        for target in targets:
            there = simulator_part(target)
            if there is None or there == here or (module, target) in DEPRECATION_FORWARDS:
                continue
            if SIMULATOR_LAYER[there] > SIMULATOR_LAYER[here]:
                bad.append(f"{module} -> {target}")
    assert not bad, "simulator/ imports upward (layers: " + " < ".join(
        "/".join(names) for names in SIMULATOR_LAYERS) + "):\n  " + "\n  ".join(sorted(bad))
    parts: Graph = {}
    for module, targets in graph.items():
        here = simulator_part(module)
        if here in (None, "__main__", "__init__"):
            continue
        parts.setdefault(here, set()).update(simulator_part(t) for t in targets if simulator_part(t) not in (None, here)
                                             and (module, t) not in DEPRECATION_FORWARDS)
    assert not circles(parts), circles(parts)


def test_the_checker_sees_lazy_and_type_checking_imports_and_circles(tmp_path):
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "a.py").write_text("def f():\n    from utils.b import g\n")
    (tmp_path / "utils" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from utils import a\n    from topo.c import C\n")
    (tmp_path / "topo").mkdir()
    (tmp_path / "topo" / "c.py").write_text("from . import d\n")
    (tmp_path / "topo" / "d.py").write_text("import utils.a\n")
    assert problems(tmp_path) == ["upward import: utils.b -> topo.c", "package circle: topo -> utils -> topo",
                                  "import circle: topo.c -> topo.d -> utils.a -> utils.b -> topo.c"]


if __name__ == "__main__":
    found = problems(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("\n".join(found) or f"imports: layered ({ORDER}), no circles")
    sys.exit(1 if found else 0)
