"""The layering rules of DESIGN.md, checked on the source: the core imports only itself, and
only the edge modules talk to Slurm, the database or NVML."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "slurm_dl"
EDGE_PACKAGES = {"jobsubmit", "prioritizer"}
PURE_MODULES = ["model.py", "config.py", "ledger.py", "packing.py", "preemption.py", "render.py", "idle.py",
                "tags.py", "sitefactor.py", "explain.py", "policy", "rules"]
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


def test_every_test_module_has_its_own_basename() -> None:
    """pytest imports test modules by basename (the integration tests import each other that
    way): two files of one name stop the whole suite at collection."""
    seen: dict[str, Path] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path
