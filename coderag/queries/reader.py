"""Read a query before searching it: tell identifiers, paths, stack frames, errors, code and prose apart.

A short question ("where are failed logins retried") is searched as it is. A long one, most often a bug
report pasted whole, mixes what points at the code (the frames of a traceback, the error, identifiers in
a snippet) with what does not (an issue template's headings and comments, `pip freeze` and
`show_versions()` dumps, version tables, URLs, long logs). Searched verbatim, the report matches the
repository's own issue template and changelog best, and its hundreds of words drown the few that matter.

`read_query` splits the text into those parts without any model; the retrievers then take what each is
good at: BM25 the identifiers, paths and prose terms, each counted once; the dense leg the prose, where
the model's 256-token window is spent on the sentences that describe the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A query this long (in identifier-like words) is read as a report; shorter ones are left as they are.
LONG_QUERY_WORDS = 40
DENSE_MAX_CHARS = 1000  # ~256 model tokens of English prose: what the dense leg gets of a long query

# What ends a file name in a report (anything else after a dot is a module or an attribute: `pkg.mod`).
FILE_EXTENSIONS = frozenset("""py pyx pyi java kt go rs js jsx mjs ts tsx rb php cs c cc cpp h hpp swift scala
toml cfg ini yaml yml json md rst txt sql sh""".split())

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FENCE = re.compile(r"^\s*(```|~~~)")
_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_PY_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>[\w.<>]+))?')
# Java/Kotlin `at pkg.Class.method(File.java:12)`, Go `pkg/file.go:12 +0x1d`, JS `at f (src/x.js:1:2)`, Rust
# `at src/main.rs:12:5`: a path with an extension, then a line number.
_PATH_LINE = re.compile(r"(?P<path>(?:[\w.\-]+/)*[\w.\-]+\.(?:py|pyx|java|kt|go|rs|js|jsx|ts|tsx|rb|php|cs|c|cc|cpp|h|hpp|swift|scala))"
                        r":(?P<line>\d+)")
_JAVA_FRAME = re.compile(r"\bat (?P<func>[\w$.]+)\((?P<file>[\w$]+\.\w+):(?P<line>\d+)\)")
_PATH = re.compile(r"(?<![\w/.])(?:[\w\-]+/)+[\w\-]+\.[A-Za-z]{1,5}\b|\b[\w\-]+\.(?:py|pyx|java|kt|go|rs|js|jsx|ts|tsx|rb|php|cs|c|cc|cpp|h|hpp|toml|cfg|ini|yaml|yml)\b")
_FRAME_LINE = re.compile(r'^\s*(?:File "[^"]+", line \d+|Traceback \(most recent call last\)|at [\w$.<>]+\(.*:\d+\)'
                         r'|\S+\.\w+:\d+(?::\d+)?(?: \+0x[0-9a-f]+)?\s*$)')
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")
_ERROR = re.compile(r"\b(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Fault))\b(?::\s*(?P<msg>[^\n]{0,200}))?")
_DOTTED_OR_COMPOUND = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|\b[A-Za-z]\w*_\w+|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z0-9]+[A-Z]\w*"
                                 r"|\b[A-Z]{2,}\w*")
_INI_SECTION = re.compile(r"^\s*\[[\w:.\- ]+\]\s*$")
_INI_LINE = re.compile(r"^\s*(?:[#;].*|[\w.\-]+\s*[=:]\s*.*)$")
_CAMEL = re.compile(r"^[a-z]+[A-Z]\w*$|^[A-Z][a-z0-9]+[A-Z]\w*$")

# Lines that say nothing about the code: environment dumps and version tables, prompts, log prefixes.
_NOISE_LINE = re.compile(
    r"^\s*(?:"
    r"[\w.\-\[\]]+\s*(?:==|>=|<=|~=|@)\s*[\w.\-+ :/]+"          # pip freeze: pkg==1.2.3, pkg @ file:///...
    r"|[\w.\-]+\s+\d+(?:\.\d+)+(?:\s+\S+){0,2}"                  # conda/pip list: name 1.2.3 [build] [channel]
    r"|(?:python|platform|os|system|machine|executable|numpy|scipy|pandas|version|release|build|commit|branch"
    r"|compiler|cython|setuptools|pip|sys\.version|libc|processor|byteorder|LC_\w+|LANG|LOCALE)\b[^\n]{0,40}?[:=][^\n]*"
    r"|[-=_*~#]{3,}\s*$"                                          # rules and underlines
    r"|(?:\$|>>>|\.\.\.|In \[\d+\]:|Out\[\d+\]:)\s*$"             # bare prompts
    r")\s*$", re.I)
# Headings and stock sentences of GitHub issue templates (bug_report.md and friends): a report written from
# a template matches the template best, so they must not reach the retrievers.
_TEMPLATE_LINE = re.compile(
    r"^\s*(?:#+\s*|\*\*)?\s*(?:describe the bug|bug description|bug report|description|summary|to reproduce"
    r"|steps to reproduce|reproduction|minimal reproducible example|code sample|code for reproduction"
    r"|expected (?:behaviou?r|outcome|result|output)|actual (?:behaviou?r|outcome|result|output)"
    r"|observed (?:behaviou?r|outcome|result)|current (?:behaviou?r|output)|environment|versions?"
    r"|system details|additional context|screenshots|possible (?:solution|fix)|anything else|checklist"
    r"|operating system|python version|installation|dialect|configuration|traceback|error message"
    r"|what happened\??|what did you expect to happen\??|other information|notes?)\s*:?\s*(?:\*\*)?\s*$",
    re.I)

_STOP = frozenset("""a an and are as at be but by can could did do does doing done for from had has have how i if in
into is it its itself me my no not of on or our should so some such than that the their them then there these
they this those to too us was we were what when where which while who why will with would you your get gets got
also just like only very any all each other more most same one two use used using please thanks thank hi hello
issue bug problem error errors example expected actual behavior behaviour happen happens happened output result
try tried trying work works working run running ran see seems seem think want need way case code file line
""".split())


@dataclass
class Frame:
    """One stack-trace frame: the file as the report spells it, its line, and the function if known."""

    path: str
    line: int
    func: str = ""


@dataclass
class QueryReading:
    """What `read_query` found in a query. For a short query only `text` and `identifiers` are set."""

    text: str
    is_long: bool = False
    identifiers: list[str] = field(default_factory=list)  # distinct, in order of first appearance
    paths: list[str] = field(default_factory=list)  # file paths and module names the query names
    frames: list[Frame] = field(default_factory=list)  # innermost last, as tracebacks print them
    errors: list[str] = field(default_factory=list)  # "TypeError: 'NoneType' object is not subscriptable"
    code: list[str] = field(default_factory=list)  # fenced or indented blocks
    prose: str = ""  # the sentences, with template lines, dumps and URLs dropped

    @property
    def definitions(self) -> list[str]:
        """Names whose definitions a long report points at, most telling first: the innermost function of
        its traceback, the compound names of its error messages (`RST.__init__` points at `RST.__init__`
        and at `RST`), then the next frames outwards."""
        funcs = [f.func for f in reversed(self.frames) if f.func and not f.func.startswith("<")]
        names = funcs[:1]
        for err in self.errors:
            for ident in _DOTTED_OR_COMPOUND.findall(err.partition(":")[2]):
                names.append(ident)
                if "." in ident:
                    names.append(ident.split(".", 1)[0])
        names += funcs[1:5]
        return list(dict.fromkeys(n for n in names if n.strip("_")))

    @property
    def bm25_text(self) -> str:
        """What the BM25 leg searches: the query itself when short; else the evidence, each piece once
        (a name repeated through a pasted log must not outweigh the rest)."""
        if not self.is_long:
            return self.text
        parts = [*self.errors, *(f.func for f in self.frames if f.func), *self.paths, *self.identifiers, self.prose]
        return "\n".join(dict.fromkeys(p for p in parts if p))

    @property
    def dense_text(self) -> str:
        """What the dense leg embeds: the query itself when short; else the title and prose, then the
        errors, within about the model's window."""
        if not self.is_long:
            return self.text
        text = "\n".join(p for p in (self.prose, *self.errors[:2]) if p)
        return (text or self.text)[:DENSE_MAX_CHARS]


def _split_blocks(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, code blocks): fenced blocks and runs of 4-space indented lines are code."""
    prose, code, block = [], [], None
    for line in text.split("\n"):
        if _FENCE.match(line):
            if block is None:
                block = []
            else:
                code.append("\n".join(block))
                block = None
            continue
        if block is not None:
            block.append(line)
        elif line.startswith(("    ", "\t")) and line.strip():
            code.append(line)
        else:
            prose.append(line)
    if block:
        code.append("\n".join(block))
    return prose, code


def _is_code_identifier(word: str) -> bool:
    return "_" in word.strip("_") or bool(_CAMEL.match(word)) or (word[:1].isupper() and len(word) > 2
                                                                   and word[1:].lower() != word[1:])


def read_query(text: str) -> QueryReading:
    """Segment `text`; a query of fewer than LONG_QUERY_WORDS words is kept as it is.

    >>> r = read_query('TypeError in validate\\nTraceback (most recent call last):\\n'
    ...                '  File "/env/site-packages/marshmallow/schema.py", line 894, in _invoke_field_validators\\n'
    ...                "TypeError: 'NoneType' object is not subscriptable" + " words" * 40)
    >>> r.frames[0].path, r.frames[0].func, r.errors[0][:9]
    ('/env/site-packages/marshmallow/schema.py', '_invoke_field_validators', 'TypeError')
    """
    words = _WORD.findall(text)
    reading = QueryReading(text=text, is_long=len(words) >= LONG_QUERY_WORDS)
    if not reading.is_long:
        reading.identifiers = list(dict.fromkeys(w for w in words if _is_code_identifier(w)))
        return reading
    body = _URL.sub(" ", _HTML_COMMENT.sub(" ", text.replace("\r\n", "\n")))
    prose_lines, code = _split_blocks(body)
    frames: list[Frame] = []
    for m in _PY_FRAME.finditer(body):
        frames.append(Frame(m["path"], int(m["line"]), m["func"] or ""))
    for m in _JAVA_FRAME.finditer(body):
        frames.append(Frame(m["file"], int(m["line"]), m["func"].rsplit(".", 1)[-1]))
    framed = {f.path for f in frames}
    for m in _PATH_LINE.finditer(body):
        if m["path"] not in framed and not any(p.endswith(m["path"]) for p in framed):
            frames.append(Frame(m["path"], int(m["line"])))
    errors = list(dict.fromkeys(m.group(0).strip() for m in _ERROR.finditer(body)))[:8]
    paths = [f.path for f in frames]
    paths += [m.group(0) for m in _PATH.finditer(body)]
    paths += [m.group(0) for m in _DOTTED.finditer(" ".join(code + prose_lines))
              if not m.group(0).replace(".", "").isdigit()]
    keep_prose = []
    for line in prose_lines:
        if (_NOISE_LINE.match(line) or _TEMPLATE_LINE.match(line) or _FRAME_LINE.search(line)
                or not line.strip()):
            continue  # frames are kept as frames, not as words
        keep_prose.append(line.strip())
    code_words = _WORD.findall("\n".join(c for c in code if not _looks_like_log(c)))
    prose_words = _WORD.findall("\n".join(keep_prose))
    idents = [w for w in code_words + prose_words if _is_code_identifier(w)]
    idents += [w for w in code_words if len(w) > 2 and w.lower() not in _STOP]
    reading.frames = frames
    reading.errors = errors
    reading.code = code
    reading.paths = list(dict.fromkeys(p.strip(".") for p in paths if len(p) > 3))
    reading.identifiers = list(dict.fromkeys(idents))
    reading.prose = " ".join(w for w in " ".join(keep_prose).split() if _WORD.sub("", w) != w or w.isalpha())
    return reading


def _looks_like_log(block: str) -> bool:
    """A pasted log or dump rather than code: mostly lines of versions, timestamps and numbers, or an INI
    file (a `[section]` and then `key = value` lines: a user's whole configuration, not the code)."""
    lines = [ln for ln in block.split("\n") if ln.strip()]
    if not lines:
        return True
    noisy = sum(1 for ln in lines if _NOISE_LINE.match(ln) or re.match(r"^\s*[\d\-:./ ,\[\]]{8,}", ln))
    if noisy * 2 >= len(lines):
        return True
    if any(_INI_SECTION.match(ln) for ln in lines):
        ini = sum(1 for ln in lines if _INI_SECTION.match(ln) or _INI_LINE.match(ln))
        return ini * 4 >= len(lines) * 3
    return False


def as_paths(named: str) -> list[str]:
    """The files a report may mean by `named`, as POSIX paths: itself (backslashes made slashes), and for
    a dotted name its module file too (`pkg.mod` -> `pkg/mod.py`; `ascii.rst` is a file or a module)."""
    named = named.replace("\\", "/").rstrip("/")
    if "/" in named or "." not in named:
        return [named]
    module = named.replace(".", "/") + ".py"
    if named.rsplit(".", 1)[-1].lower() in FILE_EXTENSIONS:
        return [named, module]
    return [module]


def path_matches(candidate: str, named: str) -> bool:
    """True when repository path `candidate` is the file a report names as `named`: an absolute path from
    the reporter's machine (`/env/site-packages/pkg/mod.py`), a relative one, or a dotted module
    (`pkg.mod`), matched on whole trailing path components: the file name alone when that is all the
    report gives, else at least the file name and its folder (so `numpy/__init__.py` is not ours)."""
    cand_parts = candidate.split("/")
    for path in as_paths(named):
        named_parts = [p for p in path.split("/") if p and p != "."]
        if len(named_parts) == 1 and cand_parts[-1] == named_parts[0]:
            return True
        if len(named_parts) >= 2 and len(cand_parts) >= 2 and cand_parts[-2:] == named_parts[-2:]:
            return True
    return False
