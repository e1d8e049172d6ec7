"""(doc comment, definition) pairs read from a small snapshot (eval/doc_pairs.py), (change description, changed code)
pairs of mined queries (eval/change_pairs.py), and the embedder fine-tuned on them with the bundled model
(eval/train_embedder.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderag.eval.change_pairs import change_pairs
from coderag.eval.doc_pairs import CODE_LINES, DocPair, doc_pairs
from coderag.eval.ranker_data import snapshot_folder
from coderag.eval.train_embedder import BATCH, fine_tune, training_pairs
from tests.conftest import write_files

FILES = {
    "pkg/urls.py": ('def scheme(url):\n    """The URL scheme, such as http or https, in lower case.\n\n'
                    '    Args:\n        url: the URL\n    """\n    head = url.split(":")[0]\n    return head.lower()\n'),
    "pkg/io.py": 'def read(b):\n    r"""Read everything that is left in the buffer"""\n    data = b.read()\n    return data\n',
    "pkg/short.py": 'def one(x):\n    """Return the value it is given, unchanged by anything."""; return x\n',
    "tests/test_urls.py": 'def test_scheme():\n    """The scheme of a plain URL is read in lower case."""\n    assert True\n',
    "cmd/root.go": ("package cmd\n\n// Execute runs the root command and exits on an error.\n"
                    "func Execute() {\n\tif err := root.Execute(); err != nil {\n\t\tos.Exit(1)\n\t}\n}\n"),
    "vendor/lib/root.go": ("package lib\n\n// Execute runs the vendored root command and exits on an error.\n"
                           "func Execute() {\n\tif err := run(); err != nil {\n\t\tpanic(err)\n\t}\n}\n"),
    "src/query.ts": ("/**\n * Cancel every query whose key starts with the prefix given.\n * @param prefix the key prefix\n */\n"
                     "export function cancelQueries(prefix: string) {\n  for (const q of all()) {\n"
                     "    if (q.key.startsWith(prefix)) q.cancel();\n  }\n}\n"),
}


def test_pairs_are_source_definitions_with_their_doc_comments_and_no_docstring_in_the_code(tmp_path: Path) -> None:
    write_files(tmp_path, FILES)
    pairs = {p.path: p for p in doc_pairs(tmp_path, most=100)}
    assert set(pairs) == {"pkg/urls.py", "pkg/io.py", "cmd/root.go", "src/query.ts"}  # no test, two-line function or vendored code
    assert pairs["pkg/urls.py"].query == "The URL scheme, such as http or https, in lower case."
    assert pairs["pkg/io.py"].query == "Read everything that is left in the buffer"  # quotes off, not its last r
    assert "lower case" not in pairs["pkg/urls.py"].code and "head.lower()" in pairs["pkg/urls.py"].code
    assert pairs["cmd/root.go"].query == "Execute runs the root command and exits on an error."
    assert pairs["src/query.ts"].query == "Cancel every query whose key starts with the prefix given."
    assert pairs["src/query.ts"].code.startswith("src/query.ts\nexport function cancelQueries")  # the path first
    assert len(doc_pairs(tmp_path, most=2)) == 2


def test_change_pairs_hold_the_definition_the_change_is_in_or_the_lines_around_it(tmp_path: Path) -> None:
    long_body = "".join(f"    total += {i}\n" for i in range(3 * CODE_LINES))
    write_files(tmp_path / "snap", {
        "pkg/cfg.py": ("import os\n\n\nclass Config:\n    def load(self, path):\n        if not os.path.exists(path):\n"
                       "            return {}\n        return read(path)\n\n\ndef other():\n    return 1\n"),
        "pkg/long.py": "def summed():\n    total = 0\n" + long_body + "    return total\n",
    })
    change_line = 3 + CODE_LINES + 10  # deep in summed(), past the lines a pair keeps from a definition's top
    mined = [
        {"query": "Return an empty config when the file is missing", "kind": "commit",
         "gold": [{"file_path": "pkg/cfg.py", "start_line": 1, "end_line": 1},  # the import: outside a definition
                  {"file_path": "pkg/cfg.py", "start_line": 6, "end_line": 7}]},
        {"query": "Add the late values to the sum as well", "kind": "commit",
         "gold": [{"file_path": "pkg/long.py", "start_line": change_line, "end_line": change_line}]},
        {"query": "Change a file the snapshot no longer has", "kind": "commit",
         "gold": [{"file_path": "pkg/gone.py", "start_line": 1, "end_line": 2}]},
    ]
    (tmp_path / "mined.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mined), encoding="utf-8")
    pairs = {p.path: p for p in change_pairs(tmp_path / "mined.jsonl", tmp_path / "snap", most=10)}
    assert set(pairs) == {"pkg/cfg.py", "pkg/long.py"}  # the gone file gives none
    assert pairs["pkg/cfg.py"].query == "Return an empty config when the file is missing"
    assert pairs["pkg/cfg.py"].code == ("pkg/cfg.py\n    def load(self, path):\n        if not os.path.exists(path):\n"
                                         "            return {}\n        return read(path)")  # the method, not the import
    code = pairs["pkg/long.py"].code.splitlines()
    assert code[0] == "pkg/long.py" and len(code) == CODE_LINES + 1
    assert f"    total += {change_line - 3}" in code and "def summed():" not in code
    assert len(change_pairs(tmp_path / "mined.jsonl", tmp_path / "snap", most=1)) == 1


def test_fine_tuning_moves_the_unfrozen_top_layer_only_and_saves_a_model_the_index_can_load(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from coderag.base.config import Settings

    snapshots = tmp_path / "snapshots"
    files = {f"src/m{i}.py": f'def f{i}(a, b):\n    """Combine item {i} with the other one given here."""\n'
                             f'    c = a + b * {i}\n    return c\n' for i in range(BATCH)}
    write_files(snapshot_folder(snapshots, "pypa/packaging"), files)  # a training repository: its folder is known
    by_repo = training_pairs(snapshots)
    assert list(by_repo) == ["pypa/packaging"] and len(by_repo["pypa/packaging"]) == BATCH

    out = tmp_path / "model"
    assert fine_tune(by_repo, out, epochs=1, lr=1e-4, frozen_layers=5, log=lambda line: None) == 1
    base = SentenceTransformer(str(Settings().model_dir()), device="cpu")[0].auto_model.state_dict()
    tuned_model = SentenceTransformer(str(out), device="cpu")
    tuned = tuned_model[0].auto_model.state_dict()
    frozen = [k for k in base if k.startswith(("embeddings.", "encoder.layer.0.", "encoder.layer.4."))]
    moved = [k for k in base if k.startswith("encoder.layer.5.") and k.endswith("weight")]
    assert frozen and all(base[k].equal(tuned[k]) for k in frozen)
    assert moved and any(not base[k].equal(tuned[k]) for k in moved)
    assert tuned_model.max_seq_length == Settings().embedding.window_tokens
    assert tuned_model.encode(["cancel the queries"]).shape == (1, 384)
    assert all(isinstance(p, DocPair) for p in by_repo["pypa/packaging"])


def test_the_command_writes_no_model_over_a_folder_that_holds_one(tmp_path: Path, capsys) -> None:
    from coderag.eval.train_embedder import main

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main(["--out", str(tmp_path / "model"), "--snapshots", str(tmp_path)])
    assert stop.value.code == 2 and "is not empty" in capsys.readouterr().err
    assert (tmp_path / "model" / "config.json").read_text(encoding="utf-8") == "{}"
