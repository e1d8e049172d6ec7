"""An index made before a CR alone ended a line holds such a file as one line; its upgrade indexes that file
again, and only that file (pipelines/migrations.py resplit_lone_cr)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import write_files

# Classic Mac line ends; written first with a space where each CR goes (the same size, one line), indexed, then
# given its CRs with the same time: the index holds it as one line, as an older coderag made it.
MAC = "def first_mac_helper():\r    return 1\r\rdef second_mac_helper():\r    return 2\r"


def test_an_upgrade_splits_again_the_files_a_cr_alone_ends_lines_of(tmp_path: Path) -> None:
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import LINE_ENDS_KEY

    root = write_files(tmp_path / "repo", {"src/unix.py": "def unix_helper():\n    return 0\n"})
    mac = root / "src/mac.py"
    mac.write_bytes(MAC.replace("\r", " ").encode())
    index_repository(root)
    st = mac.stat()
    mac.write_bytes(MAC.encode())
    os.utime(mac, ns=(st.st_atime_ns, st.st_mtime_ns))
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(LINE_ENDS_KEY, "")  # as an index of before has it: no such key
        idx.state.commit()
        res = idx.search("second_mac_helper", retriever="bm25", refresh=False)
        assert (res[0].file_path, res[0].start_line, res[0].end_line) == ("src/mac.py", 1, 1)  # the control
        unix_before = {n for n in idx.docstore.get_ref_doc_info("src/unix.py").node_ids}

    summary = index_repository(root)
    assert summary.upgraded == {"files whose lines end in a CR alone (a classic Mac file) indexed again with "
                                "their line numbers": 1}
    with CodeIndex.open(root, create=False) as idx:
        res = idx.search("second_mac_helper", retriever="bm25", refresh=False)
        hit = next(r for r in res if r.file_path == "src/mac.py")
        assert (hit.start_line, hit.end_line) != (1, 1) and "second_mac_helper" in hit.text
        assert hit.text.split("\n")[0] == MAC.split("\r")[hit.start_line - 1]
        assert set(idx.docstore.get_ref_doc_info("src/unix.py").node_ids) == unix_before  # not indexed again
    assert index_repository(root).upgraded == {}  # once
