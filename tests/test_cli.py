"""The `coderag` command line: help without heavy imports, index and status output, config errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from coderag.cli import main

HEAVY_MODULES = ("llama_index", "torch", "qdrant_client", "qdrant_edge", "transformers", "sentence_transformers")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize("args", [["-h"], ["--help"]] + [[name, "--help"] for name in sorted(main.commands)])
def test_cli_help_exits_zero(runner: CliRunner, args: list[str]) -> None:
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output


def test_cli_help_lists_index_and_status(runner: CliRunner) -> None:
    out = runner.invoke(main, ["--help"]).output
    assert re.search(r"^\s+index\s", out, re.M) and re.search(r"^\s+status\s", out, re.M)


PROBE = """
import sys
from coderag.cli import main
for args in (["--help"], ["-h"], ["index", "--help"], ["status", "--help"]):
    try:
        main(args, prog_name="coderag")
    except SystemExit as exc:
        assert exc.code == 0, (args, exc.code)
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print("HEAVY:" + ",".join(loaded))
"""


def test_cli_help_imports_no_heavy_module() -> None:
    """`--help` must be instant: LlamaIndex, torch and Qdrant are imported by command bodies only."""
    out = subprocess.run([sys.executable, "-c", PROBE, *HEAVY_MODULES], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:", out.stdout.splitlines()[-1]


SUMMARY = re.compile(
    r"^Indexed (?P<root>\S+) in [\d.]+ s\n"
    r"  files:  (?P<seen>\d+) seen, (?P<indexed>\d+) indexed, (?P<unchanged>\d+) unchanged, (?P<removed>\d+) removed, "
    r"(?P<skipped>\d+) skipped(?: \((?P<reasons>[^)]*)\))?\n"
    r"  chunks: (?P<chunks>\d+) written \((?P<embedded>\d+) embedded, (?P<cached>\d+) from cache, "
    r"(?P<dups>\d+) duplicates\), [\d.]+ chunks/s$", re.M)


def _summary(output: str) -> dict:
    m = SUMMARY.search(output)
    assert m, f"no summary in:\n{output}"
    return {k: (int(v) if v and v.isdigit() else v) for k, v in m.groupdict().items()}


def test_cli_index_then_status(runner: CliRunner, tiny_repo: Path) -> None:
    res = runner.invoke(main, ["index", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    s = _summary(res.stdout)
    assert "indexing 5 files..." in res.stderr  # off a terminal: one line per phase, no bar
    assert s["root"] == str(tiny_repo.resolve())
    assert (s["seen"], s["indexed"], s["unchanged"], s["removed"], s["skipped"]) == (5, 5, 0, 0, 0)
    assert s["chunks"] == s["embedded"] > 0 and s["cached"] == 0
    leaves = s["chunks"]

    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert f"root:        {tiny_repo.resolve()}" in res.output
    assert "files:       5 indexed, 0 skipped" in res.output
    assert re.search(rf"^chunks:      {leaves} leaves, \d+ nodes in all, 0 duplicates$", res.output, re.M)
    assert "pending:     none, the index is up to date" in res.output

    # Status finds the index from a folder inside the root, like git.
    res = runner.invoke(main, ["status", str(tiny_repo / "src" / "auth")])
    assert res.exit_code == 0 and f"root:        {tiny_repo.resolve()}" in res.output

    (tiny_repo / "src/billing/invoice.py").write_text("def invoice_total(items):\n    return 0\n")
    (tiny_repo / "README.md").unlink()
    (tiny_repo / "docs.md").write_text("# Docs\n\nMore words.\n")
    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert "pending:     2 new or modified, 1 deleted" in res.output

    res = runner.invoke(main, ["index", str(tiny_repo)])
    s = _summary(res.stdout)
    assert (s["seen"], s["indexed"], s["unchanged"], s["removed"]) == (5, 2, 3, 1)
    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert "pending:     none, the index is up to date" in res.output


def test_cli_index_verbose_lists_each_skip_with_reason(runner: CliRunner, tmp_path: Path) -> None:
    from test_scan import EXPECTED_SKIPS, make_noise_repo

    root = make_noise_repo(tmp_path / "repo")
    cfg = tmp_path / "coderag.yaml"
    cfg.write_text("chunking:\n  max_file_bytes: 5500000\n")
    res = runner.invoke(main, ["index", "--verbose", "--config", str(cfg), str(root)])
    assert res.exit_code == 0, res.output
    s = _summary(res.stdout)
    assert (s["seen"], s["indexed"], s["skipped"]) == (7, 2, sum(EXPECTED_SKIPS.values()))
    assert s["reasons"] == ", ".join(f"{k} {v}" for k, v in sorted(EXPECTED_SKIPS.items()))
    skipped_part = res.output.split("  skipped:\n")[1].split("  indexed with notes:\n")[0]
    listed = re.findall(r"^    (\S+): ([a-z-]+)", skipped_part, re.M)
    assert sorted(listed) == sorted([
        ("bin/tool.py", "binary"), ("data/huge.txt", "too-large"), ("empty.py", "empty"),
        ("gen/api.pb.gen.go", "generated"), ("loop", "symlink"),
        ("outside_link", "symlink"), ("web/app.js", "minified")])
    # indexed, its one bad byte replaced, and said so (issue 27)
    assert "  notes:  1 decoded with replacement\n" in res.output
    assert "    legacy/latin1.py: decoded with replacement (1 byte(s) not UTF-8, the first at byte 12)" in res.output

    res = runner.invoke(main, ["status", str(root)])
    # One count everywhere (issue 26: status said 5 above a list of 7, a no-op index 2): symlinks, which the
    # walk never opens, and files read once and left out, whichever run read them.
    assert "files:       2 indexed, 7 skipped" in res.output, res.output
    listed = re.search(r"^skipped:     (.*)$", res.output, re.M).group(1)
    assert sum(int(n) for n in re.findall(r"(\d+) [a-z-]+", listed)) == 7, listed
    assert "notes:       1 decoded with replacement\n" in res.output

    res = runner.invoke(main, ["index", "--verbose", "--config", str(cfg), str(root)])  # nothing changed
    assert res.exit_code == 0, res.output
    s = _summary(res.stdout)
    assert (s["indexed"], s["unchanged"], s["skipped"]) == (0, 7, 7), res.stdout
    assert len(re.findall(r"^    \S+: [a-z-]+", res.output.split("  skipped:\n")[1], re.M)) == 7, res.output


def test_cli_status_says_when_the_settings_differ_from_the_index(runner: CliRunner, tiny_repo: Path) -> None:
    """No owner running: an edited chunking in qdrant.yaml is named by status before anything rebuilds (issue 26)."""
    assert runner.invoke(main, ["index", str(tiny_repo)]).exit_code == 0
    assert "settings:" not in runner.invoke(main, ["status", str(tiny_repo)]).output
    (tiny_repo / "qdrant.yaml").write_text("chunking:\n  max_tokens: 64\n")
    out = runner.invoke(main, ["status", str(tiny_repo)]).output
    assert "settings:    the model or chunking changed since the index was built" in out, out


def test_cli_index_rebuilds_an_index_of_other_settings(runner: CliRunner, tiny_repo: Path, tmp_path: Path) -> None:
    """A changed chunking setting (or a coderag upgrade with a new splitter): `coderag index` builds the index
    again and says so, as an owner does, instead of refusing until `--rebuild` is typed."""
    from coderag.base.paths import DB_NAME, index_dir

    assert runner.invoke(main, ["index", str(tiny_repo)]).exit_code == 0
    cfg = tmp_path / "qdrant.yaml"
    cfg.write_text("chunking:\n  max_tokens: 64\n")
    res = runner.invoke(main, ["index", "--config", str(cfg), str(tiny_repo)])
    assert res.exit_code == 0, res.output
    assert "rebuilt: the index had been built with other model or chunking settings" in res.stdout
    s = _summary(res.stdout)
    assert (s["seen"], s["indexed"], s["unchanged"]) == (5, 5, 0)
    assert not list(index_dir(tiny_repo).glob("previous.db*"))  # the old vectors are gone once it is whole
    assert (index_dir(tiny_repo) / DB_NAME).is_file()
    res = runner.invoke(main, ["index", "--config", str(cfg), str(tiny_repo)])
    assert res.exit_code == 0 and "rebuilt" not in res.stdout, res.output
    assert _summary(res.stdout)["unchanged"] == 5


@pytest.mark.parametrize("yaml_text, key, bad", [
    ("store:\n  mode: foo\n", "store.mode", "'foo'"),
    ("chunking:\n  max_tokens: 4\n", "chunking.max_tokens", "4"),
    ("embedding:\n  batch_size: lots\n", "embedding.batch_size", "'lots'"),
    ("chunking:\n  max_tokns: 100\n", "chunking.max_tokns", "100"),
])
def test_cli_bad_config_names_key_and_exits_1(runner: CliRunner, tiny_repo: Path, tmp_path: Path,
                                              yaml_text: str, key: str, bad: str) -> None:
    cfg = tmp_path / "qdrant.yaml"
    cfg.write_text(yaml_text)
    res = runner.invoke(main, ["index", "--config", str(cfg), str(tiny_repo)])
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit), res.exception  # a clean ClickException, not a crash
    line = next((ln for ln in res.output.splitlines() if key in ln), None)
    assert line is not None, f"{key!r} not named in:\n{res.output}"
    assert bad in line, f"bad value {bad} not quoted in {line!r}"
    assert str(cfg) in res.output
    assert not (tiny_repo / ".coderag").exists(), "a bad config must stop before touching the repository"


def test_cli_missing_config_file_and_missing_index(runner: CliRunner, tiny_repo: Path, tmp_path: Path) -> None:
    res = runner.invoke(main, ["index", "--config", str(tmp_path / "nope.yaml"), str(tiny_repo)])
    assert res.exit_code == 1 and "nope.yaml does not exist" in res.output
    res = runner.invoke(main, ["status", str(tiny_repo)])
    assert res.exit_code == 1 and f'coderag index {tiny_repo}' in res.output
