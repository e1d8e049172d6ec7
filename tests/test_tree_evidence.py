"""The evidence an ablation can add from a whole indexed tree (eval/tree_evidence.py): a file's import in-degree
read from import-like lines of several languages, and each chunk's k-occurrence among its nearest neighbours in a
real index."""

from __future__ import annotations

import json
from pathlib import Path

from coderag.base.config import Settings
from coderag.eval.tree_evidence import KNN_K, TreeEvidence, import_in_degree, knn_hubness, module_names
from coderag.pipelines.index_repository import index_repository
from tests.conftest import TINY_FILES, write_files


def test_a_file_is_named_by_its_stem_a_package_index_and_a_go_file_by_their_folder() -> None:
    assert module_names("src/pkg/parser.py") == {"parser"}
    assert module_names("src/pkg/__init__.py") == {"pkg"}
    assert module_names("web/lib/index.ts") == {"lib"}
    assert module_names("cmd/server/main.go") == {"server"}
    assert module_names("src/typeref/mod.rs") == {"typeref"}


def test_import_in_degree_counts_the_files_that_import_a_file_in_each_language(tmp_path: Path) -> None:
    write_files(tmp_path, {
        "pkg/parser.py": "def parse(text):\n    return text\n",
        "pkg/api.py": "from pkg.parser import parse\n",
        "pkg/cli.py": "from pkg import (\n    api,\n    parser,\n)\n",
        "pkg/lonely.py": "x = 'parser'  # a word outside an import names nothing\n",
        "web/util.ts": "export const id = (x: number) => x\n",
        "web/a.ts": "import { id } from './util'\n",
        "web/b.js": "const { id } = require('./util')\n",
        "go/store/store.go": "package store\n",
        "go/cmd/main.go": 'package main\n\nimport (\n\t"fmt"\n\t"example.com/app/store"\n)\n',
        "rs/src/typeref.rs": "pub struct T;\n",
        "rs/src/lib.rs": "mod typeref;\nuse crate::typeref::{T};\n",
    })
    degree = import_in_degree(tmp_path)
    assert degree["pkg/parser.py"] == 2  # api.py, and cli.py's bracketed list read to its close
    assert degree["pkg/api.py"] == 1 and degree["pkg/lonely.py"] == 0
    assert degree["web/util.ts"] == 2  # an ES import and a require
    assert degree["go/store/store.go"] == 1  # a Go import block's quoted path names the folder
    assert degree["rs/src/typeref.rs"] == 1  # mod and use of one file count once


def test_k_occurrence_of_a_real_index_gives_every_chunk_k_neighbours(tmp_path: Path) -> None:
    root = write_files(tmp_path / "repo", TINY_FILES)
    index_repository(root, settings=Settings())
    hubs = knn_hubness(root)
    k = min(KNN_K, len(hubs) - 1)
    assert k >= 2
    assert sum(o for o, _ in hubs.values()) == k * len(hubs)  # each chunk names k neighbours, never itself
    assert all(-1.0 <= d <= 1.0 for _, d in hubs.values())
    cache = tmp_path / "knn.json"
    evidence = TreeEvidence(root, cache)
    assert evidence.chunk_knn.keys() == hubs.keys() and evidence.leaves["src/auth/service.py"] >= 1
    rows = json.loads(cache.read_text())
    rows[0][3] = 999
    cache.write_text(json.dumps(rows))
    assert TreeEvidence(root, cache).chunk_knn[tuple(rows[0][:3])][0] == 999  # the cache is read, not recomputed
