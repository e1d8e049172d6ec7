"""swebench-dev in `coderag eval`: conversion, local snapshots, splits, BM25-only builds and their densifying,
the li-bm25 and bm25-window baselines, on two fake snapshots in tmp_path (real indexing, real BM25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.eval import datasets, swebench
from coderag.eval.corpora import CorpusMissingError, fetch, is_fetched
from coderag.eval.datasets import Gold, load_dataset, validate
from coderag.eval.snapshots import SNAPSHOTS, snapshot_root

from conftest import write_files

C1 = "0123456789abcdef0123456789abcdef01234567"
C2 = "fedcba9876543210fedcba9876543210fedcba98"
WIDGETS = {
    "src/widgets/core.py": '''\
        """Widgets."""


        def render_widget(widget, width):
            """Draw a widget into a box of the given width."""
            border = "+" + "-" * width + "+"
            return border + widget.label.center(width) + border


        def resize_widget(widget, factor):
            if factor <= 0:
                raise ValueError("factor must be positive")
            widget.width = int(widget.width * factor)
            return widget
        ''',
    "README.md": "# Widgets\n\nresize_widget raises ValueError when the factor is negative.\n",
}
SOLAR = {
    "pvlib/irradiance.py": '''\
        import math


        def clearness_index(ghi, extra_radiation, zenith):
            """Ratio of global horizontal irradiance to extraterrestrial irradiance."""
            cos_z = math.cos(math.radians(zenith))
            return ghi / (extra_radiation * max(cos_z, 0.065))
        ''',
    "docs/index.rst": "Solar\n=====\n\nThe clearness index.\n",
}
SOURCE = [  # the shape of ../shared/datasets/swebench-dev/queries.jsonl
    {"id": "swe-acme__widgets-1", "repo": "acme/widgets", "commit": C1,
     "query": "resize_widget crashes with ValueError\n\n```\nTraceback (most recent call last):\n"
              "  File \"app.py\", line 3, in <module>\n    resize_widget(w, -1)\n"
              "ValueError: factor must be positive\n```\n",
     "gold_files": ["src/widgets/core.py"], "gold_lines": {"src/widgets/core.py": [[11, 12]]},
     "source": "swe-bench-lite", "kind": "issue", "language": "python", "instance_id": "acme__widgets-1"},
    {"id": "swe-pvlib__pvlib-python-2", "repo": "pvlib/pvlib-python", "commit": C2,
     "query": "clearness_index divides by a tiny cosine of the zenith near sunset",
     "gold_files": ["pvlib/irradiance.py"], "gold_lines": {"pvlib/irradiance.py": [[6, 8]]},  # 8: past the end
     "source": "swe-bench-lite", "kind": "issue", "language": "python", "instance_id": "pvlib__pvlib-python-2"},
]


@pytest.fixture
def snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two snapshots as prepare.sh writes them, found through $CODERAG_SWEBENCH_DIR."""
    folder = tmp_path / "swebench-dev"
    write_files(folder / f"acme+widgets@{C1[:12]}", WIDGETS)
    write_files(folder / f"pvlib+pvlib-python@{C2[:12]}", SOLAR)
    monkeypatch.setenv(SNAPSHOTS["swebench-dev"].env, str(folder))
    return folder


@pytest.fixture
def dataset(tmp_path: Path, snapshots: Path) -> Path:
    out = tmp_path / "swebench-dev.jsonl"
    swebench.write(swebench.convert([json.dumps(r) for r in SOURCE], snapshots), out)
    return out


def test_convert_keeps_repo_commit_and_fits_gold(dataset: Path, snapshots: Path):
    a, b = load_dataset(dataset)
    assert (a.id, a.corpus, a.kind, a.split, a.repo, a.commit) == \
        ("swebench-dev-acme__widgets-1", "swebench-dev", "issue", "tune", "acme/widgets", C1)
    assert a.gold == (Gold("src/widgets/core.py", 11, 12),)
    assert a.query.startswith("resize_widget crashes") and a.query == a.query.strip()
    assert b.split == "heldout"  # pvlib/pvlib-python is a held-out repository
    assert b.gold == (Gold("pvlib/irradiance.py", 6, 7),)  # cut at the file's last line
    assert validate([a, b], root_for_corpus=fetch) == []
    assert swebench.fit_range(["x", "", "", "y"], 2, 3) == (1, 4)  # blank-only: widened to the code around


def test_snapshot_lookup_and_what_to_do_when_missing(snapshots: Path, tmp_path: Path, monkeypatch):
    assert fetch("swebench-dev") == snapshots and is_fetched("swebench-dev")
    assert snapshot_root("swebench-dev", "acme/widgets", C1) == snapshots / f"acme+widgets@{C1[:12]}"
    with pytest.raises(CorpusMissingError, match=f"snapshot acme\\+widgets@{C2[:12]} of corpus"):
        snapshot_root("swebench-dev", "acme/widgets", C2)
    monkeypatch.setenv("CODERAG_SWEBENCH_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(CorpusMissingError) as err:
        fetch("swebench-dev")
    msg = str(err.value)
    assert f"OUT={tmp_path / 'nowhere'} " in msg and "MIRROR_DIR=" in msg and msg.split("\n")[1].endswith("prepare.sh")
    assert "CODERAG_SWEBENCH_DIR" in msg and not is_fetched("swebench-dev")
    monkeypatch.delenv("CODERAG_SWEBENCH_DIR")
    assert SNAPSHOTS["swebench-dev"].folder().name == "swebench-dev"  # prepare.sh's default, in the temp dir


def test_validate_checks_gold_in_each_querys_snapshot(dataset: Path, snapshots: Path):
    rec = json.loads(dataset.read_text().splitlines()[0])
    rec["gold"][0]["file_path"] = "src/widgets/gone.py"
    errors = validate([rec], root_for_corpus=lambda _n: snapshots)
    assert len(errors) == 1 and "gold file missing" in errors[0]
    del rec["commit"]
    assert any("repo and commit come together" in e for e in validate([rec], root_for_corpus=None))
    assert any("unknown split 'test'" in e for e in validate([{**rec, "commit": C1, "split": "test"}], None))


def _eval(args: list[str]):
    from coderag.cli import main

    return CliRunner().invoke(main, ["eval", *args])


def test_cli_runs_swebench_bm25_only_with_baselines_and_splits(dataset: Path, snapshots: Path, tmp_path: Path):
    res = _eval(["--dataset", str(dataset), "--variants", "bm25,li-bm25,bm25-window", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "### split tune (n=1)" in res.output and "### split heldout (n=1)" in res.output
    assert "### kind issue, split heldout (n=1)" in res.output
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    corpora = data["meta"]["corpora"]
    assert set(corpora) == {f"swebench-dev/acme+widgets@{C1[:12]}", f"swebench-dev/pvlib+pvlib-python@{C2[:12]}"}
    for info in corpora.values():  # no vectors: every indexed file waits for its dense pass
        assert info["mode"] == "bm25-only" and info["pending_dense"] == info["files"] > 0
        assert info["li-bm25"]["units"] > 0 and info["bm25-window"]["units"] >= 1
    by_id = {q["id"]: q for q in data["queries"]}
    widgets = by_id["swebench-dev-acme__widgets-1"]
    assert widgets["split"] == "tune"
    for v in ("bm25", "li-bm25", "bm25-window"):
        out = widgets["outcomes"][v]
        assert "error" not in out, out
        assert out["ranked"][0].startswith("src/widgets/core.py:"), (v, out["ranked"])
        assert out["metrics"]["recall@1"] == 1.0 and out["metrics"]["mrr@10"] == 1.0 and out["in_payload"]
    # bm25-window reads code files only: the README that names the function is not a window
    assert all(not r.startswith("README.md") for r in widgets["outcomes"]["bm25-window"]["ranked"])
    assert data["summary"]["bm25"]["split:heldout"]["n"] == 1


def test_cli_dataset_all_skips_missing_snapshots_and_explicit_says_how(dataset: Path, tmp_path: Path, monkeypatch):
    shelf = tmp_path / "shelf"  # the shipped-datasets folder, with a one-query pinned-style dataset next to it
    shelf.mkdir()
    (shelf / "swebench-dev.jsonl").write_text(dataset.read_text())
    tiny = write_files(tmp_path / "tiny", WIDGETS)
    q = {"id": "tiny-1", "corpus": "tiny", "query": "resize_widget", "kind": "identifier", "split": "tune",
         "gold": [{"file_path": "src/widgets/core.py", "start_line": 10, "end_line": 14}]}
    (shelf / "tiny.jsonl").write_text(json.dumps(q) + "\n")
    monkeypatch.setattr(datasets, "DATASETS_DIR", shelf)
    monkeypatch.setenv("CODERAG_SWEBENCH_DIR", str(tmp_path / "not-prepared"))

    res = _eval(["--dataset", "all", "--variants", "bm25", "--corpus-root", f"tiny={tiny}",
                 "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "skipping dataset swebench-dev: the snapshots of swebench-dev are not in" in res.output
    assert "| bm25 | 1 | 0 |" in res.output

    res = _eval(["--dataset", "swebench-dev", "--variants", "bm25"])
    assert res.exit_code == 1 and "prepare.sh" in res.output and "MIRROR_DIR=" in res.output, res.output
