"""The package's shape: imports point down the layer order the README states, and no module imports itself back.

The layer list is read from README.md's architecture section (the ```layers block), so the document and
the check cannot drift apart. Imports under `if TYPE_CHECKING:` count like any other: an annotation that
needs a module from a lower layer says the types live in the wrong place.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "observer"
DEV = ROOT / "observer_dev"  # the dev package: one layer of its own, above the service


def readme_layers(name: str = "layers") -> list[set[str]]:
    text = (ROOT / "README.md").read_text()
    block = re.search(rf"```{name}\n(.*?)```", text, re.S)
    assert block, f"README.md's architecture section must hold a ```{name} block"
    layers = []
    for line in block.group(1).splitlines():
        m = re.match(r"\s*\d+\.\s+(.*?)\s*(?:#.*)?$", line)
        if m:
            layers.append(set(m.group(1).split()))
    return layers


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Module → the observer modules it imports (anywhere in the file, function bodies too)."""
    modules = {module_name(p): p for base in (PACKAGE, DEV) for p in base.rglob("*.py")}
    out: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            out[mod].update(t for t in targets if t in modules and t != mod)
    return out


def area(mod: str) -> str:
    parts = mod.split(".")
    if parts[0] == DEV.name:
        return DEV.name
    return parts[1] if len(parts) > 1 else "observer"


def test_every_area_is_in_exactly_one_layer() -> None:
    layers = readme_layers()
    named = [a for layer in layers for a in layer]
    assert len(named) == len(set(named)), "an area is listed in two layers"
    present = {area(module_name(p)) for base in (PACKAGE, DEV) for p in base.rglob("*.py")} - {"observer"}
    assert present == set(named), f"README layers miss {present - set(named)} or list unknown {set(named) - present}"


def test_imports_point_down_the_layers() -> None:
    rank = {a: i for i, layer in enumerate(readme_layers()) for a in layer}
    upward = sorted(f"{src} → {dst}" for src, dsts in imports().items() for dst in dsts
                    if area(src) != "observer" and area(dst) != "observer" and rank[area(dst)] > rank[area(src)])
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def analyse_part(mod: str) -> str | None:
    """`observer.analyse.canary.judge` → `canary`; `observer.analyse.histogram` → `histogram`."""
    parts = mod.split(".")
    return parts[2] if parts[:2] == ["observer", "analyse"] and len(parts) > 2 else None


def test_analyse_parts_are_in_exactly_one_layer() -> None:
    layers = readme_layers("analyse-layers")
    named = [a for layer in layers for a in layer]
    assert len(named) == len(set(named)), "an analyse part is listed in two layers"
    present = {analyse_part(module_name(p)) for p in (PACKAGE / "analyse").rglob("*.py")} - {None}
    assert present == set(named), \
        f"README analyse-layers miss {present - set(named)} or list unknown {set(named) - present}"


def test_imports_point_down_the_analyse_layers() -> None:
    """Canary, drift and quality are areas of their own: an import from drift into the canary's package ties
    the two both ways (the canary reads drift), which the area-level check cannot see."""
    rank = {a: i for i, layer in enumerate(readme_layers("analyse-layers")) for a in layer}
    upward = sorted(f"{src} → {dst}" for src, dsts in imports().items() for dst in dsts
                    if (s := analyse_part(src)) and (d := analyse_part(dst)) and rank[d] > rank[s])
    assert not upward, "imports from a lower analyse layer to a higher one:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


# What `observer serve` and `observer proxy` run: their commands, the service and the sidecar.
SERVING = ("observer.cli.core", "observer.cli.sampling", "observer.service", "observer.wiring.root",
           "observer.wiring.sidecar")


def reachable(graph: dict[str, set[str]], roots: tuple[str, ...]) -> dict[str, str]:
    """Every module the roots import, directly or not, with the module that first imports it."""
    seen: dict[str, str] = {r: "" for r in roots}
    todo = list(roots)
    while todo:
        mod = todo.pop()
        for dst in sorted(graph.get(mod, ())):
            if dst not in seen:
                seen[dst] = mod
                todo.append(dst)
    return seen


def test_serving_never_reaches_the_dev_package() -> None:
    seen = reachable(imports(), SERVING)
    dev = sorted(f"{by} → {mod}" for mod, by in seen.items() if area(mod) == DEV.name)
    assert not dev, "serve/proxy import the dev package (simulator, game day, demo):\n" + "\n".join(dev)


def test_serve_and_proxy_commands_load_no_dev_module() -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom observer.cli.main import app\n"
            "for cmd in ('serve', 'proxy'):\n"
            "    assert CliRunner().invoke(app, [cmd, '--help']).exit_code == 0, cmd\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'observer_dev'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"observer serve/proxy loaded {out.stdout.strip()}"


MAX_MODULE_LINES = 500
"""A module past this has grown two jobs: split it where its parts stop sharing state (the canary judge's
metrics, verdict and fairness; each source; the health rules' engine and GPU families)."""


def test_no_module_is_over_the_size_limit() -> None:
    """The service, the dev package and the benches alike: the rooms the rule does not watch regrow hubs."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for base in (PACKAGE, DEV, ROOT / "bench") for p in base.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_benches_import_no_test_module_and_use_no_path_tricks() -> None:
    """Benches share helpers through tests/support/ (or observer_dev) and run as `python -m bench.NAME`: a test
    module imported by a bench ties a measurement to a test's private helpers, and sys.path edits hide that the
    bench only runs from one place."""
    problems = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        text = path.read_text()
        if "sys.path" in text:
            problems.append(f"{path.name}: edits sys.path")
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            problems += [f"{path.name}: imports {n}" for n in names
                         if n.startswith("tests.") and not n.startswith("tests.support")]
    assert problems == []


def test_every_bench_imports() -> None:
    """A bench whose imports broke (a helper renamed or removed) is a stale figure waiting to be quoted."""
    code = ("import importlib, json, pathlib\nbroken = {}\n"
            "for p in sorted(pathlib.Path('bench').glob('*.py')):\n"
            "    try:\n        importlib.import_module(f'bench.{p.stem}')\n"
            "    except ImportError as e:\n        broken[p.name] = str(e)\n"
            "print(json.dumps(broken))")
    # Its own process: the benches' imports (torch among them) stay out of this worker.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout[-2000:]
