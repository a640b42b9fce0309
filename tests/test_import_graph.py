"""The import graph of the installed packages (backbones, classification, detection), read from their source: no
cycle between modules (imports inside functions and under TYPE_CHECKING count: a cycle is a design smell wherever
it is spelled), and the layers import one way only -- backbones <- classification <- detection."""

import ast
from pathlib import Path

from conftest import REPO

PACKAGES = ("backbones", "classification", "detection")  # in layer order: each may import only those before it


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (REPO / pkg).rglob("*.py"):
            parts = list(f.relative_to(REPO).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (a `from pkg import name` of a submodule counts as that submodule)."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            found.update(f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names)
    edges = set()
    for m in found:
        while m and m not in known:
            m = m.rpartition(".")[0]
        if m and m != name:
            edges.add(m)
    return edges


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_of_the_project_takes_part_in_an_import_cycle():
    graph = _graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 150  # the graph was read, not empty
    assert _cycles(graph) == []


def test_a_cycle_is_found_when_there_is_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_layers_import_one_way():
    bad = [f"{m} imports {t}" for m, targets in _graph().items() for t in targets
           if PACKAGES.index(t.split(".")[0]) > PACKAGES.index(m.split(".")[0])]
    assert bad == []
