"""Long bug reports end to end: the file a traceback names ranks first, not the issue template it was written from."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from coderag.base.config import Settings

FILES = {
    "src/shop/cart.py": '''\
        """The shopping cart."""


        class Cart:
            def __init__(self):
                self.items = {}

            def add(self, sku, quantity=1):
                self.items[sku] = self.items.get(sku, 0) + quantity

            def apply_discount(self, code, table):
                """Take a discount code off the total."""
                rate = table[code]
                return self.total() * (1 - rate)

            def total(self):
                return sum(self.items.values())
        ''',
    "src/shop/orders.py": '''\
        """Orders placed from a cart."""
        from shop.cart import Cart


        def place_order(cart: Cart, code, table):
            amount = cart.apply_discount(code, table)
            return {"amount": amount}
        ''',
    "src/shop/shipping.py": '''\
        """Shipping costs by weight and destination."""


        def shipping_cost(weight_kg, country):
            base = 5 if country == "FR" else 12
            return base + 0.5 * weight_kg
        ''',
    ".github/ISSUE_TEMPLATE/bug_report.md": '''\
        ---
        name: Bug report
        about: Create a report to help us improve
        ---

        ## Describe the bug
        A clear and concise description of what the bug is.

        ## To Reproduce
        Steps to reproduce the behavior, with a minimal code example and the full traceback.

        ## Expected behavior
        A clear and concise description of what you expected to happen.

        ## Environment
        - OS, Python version, shop version
        ''',
    "CHANGELOG.md": '''\
        # Changelog

        ## 1.2.0
        - Fixed a bug where placing an order crashed with a traceback when the discount code was wrong.
        - The cart total is described clearly and concisely in the order.
        ''',
}

REPORT = '''\
KeyError when placing an order with an unknown discount code

## Describe the bug
Placing an order crashes when the customer types a discount code that does not exist.
A clear and concise description: the order should be refused with a message instead.

## To Reproduce
```python
from shop.orders import place_order
place_order(cart, "SPRING", {"WINTER": 0.1})
```

```
Traceback (most recent call last):
  File "/home/me/app.py", line 3, in <module>
  File "/home/me/venv/lib/python3.11/site-packages/shop/orders.py", line 6, in place_order
    amount = cart.apply_discount(code, table)
  File "/home/me/venv/lib/python3.11/site-packages/shop/cart.py", line 13, in apply_discount
    rate = table[code]
KeyError: 'SPRING'
```

## Expected behavior
A clear and concise description of what you expected to happen: a clear error.

## Environment
- OS: Ubuntu 22.04
- Python version: 3.11.4
- shop==1.2.1
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("reports") / "shop", FILES)
    index_repository(root, settings=Settings())
    return root


def _files(root: Path, query: str, **retrieval) -> list[str]:
    from coderag import CodeIndex

    settings = Settings()
    for key, value in retrieval.items():
        setattr(settings.retrieval, key, value)
    with CodeIndex.open(root, settings=settings, create=False) as idx:
        res = idx.search(query, retriever="bm25", max_tokens=4000)
    return list(dict.fromkeys(r.file_path for r in res))


def test_report_ranks_the_failing_function_above_the_template(repo: Path) -> None:
    files = _files(repo, REPORT)
    assert files[0] == "src/shop/cart.py"
    # A report fills the budget (retrieval.report_cut_ratio 0): in a repository this small the damped template
    # and changelog may come at its tail, never before a source file.
    noise = [i for i, f in enumerate(files) if f in (".github/ISSUE_TEMPLATE/bug_report.md", "CHANGELOG.md")]
    assert all(i > max(j for j, f in enumerate(files) if f.startswith("src/")) for i in noise)
    cut = _files(repo, REPORT, report_cut_ratio=0.45)  # a cut leaves them out
    assert ".github/ISSUE_TEMPLATE/bug_report.md" not in cut and "CHANGELOG.md" not in cut


def test_report_read_verbatim_ranks_the_caller_first_and_keeps_the_noise(repo: Path) -> None:
    """What query reading adds: word for word, the report ranks the outer frame's file first and brings the
    issue template it was written from along (the changelog is weighed down for every query)."""
    files = _files(repo, REPORT, read_queries=False)
    assert files[0] != "src/shop/cart.py"
    assert ".github/ISSUE_TEMPLATE/bug_report.md" in files


def test_report_named_files_stay_within_the_file_pattern(repo: Path) -> None:
    from coderag import CodeIndex

    with CodeIndex.open(repo, settings=Settings(), create=False) as idx:
        res = idx.search(REPORT, retriever="bm25", file_pattern="src/shop/orders.py")
    assert res and {r.file_path for r in res} == {"src/shop/orders.py"}


def test_file_pattern_selects_files_of_a_bm25_only_first_pass(tmp_path: Path) -> None:
    """A first build is searchable by BM25 before its dense pass: a filtered search must see those files too."""
    from coderag import CodeIndex
    from coderag.store.state import STATUS_SPARSE

    root = write_files(tmp_path / "shop", FILES)
    with CodeIndex.open(root, settings=Settings(), create=True) as idx:
        idx.refresh(dense=False)  # the owner's first pass: BM25 points only
        assert {r.status for r in idx.state.files().values()} == {STATUS_SPARSE}
        res = idx.search("shipping cost by weight", retriever="bm25", file_pattern="src/**/*.py")
    assert res and res[0].file_path == "src/shop/shipping.py"
