"""eval/bench_resume.py: its comparison of two indexes says "same" only for the same content, and a build
killed with SIGKILL mid-run resumes to the content of a clean build."""

from pathlib import Path

from coderag.eval.bench_resume import _child, corpus_files, differences, link_copy, snapshot
from coderag.pipelines.code_index import CodeIndex


def _build(root: Path) -> None:
    with CodeIndex.open(root) as index:
        index.refresh(dense=False)


def test_snapshots_match_for_equal_builds_and_name_a_changed_file(tiny_repo, tmp_path):
    other = tmp_path / "other" / "repo"
    link_copy(tiny_repo, corpus_files(tiny_repo, None), other)
    _build(tiny_repo)
    _build(other)
    clean = snapshot(tiny_repo)
    assert clean["store points"] and clean["leaf chunks per file"]
    assert differences(clean, snapshot(other)) == []

    path = other / "src/billing/invoice.py"
    text = path.read_text()
    path.unlink()  # a hard link: writing through it would change tiny_repo's file too
    path.write_text(text.replace("tax_rate", "vat_rate"))
    _build(other)
    diffs = differences(clean, snapshot(other))
    sections = {d.split(":")[0] for d in diffs}
    assert {"manifest", "leaf chunks per file", "store points"} <= sections
    assert any("src/billing/invoice.py" in d for d in diffs if d.startswith("manifest"))


def test_a_build_killed_mid_run_resumes_to_the_clean_content(tmp_path):
    src = tmp_path / "src"
    for i in range(150):  # three batches of ingestion.BATCH_FILES (64)
        p = src / f"pkg{i // 50}" / f"mod_{i:03d}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"def handler_{i}(request):\n    return {{'id': {i}, 'name': 'item {i}'}}\n\n\n"
                     f"class Model{i}:\n    field = {i}\n\n    def save(self):\n        return handler_{i}(self)\n")
    rels = corpus_files(src, None)
    clean_root, killed_root = tmp_path / "clean" / "src", tmp_path / "killed" / "src"
    link_copy(src, rels, clean_root)
    link_copy(src, rels, killed_root)
    _build(clean_root)
    log = tmp_path / "children.log"
    killed = _child("--build-only", killed_root, log, kill_at=0.3)
    assert killed["killed"] and killed["progress"][0] < 150, killed
    resumed = _child("--build-only", killed_root, log)
    assert 0 < resumed["result"]["indexed"] < 150
    assert differences(snapshot(clean_root), snapshot(killed_root)) == []


def test_dense_vectors_are_compared_within_a_tolerance():
    """A resumed build embeds a chunk in another batch (other padding): its last float bits may move, no more."""
    clean = {"dense vectors": {"p1 dense": "[0.1, 0.2]"}, "store points": {"p1": '{"payload": 1}'}}
    assert differences(clean, {**clean, "dense vectors": {"p1 dense": "[0.100001, 0.2]"}}) == []
    moved = differences(clean, {**clean, "dense vectors": {"p1 dense": "[0.2, 0.2]"}})
    assert len(moved) == 1 and moved[0].startswith("dense vectors: 0 only in clean, 0 only in resumed, 1 differ")
    assert differences(clean, {**clean, "store points": {"p1": '{"payload": 2}'}})[0].startswith("store points")
