"""STYLE.md 3.4: the pure side never pulls in I/O, and only the CLI prints or reads env."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The pure loadgen modules: data, quantities, histograms, errors, length distributions, and the sans-IO engine
# and arrival schedules, which the planner's replica simulation runs in virtual time (the simulator runs the
# same engine in real time; the planner never imports the simulator or the command line).
PLANNER_ALLOWED_LOADGEN = {
    "loadgen",
    "loadgen.api",
    "loadgen.choices",
    "loadgen.results",
    "loadgen.slo_target",
    "loadgen.quantity",
    "loadgen.histogram",
    "loadgen.errors",
    "loadgen.load",
    "loadgen.engine",
    "loadgen.lengths",
    "loadgen.plan_defaults",
    "loadgen.level",
    "loadgen.level.aggregates",
    "loadgen.level.breakdown",
    "loadgen.level.client_health",
    "loadgen.level.declared",
    "loadgen.level.independence",
    "loadgen.level.result",
    "loadgen.level.server_sample",
    "loadgen.level.summary",
}
PLANNER_FORBIDDEN = ("httpx", "aiohttp", "asyncio", "typer", "rich.console", "socket")
# modules compiled from Cython (.pyx): leaves that never import from loadgen or planner (what they need
# from the package is handed to them: fastread gets the Python chunk test as an argument)
PYX = sorted(p for top in ("loadgen", "planner") for p in (ROOT / top).rglob("*.pyx"))
COMPILED = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PYX}


def test_compiled_modules_are_leaves() -> None:
    assert PYX, "no .pyx found: the rules below would not see them"
    for path in PYX:
        imported = re.findall(r"^(?:from|c?import)\s+([\w.]+)", path.read_text(), flags=re.M)
        assert not [m for m in imported if m.split(".")[0] in ("loadgen", "planner")], path


def imports_of(path: Path, *, typing_only: bool = True) -> set[str]:
    """The modules ``path`` imports; ``typing_only=False`` leaves out those under ``if TYPE_CHECKING:``, which
    never run (a module whose functions take a record as an argument may name the record's module there
    without an import cycle)."""
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(), filename=str(path))]
    while pending:
        node = pending.pop()
        if not typing_only and isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        pending.extend(ast.iter_child_nodes(node))
    return names


def test_planner_imports_only_pure_modules() -> None:
    for path in sorted((ROOT / "planner").rglob("*.py")):
        for name in imports_of(path):
            assert not name.startswith(PLANNER_FORBIDDEN), f"{path.name} imports {name}"
            if name.split(".")[0] == "loadgen":
                assert name in PLANNER_ALLOWED_LOADGEN, f"{path.name} imports {name}"
                assert not name.startswith(("loadgen.sim", "loadgen.cli")), f"{path.name} imports {name}"


def test_the_planner_top_holds_only_its_front_door() -> None:
    top = sorted(p.name for p in (ROOT / "planner").glob("*.py"))
    assert top == ["__init__.py", "front_door.py"], top
    wings = [part.removeprefix("planner: ") for part in layers() if part.startswith("planner: ")]
    assert wings[-1] == "front door", wings
    folders = sorted(p.name for p in (ROOT / "planner").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(wings[:-1]), (folders, wings)


def test_importing_planner_and_results_loads_no_io_stack() -> None:
    modules = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "planner").rglob("*.py")
    ]
    code = (
        "import sys, importlib\n"
        f"for m in {['planner', *modules]!r}: importlib.import_module(m)\n"
        "import loadgen.results, loadgen.histogram, loadgen.errors\n"
        "bad = [m for m in ('httpx', 'aiohttp', 'typer', 'rich.console', 'loadgen.run.runner', 'loadgen.wire.client')"
        " if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_only_histogram_imports_hdrh() -> None:
    for path in sorted((ROOT / "loadgen").rglob("*.py")) + sorted((ROOT / "planner").rglob("*.py")):
        if path.name != "histogram.py":
            assert not any(n.startswith("hdrh") for n in imports_of(path)), path


# The one switch read outside the command line: LOADGEN_PURE_WIRE runs the native wire without its
# compiled reader. It is a property of the installation, as a build without a compiler is (so every
# process of a run, a Ray worker's too, and every test reads it alike), and the results say which ran.
ENVIRON_READERS = {"loadgen/wire/native.py"}


def test_no_print_or_environ_outside_the_cli() -> None:
    for path in sorted((ROOT / "loadgen").rglob("*.py")) + sorted((ROOT / "planner").rglob("*.py")):
        if "cli" in path.relative_to(ROOT).parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "print", f"print() in {path}"
            if isinstance(node, ast.Attribute) and node.attr == "environ":
                if path.relative_to(ROOT).as_posix() in ENVIRON_READERS:
                    continue
                raise AssertionError(f"os.environ read in {path}")


def architecture_parts() -> dict[str, list[str]]:
    """docs/architecture.md's table: part -> the module paths (or globs) it lists."""
    parts = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            parts[cells[0]] = [m.strip("`") for m in cells[1].split(", ")]
    return parts


def test_every_source_file_belongs_to_a_part_named_in_the_architecture() -> None:
    listed = {p for globs in architecture_parts().values() for g in globs for p in ROOT.glob(g)}
    sources = set((ROOT / "loadgen").rglob("*.py")) | set((ROOT / "planner").rglob("*.py"))
    assert not sources - listed, sorted(str(p.relative_to(ROOT)) for p in sources - listed)
    assert not listed - sources, sorted(str(p.relative_to(ROOT)) for p in listed - sources)


def test_the_parts_nevers_hold() -> None:
    parts = {name: [p for g in globs for p in ROOT.glob(g)] for name, globs in architecture_parts().items()}
    io_stack = ("httpx", "aiohttp", "asyncio", "typer", "socket", "rich")
    for path in parts["results contract"]:
        assert not any(n.startswith(io_stack) for n in imports_of(path)), f"{path.name} imports the I/O stack"
    for path in parts["inputs"]:
        assert not any(n.startswith(("httpx", "aiohttp", "socket")) for n in imports_of(path)), path.name
    for path in parts["wire"]:
        assert "loadgen.run.metrics" not in imports_of(path), f"{path.name} computes metrics"
    for path in parts["simulator"]:
        assert not any(n.split(".")[0] == "planner" for n in imports_of(path)), f"{path.name} imports the planner"


def layers() -> tuple[str, ...]:
    """The parts from the bottom up, as docs/architecture.md's table lists them: a module imports only from
    its own part or one listed before it."""
    return tuple(architecture_parts())


def module_parts() -> dict[str, str]:
    """Each module's dotted name -> the part docs/architecture.md puts it in."""
    owner = {}
    for part, globs in architecture_parts().items():
        for path in (p for g in globs for p in ROOT.glob(g)):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            owner[name.removesuffix(".__init__")] = part
    return owner


def test_the_architecture_lists_the_parts_from_the_contract_up() -> None:
    assert layers()[0] == "results contract" and layers()[-1] == "command line"


def test_no_part_imports_from_a_part_above_it() -> None:
    owner = module_parts()
    rank = {part: i for i, part in enumerate(layers())}
    upward = []
    for module, part in owner.items():
        path = ROOT / (
            module.replace(".", "/") + ("/__init__.py" if (ROOT / module.replace(".", "/")).is_dir() else ".py")
        )
        for name in imports_of(path) - COMPILED:
            target = owner.get(name) or owner.get(name.rpartition(".")[0])  # a module, or a name in a package
            if target is not None and rank[target] > rank[part]:
                upward.append(f"{module} ({part}) imports {name} ({target})")
    assert not upward, upward


def test_the_module_import_graph_has_no_cycle() -> None:
    owner = module_parts()
    graph: dict[str, set[str]] = {m: set() for m in owner}
    for module in owner:
        path = ROOT / (
            module.replace(".", "/") + ("/__init__.py" if (ROOT / module.replace(".", "/")).is_dir() else ".py")
        )
        for name in imports_of(path, typing_only=False) - COMPILED:
            target = name if name in owner else name.rpartition(".")[0]
            if target in owner and target != module:
                graph[module].add(target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_planners_public_names_are_honest() -> None:
    """``planner.__all__`` lists exactly the names ``planner/__init__.py`` imports, each of them real."""
    import planner

    tree = ast.parse((ROOT / "planner" / "__init__.py").read_text())
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert sorted(planner.__all__) == sorted(imported), set(planner.__all__) ^ imported
    assert all(hasattr(planner, name) for name in planner.__all__)
    assert callable(planner.plan) and planner.plan.__module__ == "planner.front_door"


def test_every_package_is_in_the_wheel() -> None:
    """A package missing from pyproject's list works from the checkout and fails installed (loadgen.level once)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("loadgen", "planner")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)
