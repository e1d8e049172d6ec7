"""Every module of the package imports, and the `>>>` examples of its docstrings run and hold (issue 27: they
never ran, so nothing kept them true). One test per module; examples marked `# doctest: +SKIP` (an index on
disk, a model) are documentation only."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

# The import packages, as pyproject.toml ships them (`coderag`, its subpackages and the top-level folders it
# maps in), each listed through its own __path__, which is where an editable install finds them. Read from
# there, not written again here: a hand-kept copy once missed coderag.base and coderag.queries.
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
PACKAGES = tuple(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        path = importlib.import_module(pkg).__path__  # a package's __init__: light, no LlamaIndex
        names += [f"{pkg}.{m.name}" for m in pkgutil.iter_modules(path)
                  if not m.ispkg and m.name != "__main__"]  # __main__ runs the CLI when imported
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_doctests_module_imports_and_its_examples_hold(name: str) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


def test_doctests_the_examples_are_found() -> None:
    """The finder sees the package's examples (a wrong package list would pass every test above)."""
    examples = 0
    for name in _modules():
        if name.startswith(("coderag.nodes.", "coderag.postprocessors.", "coderag.mcp_stdio")):
            module = importlib.import_module(name)
            examples += sum(len(t.examples) for t in doctest.DocTestFinder().find(module, name))
    assert examples >= 30, examples
