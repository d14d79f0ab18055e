"""The package's import graph (issue 31, part 4): the torch engine and the compiled kernels stand
on their own, and :mod:`skfilter.stepping`, above both, decides which one runs a step.

The graph is read from the source (every ``import``, also those inside functions, which run
later but still make one module need another), so a lazy import cannot hide a cycle.
"""

import ast
import functools
import pathlib

import pytest

import skfilter

ROOT = pathlib.Path(skfilter.__file__).parent

#: the torch engine: the filter step and what it is made of
ENGINE = ("skfilter.filtering", "skfilter.posteriors", "skfilter.likelihoods", "skfilter.dynamics",
          "skfilter.weighting", "skfilter.models")


def _modules():
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


@functools.lru_cache(maxsize=None)
def _graph():
    """``{module: {modules it imports}}`` over skfilter's modules (a ``from package import name``
    counts as an import of the submodule when ``name`` is one, else of the package)."""
    modules = _modules()
    graph = {}
    for name, (path, package) in modules.items():
        here = name if package else name.rsplit(".", 1)[0]
        needs = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                needs.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[:len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    needs.add(sub if sub in modules else target)
        graph[name] = frozenset(m for m in needs if m in modules and m != name)
    return graph


def import_graph():
    """A copy of the graph read once per session (:func:`_graph`)."""
    return dict(_graph())


def _reaches(graph, start):
    seen, stack = set(), [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _in(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read():
    graph = import_graph()
    assert "skfilter.filtering" in graph["skfilter.stepping"]
    assert "skfilter.kernels.lofi" in graph["skfilter.stepping"]
    assert "skfilter.stepping" in graph["skfilter._estimator"]


def test_no_import_cycle():
    """No module needs itself through others. The package root is left out: its ``__init__`` only
    re-exports the public names (``skfilter.show_versions`` reads the version from it)."""
    graph = {m: needs - {"skfilter"} for m, needs in import_graph().items() if m != "skfilter"}
    cycles = sorted(m for m in graph if m in _reaches(graph, m))
    assert cycles == []


@pytest.mark.parametrize("engine", ENGINE)
def test_the_engine_does_not_need_the_dispatch(engine):
    """The engine runs every filter on its own: nothing in it reaches :mod:`skfilter.stepping`, and
    the filter step reaches no kernel."""
    graph = import_graph()
    for module in (m for m in graph if _in(m, (engine,))):
        reached = _reaches(graph, module)
        assert "skfilter.stepping" not in reached, module
        if module == "skfilter.filtering":
            assert not any(_in(m, ("skfilter.kernels",)) for m in reached)


def test_the_kernels_do_not_need_the_engine():
    """The kernels work on arrays: no kernel module reaches the engine, the dispatch or an
    estimator (``python -m skfilter.kernels``, which compiles them by fitting estimators, aside)."""
    graph = import_graph()
    for module in (m for m in graph if _in(m, ("skfilter.kernels",)) and not m.endswith("__main__")):
        reached = _reaches(graph, module)
        bad = sorted(m for m in reached if _in(m, ENGINE + ("skfilter.stepping", "skfilter._estimator")))
        assert bad == [], module
