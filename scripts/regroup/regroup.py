#!/usr/bin/env python3
# ruff: noqa: E501
"""Regroup the vlajax package by role, and move research code out of it (a re-runnable codemod).

    python regroup.py ROOT [--no-verify] [--python PY]

1. `git mv` every entry of MOVES that is still at its old place (files or folders; a folder's
   untracked leftovers are moved too), and writes the new packages' `__init__.py` (NEW_FILES).
2. Rewrites every reference in every tracked text file (py, md, ipynb, toml, sh, Makefile, .ci/run,
   cfg/ini/yaml/txt outside the run-data trees): `from P import a, b as c` (module names among the
   imported names are split to their new packages), dotted names anywhere (`import vlajax.x`,
   `"vlajax.x:run"`, `mock.patch("vlajax.x.f")`, `python -m vlajax.x`), and paths (`vlajax/x.py`,
   `vlajax/plan/`, `tests/plan/`). Rewrites are by module-name patterns, so code written after this
   script was drafted is rewritten too.
3. Applies the few targeted edits (PATCHES) a move needs (pyproject extras, the layer rules, the
   benchmark registry); each is skipped when already applied and fails loudly when its anchor is gone.
4. Verifies: every module under vlajax/ and research/ imports, ruff is clean, a second rewrite pass
   changes nothing (no old module name or path is left), and vlajax imports nothing from research.

Idempotent: a second run moves nothing and rewrites nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# ---------------------------------------------------------------------------------------------------
# THE MAPPING: (old path, new path), relative to the repository root. Folders move whole.
# ---------------------------------------------------------------------------------------------------
MOVES: list[tuple[str, str]] = [
    # shared/: small utilities every layer uses (no vlajax imports)
    ("vlajax/atomic_files.py", "vlajax/shared/atomic_files.py"),
    ("vlajax/cli.py", "vlajax/shared/cli.py"),
    ("vlajax/compile_cache.py", "vlajax/shared/compile_cache.py"),
    ("vlajax/stats.py", "vlajax/shared/stats.py"),
    ("vlajax/resize_pad.py", "vlajax/shared/resize_pad.py"),
    # config/: the typed configuration, its sections, presets and reference
    ("vlajax/config.py", "vlajax/config/schema.py"),
    ("vlajax/model_config.py", "vlajax/config/model.py"),
    ("vlajax/run_config.py", "vlajax/config/run.py"),
    ("vlajax/mesh_config.py", "vlajax/config/mesh.py"),
    ("vlajax/config_errors.py", "vlajax/config/errors.py"),
    ("vlajax/config_reference.py", "vlajax/config/reference.py"),
    ("vlajax/policy_openpi.py", "vlajax/config/openpi.py"),
    ("vlajax/presets", "vlajax/config/presets"),
    # training/: the run plumbing (mesh, processes, state, checkpoints, stops, logs)
    ("vlajax/sharding.py", "vlajax/training/sharding.py"),
    ("vlajax/distributed.py", "vlajax/training/distributed.py"),
    ("vlajax/checkpoint.py", "vlajax/training/checkpoint.py"),
    ("vlajax/train_state.py", "vlajax/training/train_state.py"),
    ("vlajax/preemption.py", "vlajax/training/preemption.py"),
    ("vlajax/logging.py", "vlajax/training/logging.py"),
    ("vlajax/trainable.py", "vlajax/training/trainable.py"),
    # policies/: a trained model as a policy (bridge, pi inputs, run files, openpi import)
    ("vlajax/policy.py", "vlajax/policies/bridge.py"),
    ("vlajax/policy_pi.py", "vlajax/policies/pi.py"),
    ("vlajax/inference.py", "vlajax/policies/policy.py"),
    ("vlajax/run_files.py", "vlajax/policies/run_files.py"),
    ("vlajax/models/import_openpi.py", "vlajax/policies/import_openpi.py"),
    ("vlajax/models/memory.py", "vlajax/policies/memory.py"),
    # data/: scripted demonstrations join the datasets
    ("vlajax/demos.py", "vlajax/data/demos.py"),
    # evaluation/: closed loop, robustness, remote policies
    ("vlajax/evaluation.py", "vlajax/evaluation/closed_loop.py"),
    ("vlajax/robustness.py", "vlajax/evaluation/robustness.py"),
    ("vlajax/serve/remote.py", "vlajax/evaluation/remote.py"),
    # sft/: the supervised trainers
    ("vlajax/sft.py", "vlajax/sft/loop.py"),
    ("vlajax/init_from.py", "vlajax/sft/init_from.py"),
    ("vlajax/smoke.py", "vlajax/sft/smoke.py"),
    # quickstart/: `python -m vlajax.quickstart` (a package with __main__)
    ("vlajax/quickstart.py", "vlajax/quickstart/run.py"),
    ("vlajax/quickstart_report.py", "vlajax/quickstart/report.py"),
    # research/: outside the installed package
    ("vlajax/plan", "research/planner"),
    ("vlajax/bench/rl_peer.py", "research/bench/rl_peer.py"),
    ("vlajax/bench/rl_peer_profile.py", "research/bench/rl_peer_profile.py"),
    ("vlajax/bench/rollout_profile.py", "research/bench/rollout_profile.py"),
    ("vlajax/bench/soak.py", "research/bench/soak.py"),
    ("vlajax/bench/async_.py", "research/bench/async_.py"),
    ("vlajax/bench/async_libero.py", "research/bench/async_libero.py"),
    # their tests
    ("tests/plan", "tests/research/planner"),
    ("tests/rl/test_bench_rl_peer.py", "tests/research/test_bench_rl_peer.py"),
    ("tests/envs/test_bench_rollout_profile.py", "tests/research/test_bench_rollout_profile.py"),
    ("tests/pipeline/test_bench_async.py", "tests/research/test_bench_async.py"),
    ("tests/test_soak_train_async.py", "tests/research/test_soak_train_async.py"),
]

# `python -m OLD` keeps working for these (the new package has a __main__): left as written
KEEP_AS_COMMAND = {"vlajax.quickstart"}

# new files (written when absent; never overwritten)
NEW_FILES: dict[str, str] = {
    "vlajax/shared/__init__.py": '"""Small utilities every layer uses: whole-file writes, the tools\' command line, the compile\n'
                                 'cache, intervals, image resize-with-pad. Nothing here imports the rest of vlajax."""\n',
    "vlajax/config/__init__.py": '"""The typed, frozen configuration: `schema` (TrainConfig and its sections, the preset registry),\n'
                                 'the sections `model`, `run`, `mesh`, the error type `errors`, openpi\'s train configs\n'
                                 '`openpi`, the presets `presets/` and the generated reference `reference`."""\n',
    "vlajax/training/__init__.py": '"""The run plumbing shared by every trainer: the device mesh and sharding, multi-host start-up,\n'
                                   'the train state, Orbax checkpoints, stop requests, metrics and progress, trainable masks."""\n',
    "vlajax/policies/__init__.py": '"""A trained model as a policy: the simulator bridge (`bridge`), the pi0 inputs (`pi`),\n'
                                   '`Policy` (`policy`), a run\'s files (`run_files`), the openpi checkpoint import\n'
                                   '(`import_openpi`) and the SFT memory plan (`memory`)."""\n',
    "vlajax/evaluation/__init__.py": '"""Evaluation of a policy: closed loop in the simulator (`closed_loop`), per perturbation\n'
                                     'axis and level (`robustness`), and against a policy server (`remote`)."""\n',
    "vlajax/sft/__init__.py": '"""Supervised training: the SFT loop (`loop`), starting from another run\'s weights (`init_from`),\n'
                              'and the foundation end-to-end check on a teacher-student regression (`smoke`)."""\n',
    "vlajax/quickstart/__init__.py": '"""`make quickstart`: demos -> SFT -> RL -> eval on the CPU presets (`run`), then a report\n'
                                     'folder (`report`)."""\n',
    "vlajax/quickstart/__main__.py": '"""`python -m vlajax.quickstart`: runs `run` as the command (its own `__main__`)."""\n\n'
                                     'import runpy\n\n'
                                     'runpy.run_module("vlajax.quickstart.run", run_name="__main__", alter_sys=True)\n',
    "research/__init__.py": '"""Research code, outside the installed package: the discrete-event planner of the async\n'
                            'pipeline (`planner`, needs the `research` extra: simpy) and the research benchmarks\n'
                            '(`bench`). Run from a checkout: `python -m research.planner ...`,\n'
                            '`python -m research.bench NAME ...`."""\n',
    "research/bench/__init__.py": '"""Research benchmarks: `python -m research.bench NAME --json PATH` (from a checkout).\n\n'
                                  'A benchmark is a module `research.bench.<name>` with `main(argv: list[str]) -> int`; the user\n'
                                  'benchmarks are `python -m vlajax.bench`.\n"""\n\n'
                                  'BENCHMARKS: dict[str, str] = {\n'
                                  '    "rl_peer": "vlajax sync PPO vs brax PPO env steps/s on one state task",\n'
                                  '    "rl_peer_profile": "where the time of the rl_peer comparison goes",\n'
                                  '    "rollout_profile": "the pixel rollout\'s parts timed one by one",\n'
                                  '    "soak": "long async run: RSS and every pipeline structure sampled each minute",\n'
                                  '    "async_libero": "the async loops on real LIBERO workers beside the planner\'s prediction",\n'
                                  '}\n',
    "research/bench/__main__.py": '"""`python -m research.bench NAME [--json PATH] ...` runs `research.bench.<NAME>.main`."""\n\n'
                                  'import difflib\nimport importlib\nimport sys\n\n'
                                  'from research.bench import BENCHMARKS\n\n\n'
                                  'def main(argv: list[str]) -> int:\n'
                                  '    if not argv or argv[0] in ("-h", "--help"):\n'
                                  '        print("usage: python -m research.bench NAME [options]\\n\\nbenchmarks:")\n'
                                  '        print("\\n".join(f"  {n:16s} {d}" for n, d in BENCHMARKS.items()))\n'
                                  '        return 0 if argv else 2\n'
                                  '    name, rest = argv[0], argv[1:]\n'
                                  '    if name not in BENCHMARKS:\n'
                                  '        close = difflib.get_close_matches(name, BENCHMARKS, n=2)\n'
                                  '        hint = f" (did you mean {\', \'.join(close)}?)" if close else ""\n'
                                  '        print(f"error: unknown benchmark {name!r}{hint}; available: {\', \'.join(BENCHMARKS)}",\n'
                                  '              file=sys.stderr)\n'
                                  '        return 2\n'
                                  '    return int(importlib.import_module(f"research.bench.{name}").main(rest) or 0)\n\n\n'
                                  'if __name__ == "__main__":\n    sys.exit(main(sys.argv[1:]))\n',
}

# text files rewritten: by name ending (and a few exact names), outside the run-data trees
TEXT_ENDINGS = (".py", ".md", ".ipynb", ".toml", ".sh", ".cfg", ".ini", ".yaml", ".yml", ".txt", ".json")
TEXT_NAMES = {"Makefile", ".ci/run"}
# run data and recorded outputs: never rewritten (they record what ran then)
DATA_ENDINGS = (".jsonl", ".json", ".txt", ".csv", ".log", ".parquet")
DATA_TREES = ("results/", "docs/", "tests/fixtures/", "tests/models/golden/")

# ---------------------------------------------------------------------------------------------------
# Derived tables
# ---------------------------------------------------------------------------------------------------


def dotted(path: str) -> str:
    p = path[:-3] if path.endswith(".py") else path
    parts = p.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, str] = {dotted(o): dotted(n) for o, n in MOVES}  # old dotted -> new dotted (folders: prefixes)
PATHS: dict[str, str] = {o: n for o, n in MOVES}


def _children() -> dict[str, set[str]]:
    """For an old module that became a package of the same name (vlajax.config -> vlajax.config.schema):
    the names of that package's children after the move (so `vlajax.config.presets` is left alone)."""
    out: dict[str, set[str]] = {}
    for old in MODULES:
        kids = {new.split(".")[len(old.split("."))] for new in MODULES.values() if new.startswith(old + ".")}
        kids |= {dotted(p).split(".")[len(old.split("."))] for p in NEW_FILES if dotted(p).startswith(old + ".")}
        if kids:
            out[old] = kids
    return out


CHILDREN = _children()


def map_module(name: str) -> str:
    """The new dotted name of `name` (a module, a package, or `module.attribute`)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in MODULES:
            rest = parts[i:]
            if rest and head in CHILDREN and rest[0] in CHILDREN[head]:
                return name  # already the new package's child
            return ".".join([MODULES[head], *rest])
    return name


_OLD_ALT = "|".join(re.escape(m) for m in sorted(MODULES, key=len, reverse=True))
DOTTED_RE = re.compile(rf"(?<![\w.])({_OLD_ALT})((?:\.\w+)*)(?![\w])")
_OLD_PATH_ALT = "|".join(re.escape(p) for p in sorted(PATHS, key=len, reverse=True))
PATH_RE = re.compile(rf"(?<![\w.-])({_OLD_PATH_ALT})(?![\w-])")
# `from X import a, b as c` on one line or in parentheses over several; X absolute
FROM_RE = re.compile(r"^(?P<indent>[ \t]*)from[ \t]+(?P<mod>(?:vlajax|research|tests)(?:\.\w+)*)[ \t]+import[ \t]+"
                     r"(?:\((?P<paren>[^)]*)\)|(?P<plain>[^\n#()]*?))(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)


def rewrite_from(m: re.Match) -> str:
    """One `from MOD import names` statement, rewritten whole (the module and the moved names in it)."""
    indent, mod, tail = m["indent"], m["mod"], m["tail"] or ""
    body = m["paren"] if m["paren"] is not None else m["plain"]
    items = [" ".join(s.split()) for s in re.sub(r"#[^\n]*", "", body).split(",") if s.strip()]
    if not items or "*" in items:
        return m.group(0)
    groups: dict[str, list[str]] = {}
    for item in items:
        name, _, alias = (s.strip() for s in item.partition(" as "))
        old_full = f"{mod}.{name}"
        if name in CHILDREN.get(mod, set()):  # already the new package's child (`vlajax.config import schema`)
            target_mod, target_name = mod, name
        elif old_full in MODULES:  # a moved module among the imported names
            target_mod, _, target_name = MODULES[old_full].rpartition(".")
        else:
            target_mod, target_name = map_module(mod), name
        if target_name != name and not alias:
            alias = name
        groups.setdefault(target_mod, []).append(f"{target_name} as {alias}" if alias else target_name)
    if list(groups) == [mod] and groups[mod] == items:
        return m.group(0)  # nothing moved: the statement stays as written
    if m["paren"] is not None and "#" in body:
        raise SystemExit(f"error: cannot split an import with comments inside its parentheses: {m.group(0)!r}")
    lines = []
    for target_mod, names in groups.items():
        line = f"{indent}from {target_mod} import {', '.join(names)}"
        if len(line) + len(tail) > 120 and len(names) > 1:
            inner = "".join(f"{indent}    {n},\n" for n in names)
            line = f"{indent}from {target_mod} import (\n{inner}{indent})"
        lines.append(line + tail)
    return "\n".join(lines)


def rewrite_dotted(text: str) -> str:
    def sub(m: re.Match) -> str:
        old, rest = m.group(1), m.group(2) or ""
        start = m.start()
        if old in KEEP_AS_COMMAND and not rest and re.search(r"-m[ \t]+$", text[max(0, start - 8):start]):
            return m.group(0)
        after = re.match(r"[ \t]+import[ \t]+\(?[ \t]*(\w+)", text[m.end():])
        if not rest and after and after.group(1) in CHILDREN.get(old, ()):
            return m.group(0)  # `from vlajax.config import schema` inside a string or a sentence: the new package
        return map_module(old + rest)

    return DOTTED_RE.sub(sub, text)


RESEARCH_BENCHES = ("rl_peer_profile", "rl_peer", "soak", "rollout_profile", "async_libero")
BENCH_CMD_RE = re.compile(r"vlajax\.bench((?:\"[ \t]*,[ \t]*\"|[ \t]+))(" + "|".join(RESEARCH_BENCHES) + r")\b")
BENCH_LIBERO_RE = re.compile(r"vlajax\.bench([ \t]+)async([ \t]+--regimes[ \t]+libero\b)")


def rewrite_bench_commands(text: str) -> str:
    """`python -m vlajax.bench soak` (or `"-m", "vlajax.bench", "soak"`) -> research.bench: the research
    benchmarks left the user registry; the async bench's libero regime is `research.bench async_libero`."""
    text = BENCH_CMD_RE.sub(r"research.bench\1\2", text)
    return BENCH_LIBERO_RE.sub(r"research.bench\1async_libero\2", text)


def rewrite_paths(text: str) -> str:
    return PATH_RE.sub(lambda m: PATHS[m.group(1)], text)


def rewrite_text(text: str, is_python: bool = True) -> str:
    """`from` statements rewritten whole; everything between them by dotted names, then by paths."""
    out, pos = [], 0
    for m in FROM_RE.finditer(text):
        out.append(rewrite_paths(rewrite_bench_commands(rewrite_dotted(text[pos:m.start()]))))
        out.append(rewrite_from(m))
        pos = m.end()
    out.append(rewrite_paths(rewrite_bench_commands(rewrite_dotted(text[pos:]))))
    return "".join(out)


def rewrite_notebook(raw: str) -> str:
    nb = json.loads(raw)
    changed = False
    for cell in nb.get("cells", []):
        src = cell.get("source")
        joined = "".join(src) if isinstance(src, list) else (src or "")
        new = rewrite_text(joined, cell.get("cell_type") == "code")
        if new != joined:
            cell["source"] = new.splitlines(keepends=True) if isinstance(src, list) else new
            changed = True
    if not changed:
        return raw
    out = json.dumps(nb, indent=1, ensure_ascii=False)
    return out + ("\n" if raw.endswith("\n") else "")


# ---------------------------------------------------------------------------------------------------
# Targeted edits: (file, anchor regex, replacement, marker that says it is applied)
# ---------------------------------------------------------------------------------------------------
LAYER_RULES = '''RULES = (
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
    # models may reach policies (not data): `python -m vlajax.models.presets --preset` prints the SFT memory plan
    ("vlajax.models", ("vlajax.data", "vlajax.pipeline", "vlajax.sft", "vlajax.rl", "vlajax.evaluation",
                       "vlajax.serve", "vlajax.libero", "vlajax.bench", "vlajax.train")),
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
'''

NO_RESEARCH_TEST = '''

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
'''

PYPROJECT_RESEARCH_EXTRA = '''# The research code outside the package (research/: the planner, research benchmarks) and experiments/.
research = [
  "simpy==4.1.2",  # research.planner: the discrete-event model of the async pipeline
  "scipy>=1.13",  # Student t quantiles (research.bench.soak, experiments/async_stats)
]
'''


def patches() -> list[tuple[str, str, str, str]]:
    """(file, anchor regex (re.S|re.M), replacement, regex whose presence means applied)."""
    return [
        # the layer rules for the new rooms
        ("tests/test_layers.py", r"^RULES = \(\n.*?^\)\n", LAYER_RULES, r'^    \("vlajax\.shared", '),
        # the detector's own example: `from pkg import module` after the move
        ("tests/test_layers.py", r'"from vlajax import sft\\n', '"from vlajax.sft import loop\\\\n',
         r'"from vlajax\.sft import loop\\n'),
        ("tests/test_layers.py", r"\Z", NO_RESEARCH_TEST, r"def test_the_library_imports_no_research"),
        # simpy and scipy: the research extra (dev includes it)
        ("pyproject.toml", r'^  "simpy==[^\n]*\n', "", r"^research = \["),
        ("pyproject.toml", r'^  "scipy>=[^\n]*\n', "", r"^research = \["),
        ("pyproject.toml", r"^(# Tests, lint and notebooks[^\n]*\n)", PYPROJECT_RESEARCH_EXTRA + r"\1", r"^research = \["),
        ("pyproject.toml", r'^(dev = \[\n)', r'\1  "vlajax[research]",\n', r'"vlajax\[research\]"'),
        # research/ is imported from a checkout (pytest's rootdir on sys.path)
        ("pyproject.toml", r'^(testpaths = \["tests"\]\n)', r'\1pythonpath = ["."]\n', r'^pythonpath = '),
        # lint the research folder too
        ("Makefile", r"ruff check vlajax tests experiments scripts(?! research)", "ruff check vlajax tests experiments scripts research",
         r"\A(?!.*ruff check vlajax tests experiments scripts(?! research))"),
        # the user benchmarks registry: the research ones leave
        ("vlajax/bench/__init__.py", r'^    "rl_peer": [^\n]*\n', "", r"\A(?!.*\"rl_peer\": )"),
        ("vlajax/bench/__init__.py", r'^    "soak": [^\n]*\n', "", r"\A(?!.*\"soak\": )"),
        # the async bench's libero regime (the planner beside real LIBERO workers) is research
        ("vlajax/bench/async_loops.py",
         r'^(?P<i>[ \t]*)if "libero" in argv:[^\n]*\n(?:(?P=i)[ \t]+[^\n]*\n|[ \t]*\n)+',
         '\\g<i>if "libero" in argv:  # the planner beside real LIBERO workers: a research benchmark\n'
         '\\g<i>    cli.error("the libero regime is research: python -m research.bench async_libero --regimes libero ...")\n',
         r"the libero regime is research"),
        # the async loop's own `__main__` (a second spelling of `vlajax.train rl --pipeline.enabled` that
        # imported the CLI from below it); optional: skipped with a warning where the code has changed
        ("vlajax/rl/async_loop.py",
         r'\n\nif __name__ == "__main__":\n    from vlajax\.train import parse\n\n'
         r'    sys\.exit\(run_async\(parse\("rl", sys\.argv\[1:\]\)\)\)\n\Z',
         "\n", r'\A(?!.*from vlajax\.train import parse)', "optional"),
        ("vlajax/rl/async_loop.py",
         r'\A"""`python -m vlajax\.rl\.async_loop --preset NAME \[overrides\]`: the RL core through the async '
         r'pipeline\.\n\n`run_async\(cfg\) -> int` is the entry for `python -m vlajax\.train rl --pipeline\.enabled`\n'
         r"\(`vlajax\.rl\.command\.run` dispatches here when `cfg\.pipeline\.enabled`\); this module's `__main__`\n"
         r"parses the same flags \(`vlajax\.train\.parse`\)\.\n",
         '"""The RL core through the async pipeline: `python -m vlajax.train rl --pipeline.enabled --preset NAME`.\n\n'
         '`run_async(cfg) -> int` is that command\'s entry (`vlajax.rl.command.run` dispatches here when\n'
         '`cfg.pipeline.enabled`).\n',
         r"\A(?!.*python -m vlajax\.rl\.async_loop)", "optional"),
    ]


def apply_patches(root: str) -> list[str]:
    done = []
    for rel, anchor, repl, marker, *how in patches():
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            raise SystemExit(f"error: patch target {rel} is missing")
        with open(path) as f:
            text = f.read()
        if re.search(marker, text, re.S | re.M):
            continue
        new, n = re.subn(anchor, repl, text, count=0 if rel == "Makefile" else 1, flags=re.S | re.M)
        if n < 1 and how == ["optional"]:
            print(f"warning: optional patch of {rel} skipped: its anchor {anchor[:60]!r}... is not there",
                  file=sys.stderr)
            continue
        if n < 1:
            raise SystemExit(f"error: patch anchor {anchor!r} not found in {rel}")
        with open(path, "w") as f:
            f.write(new)
        done.append(rel)
    return done


# ---------------------------------------------------------------------------------------------------
# Moving, rewriting, checking
# ---------------------------------------------------------------------------------------------------


def git(root: str, *args: str, check: bool = True) -> str:
    r = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
    if check and r.returncode:
        raise SystemExit(f"error: git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def adjust_depth(text: str, delta: int) -> str:
    """A file moved `delta` folders deeper: paths it builds from `__file__` that climb out of its own folder
    (two levels or more: the repository root, docs/) climb `delta` more. Applied once, when the file moves."""
    if not delta:
        return text
    file_ = r"(?:(?:pathlib\.)?Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?)"

    def parents(m):
        n = int(m.group(2))
        return f"{m.group(1)}{n + delta}]" if n >= 1 else m.group(0)

    def parent_chain(m):
        k = m.group(2).count(".parent")
        return m.group(1) + ".parent" * (k + delta) if k >= 2 else m.group(0)

    text = re.sub(rf"({file_}\.parents\[)(\d+)\]", parents, text)
    text = re.sub(rf"({file_})((?:\.parent(?![\w\[]))+)", parent_chain, text)
    out, pos = [], 0
    for m in re.finditer(r"((?:os\.path\.dirname\()+)(os\.path\.(?:abspath|realpath)\(__file__\)|__file__)", text):
        k = m.group(1).count("os.path.dirname(")
        if k >= 2:
            out += [text[pos:m.start()], "os.path.dirname(" * (k + delta), m.group(2), ")" * delta]
            pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _depth(path: str) -> int:
    return path.count("/")


def adjust_moved(root: str, old: str, new: str) -> None:
    """The depth fix-up of every Python file under `new` (a file or a folder) that moved from `old`."""
    delta = _depth(new) - _depth(old)
    dst = os.path.join(root, new)
    files = [dst] if os.path.isfile(dst) else [os.path.join(d, f) for d, _, fs in os.walk(dst) for f in fs]
    for path in files:
        if path.endswith(".py"):
            with open(path) as f:
                text = f.read()
            fixed = adjust_depth(text, delta)
            if fixed != text:
                with open(path, "w") as f:
                    f.write(fixed)
                print(f"  {os.path.relpath(path, root)}: paths from __file__ climb {delta} more", file=sys.stderr)


def move(root: str) -> list[str]:
    moved = []
    for old, new in MOVES:
        src, dst = os.path.join(root, old), os.path.join(root, new)
        if not os.path.exists(src):
            if not os.path.exists(dst):
                print(f"warning: neither {old} nor {new} exists", file=sys.stderr)
            continue
        if os.path.isfile(src) and os.path.exists(dst):
            raise SystemExit(f"error: both {old} and {new} exist")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            tracked = git(root, "ls-files", "--", old).split()
            if tracked:
                if os.path.exists(dst):
                    for f in tracked:
                        t = os.path.join(new, os.path.relpath(f, old))
                        os.makedirs(os.path.join(root, os.path.dirname(t)), exist_ok=True)
                        git(root, "mv", f, t)
                else:
                    git(root, "mv", old, new)
            for d, _, files in os.walk(src, topdown=False):  # untracked leftovers (not caches)
                for f in files:
                    s = os.path.join(d, f)
                    if "__pycache__" in s or f.endswith(".pyc"):
                        continue
                    t = os.path.join(dst, os.path.relpath(s, src))
                    os.makedirs(os.path.dirname(t), exist_ok=True)
                    shutil.move(s, t)
                    print(f"moved untracked {os.path.relpath(s, root)}", file=sys.stderr)
            shutil.rmtree(src, ignore_errors=True)
        else:
            if git(root, "ls-files", "--", old).strip():
                git(root, "mv", old, new)
            else:
                shutil.move(src, dst)
        adjust_moved(root, old, new)
        moved.append(f"{old} -> {new}")
    for rel, text in NEW_FILES.items():
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            git(root, "add", "--", rel)
    return moved


def text_files(root: str) -> list[str]:
    files = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    out = []
    for rel in files:
        if not rel or not os.path.isfile(os.path.join(root, rel)) or rel in NEW_FILES:
            continue
        if rel.startswith("scripts/regroup/"):
            continue  # this script and its commit message: their tables name the old modules on purpose
        if rel.startswith(DATA_TREES) and rel.endswith(DATA_ENDINGS):
            continue  # recorded outputs: what ran then
        if rel.endswith(TEXT_ENDINGS) or rel in TEXT_NAMES or os.path.basename(rel) in TEXT_NAMES:
            out.append(rel)
    return out


# blocks written by PATCHES that name the new packages by their bare names (`vlajax.config`): once written,
# never rewritten again (file, block regex, marker that says the block is the new one)
PROTECTED = [("tests/test_layers.py", r"^RULES = \(\n.*?^\)\n", r'^    \("vlajax\.shared", ')]


def _rewrite_file(rel: str, text: str) -> str:
    for prel, block, marker in PROTECTED:
        m = re.search(block, text, re.S | re.M) if prel == rel else None
        if m and re.search(marker, m.group(0), re.M):
            head, tail = text[:m.start()], text[m.end():]
            return _rewrite_file("", head) + m.group(0) + _rewrite_file("", tail)
    return rewrite_notebook(text) if rel.endswith(".ipynb") else rewrite_text(text, rel.endswith(".py"))


def rewrite_all(root: str, write: bool = True) -> list[str]:
    changed = []
    for rel in text_files(root):
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            continue
        new = _rewrite_file(rel, text)
        if new != text:
            changed.append(rel)
            if write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    return changed


LIMIT = 120


def _split_at(text: str, lo: int, hi: int, f_string: bool = False) -> int | None:
    """The index of the last space in text[lo:hi] (outside `{...}` when `f_string`), or None."""
    depth, best = 0, None
    for i, ch in enumerate(text[:hi]):
        if f_string and ch in "{}":
            depth += 1 if ch == "{" else -1
        elif ch == " " and i >= lo and depth == 0:
            best = i
    return best


def _spans(toks):
    """(start, end, depth, is_string) for each string literal (f-strings whole) and each comma, with the bracket
    depth where it stands (tokens of Python 3.12: an f-string is FSTRING_START ... FSTRING_END)."""
    import tokenize

    out, depth, fstart, fdepth = [], 0, [], 0
    for t in toks:
        if t.type == tokenize.OP and t.string in "([{" and not fstart:
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}" and not fstart:
            depth -= 1
        elif t.type == tokenize.OP and t.string == "," and not fstart:
            out.append((t.start, t.end, depth, False))
        elif t.type == tokenize.STRING and not fstart:
            out.append((t.start, t.end, depth, True))
        elif t.type == getattr(tokenize, "FSTRING_START", -1):
            if not fstart:
                fdepth = depth
            fstart.append(t.start)
        elif t.type == getattr(tokenize, "FSTRING_END", -1):
            st = fstart.pop()
            if not fstart:
                out.append((st, t.end, fdepth, True))
    return out


TRIPLE_RE = re.compile(r"(?i)[rbuf]*('{3}|\"{3})")


def wrap_line(lines: list[str], row: int) -> bool:
    """Wrap line `row` (0-based) of a Python file under LIMIT columns: a comment line, a docstring line, a
    trailing comment (moved above), a string literal inside brackets (split in two), or after a comma inside
    brackets. False if none fits."""
    import io
    import tokenize

    body = lines[row].rstrip("\n")
    indent = body[: len(body) - len(body.lstrip())]
    if body.lstrip().startswith("#"):
        k = _split_at(body, len(indent) + 2, LIMIT)
        if k is None:
            return False
        lines[row:row + 1] = [body[:k] + "\n", f"{indent}# {body[k + 1:]}\n"]
        return True
    toks = list(tokenize.generate_tokens(io.StringIO("".join(lines)).readline))
    for t in toks:
        (sr, sc), (er, ec) = t.start, t.end
        if not (sr - 1 <= row <= er - 1):
            continue
        if t.type == tokenize.COMMENT and sr - 1 == row and len(body[:sc].rstrip()) <= LIMIT:
            lines[row:row + 1] = [f"{indent}{t.string}\n", body[:sc].rstrip() + "\n"]
            return True
        triple = t.type == tokenize.STRING and TRIPLE_RE.match(t.string)
        if triple and (sr != er or body[:sc].strip() == ""):  # a triple-quoted string: wrap its text
            k = _split_at(body, max(len(indent) + 4, sc + 4 if sr - 1 == row else 0), LIMIT)
            if k is None:
                return False
            lines[row:row + 1] = [body[:k] + "\n", indent + body[k + 1:] + "\n"]
            return True
    spans = _spans(toks)
    for (sr, sc), (er, ec), depth, is_str in spans:  # a string literal crossing the limit, inside brackets
        if not is_str or sr - 1 != row or er != sr or ec <= LIMIT or depth == 0:
            continue
        lit = body[sc:ec]
        m = re.match(r"(?i)([rbuf]*)('|\")", lit)
        if not m or lit.startswith(m.group(1) + m.group(2) * 3) or ("r" in m.group(1).lower() and "\\" in lit):
            continue
        prefix, q = m.group(1), m.group(2)
        k = _split_at(body, sc + len(prefix) + 2, LIMIT - 1, "f" in prefix.lower())
        if k is None:
            continue
        lines[row:row + 1] = [body[:k + 1] + q + "\n", " " * sc + prefix + q + body[k + 1:] + "\n"]
        return True
    commas = [(sc, ec, d) for (sr, sc), (er, ec), d, is_str in spans if not is_str and sr - 1 == row and d > 0
              and ec < LIMIT]
    if commas:  # after the last comma that fits, aligned under the first item of its bracket
        sc, ec, d = commas[-1]
        opens = [t for t in toks if t.type == tokenize.OP and t.string in "([{" and t.start[0] - 1 == row
                 and t.start[1] < sc]
        col = opens[-1].end[1] if opens else len(indent) + 4
        rest = body[ec:].lstrip()
        if rest:
            lines[row:row + 1] = [body[:ec] + "\n", " " * col + rest + "\n"]
            return True
    return False


def fix_lint(root: str, python: str, files: list[str]) -> None:
    """Sort the rewritten imports (ruff's isort rule, --fix) and wrap the lines the longer names pushed past
    the limit."""
    py = [f for f in files if f.endswith(".py") and os.path.exists(os.path.join(root, f))]
    if not py:
        return
    subprocess.run([python, "-m", "ruff", "check", "--no-cache", "--select", "I", "--fix", "--quiet", *py],
                   cwd=root, capture_output=True)
    for _ in range(5):
        r = subprocess.run([python, "-m", "ruff", "check", "--no-cache", "--select", "E501", "--output-format",
                            "json", *py], cwd=root, capture_output=True, text=True)
        found = json.loads(r.stdout or "[]")
        if not found:
            return
        by_file: dict[str, list[int]] = {}
        for e in found:
            by_file.setdefault(e["filename"], []).append(e["location"]["row"] - 1)
        progress = False
        for path, rows in by_file.items():
            with open(path) as f:
                lines = f.readlines()
            for row in sorted(set(rows), reverse=True):
                progress |= wrap_line(lines, row)
            with open(path, "w") as f:
                f.writelines(lines)
        if not progress:
            return


IMPORT_CHECK = r'''
import importlib, pkgutil, sys, traceback
bad, total = [], 0
for pkg in ("vlajax", "research"):
    p = importlib.import_module(pkg)
    names = [pkg] + [m.name for m in pkgutil.walk_packages(p.__path__, pkg + ".")]
    for name in names:
        if name.rsplit(".", 1)[-1] == "__main__":
            continue
        total += 1
        try:
            importlib.import_module(name)
        except Exception as e:
            bad.append(f"{name}: {type(e).__name__}: {e}")
print("imported", total, "modules;", len(bad), "failed")
print("\n".join(bad))
sys.exit(1 if bad else 0)
'''


def ruff_count(root: str, python: str) -> int:
    dirs = [d for d in ("vlajax", "tests", "experiments", "scripts", "research") if os.path.isdir(os.path.join(root, d))]
    r = subprocess.run([python, "-m", "ruff", "check", "--no-cache", "--output-format", "json", *dirs], cwd=root,
                       capture_output=True, text=True)
    return len(json.loads(r.stdout or "[]"))


def verify(root: str, python: str, ruff_before: int = 0) -> bool:
    ok = True
    env = {**os.environ, "PYTHONPATH": root, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    r = subprocess.run([python, "-c", "import vlajax, research; print(vlajax.__file__, research.__file__)"],
                       cwd=root, env=env, capture_output=True, text=True)
    print("imported from:", r.stdout.strip() or r.stderr.strip()[-500:])
    if not r.stdout.strip().startswith(os.path.join(os.path.realpath(root), "vlajax")):
        print("error: vlajax is not imported from", root)
        ok = False
    r = subprocess.run([python, "-c", IMPORT_CHECK], cwd=root, env=env, capture_output=True, text=True)
    print("import check:", r.stdout.strip()[-3000:], r.stderr.strip()[-2000:] if r.returncode else "")
    ok &= r.returncode == 0
    r = subprocess.run([python, "-m", "ruff", "check", "--no-cache", "vlajax", "tests", "experiments", "scripts",
                        "research"], cwd=root, capture_output=True, text=True)
    print("ruff:", (r.stdout + r.stderr).strip()[-3000:])
    after = ruff_count(root, python)
    print(f"ruff errors before the move: {ruff_before}, after: {after}")
    ok &= after <= ruff_before
    top = sorted(f for f in os.listdir(os.path.join(root, "vlajax")) if f.endswith(".py"))
    print(f"modules at the top of vlajax/ ({len(top)}):", ", ".join(top))
    ok &= len(top) <= 6
    left = rewrite_all(root, write=False)
    print("a second rewrite pass would change:", left or "nothing")
    ok &= not left
    olds = [o for o, _ in MOVES]
    r = subprocess.run(["git", "-C", root, "grep", "-n", "-E",
                        r"(^|[^A-Za-z0-9_.-])(" + "|".join(re.escape(p) for p in olds) + r")([^A-Za-z0-9_-]|$)",
                        "--", ".", ":!scripts/regroup",
                        *[f":!{t}*.{e.lstrip('.')}" for t in DATA_TREES for e in DATA_ENDINGS]],
                       capture_output=True, text=True)
    print("old paths left:", r.stdout.strip()[:3000] or "none")
    ok &= not r.stdout.strip()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    ruff_before = ruff_count(root, a.python) if not a.no_verify else 0
    moved = move(root)
    print(f"moved {len(moved)}:", *moved, sep="\n  ")
    changed = rewrite_all(root)
    print(f"rewrote {len(changed)} files")
    patched = apply_patches(root)
    print("patched:", patched or "nothing")
    fix_lint(root, a.python, sorted(set(changed) | set(patched) | set(NEW_FILES)))
    git(root, "add", "-A", "--", "vlajax", "research", "tests")
    if a.no_verify:
        return 0
    ok = verify(root, a.python, ruff_before)
    print("VERIFY:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
