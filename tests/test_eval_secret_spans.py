"""eval/secret_spans.py: the spans a rules version masks over a tree, and what a new version adds."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderag.eval.secret_spans import main

# Made at run time, so this file holds no key of its shape.
KEY = "a10f9d73" + "b2a860614c04c75366e5c426"


def test_a_new_rule_shows_as_an_added_span_with_the_bytes_around_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "search.py").write_text(f'ALGOLIA_ADMIN_KEY = "{KEY}"\n', encoding="utf-8")
    (tree / "src" / "plain.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    (tree / ".git").mkdir()
    (tree / ".git" / "config").write_text(f'token = "{KEY}"\n', encoding="utf-8")  # never read
    before_rules = tmp_path / "rules_before.py"
    before_rules.write_text("def secret_spans(data):\n    return []\n", encoding="utf-8")  # a version that finds none

    main(["dump", str(tmp_path / "before.json"), str(tree), "--rules", str(before_rules)])
    main(["dump", str(tmp_path / "after.json"), str(tree)])
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 files, 1 spans in 1 files")
    main(["diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")])
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 spans added, 0 gone"
    added, = [line for line in out if line.startswith("+ ")]
    assert "src/search.py:21-53 password or key (by its name)" in added and "ALGOLIA_ADMIN_KEY" in added
