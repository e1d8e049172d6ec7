"""A Jupyter notebook is indexed as its cells, on the notebook file's own line numbers (nodes/notebook.py); its
outputs never are, and a notebook that cannot be read so stays data."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from conftest import write_files


def notebook(cells: list[dict], language: str = "python", indent: int | None = 1) -> str:
    """A notebook as Jupyter writes it: keys sorted, one space of indent, each source line its own string."""
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"display_name": language, "language": language, "name": language}}}
    return json.dumps(nb, indent=indent, sort_keys=True, ensure_ascii=False) + "\n"


def code(*lines: str, outputs: tuple = ()) -> dict:
    return {"cell_type": "code", "execution_count": 1, "id": f"c{len(lines)}", "metadata": {},
            "outputs": list(outputs), "source": list(lines)}


def markdown(*lines: str) -> dict:
    return {"cell_type": "markdown", "id": "m", "metadata": {}, "source": list(lines)}


IMAGE = base64.b64encode(random.Random(7).randbytes(3000)).decode()
_RANDOM = random.Random(8)
TOKEN = "ghp_" + "".join(_RANDOM.choice("abcdefghijkLMNOPQRSTUV0123456789") for _ in range(36))
ANALYSIS = notebook([
    markdown("# Churn model\n", "\n", "Train a model on the customer table."),
    code("%matplotlib inline\n", "import pandas as pd\n", "\n", "def load_customers(path):\n",
         '    """Read the customer table and drop test accounts."""\n', "    return pd.read_csv(path)",
         outputs=({"name": "stdout", "output_type": "stream", "text": ["quarterly_revenue_forecast 1200\n"]},)),
    code("def churn_rate_by_month(df):\n", '    """Share of customers who cancelled, per signup month."""\n',
         "    return df.groupby(df.signup.dt.month).cancelled.mean()\n", "\n",
         f'GITHUB_TOKEN = "{TOKEN}"',
         outputs=({"data": {"image/png": IMAGE, "application/json": {"source": ["vega_spec_output_source"]}},
                   "metadata": {}, "output_type": "display_data"},)),
    code(),
])


def _file_lines(root: Path, rel: str) -> list[str]:
    return (root / rel).read_text(encoding="utf-8").split("\n")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory):
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository

    root = write_files(tmp_path_factory.mktemp("nb") / "repo", {
        "notebooks/analysis.ipynb": ANALYSIS, "src/app.py": "def main():\n    return 0\n"})
    index_repository(root)
    with CodeIndex.open(root, create=False) as idx:
        yield root, idx


def test_notebooks_a_cell_is_found_on_the_lines_of_the_notebook_file(indexed) -> None:
    root, idx = indexed
    res = idx.search("share of customers who cancelled per signup month", refresh=False)
    hit = res[0]
    assert hit.file_path == "notebooks/analysis.ipynb"
    lines = _file_lines(root, hit.file_path)
    where = lines.index('    "def churn_rate_by_month(df):\\n",') + 1
    assert hit.start_line <= where <= hit.end_line
    shown = hit.text.split("\n")
    assert shown[where - hit.start_line] == "def churn_rate_by_month(df):"
    # every line shown is the string on that line of the file, decoded: the line numbers are the file's
    for number, text in zip(range(hit.start_line, hit.end_line + 1), shown):
        if text and not text.startswith("#") and "SECRET MASKED" not in text:
            assert json.loads(lines[number - 1].strip().rstrip(",")).rstrip("\n") == text


def test_notebooks_outputs_are_never_indexed_and_tokens_in_cells_are_masked(indexed) -> None:
    _, idx = indexed
    for query in ("quarterly_revenue_forecast", "vega_spec_output_source", IMAGE[:40]):
        assert not any(r.file_path.endswith(".ipynb") for r in idx.search(query, retriever="bm25", refresh=False))
    hits = idx.search("GITHUB_TOKEN churn_rate_by_month", retriever="bm25", refresh=False)
    text = next(r.text for r in hits if r.file_path.endswith(".ipynb"))
    assert "GITHUB_TOKEN" in text and "[SECRET MASKED]" in text and TOKEN[4:] not in text
    markdown_hits = idx.search("customer table model", retriever="bm25", refresh=False)
    assert any("# Train a model on the customer table." in r.text for r in markdown_hits)


@pytest.mark.parametrize("text, why", [
    (notebook([code("x = 1\n", "y = 2")], indent=None), "one line of JSON"),
    (notebook([code("x <- 1\n", "y <- 2")], language="R"), "another kernel"),
    (notebook([{**code(), "source": "x = 1\ny = 2"}]), "a source of one string of two lines"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than the parser goes"),
    ('{"cells": [{"cell_type": "code", "source": [1, 2]}]}', "a source that is not text"),
])
def test_notebooks_that_cannot_be_read_as_cells_stay_data(tmp_path: Path, text: str, why: str) -> None:
    from coderag.nodes.file_classes import DATA, content_class
    from coderag.nodes.notebook import notebook_text

    assert notebook_text(text) is None, why
    assert content_class("nb/other.ipynb", text.encode())[0] == DATA, why


def test_notebooks_cells_of_one_line_and_empty_cells_keep_their_lines() -> None:
    from coderag.nodes.notebook import notebook_text

    text = notebook([{**code(), "source": "x = 1"}, code(), markdown("Done.")])
    out = notebook_text(text).split("\n")
    lines = text.split("\n")
    assert len(out) == len(lines)
    assert [(lines[i].strip(), ln) for i, ln in enumerate(out) if ln] == [
        ('"source": "x = 1"', "x = 1"),  # a cell of one line: its line holds the code, no label
        ('"source": []', "# cell 2, id c0"),
        ('"source": [', "# cell 3 (markdown), id m"),
        ('"Done."', "# Done."),
    ]


def test_notebooks_an_index_that_holds_one_as_raw_json_indexes_it_again_as_cells(tmp_path: Path) -> None:
    """Before notebooks were read as cells, a `!*.ipynb` brought them in as JSON; the upgrade indexes them again
    (pipelines/migrations.py resplit_read_otherwise), and only them."""
    from coderag import CodeIndex
    from coderag.nodes import scan
    from coderag.nodes.file_text import DecodedText
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY
    from coderag.pipelines.migrations import NOTEBOOKS_NOTE

    root = write_files(tmp_path / "repo", {"nb/analysis.ipynb": ANALYSIS, "src/app.py": "def main():\n    return 0\n"})
    mp = pytest.MonkeyPatch()
    mp.setattr(scan, "decode_file", lambda data, notebook=False: DecodedText(data.decode("utf-8")))  # the JSON
    try:
        index_repository(root)
    finally:
        mp.undo()
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, "lf, crlf, cr")  # as the index of a coderag of before has it
        idx.state.commit()
        app_before = set(idx.docstore.get_ref_doc_info("src/app.py").node_ids)
        raw = idx.search("churn_rate_by_month", retriever="bm25", refresh=False)
        assert any('"def churn_rate_by_month(df):\\n",' in r.text for r in raw)  # the control: JSON held

    assert index_repository(root).upgraded == {NOTEBOOKS_NOTE: 1}
    with CodeIndex.open(root, create=False) as idx:
        hit = next(r for r in idx.search("churn_rate_by_month", retriever="bm25", refresh=False)
                   if r.file_path == "nb/analysis.ipynb")
        where = _file_lines(root, "nb/analysis.ipynb").index('    "def churn_rate_by_month(df):\\n",') + 1
        assert hit.text.split("\n")[where - hit.start_line] == "def churn_rate_by_month(df):"
        assert set(idx.docstore.get_ref_doc_info("src/app.py").node_ids) == app_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once


def test_notebooks_a_password_quoted_in_a_cell_is_masked_on_its_line() -> None:
    """In the file a cell's quotes are JSON escapes (`\\"`), which hide a quoted value from the secret rules: the
    cells' text is what they read, and the outputs are not read at all."""
    from coderag.nodes.file_text import decode_file

    password = "Tr0ub4dor&3xyz"
    text = notebook([code("import os\r\n", f'DB_PASSWORD = "{password}"\n', "connect(DB_PASSWORD)",
                          outputs=({"name": "stdout", "output_type": "stream", "text": [f"{TOKEN}\n"]},))])
    decoded = decode_file(text.encode(), notebook=True)
    where = next(i for i, ln in enumerate(text.split("\n"), 1) if "DB_PASSWORD = " in ln)
    assert decoded.text.split("\n")[where - 1] == 'DB_PASSWORD = "' + "*" * len(password) + '"'
    assert decoded.masked == ((where, "password or key (by its name)"),)
    assert "import os" in decoded.text.split("\n") and password not in decoded.text and TOKEN not in decoded.text


@pytest.mark.parametrize("encode", [lambda t: b"\xef\xbb\xbf" + t.encode(), lambda t: t.replace("\n", "\r\n").encode(),
                                    lambda t: t.replace("\n", "\r").encode()], ids=["bom", "crlf", "cr"])
def test_notebooks_the_class_check_and_the_decoder_read_a_notebook_alike(encode) -> None:
    """A notebook with a BOM or another line end is indexed as its cells: the class check reads it as the decoder
    does (nodes/file_text.py notebook_cells), so it is not data to one and cells to the other."""
    from coderag.nodes.file_classes import content_class
    from coderag.nodes.file_text import decode_file

    data = encode(notebook([code("x = 1\n", "y = 2")]))
    assert content_class("nb/a.ipynb", data) is None
    shown = [ln for ln in decode_file(data, notebook=True).text.split("\n") if ln]
    assert shown == ["# cell 1, id c2", "x = 1", "y = 2"]
