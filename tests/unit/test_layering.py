"""The layering rules of DESIGN.md, checked on the source: the pure core (``slurm_dl.core``)
does no I/O and reads no clock, the package never imports the daemons, and only the edge
modules talk to Slurm, the database or NVML."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "slurm_dl"
EDGE_PACKAGES = {"jobsubmit", "prioritizer"}
PURE_CORE = CORE / "core"
PURE_MODULES = [str(p.relative_to(CORE)) for p in sorted(PURE_CORE.rglob("*.py"))] + ["render.py"]
# What the core may import from outside itself: plain data and string helpers, no I/O at import
# or call time (the default database URL and path check, the GPU sample record, the text layout
# of an explanation).
CORE_MAY_IMPORT = {"slurm_dl.site_paths", "slurm_dl.telemetry.samples", "slurm_dl.explain_view"}
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
        assert not bad, f"{path.relative_to(REPO)} imports {bad}: I/O belongs in slurm_dl/slurm, store or telemetry"
        src = path.read_text()
        for call in ("time.time(", "datetime.now(", "time.monotonic("):
            assert call not in src, f"{path.relative_to(REPO)} reads the clock ({call}); take `now` as an argument"


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
        assert name not in loose and (PURE_CORE / f"{name}.py").exists(), name
    assert (PURE_CORE / "policy").is_dir() and (PURE_CORE / "rules").is_dir()


@pytest.mark.parametrize("path", sorted(PURE_CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_core_imports_only_core(path: Path) -> None:
    outside = {m for m in _slurm_dl_imports(path) if not m.startswith("slurm_dl.core")} - CORE_MAY_IMPORT
    assert not outside, f"{path.relative_to(REPO)} imports {outside} from outside the core"


def test_every_test_module_has_its_own_basename() -> None:
    """pytest imports test modules by basename (the integration tests import each other that
    way): two files of one name stop the whole suite at collection."""
    seen: dict[str, Path] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path
