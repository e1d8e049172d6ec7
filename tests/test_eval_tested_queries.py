"""Queries mined from an indexed snapshot (eval/index_queries.py): "where is X tested" (`where_tested_queries`), a
name defined once in the source and used by a test, its gold the test chunks that use it; and docstring sentences
(`docstring_queries`), a test's never among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_files
from coderag.base.config import Settings

FILES = {
    "src/shop/cart.py": '''\
        def compute_discount(total, code):
            """The discount a promotion code gives on a cart's total."""
            rates = {"SAVE10": 0.1, "SAVE20": 0.2, "HALFOFF": 0.5}
            if code not in rates:
                return 0.0
            discount = total * rates[code]
            if discount > 100.0:
                discount = 100.0
            return round(discount, 2)


        def format_receipt_line(name, price):
            return f"{name:<20}{price:>8.2f}"
        ''',
    "tests/test_cart.py": '''\
        from src.shop.cart import compute_discount


        def test_save10_takes_a_tenth_off():
            """A tenth comes off every cart that uses the promotion code."""
            assert compute_discount(50.0, "SAVE10") == 5.0


        def test_unknown_codes_give_nothing():
            assert compute_discount(50.0, "NOPE") == 0.0
        ''',
}


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coderag import index_repository

    root = write_files(tmp_path_factory.mktemp("tested") / "shop", FILES)
    index_repository(root, settings=Settings())
    return root


def test_where_tested_queries_ask_where_a_name_is_tested_and_point_at_its_tests(shop: Path) -> None:
    from coderag.eval.index_queries import where_tested_queries

    found = where_tested_queries(shop, "acme/shop", "0" * 40, "heldout")
    assert [q["query"] for q in found] == ["where is compute_discount tested"]  # format_receipt_line: untested
    q = found[0]
    assert q["kind"] == "identifier" and q["split"] == "heldout" and q["repo"] == "acme/shop"
    assert {g["file_path"] for g in q["gold"]} == {"tests/test_cart.py"}
    lines = (shop / "tests/test_cart.py").read_text(encoding="utf-8").splitlines()
    covered = {n for g in q["gold"] for n in range(g["start_line"], g["end_line"] + 1)}
    assert {i + 1 for i, line in enumerate(lines) if "compute_discount(" in line} <= covered
    assert where_tested_queries(shop, "acme/shop", "0" * 40, "heldout") == found  # seeded: the same every run


def test_docstring_queries_ask_for_source_definitions_never_for_a_test(shop: Path) -> None:
    # A test's docstring states a behaviour; asked in its words, the answer is the code that has it, not the test.
    from coderag.eval.history_repos import HISTORY_REPOS
    from coderag.eval.index_queries import docstring_queries

    repo = next(iter(HISTORY_REPOS))
    found = docstring_queries(shop, repo, "train")
    assert [q["query"] for q in found] == ["The discount a promotion code gives on a cart's total."]
    assert found[0]["gold"] == [{"file_path": "src/shop/cart.py", "start_line": 1, "end_line": 9}]
    assert found[0]["kind"] == "docstring" and found[0]["split"] == "train"


def test_name_queries_of_a_snapshot_no_history_repository_pins(shop: Path) -> None:
    # The tune projects' snapshots (eval/tune_commits.py `names`) are pinned there, not in eval/history_repos.py.
    from coderag.eval.index_queries import name_queries

    found = name_queries(shop, "acme/shop", "tune", commit="1" * 40)
    assert found and {(q["repo"], q["commit"], q["split"], q["kind"]) for q in found} == {
        ("acme/shop", "1" * 40, "tune", "identifier")}
    assert any(q["gold"][0]["file_path"] == "src/shop/cart.py" for q in found)
