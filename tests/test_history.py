"""Mining labelled queries from a real git history (eval/history.py): which commits describe their change,
what their query says, and which lines of the snapshot are their gold."""

from __future__ import annotations

import subprocess
from pathlib import Path

from coderag.eval.history import TEST, clean_message, describes_change, make_snapshot, mine, missing_blobs

APP_V1 = '''\
def login(user, password):
    return check(user, password)


def check(user, password):
    return user == "admin"
'''
APP_V2 = '''\
def login(user, password, retries=3):
    for attempt in range(retries):
        if check(user, password):
            return True
    return False


def check(user, password):
    return user == "admin"
'''


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


def _commit(repo: Path, files: dict[str, str], message: str, author: str = "Dev") -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, f"--author={author} <{author.lower()}@example.com>")
    return _git(repo, "rev-parse", "HEAD").strip()


def test_history_mines_the_commits_that_describe_a_change_with_the_lines_they_added(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _commit(repo, {"src/app.py": APP_V1, "README.md": "# app\n", "pyproject.toml": "[project]\nversion='1'\n"},
            "Add the first version of the login flow")
    wanted = _commit(repo, {"src/app.py": APP_V2, "tests/test_app.py": "def test_login(): pass\n",
                            "CHANGES.md": "retries\n"},
                     "Retry the login a few times before giving up (#42)\n\nA flaky store made users log in "
                     "twice.\n\nSigned-off-by: Dev <dev@example.com>")
    _commit(repo, {"pyproject.toml": "[project]\nversion='2'\n", "src/app.py": APP_V2 + "\n"},
            "Bump version to 2.0 for the release")
    _commit(repo, {"src/app.py": APP_V2 + "\n# end\n", "pyproject.toml": "[project]\nversion='3'\n"},
            "Change the login module and the project file together")  # a config file beside: not described
    _commit(repo, {"src/app.py": APP_V2 + "\n# end\n# more\n"}, "Update the login module as the bot wants it",
            author="renovate[bot]")
    head = _git(repo, "rev-parse", "HEAD").strip()
    snapshot = make_snapshot(repo / ".git", head, tmp_path / "snap")

    pairs, why = mine("dev/app", repo / ".git", snapshot, head, "train", years=1)

    assert [p["id"] for p in pairs] == [f"history-dev/app@{wanted[:12]}"]
    pair = pairs[0]
    assert pair["query"] == "Retry the login a few times before giving up\n\nA flaky store made users log in twice."
    assert pair["kind"] == "commit" and pair["split"] == "train" and pair["commit"] == head
    # The five lines the commit added, as the snapshot numbers them (1-based, inclusive); `check`, which it
    # left alone, is not gold.
    assert pair["gold"] == [{"file_path": "src/app.py", "start_line": 1, "end_line": 5}]
    # The first commit and the fourth change the project file beside the code.
    assert why.counts == {"message": 1, "other files": 2, "bot": 1}
    assert (snapshot / "src/app.py").read_text() == APP_V2 + "\n# end\n# more\n"


def test_history_reads_only_describing_subjects_and_cleans_messages() -> None:
    assert not describes_change("Fix typo in the parser docs here")
    assert not describes_change("chore(deps): update rust crate serde to v1.0.200")
    assert not describes_change("Revert \"Add retries to the login flow\"")
    assert not describes_change("Run black over the whole code base")
    assert describes_change("fix(router): match a trailing slash on mounted routes")
    assert clean_message("Handle empty input in the tokenizer\n\nFixes #12.\nCloses: #13\nCo-authored-by: A <a@b>") \
        == "Handle empty input in the tokenizer"


def test_history_mines_the_behaviours_new_tests_state_with_their_commits_gold(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _commit(repo, {"src/app.py": APP_V1, "tests/test_app.py": "def test_login(): pass\n"}, "Add the login flow")
    wanted = _commit(repo, {"src/app.py": APP_V2, "tests/test_app.py": (
        "def test_login(): pass\n\n\ndef test_login_retries_before_giving_up():\n    pass\n\n\n"
        "def test_login_gives_up_after_retries():\n    \"\"\"A wrong password fails after three tries.\"\"\"\n"
        "\n\ndef test_check(): pass\n")}, "wip")  # a message that says nothing: its tests still do
    _commit(repo, {"src/app.py": APP_V2 + "\n", "pyproject.toml": "[project]\n",
                   "tests/test_more.py": "def test_the_project_file_is_read_first(): pass\n"}, "wip")
    head = _git(repo, "rev-parse", "HEAD").strip()
    snapshot = make_snapshot(repo / ".git", head, tmp_path / "snap")

    pairs, why = mine("dev/app", repo / ".git", snapshot, head, "heldout", years=1, kind=TEST)

    # The docstring's sentence stands for its test; a name of fewer than four words states no behaviour.
    assert [p["query"] for p in pairs] == ["login retries before giving up", "A wrong password fails after three tries."]
    assert [p["id"] for p in pairs] == [f"history-dev/app@{wanted[:12]}:test0", f"history-dev/app@{wanted[:12]}:test1"]
    assert all(p["kind"] == "test" and p["split"] == "heldout" for p in pairs)
    assert pairs[0]["gold"] == [{"file_path": "src/app.py", "start_line": 1, "end_line": 5}]
    # The last commit changes the project file beside its test; the first adds a test named in one word.
    assert why.counts == {"other files": 1, "no test description": 1}


def test_history_snapshot_leaves_out_files_the_mirror_lacks(tmp_path: Path) -> None:
    """A mirror may hold a repository without its largest files: the snapshot is made without them."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    head = _commit(repo, {"src/app.py": APP_V1, "media/logo.sketch": "a large design file\n"},
                   "Add the login flow and the logo")
    blob = _git(repo, "rev-parse", f"{head}:media/logo.sketch").strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()

    assert missing_blobs(repo / ".git", head) == ["media/logo.sketch"]
    snapshot = make_snapshot(repo / ".git", head, tmp_path / "snap")
    assert (snapshot / "src/app.py").read_text() == APP_V1
    assert not (snapshot / "media/logo.sketch").exists()
    assert (snapshot / ".commit").read_text().strip() == head


def test_report_queries_pair_a_bug_report_with_the_lines_its_fix_added(tmp_path: Path) -> None:
    from coderag.eval.history import ISSUE
    from coderag.eval.report_queries import report_queries

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"src/app.py": APP_V1}, "Add the first version of the login flow")
    fix = _commit(repo, {"src/app.py": APP_V2, "tests/test_app.py": "def test_login(): pass\n"},
                  "Retry the login a few times before giving up (fixes #7)")
    _git(repo, "checkout", "-q", "-b", "side")
    unmerged = _commit(repo, {"src/app.py": APP_V2 + "\n# side\n"}, "Note the side branch in the login module")
    _git(repo, "checkout", "-q", "main")
    head = _git(repo, "rev-parse", "HEAD").strip()
    snapshot = make_snapshot(repo / ".git", head, tmp_path / "snap")
    reports = [{"repo": "acme/app", "issue": 7, "fix_commit": fix, "title": "Login fails on a flaky store",
                "body": "Traceback (most recent call last):\n  File \"src/app.py\", line 2, in login\n"
                        "KeyError: 'user'"},
               {"repo": "acme/app", "issue": 8, "fix_commit": unmerged, "title": "Side", "body": "not merged"},
               {"repo": "acme/other", "issue": 9, "fix_commit": fix, "title": "Another project", "body": "x"}]

    found, why = report_queries(reports, "acme/app", repo / ".git", snapshot, head, "train")
    commit_queries, _ = mine("acme/app", repo / ".git", snapshot, head, "train")

    assert [q["id"] for q in found] == ["history-acme/app#7"]
    q = found[0]
    assert q["query"].startswith("Login fails on a flaky store\nTraceback (most recent call last):")
    assert q["kind"] == ISSUE and q["split"] == "train" and q["commit"] == head
    # The same gold as the fix's own message would have: the lines it added that the snapshot holds.
    assert q["gold"] == next(c["gold"] for c in commit_queries if c["id"].endswith(fix[:12]))
    assert {g["file_path"] for g in q["gold"]} == {"src/app.py"}
    assert why.counts == {"fix not in the snapshot": 1}
