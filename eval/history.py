"""Labelled queries mined from git history: a commit's message describes its change, the files it
changed are where that change lives.

A commit gives a query when its message says what changed and its diff is narrow enough to name the
place: a subject of MIN_SUBJECT_WORDS words or more; not a merge, revert, release, version bump,
dependency update, formatting or lint pass, typo fix or bot commit; 1 to MAX_SOURCE_FILES source files
changed (added or modified, none renamed or deleted) and every other changed file a test or a doc. The
query is the subject and body with trailers (``Signed-off-by:``), PR and issue numbers and links
removed. Its gold is each changed source file as the indexed snapshot has it, with the lines the
commit added or touched where those lines are still in that snapshot (a line whose text occurs once in
the file there); a file none of whose lines survive is gold as a whole.

The same narrow commits give a second kind of query (TEST): each test they add beside their source change
states a behaviour of that change in its name, docstring or spec string ("returns 404 when no route
matches"), with the commit's gold. These read like a question about what code does, which a commit
message does not; and the text they are found by lies in the test, not in the gold.

One snapshot per repository is indexed (a pinned commit, `HISTORY_REPOS` in eval/history_repos.py), and
the commits of the `years` before it whose source files all still exist there are mined from it. Queries never cross
repositories, and the split (train or heldout) is the repository's, never the query's.

This module only reads git; nothing it makes is committed (the queries quote public commit messages):
``python -m coderag.eval.ranker_data queries`` rebuilds them, and eval/README.md says how the whole training
set is made.

Examples:
    >>> clean_message("Fix the parser (#123)\\n\\nIt dropped tabs.\\n\\nSigned-off-by: A <a@b.c>")
    'Fix the parser\\n\\nIt dropped tabs.'
    >>> describes_change("Bump version to 2.1.0"), describes_change("Handle empty input in the tokenizer")
    (False, True)
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coderag.eval.behaviour_queries import described_behaviours
from coderag.nodes.file_roles import DOCS, SOURCE, TESTS, file_role
from coderag.nodes.languages import detect_language

MIN_SUBJECT_WORDS = 5
MAX_SOURCE_FILES = 3
MAX_QUERY_CHARS = 2000  # a body past this is a changelog or a template pasted in, not a description
MIN_LINE_CHARS = 8  # shorter lines (`}`, `return`, `end`) occur everywhere and locate nothing
DEFAULT_YEARS = 5.0

CODE_LANGUAGES = frozenset({"python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp",
                            "csharp", "ruby", "php", "kotlin", "scala", "swift", "lua"})

_TRAILER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(-by|-[Ii]d|-[Tt]o)?:\s+\S.*$")
_TRAILER_KEYS = re.compile(r"^(signed-off|co-authored|reviewed|acked|tested|reported|suggested|helped|cc|"
                           r"change-id|fixes|closes|resolves|refs?|see|pr|pr-url|issue|bug|link|"
                           r"differential revision|reviewers?|approved)(-by)?:", re.I)
_REFS = re.compile(r"\(\s*(?:#|GH-|gh-)\d+\s*\)|(?<![\w/])(?:#|GH-|gh-)\d+\b|https?://\S+/(?:pull|issues)/\d+\S*")
_CLOSE_WORDS = re.compile(r"\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?|refs?|see)\s*:?\s*(?=[.,;]|$)", re.I | re.M)
_NOISE_LINES = re.compile(r"^\s*(?:[A-Z][A-Z_]+=.*|<!--.*?-->|\[skip ci\]|\[ci skip\]|[-*=_]{3,}|- \[[ xX]\].*)\s*$", re.M)
_NOT_A_CHANGE = re.compile(
    r"^\s*(?:revert|merge|release|bump|prepare (?:for )?(?:the )?release|version|v?\d+\.\d+(?:\.\d+)?\b)"
    r"|\b(?:bump(?:s|ed)?|dependabot|renovate|pre-commit-ci|changelog|release notes"
    r"|deps|dependenc(?:y|ies)|upgrade \S+ (?:from|to)|update \S+ (?:from|to) v?\d"
    r"|reformat\w*|re-format\w*|formatting|run (?:black|prettier|gofmt|rustfmt|cargo fmt)|apply (?:black|prettier)"
    r"|gofmt|rustfmt|cargo fmt|clang-format|prettier|isort|lint(?:s|ing|er)?|clippy|typos?|spelling|whitespace"
    r"|copyright|license header)\b"
    r"|^\s*(?:style|chore\((?:deps|release)\)|build\(deps\)|ci|docs?|test|tests)(?:\(.*?\))?!?:", re.I)
_BOT = re.compile(r"\[bot\]|dependabot|renovate|github-actions|pre-commit-ci|allcontributors|greenkeeper", re.I)


def clean_message(message: str) -> str:
    """A commit message as a query: trailers, PR and issue numbers and links, CI markers, rules and
    template checklists removed; blank lines kept between paragraphs; at most MAX_QUERY_CHARS."""
    lines = message.strip().splitlines()
    while lines and (not lines[-1].strip() or _TRAILER_KEYS.match(lines[-1].strip())
                     or (_TRAILER.match(lines[-1].strip()) and len(lines) > 1)):
        lines.pop()  # the trailer block at the end
    text = "\n".join(line for line in lines if not _TRAILER_KEYS.match(line.strip()))
    text = _CLOSE_WORDS.sub("", _NOISE_LINES.sub("", _REFS.sub("", text)))
    text = "\n".join(line for line in text.split("\n") if not line.strip() or re.search(r"\w", line))
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    out = "\n\n".join(p for p in paragraphs if p)
    return out[:MAX_QUERY_CHARS].rsplit(" ", 1)[0] if len(out) > MAX_QUERY_CHARS else out


def describes_change(subject: str) -> bool:
    """True if a commit's subject line reads as a description of a change (MIN_SUBJECT_WORDS words or
    more, and not a merge, revert, release, bump, dependency, formatting, lint, typo or docs/CI commit)."""
    words = _REFS.sub("", subject).split()
    return len(words) >= MIN_SUBJECT_WORDS and not _NOT_A_CHANGE.search(subject)


def is_source(path: str) -> bool:
    """A file in a programming language that is neither a test, a doc nor an example."""
    return detect_language(path) in CODE_LANGUAGES and file_role(path, detect_language(path)) == SOURCE


def may_change_beside(path: str) -> bool:
    """Files a commit may change beside its source files without its message being about them."""
    return file_role(path, detect_language(path)) in (TESTS, DOCS)


@dataclass
class FileChange:
    """One file of a commit's diff: its paths before and after, how it changed, its new lines."""

    old_path: str
    new_path: str
    status: str = "modified"  # added, modified, deleted, renamed, binary
    added: list[str] = field(default_factory=list)  # the '+' lines
    context: list[str] = field(default_factory=list)  # the ' ' lines around a hunk that only deletes


@dataclass
class Commit:
    sha: str
    author: str
    timestamp: int
    message: str
    files: list[FileChange] = field(default_factory=list)

    @property
    def subject(self) -> str:
        return self.message.strip().split("\n", 1)[0]


def _git(gitdir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["git", "--git-dir", str(gitdir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def snapshot_time(gitdir: Path, commit: str) -> int:
    out = subprocess.run(["git", "--git-dir", str(gitdir), "log", "-1", "--format=%ct", commit],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


_HEADER = "\x1e"
_FIELD = "\x1f"
_END = "\x1d"
_LOG = ("-M", "-p", "-U1", "--no-color", "--no-ext-diff",
        f"--format={_HEADER}%H{_FIELD}%an <%ae>{_FIELD}%ct{_FIELD}%B{_END}")  # one record per commit, its diff


def commits(gitdir: Path, until: str, years: float) -> Iterator[Commit]:
    """The non-merge commits of the `years` before commit `until` (itself included), with their diffs
    at one line of context, newest first. One `git log` stream per repository."""
    end = snapshot_time(gitdir, until)
    since = end - int(years * 365.25 * 86400)
    proc = _git(gitdir, "log", "--no-merges", f"--since={since}", *_LOG, until)
    assert proc.stdout is not None
    record: list[str] = []
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace")
        if line.startswith(_HEADER) and record:
            yield _parse(record)
            record = []
        record.append(line)
    if record:
        yield _parse(record)
    proc.wait()


def commit_of(gitdir: Path, sha: str) -> Commit:
    """One commit with its diff against its first parent, as `commits` gives it."""
    out = subprocess.run(["git", "--git-dir", str(gitdir), "log", "-1", "--diff-merges=first-parent", *_LOG, sha],
                         capture_output=True, check=True).stdout.decode("utf-8", "replace")
    return _parse(out.splitlines(keepends=True))


def _parse(lines: list[str]) -> Commit:
    text = "".join(lines)
    head, _, diff = text[1:].partition(_END)
    sha, author, ts, message = head.split(_FIELD, 3)
    commit = Commit(sha, author, int(ts), message)
    current: FileChange | None = None
    in_hunk, hunk_added, hunk_context = False, False, []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            if current is not None and in_hunk and not hunk_added:
                current.context.extend(hunk_context)
            m = re.match(r"diff --git a/(.*) b/(.*)$", line)
            current = FileChange(*(m.groups() if m else ("", "")))
            commit.files.append(current)
            in_hunk = False
        elif current is None:
            continue
        elif line.startswith("new file mode"):
            current.status = "added"
        elif line.startswith("deleted file mode"):
            current.status = "deleted"
        elif line.startswith(("rename from", "rename to", "copy from", "copy to")):
            current.status = "renamed"
        elif line.startswith("Binary files"):
            current.status = "binary"
        elif line.startswith("@@"):
            if in_hunk and not hunk_added:
                current.context.extend(hunk_context)
            in_hunk, hunk_added, hunk_context = True, False, []
        elif in_hunk and line.startswith("+") and not line.startswith("+++"):
            current.added.append(line[1:])
            hunk_added = True
        elif in_hunk and line.startswith(" "):
            hunk_context.append(line[1:])
    if current is not None and in_hunk and not hunk_added:
        current.context.extend(hunk_context)
    return commit


def gold_lines(snapshot_text: str, change: FileChange) -> list[tuple[int, int]]:
    """The 1-based inclusive line ranges of the snapshot file that hold lines the commit added (or, for a
    hunk that only deletes, the lines around it), where such a line's text occurs once in the file; runs
    of found lines two apart or closer are one range."""
    lines = snapshot_text.splitlines()
    where: dict[str, list[int]] = {}
    for no, line in enumerate(lines, 1):
        key = line.strip()
        if len(key) >= MIN_LINE_CHARS:
            where.setdefault(key, []).append(no)
    found = sorted({where[k][0] for k in (s.strip() for s in change.added + change.context)
                    if len(where.get(k, ())) == 1})
    ranges: list[tuple[int, int]] = []
    for no in found:
        if ranges and no - ranges[-1][1] <= 2:
            ranges[-1] = (ranges[-1][0], no)
        else:
            ranges.append((no, no))
    return ranges


@dataclass
class Rejections:
    """Why commits gave no query, counted (the dataset card quotes them)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1


def narrow_gold(commit: Commit, snapshot: Path, why: Rejections) -> list[dict] | None:
    """The gold of a commit whose diff is narrow enough to name the place: 1 to MAX_SOURCE_FILES source files
    added or modified, every other file a test or a doc, each source file narrowed to the lines it added or
    touched that are still in the snapshot (a whole file when none is). None, the reason counted in `why`,
    for any other commit."""
    sources = [f for f in commit.files if is_source(f.new_path) or is_source(f.old_path)]
    others = [f for f in commit.files if f not in sources]
    if not sources:
        why.add("no source file")
        return None
    if len(sources) > MAX_SOURCE_FILES:
        why.add("too many source files")
        return None
    if any(not may_change_beside(f.new_path) for f in others):
        why.add("other files")
        return None
    if any(f.status in ("deleted", "renamed", "binary") or f.old_path != f.new_path for f in sources):
        why.add("renamed or deleted")
        return None
    gold = []
    for f in sources:
        path = snapshot / f.new_path
        if not path.is_file():
            why.add("gone from the snapshot")
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
        ranges = gold_lines(text, f) or [(1, max(1, text.count("\n") + (not text.endswith("\n"))))]
        gold += [{"file_path": f.new_path, "start_line": a, "end_line": b} for a, b in ranges]
    return gold


def message_pairs_of(commit: Commit, snapshot: Path, why: Rejections) -> list[dict]:
    """The query of a narrow commit whose message describes its change, with its gold; none for any other
    (the reason counted in `why`)."""
    if not describes_change(commit.subject):
        why.add("message")
        return []
    gold = narrow_gold(commit, snapshot, why)
    if gold is None:
        return []
    query = clean_message(commit.message)
    if len(query.split()) < MIN_SUBJECT_WORDS:
        why.add("message")
        return []
    return [{"query": query, "gold": gold, "sha": commit.sha}]


TESTS_PER_COMMIT = 3  # a commit that adds twenty tests is one change, not twenty


def behaviour_pairs_of(commit: Commit, snapshot: Path, why: Rejections) -> list[dict]:
    """The queries of the tests a narrow commit adds beside its source change (at most TESTS_PER_COMMIT),
    each with the commit's gold; none when it adds no test that states a behaviour."""
    gold = narrow_gold(commit, snapshot, why)
    if gold is None:
        return []
    found = [d for f in commit.files if file_role(f.new_path, detect_language(f.new_path)) == TESTS
             for d in described_behaviours(f.added)]
    if not found:
        why.add("no test description")
    return [{"query": d, "gold": gold, "sha": commit.sha} for d in found[:TESTS_PER_COMMIT]]


COMMIT, TEST = "commit", "test"  # the kinds of query a history gives: a commit's message, a new test's description
ISSUE = "issue"  # a bug report with the lines its fix changed (eval/bug_reports.py, eval/report_queries.py)


def mine(repo: str, gitdir: Path, snapshot: Path, commit: str, split: str, years: float = DEFAULT_YEARS,
         kind: str = COMMIT) -> tuple[list[dict], Rejections]:
    """Every query of `repo`'s history against its snapshot, as dataset records (eval/datasets.py) of
    `kind` (COMMIT: commit messages; TEST: the descriptions of the tests commits add) in corpus ``history``.
    A bot's commits give neither."""
    why = Rejections()
    out: list[dict] = []
    seen: set[str] = set()
    pairs_of = behaviour_pairs_of if kind == TEST else message_pairs_of
    for c in commits(gitdir, commit, years):
        if _BOT.search(c.author):
            why.add("bot")
            continue
        pairs = pairs_of(c, snapshot, why)
        for n, pair in enumerate(pairs):
            if pair["query"].lower() in seen:
                why.add("duplicate message")
                continue
            seen.add(pair["query"].lower())
            suffix = f":test{n}" if kind == TEST else ""
            out.append({"id": f"history-{repo}@{pair['sha'][:12]}{suffix}", "corpus": "history", "query": pair["query"],
                        "gold": pair["gold"], "kind": kind, "split": split, "repo": repo, "commit": commit})
    return out, why


def missing_blobs(gitdir: Path, commit: str) -> list[str]:
    """Paths of `commit`'s tree whose contents the git dir lacks: a mirror may hold a repository without its
    largest files (a design file, a video), and `git archive` stops at the first of them."""
    tree = subprocess.run(["git", "--git-dir", str(gitdir), "ls-tree", "-r", "-z", commit], capture_output=True,
                          check=True).stdout.decode("utf-8", "replace")
    blobs = [(meta.split()[2], path) for meta, _, path in (e.partition("\t") for e in tree.split("\0") if e)
             if meta.split()[1] == "blob"]
    if not blobs:
        return []
    checked = subprocess.run(["git", "--git-dir", str(gitdir), "cat-file", "--batch-check"], capture_output=True,
                             check=True, input="\n".join(sha for sha, _ in blobs).encode()).stdout.decode().splitlines()
    return [path for (_, path), line in zip(blobs, checked) if line.endswith(" missing")]


def make_snapshot(gitdir: Path, commit: str, dest: Path) -> Path:
    """The tree of `commit` written to `dest` (`git archive`, no history), once: a finished snapshot holds
    `.commit`, so a broken one is made again. Files the git dir lacks (`missing_blobs`) are left out."""
    if (dest / ".commit").is_file():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    archive = _git(gitdir, "archive", commit, *(f":(exclude,literal){p}" for p in missing_blobs(gitdir, commit)))
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed in {gitdir}")
    (dest / ".commit").write_text(commit + "\n", encoding="utf-8")
    return dest
