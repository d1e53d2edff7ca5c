"""The layering rules of DESIGN.md, checked on the source: the pure core (``slurm_dl.core``)
does no I/O and reads no clock, the package never imports the daemons, only the edge
modules talk to Slurm, the database or NVML, imports flow one way (front-ends -> edges and
simulator -> core) and no two modules import each other, directly or round a longer circle
(imports inside functions and under TYPE_CHECKING count: they are dependencies too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "slurm_dl"
EDGE_PACKAGES = {"jobsubmit", "prioritizer"}
PURE_CORE = CORE / "core"
PURE_MODULES = [str(p.relative_to(CORE)) for p in sorted(PURE_CORE.rglob("*.py"))] + [
    "dlsubmit/render.py"
]
# What the core may import from outside itself: nothing (the default database URL, the GPU
# sample record live in the core; the text layout of an explanation lives outside and calls it).
CORE_MAY_IMPORT: set[str] = set()
IMPURE = {"subprocess", "socket", "sqlalchemy", "sqlmodel", "pynvml", "pyslurm"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _files(rel: str) -> list[Path]:
    p = CORE / rel
    return sorted(p.rglob("*.py")) if p.is_dir() else [p]


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_core_never_imports_the_edge_packages(path: Path) -> None:
    assert not (_imports(path) & EDGE_PACKAGES), f"{path} imports {_imports(path) & EDGE_PACKAGES}"


@pytest.mark.parametrize("rel", PURE_MODULES)
def test_pure_modules_do_no_io(rel: str) -> None:
    for path in _files(rel):
        if not path.exists():
            pytest.skip(f"{rel} not present")
        bad = _imports(path) & IMPURE
        assert not bad, (
            f"{path.relative_to(REPO)} imports {bad}: I/O belongs in slurm_dl/slurm, store or telemetry"
        )
        src = path.read_text()
        for call in ("time.time(", "datetime.now(", "time.monotonic("):
            assert call not in src, (
                f"{path.relative_to(REPO)} reads the clock ({call}); take `now` as an argument"
            )


def _slurm_dl_imports(path: Path) -> set[str]:
    """Absolute names of the slurm_dl modules ``path`` imports (relative imports resolved)."""
    rel = path.relative_to(REPO).with_suffix("")
    pkg = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)]
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module and node.module.startswith("slurm_dl"):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("slurm_dl"))
    return out


def test_the_core_package_holds_the_pure_modules() -> None:
    loose = sorted(p.stem for p in CORE.glob("*.py"))
    for name in ("model", "config", "packing", "preemption", "ledger", "tags", "explain", "idle"):
        held = (PURE_CORE / f"{name}.py").exists() or (
            PURE_CORE / name / "__init__.py"
        ).exists()  # module or package
        assert name not in loose and held, name
    assert (PURE_CORE / "policy").is_dir() and (PURE_CORE / "rules").is_dir()


@pytest.mark.parametrize(
    "path", sorted(PURE_CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO))
)
def test_core_imports_only_core(path: Path) -> None:
    outside = {
        m for m in _slurm_dl_imports(path) if not m.startswith("slurm_dl.core")
    } - CORE_MAY_IMPORT
    assert not outside, f"{path.relative_to(REPO)} imports {outside} from outside the core"


def test_every_test_module_has_its_own_basename() -> None:
    """pytest imports test modules by basename (the integration tests import each other that
    way): two files of one name stop the whole suite at collection."""
    seen: dict[str, Path] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path


ROOTS = ("slurm_dl", "jobsubmit", "prioritizer")
FRONT_ENDS = ("slurm_dl.cli", "slurm_dl.dlsubmit", "jobsubmit", "prioritizer")


def _modules() -> dict[str, Path]:
    mods = {}
    for root in ROOTS:
        for p in sorted((REPO / root).rglob("*.py")):
            rel = p.relative_to(REPO).with_suffix("")
            mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    return mods


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (``from pkg import sub``: the submodule;
    ``from pkg import name``: the package)."""

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(
                        pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else [])
                    )
                    if node.level
                    else (node.module or "")
                )
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    out.add(known(sub) if sub in mods else known(base))
            elif isinstance(node, ast.Import):
                out.update(known(a.name) for a in node.names)
        graph[name] = {m for m in out if m and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def layer(module: str) -> int:
    """DESIGN.md's layers: 0 the pure core, 1 the edges, the simulator and the rest of the
    package, 2 the front-ends (the CLIs, the filter service, the daemon)."""
    if module == "slurm_dl.core" or module.startswith("slurm_dl.core."):
        return 0
    if any(module == f or module.startswith(f + ".") for f in FRONT_ENDS):
        return 2
    return 1


def upward(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if layer(b) > layer(a)
    ]


def test_no_import_circle() -> None:
    found = circles(import_graph(_modules()))
    assert not found, (
        "import circles (one module should hold the piece the other needs): "
        + "; ".join(" <-> ".join(c) for c in found)
    )


def test_imports_flow_down_the_layers() -> None:
    found = upward(import_graph(_modules()))
    assert not found, "imports from a lower layer into a higher one: " + "; ".join(found)


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path) -> None:
    """The two checks above on a made-up package: they do find what they look for."""
    pkg = tmp_path / "slurm_dl"
    (pkg / "core").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for f in ("__init__.py", "core/__init__.py", "cli/__init__.py", "cli/main.py"):
        (pkg / f).write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from slurm_dl.a import y\n"
    )
    (pkg / "core" / "m.py").write_text("from ..cli.main import run\nfrom .. import a\n")
    mods = {}
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(tmp_path).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    graph = import_graph(mods)
    assert circles(graph) == [["slurm_dl.a", "slurm_dl.b", "slurm_dl.c"]]
    assert upward(graph) == [
        "slurm_dl.core.m (layer 0) imports slurm_dl.a (layer 1)",
        "slurm_dl.core.m (layer 0) imports slurm_dl.cli.main (layer 2)",
    ]


def test_the_daemon_never_reaches_into_the_filter_rules() -> None:
    """The filter's rules (``slurm_dl.core.rules``) are the filter's own (and dlsubmit's dry
    run of them); what the daemon shares with the filter (hints, class access and quotas, the
    site's shape, live counts, tags) lives in the core beside them."""
    bad = {}
    for path in sorted((REPO / "prioritizer").rglob("*.py")):
        found = {m for m in _slurm_dl_imports(path) if m.startswith("slurm_dl.core.rules")}
        if found:
            bad[str(path.relative_to(REPO))] = sorted(found)
    assert not bad, bad


# The simulator's parts, bottom up (slurm_dl/sim/__init__.py): traces and the one-cluster engine;
# the rankers and the reports; the replays at the package's top (simulate, runner, ...); the
# what-if set-up. A module imports the simulator's modules of its own part or of a lower level.
SIM_LEVELS = {"workloads": 0, "engine": 0, "ranking": 1, "reports": 1, "": 2, "whatif": 3}


def _sim_part(module: str) -> str | None:
    """The part of the simulator ``module`` is in ('' for the package's top), or None outside it."""
    parts = module.split(".")
    if parts[:2] != ["slurm_dl", "sim"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in SIM_LEVELS else ""


def test_the_simulator_imports_flow_up_its_parts() -> None:
    graph = import_graph(_modules())
    bad = [
        f"{a} imports {b}"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if _sim_part(a) is not None
        and _sim_part(b) is not None
        and _sim_part(a) != _sim_part(b)
        and SIM_LEVELS[_sim_part(b)] >= SIM_LEVELS[_sim_part(a)]
    ]
    assert not bad, "the simulator's parts import sideways or upwards: " + "; ".join(bad)
    assert {p for p in SIM_LEVELS if p} == {
        p.name for p in (CORE / "sim").iterdir() if (p / "__init__.py").is_file()
    }
