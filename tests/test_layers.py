"""The folders show the layers, and imports only point down them.

front ends (the CLI, MCP server, owner, client in `coderag/`, and `eval/`) -> pipelines -> components (ingestion
nodes, postprocessors, the store, query reading) -> base (settings, errors, paths, locks). A module may import its
own layer or any layer below; an import that points up — even a lazy one inside a function, or one only for type
checkers — ties a lower piece to a higher one and fails here. Files are mapped to packages the way the
installer maps them (pyproject's `packages` and `package-dir`), so a folder added without a layer fails too.
"""

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FRONT_ENDS, PIPELINES, COMPONENTS, BASE = 3, 2, 1, 0
LAYER_NAMES = {FRONT_ENDS: "front ends", PIPELINES: "pipelines", COMPONENTS: "components", BASE: "base"}

LAYERS = {
    "coderag": FRONT_ENDS,
    "coderag.eval": FRONT_ENDS,
    "coderag.pipelines": PIPELINES,
    "coderag.nodes": COMPONENTS,
    "coderag.postprocessors": COMPONENTS,
    "coderag.store": COMPONENTS,
    "coderag.queries": COMPONENTS,
    "coderag.base": BASE,
}


def package_dirs(root: Path) -> dict[str, Path]:
    """Each installed package and the folder it is built from, read from pyproject.toml as setuptools reads it."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})
    dirs = {}
    for package in setuptools["packages"]:
        parts = package.split(".")
        # The nearest mapped ancestor decides the folder; the rest of the name are subfolders under it.
        for cut in range(len(parts), 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in mapped:
                dirs[package] = root / mapped[prefix] / Path(*parts[cut:])
                break
        else:
            dirs[package] = root / Path(*parts)
    return dirs


def owning_package(module: str) -> str:
    """The innermost layered package a dotted module name lies in ('' when outside the project)."""
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in LAYERS:
            return prefix
    return ""


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import anywhere in the file, relative ones resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from coderag import pipelines` names a subpackage, not an attribute of the root.
            found.extend(
                (node.lineno, f"{target}.{alias.name}")
                for alias in node.names
                if owning_package(f"{target}.{alias.name}") != owning_package(target)
            )
    return found


def layer_violations(root: Path) -> list[str]:
    violations = []
    for package, folder in package_dirs(root).items():
        for path in sorted(folder.glob("*.py")):
            is_package = path.name == "__init__.py"
            module = package if is_package else f"{package}.{path.stem}"
            layer = LAYERS[package]
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, target in imported_modules(tree, module, is_package):
                target_package = owning_package(target)
                if not target_package or target_package == package:
                    continue
                if LAYERS[target_package] > layer:
                    violations.append(
                        f"{path.relative_to(root).as_posix()}:{line}: {module} ({LAYER_NAMES[layer]}) imports "
                        f"{target} ({LAYER_NAMES[LAYERS[target_package]]})"
                    )
    return sorted(set(violations))


def test_every_installed_package_has_a_layer():
    unlayered = sorted(set(package_dirs(REPO)) - set(LAYERS))
    assert not unlayered, f"give these packages a layer in tests/test_layers.py: {unlayered}"
    missing = sorted(package for package, folder in package_dirs(REPO).items() if not (folder / "__init__.py").is_file())
    assert not missing, f"packages without a folder: {missing}"


def test_no_module_imports_a_higher_layer():
    violations = layer_violations(REPO)
    assert not violations, "imports that point up the layers:\n" + "\n".join(violations)


def test_the_check_catches_an_upward_import(tmp_path):
    """The check itself can fail: a base module that lazily imports a pipeline, and a component that imports a
    front end through a relative import, are both reported, and the downward imports beside them are not."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    for package, folder in package_dirs(tmp_path).items():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    dirs = package_dirs(tmp_path)
    (dirs["coderag.base"] / "settings.py").write_text(
        "import os\n\ndef load():\n    from coderag.pipelines.code_index import CodeIndex\n    return CodeIndex\n"
    )
    (dirs["coderag.nodes"] / "reader.py").write_text("from ..base import settings\nfrom ..cli import main\n")
    (dirs["coderag.pipelines"] / "code_index.py").write_text("from coderag.nodes.reader import settings\n")

    assert layer_violations(tmp_path) == [
        "coderag/base/settings.py:4: coderag.base.settings (base) imports coderag.pipelines.code_index (pipelines)",
        "nodes/reader.py:2: coderag.nodes.reader (components) imports coderag.cli (front ends)",
    ]


@pytest.mark.parametrize(
    ("module", "is_package", "source", "expected"),
    [
        ("coderag.nodes.reader", False, "from . import ignore", "coderag.nodes"),
        ("coderag.nodes.reader", False, "from .. import cli", "coderag"),
        ("coderag.nodes", True, "from .reader import Reader", "coderag.nodes.reader"),
        ("coderag.nodes.reader", False, "from ..base.paths import index_dir", "coderag.base.paths"),
        ("coderag.cli", False, "import coderag.pipelines.code_index as ci", "coderag.pipelines.code_index"),
    ],
)
def test_relative_imports_resolve_like_python(module, is_package, source, expected):
    targets = [target for _, target in imported_modules(ast.parse(source), module, is_package)]
    assert expected in targets
