"""The package's layers only point down: no import loop in `vlajax/`, and the layer rules below.

The graph is read from the source with `ast` (nothing is imported): every `import vlajax...` and
`from vlajax... import ...` anywhere in a module, also inside functions (a lazy import still ties
two modules together), except under `if TYPE_CHECKING:`. `from pkg import name` is an edge to
`pkg.name` when that is a module, else to `pkg`. `docs/architecture.md` draws the layers.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (importer prefix, imported prefixes it must not reach): lower layers never import upper ones
RULES = (
    ("vlajax.shared", ("vlajax.config", "vlajax.training", "vlajax.models", "vlajax.data", "vlajax.envs",
                       "vlajax.policies", "vlajax.pipeline", "vlajax.sft", "vlajax.rl", "vlajax.evaluation",
                       "vlajax.serve", "vlajax.libero", "vlajax.bench", "vlajax.quickstart", "vlajax.train")),
    ("vlajax.envs", ("vlajax.config", "vlajax.training", "vlajax.models", "vlajax.data", "vlajax.policies",
                     "vlajax.pipeline", "vlajax.sft", "vlajax.rl", "vlajax.evaluation", "vlajax.serve",
                     "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.config", ("vlajax.training", "vlajax.models", "vlajax.data", "vlajax.policies", "vlajax.pipeline",
                       "vlajax.sft", "vlajax.rl", "vlajax.evaluation", "vlajax.serve", "vlajax.libero",
                       "vlajax.bench", "vlajax.train")),
    ("vlajax.training", ("vlajax.models", "vlajax.data", "vlajax.policies", "vlajax.pipeline", "vlajax.sft",
                         "vlajax.rl", "vlajax.evaluation", "vlajax.serve", "vlajax.libero", "vlajax.bench",
                         "vlajax.train")),
    ("vlajax.models", ("vlajax.data", "vlajax.policies", "vlajax.pipeline", "vlajax.sft", "vlajax.rl",
                       "vlajax.evaluation", "vlajax.serve", "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.data", ("vlajax.policies", "vlajax.pipeline", "vlajax.sft", "vlajax.rl", "vlajax.evaluation",
                     "vlajax.serve", "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.pipeline", ("vlajax.policies", "vlajax.sft", "vlajax.rl", "vlajax.evaluation", "vlajax.serve",
                         "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.policies", ("vlajax.sft", "vlajax.rl", "vlajax.evaluation", "vlajax.serve", "vlajax.libero",
                         "vlajax.bench", "vlajax.train")),
    ("vlajax.serve", ("vlajax.sft", "vlajax.rl", "vlajax.evaluation", "vlajax.libero", "vlajax.bench",
                      "vlajax.train")),
    ("vlajax.evaluation", ("vlajax.sft", "vlajax.rl", "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.sft", ("vlajax.rl", "vlajax.libero", "vlajax.bench", "vlajax.train")),
    ("vlajax.rl.setup", ("vlajax.rl.loop", "vlajax.rl.async_loop", "vlajax.rl.async_workload", "vlajax.rl.command")),
    ("vlajax.rl.loop", ("vlajax.rl.async_loop", "vlajax.rl.async_workload", "vlajax.rl.command")),
    ("vlajax.rl.async_loop", ("vlajax.rl.loop", "vlajax.rl.command")),
)


def package_modules(root: str) -> dict[str, str]:
    """Dotted module name -> file, for every `.py` under `root/vlajax` (packages by their `__init__`)."""
    out = {}
    for d, _, files in os.walk(os.path.join(root, "vlajax")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def module_imports(name: str, source: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The modules of `modules` that module `name` (source text `source`) imports."""
    tree = ast.parse(source)
    skip = _type_checking_nodes(tree)
    pkg = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph(root: str = ROOT) -> dict[str, set[str]]:
    mods = package_modules(root)
    names = set(mods)
    graph = {}
    for name, path in mods.items():
        with open(path) as f:
            graph[name] = module_imports(name, f.read(), names, path.endswith("__init__.py"))
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (each is at least one import loop)."""
    index, low, stack, on_stack, loops = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm (recursive; the package graph is shallow)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return loops


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_breaks(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for importer, banned in RULES:
        for m, deps in sorted(graph.items()):
            if _under(m, importer):
                out += [f"{m} imports {d}" for d in sorted(deps) if any(_under(d, b) for b in banned)]
    return out


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_no_import_loop_in_the_package(graph):
    assert len(graph) > 50 and "vlajax.rl.setup" in graph["vlajax.rl.loop"]
    assert import_loops(graph) == []


def test_pipeline_imports_nothing_from_rl(graph):
    pipeline = {m: deps for m, deps in graph.items() if _under(m, "vlajax.pipeline")}
    assert len(pipeline) >= 10
    assert {m: sorted(d for d in deps if _under(d, "vlajax.rl")) for m, deps in pipeline.items()} == {
        m: [] for m in pipeline}


def test_layer_rules(graph):
    assert rule_breaks(graph) == []


def test_the_checks_catch_a_loop_and_a_rule_break():
    """The detector on small graphs: the two loops this package used to have, and a clean one."""
    mods = {"vlajax.sft.loop", "vlajax.evaluation.closed_loop", "vlajax.policies.run_files", "vlajax",
            "vlajax.pipeline.w", "vlajax.rl.loop",
            "vlajax.rl"}
    sft = module_imports("vlajax.sft.loop", "def f():\n    from vlajax.evaluation.closed_loop import evaluate\n", mods)
    ev = module_imports("vlajax.evaluation.closed_loop", "from vlajax.sft import loop\nfrom vlajax.policies.run_files "
                                                         "import x\n", mods)
    assert sft == {"vlajax.evaluation.closed_loop"} and ev == {"vlajax.sft.loop", "vlajax.policies.run_files"}
    assert import_loops({"vlajax.sft.loop": sft, "vlajax.evaluation.closed_loop": ev,
                         "vlajax.policies.run_files": set()}) == [
        ["vlajax.evaluation.closed_loop", "vlajax.sft.loop"]]
    three = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_loops(three) == [["a", "b", "c"]]
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    w = module_imports("vlajax.pipeline.w", "from ..rl.loop import Setup\n", mods)
    assert w == {"vlajax.rl.loop"}
    assert rule_breaks({"vlajax.pipeline.w": w}) == ["vlajax.pipeline.w imports vlajax.rl.loop"]
    typed = module_imports("vlajax",
                           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import vlajax.sft.loop\n",
                           mods, is_package=True)
    assert typed == set()


def test_public_names_survive_importing_the_modules():
    """Importing a module binds its name on the package: no public function (e.g. `vlajax.evaluate`, the
    function of the module `vlajax.evaluation.closed_loop`) may share its name with a module, or it would stop working
    once that module is imported."""
    import subprocess
    import sys

    modules = ("vlajax.sft.loop", "vlajax.policies.run_files", "vlajax.rl.command", "vlajax.rl.async_loop",
               "vlajax.train",
               "vlajax.evaluation.closed_loop", "vlajax.evaluation.robustness", "vlajax.evaluation.remote")
    code = ("import importlib, types, vlajax\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = [n for n in vlajax.__all__ if isinstance(getattr(vlajax, n), types.ModuleType)]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_library_imports_no_research():
    """`pip install .` ships `vlajax/` only: no module of it may import `research` (the planner, research
    benchmarks), not even lazily."""
    bad = []
    for name, path in sorted(package_modules(ROOT).items()):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{name} imports {m}" for m in mods if m == "research" or m.startswith("research.")]
    assert bad == []
