"""No import cycles between the modules of ``sparkdl/``.

The graph has one node per module (a package is its ``__init__``) and an edge A -> B when A imports B anywhere:
at module level or inside a function (a function-level import only postpones a cycle, it does not remove one).

How imports become edges:

- ``import a.b.c`` is an edge to ``a.b.c`` (the packages ``a`` and ``a.b`` that Python initialises on the way are
  not edges: otherwise every package ``__init__`` that re-exports its submodules would form a false cycle with them).
- ``from p import name`` is an edge to the submodule ``p.name`` when there is one; otherwise, when ``p`` is a package
  whose ``__init__`` re-exports ``name`` (``from p.sub import name``), an edge to the module that defines it
  (followed through further re-exports); otherwise an edge to ``p``.
- Relative imports are resolved against the importing module's package.
"""
import ast
import os
from collections import deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules(root, package):
    """``{dotted name: (path, is_package)}`` of every module under ``root/package``."""
    out = {}
    for base, dirs, files in os.walk(os.path.join(root, package)):
        dirs[:] = [d for d in dirs if os.path.exists(os.path.join(base, d, "__init__.py"))]
        rel = os.path.relpath(base, root).replace(os.sep, ".")
        for f in files:
            if f.endswith(".py"):
                is_pkg = f == "__init__.py"
                out[rel if is_pkg else f"{rel}.{f[:-3]}"] = (os.path.join(base, f), is_pkg)
    return out


def _parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _from_base(node, name, is_pkg):
    """The absolute module named by an ``ImportFrom`` node inside module ``name``."""
    if not node.level:
        return node.module
    parts = name.split(".") if is_pkg else name.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


class ImportGraph:
    """The import graph of the package ``package`` found under ``root``."""

    def __init__(self, root, package):
        self.modules = _modules(root, package)
        self.trees = {m: _parse(p) for m, (p, _) in self.modules.items()}
        self.edges = {m: set() for m in self.modules}
        for m in self.modules:
            for target in self._imports(m):
                if target != m:
                    self.edges[m].add(target)

    def _reexport(self, package, name, seen=()):
        """The module that defines ``name`` re-exported by ``package``'s ``__init__`` (``package`` itself if
        it binds ``name`` some other way)."""
        if (package, name) in seen or not self.modules.get(package, (None, False))[1]:
            return package
        for node in self.trees[package].body:  # module level only: what the package namespace holds
            if isinstance(node, ast.ImportFrom):
                base = _from_base(node, package, True)
                for alias in node.names:
                    if (alias.asname or alias.name) == name and base in self.modules:
                        if f"{base}.{alias.name}" in self.modules:
                            return f"{base}.{alias.name}"
                        return self._reexport(base, alias.name, seen + ((package, name),))
        return package

    def _known(self, dotted):
        """The longest prefix of ``dotted`` that is a module of the graph, or None."""
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in self.modules:
                return ".".join(parts[:k])
        return None

    def _imports(self, name):
        is_pkg = self.modules[name][1]
        for node in ast.walk(self.trees[name]):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self._known(alias.name)
                    if target:
                        yield target
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, name, is_pkg)
                if base not in self.modules:
                    target = self._known(base) if base else None
                    if target:
                        yield target
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    yield sub if sub in self.modules else self._reexport(base, alias.name)

    def cycles(self):
        """The shortest cycle through each module that is on one (lists of modules, first == last), each cycle
        once, starting at its alphabetically first module."""
        out = []
        for component in _components(self.edges):
            for start in sorted(component) if len(component) > 1 else ():
                cycle = _shortest_cycle(self.edges, component, start)[:-1]
                first = cycle.index(min(cycle))
                cycle = cycle[first:] + cycle[:first]
                if cycle + cycle[:1] not in out:
                    out.append(cycle + cycle[:1])
        return sorted(out)


def _components(edges):
    """Strongly connected components (Tarjan, iterative)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.add(top)
                    if top == node:
                        break
                result.append(component)
    return result


def _shortest_cycle(edges, component, start):
    """The shortest path ``start -> ... -> start`` inside ``component`` (breadth first)."""
    parent, queue = {}, deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & component):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle of {sorted(component)}")


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def test_sparkdl_has_no_import_cycles():
    graph = ImportGraph(ROOT, "sparkdl")
    assert len(graph.modules) > 100 and "sparkdl.ml.arrow" in graph.modules
    cycles = graph.cycles()
    assert not cycles, "import cycles in sparkdl/:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_function_level_imports_and_resolves_reexports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\nfrom pkg.sub import C as D\n",
        "pkg/a.py": "import numpy\n\nclass A:\n    pass\n\ndef f():\n    from pkg.b import B\n",
        "pkg/b.py": "from .c import helper\n\nclass B:\n    pass\n",
        "pkg/c.py": "from pkg import A\n\ndef helper():\n    pass\n",
        "pkg/sub/__init__.py": "from .d import C\n",
        "pkg/sub/d.py": "import pkg.a\n\nclass C:\n    pass\n",
        "pkg/e.py": "from pkg import D, sub\nfrom . import a\n",
    })
    graph = ImportGraph(str(tmp_path), "pkg")
    assert graph.edges == {
        "pkg": {"pkg.a", "pkg.sub.d"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"},
        "pkg.sub": {"pkg.sub.d"}, "pkg.sub.d": {"pkg.a"}, "pkg.e": {"pkg.sub.d", "pkg.sub", "pkg.a"}}
    assert graph.cycles() == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_a_cycle_through_a_package_init_is_reported(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\nX = 1\n",
        "pkg/a.py": "class A:\n    def f(self):\n        from pkg import X\n",
    })
    assert ImportGraph(str(tmp_path), "pkg").cycles() == [["pkg", "pkg.a", "pkg"]]


def test_every_cycle_of_a_tangle_is_named(tmp_path):
    _write(tmp_path, {  # today's ml/ circle before issue 27: arrow -> tokens -> validation -> arrow and back
        "pkg/__init__.py": "",
        "pkg/arrow.py": "def f():\n    from pkg.tokens import decode\n",
        "pkg/tokens.py": "def g():\n    from pkg.validation import Check\n",
        "pkg/validation.py": "from pkg.arrow import MODES\n\ndef h():\n    from pkg.tokens import checks\n",
    })
    assert ImportGraph(str(tmp_path), "pkg").cycles() == [["pkg.arrow", "pkg.tokens", "pkg.validation", "pkg.arrow"],
                                                          ["pkg.tokens", "pkg.validation", "pkg.tokens"]]
