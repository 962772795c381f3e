"""docs/architecture.md is the map of the house: every path it names exists, every module of
the apps is on it, and the rooms keep the size and naming rules the map states."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a backticked path on the map starts at one of the repository's top folders
TOP = (
    "harness_app/",
    "trajectories/",
    "training/",
    "config/",
    "templates/",
    "static/",
    "tests/",
    "bench/",
    "docker/",
    "scripts/",
    "docs/",
    "requirements/",
)
APPS = ("harness_app", "trajectories", "training", "config")
MAX_MODULE_LINES = 600
MAP = ROOT / "docs" / "architecture.md"


def _named_paths(text: str) -> set[str]:
    """Repository paths in backticks: `trajectories/selectors/turns.py`, `training/rl/`."""
    return {cell.rstrip("/") for cell in re.findall(r"`([^`\s]+)`", text) if cell.startswith(TOP)}


def _app_modules() -> list[Path]:
    modules = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if "migrations" in rel.parts or path.name == "__init__.py":
                continue
            modules.append(rel)
    return sorted(modules)


def test_every_path_the_map_names_exists() -> None:
    missing = sorted(p for p in _named_paths(MAP.read_text()) if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_app_module_is_on_the_map() -> None:
    named = _named_paths(MAP.read_text())
    unmapped = [
        str(module)
        for module in _app_modules()
        # a module is on the map when it, or a folder holding it, is named
        if not any(str(module) == p or str(module).startswith(p + "/") for p in named)
    ]
    assert not unmapped, f"modules missing from docs/architecture.md: {unmapped}"


def test_no_app_module_passes_the_size_limit() -> None:
    long = {
        str(m): n
        for m in _app_modules()
        if (n := len((ROOT / m).read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these along a seam a reader would name: {long}"


def test_no_role_topic_module_families_remain() -> None:
    # selectors_list.py beside selectors_episode.py: a package (selectors/list.py) instead
    roles = ("selectors", "services", "views", "api", "tasks", "forms", "serializers")
    families = [
        str(m)
        for m in _app_modules()
        if m.parts[0] != "config" and any(m.stem.startswith(role + "_") for role in roles)
    ]
    assert not families, f"role_topic modules; make them a package: {families}"


def _topic_families() -> dict[str, list[str]]:
    """Modules grouped by folder and the stem's first word: `proxy.py`, `proxy_body.py` and
    `proxy_limits.py` are the family `trajectories/proxy`."""
    families: dict[str, list[str]] = {}
    for module in _app_modules():
        prefix = module.stem.lstrip("_").split("_")[0]
        families.setdefault(f"{module.parent}/{prefix}", []).append(module.name)
    return {name: sorted(members) for name, members in families.items() if len(members) >= 3}


def test_no_topic_module_families_remain() -> None:
    # proxy.py beside proxy_body.py and proxy_limits.py: a package (proxy/body.py) instead
    families = _topic_families()
    assert not families, f"<topic>_*.py families of 3 or more; make each a package: {families}"
