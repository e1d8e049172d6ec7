"""File classes that are never indexed: secrets (by name and by content) and data (by name and by content).

Two reasons, each a skip reason of its own in the skip report and in `coderag status`:

- `secret`: private keys, certificates, keystores, `.env` files, credential files, and any file whose bytes
  hold a private key block or a GCP service-account key. A hard rule: the names are checked before any
  ignore file (IgnoreMatcher), so a user's `!pattern` cannot re-include them, and such a file is never
  opened; the content check runs on every file read. An API token (GitHub, GitLab, Slack, Stripe live,
  Google API, OpenAI/Anthropic-style `sk-`, npm, PyPI, Hugging Face, SendGrid, Telegram, Shopify,
  DigitalOcean, Databricks), an Azure storage key, a Slack or Discord webhook, a JSON web token, a password in
  a URL, an AWS access key ID or secret access key, or a random value assigned to a name like `DB_PASSWORD` or
  `apiKey` makes a file a secret too, unless the file is source code (CODE_LANGUAGES): there the token is one
  line of hundreds, so the file is indexed with the token's characters masked (`secret_spans`,
  nodes/file_text.py) rather than lost to search.
- `data`: CSV/TSV, images as text (SVG, ...), notebooks, lock files, snapshots (`data_name`: below every
  ignore file's patterns, so `!*.csv` in a .coderagignore brings CSVs back), big JSON/YAML/XML,
  big fixtures, and files that are mostly numeric rows or base64 (`content_class`). One chunk per row
  costs most of a first index's embedding time and never answers a question about the code.

Stdlib only: the walk of a no-change run imports this.
"""

from __future__ import annotations

import itertools
import re
from typing import Iterator, Optional

from coderag.nodes.file_roles import FIXTURE_DIRS
from coderag.nodes.languages import EXTENSIONS, detect_language

SECRET, DATA = "secret", "data"
# Bumped when a rule is added that may class a file an older index holds as a secret or data: the next
# upgrade reads the indexed files once more and drops those (pipelines/ingestion.py purge_reclassified).
# A change that lets a skipped file in is seen by the walk: while an index's rules are older, the files it
# skipped for a reason in RECHECKED_REASONS are read again (pipelines/changes.py).
# 1: keys, credentials and data files; 2: API tokens; 3: tokens in source code masked, not the file
# skipped, and a file with a few bytes that are not UTF-8 decoded with replacement, not skipped; 4: jest's
# `__mocks__` and jscodeshift's `__testfixtures__` are fixture folders (file_roles.FIXTURE_DIRS); 5: AWS
# access key IDs and secret keys under any `aws_secret` name, GitLab, npm, PyPI, Hugging Face, SendGrid and
# Telegram, Shopify, DigitalOcean and Databricks tokens, Azure storage keys, Slack and Discord webhooks, JSON
# web tokens, passwords in URLs; 6: random values assigned to a password's or key's name.
RULES_VERSION = "6"
RECHECKED_REASONS = frozenset({SECRET, "encoding"})

# Files in these languages are code or prose whatever their numbers: the row and base64 sniffs are for the
# rest ("text", json, yaml, xml, ...), where a table of numbers is a table. Their extensions also make a
# name code that would otherwise look like a key's (`id_rsa.go`).
CODE_LANGUAGES = frozenset({
    "python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp", "csharp", "ruby", "php",
    "kotlin", "scala", "swift", "lua", "bash", "markdown", "rst", "dockerfile", "make", "cmake", "vue", "svelte",
    "proto", "hcl",
})
_CODE_SUFFIXES = frozenset(ext for ext, lang in EXTENSIONS.items() if lang in CODE_LANGUAGES)

# -- secrets by name -------------------------------------------------------------------------------
# Lowercase; a path is lowercased before it is matched (`ID_RSA`, `Server.PEM`).
SECRET_SUFFIXES = frozenset({
    ".pem", ".key", ".p12", ".pfx", ".pkcs12", ".p8", ".pk8", ".ppk",     # private keys
    ".crt", ".cer", ".der", ".csr", ".p7b", ".p7c",                       # certificates: no code in them, and
                                                                          # they sit next to their keys
    ".keystore", ".jks", ".bks", ".kdbx", ".keychain", ".keychain-db",    # key stores
    ".gpg", ".pgp",                                                       # encrypted files, keyrings
    ".tfstate",                                                           # Terraform state: plaintext secrets
    ".env", ".secret", ".secrets", ".kubeconfig",
})
# Whole names. `.npmrc`, `.pypirc`, `.yarnrc.yml` are skipped whether or not they hold a token today: they
# have nothing a code question needs, and a token added tomorrow would otherwise be indexed before anyone
# notices.
SECRET_NAMES = frozenset({
    ".env", ".envrc", ".netrc", "_netrc", ".pgpass", ".git-credentials", ".htpasswd", ".my.cnf", ".s3cfg",
    ".boto", ".dockercfg", ".npmrc", ".pypirc", ".yarnrc.yml", "kubeconfig",
    "secrets.yml", "secrets.yaml", "secrets.json", "secrets.toml", "credentials.yml.enc",
})
# Names that start so, unless they end in a code extension (`id_rsa.go` is code) or in `.pub` (a public key
# is published by design: indexed as any text file): SSH keys (`id_rsa`, `id_rsa.old`, `id_ed25519_github`),
# Google OAuth client files (`client_secret_123.apps.googleusercontent.com.json`), Terraform state backups.
SECRET_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "client_secret", "terraform.tfstate")
PUBLIC_KEY_SUFFIX = ".pub"
# Every `.env.*`, code extension or not (`.env.js` configs hold the same values). Templates (`.env.example`,
# `.env.sample`) are skipped too: real values get pasted into them by mistake, and the variable names they
# list are also in the code that reads them, so search loses nothing.
ENV_PREFIX = ".env."
# Every file inside these folders (~/.ssh, ~/.aws, ~/.gnupg, ... committed or copied into a tree).
SECRET_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".gem"})


# -- data by name: applied below every ignore file (IgnoreMatcher), so a `!pattern` brings them back --------
DATA_SUFFIXES = frozenset({
    ".csv", ".tsv", ".psv", ".jsonl", ".ndjson", ".geojson", ".topojson", ".arff", ".har",   # rows, records
    ".svg", ".eps", ".xpm", ".xbm", ".pbm", ".pgm", ".ppm", ".drawio",                      # images as text
    ".ipynb",
    ".lock", ".lockfile", ".lockb",                                                          # lock files
    ".snap", ".ambr",                                                                        # test snapshots
})
DATA_NAMES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "packages.lock.json", "conda-lock.yml",
    "Package.resolved", "go.sum", "go.work.sum",
})
DATA_DIRS = frozenset({"__snapshots__"})
# Notebooks (`*.ipynb`) are data here: as raw JSON every code line is a quoted string and the outputs
# (base64 images, tables) are most of the bytes, so their chunks embed as noise; the cells would need a
# converter of their own. Lock files list versions that the manifest next to them (pyproject.toml,
# package.json, Cargo.toml) already names, so BM25 loses nothing either.


def _split(rel_path: str) -> tuple[list[str], str, str]:
    """(folders, name, suffix) of a POSIX path, as PurePosixPath has them, in a few string operations: the
    walk asks for every file, and a PurePosixPath costs several times more."""
    *dirs, name = rel_path.split("/")
    dot = name.rfind(".")
    return dirs, name, name[dot:] if 0 < dot < len(name) - 1 else ""


def secret_name(rel_path: str) -> Optional[str]:
    """Why `rel_path` (POSIX, relative) is a secret by its name alone, or None. Cheap: no I/O, no regex."""
    dirs, name, suffix = _split(rel_path.lower())
    if name in SECRET_NAMES:
        return f"{name} file"
    if suffix in SECRET_SUFFIXES:
        return f"{suffix} file"
    if name.startswith(ENV_PREFIX):
        return f"{ENV_PREFIX}* file"
    if name.startswith(SECRET_PREFIXES) and suffix not in _CODE_SUFFIXES and suffix != PUBLIC_KEY_SUFFIX:
        return f"{next(x for x in SECRET_PREFIXES if name.startswith(x))}* file"
    for d in dirs:
        if d in SECRET_DIRS:
            return f"file in {d}/"
    return None


def data_name(rel_path: str) -> Optional[str]:
    """The built-in pattern by which `rel_path` is a data file (`*.csv`, `go.sum`, `__snapshots__/`), or None."""
    dirs, name, suffix = _split(rel_path)
    if suffix in DATA_SUFFIXES:
        return f"*{suffix}"
    if name in DATA_NAMES:
        return name
    for d in dirs:
        if d in DATA_DIRS:
            return f"{d}/"
    return None


# -- content ----------------------------------------------------------------------------------------
# A private key is its body, not its header: the header must be followed, within KEY_BODY_WINDOW bytes
# (room for Proc-Type/Comment headers, quotes, `\n` escapes, string concatenation), by a line of base64
# that mixes digits and both cases. A README that shows `-----BEGIN PRIVATE KEY-----` in prose, or with
# `...` for the body, holds no key and is indexed.
_KEY_HEADER = re.compile(rb"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_KEY_BODY = re.compile(rb"(?:\n|\\n|[\"'`])[ \t\"'`+]*([A-Za-z0-9+/]{32,})")
KEY_BODY_WINDOW = 300
_B_DIGIT = re.compile(rb"[0-9]")
_PUTTY_KEY = re.compile(rb"PuTTY-User-Key-File-\d+:")
# The value, not the name: code that reads the variable (`os.environ["AWS_SECRET_ACCESS_KEY"]`) is code.
# Also the `SecretAccessKey` of AWS's JSON answers (`aws sts assume-role`), and a key under a shorter name of
# the same (`AWS_SECRET`, `aws_secret_key`, `awsSecret`). The value has no prefix of its own, so it must look
# random (both cases): a placeholder of forty `x` is not a key.
_AWS_SECRET = re.compile(rb"(?:secret_?access_?key|aws_?secret\w{0,16})[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})"
                         rb"(?![A-Za-z0-9/+])", re.IGNORECASE)
_AWS_HINTS = (b"ccess_key", b"CCESS_KEY", b"ccessKey", b"ccess_Key", b"ws_secret", b"WS_SECRET", b"wsSecret",
              b"ws_Secret", b"WSSecret")
_GCP_ACCOUNT = re.compile(rb"\"type\"\s*:\s*\"service_account\"")

# API tokens by their issuers' published shapes. A token must look random (both letter cases in its body;
# Slack's: two of digits, lower and upper case) and stand alone (no letter, digit or `_` glued to either
# end), so placeholders (`ghp_xxxx...`, `xoxb-your-token`), shorter or longer runs, a hex digest after
# `sk-` and code that checks a prefix (`token.startswith("ghp_")`) are code. Test keys (`sk_test_`) are
# not secrets: Stripe publishes them in its docs.
_TOKEN_END = rb"(?![A-Za-z0-9_])"
_API_TOKENS = (
    ("GitHub token", (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),
     re.compile(rb"(?<![A-Za-z0-9_])gh[pousr]_([A-Za-z0-9]{36})" + _TOKEN_END), "cases"),
    ("GitHub token", (b"github_pat_",),
     re.compile(rb"(?<![A-Za-z0-9_])github_pat_([A-Za-z0-9]{22}_[A-Za-z0-9]{59})" + _TOKEN_END), "cases"),
    ("Slack token", (b"xox",),
     re.compile(rb"(?<![A-Za-z0-9_-])xox[abprs]-(?:[0-9]{6,}-){1,3}([A-Za-z0-9]{16,})(?![A-Za-z0-9_-])"), "two"),
    ("Stripe live key", (b"k_live_",),
     re.compile(rb"(?<![A-Za-z0-9_])[sr]k_live_([A-Za-z0-9]{24,})" + _TOKEN_END), "cases"),
    ("Google API key", (b"AIza",),
     re.compile(rb"(?<![A-Za-z0-9_-])AIza([0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])"), "cases"),
    # OpenAI's `sk-` + 48 (legacy), `sk-proj-`/`sk-svcacct-`/`sk-admin-` + 100 or more, Anthropic's
    # `sk-ant-api03-`: at least 40 in the body, so `sk-` and a short slug is code.
    ("API key (sk-)", (b"sk-",),
     re.compile(rb"(?<![A-Za-z0-9_-])sk-(?:proj|svcacct|admin|ant-(?:api|admin)[0-9]{2})-([A-Za-z0-9_-]{40,})"
                rb"(?![A-Za-z0-9_-])"), "cases"),
    ("API key (sk-)", (b"sk-",),
     re.compile(rb"(?<![A-Za-z0-9_-])sk-([A-Za-z0-9]{40,})(?![A-Za-z0-9_-])"), "cases"),
    # An AWS access key ID (`AKIA` long-lived, `ASIA` temporary) is half of a credential, and what every secret
    # scanner flags. Upper case and digits, so "two" kinds of character; AWS's documented example
    # (`AKIAIOSFODNN7EXAMPLE`, in many a README) is public.
    ("AWS access key ID", (b"AKIA", b"ASIA"),
     re.compile(rb"(?<![A-Za-z0-9_])(?:AKIA|ASIA)((?![A-Z0-9]{9}EXAMPLE)[A-Z0-9]{16})" + _TOKEN_END), "two"),
    ("GitLab token", (b"glpat-",),
     re.compile(rb"(?<![A-Za-z0-9_-])glpat-([A-Za-z0-9_-]{20,})(?![A-Za-z0-9_-])"), "cases"),
    ("npm token", (b"npm_",), re.compile(rb"(?<![A-Za-z0-9_])npm_([A-Za-z0-9]{36})" + _TOKEN_END), "cases"),
    ("PyPI token", (b"pypi-AgE",),
     re.compile(rb"(?<![A-Za-z0-9_-])pypi-(AgE[A-Za-z0-9_-]{50,})(?![A-Za-z0-9_-])"), "cases"),
    ("Hugging Face token", (b"hf_",), re.compile(rb"(?<![A-Za-z0-9_])hf_([A-Za-z]{34})" + _TOKEN_END), "cases"),
    ("SendGrid key", (b"SG.",),
     re.compile(rb"(?<![A-Za-z0-9_-])SG\.([A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})(?![A-Za-z0-9_-])"), "cases"),
    ("Telegram bot token", (b":AA",),
     re.compile(rb"(?<![A-Za-z0-9_])[0-9]{8,10}:(AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])"), "cases"),
    # Hex bodies (lower case and digits, so "two" kinds): Shopify's app and access tokens, DigitalOcean's
    # personal, OAuth and refresh tokens, Databricks' personal access tokens.
    ("Shopify token", (b"shpat_", b"shpss_", b"shpca_", b"shppa_"),
     re.compile(rb"(?<![A-Za-z0-9_])shp(?:at|ss|ca|pa)_([a-fA-F0-9]{32})" + _TOKEN_END), "two"),
    ("DigitalOcean token", (b"_v1_",),
     re.compile(rb"(?<![A-Za-z0-9_])do[por]_v1_([a-f0-9]{64})" + _TOKEN_END), "two"),
    ("Databricks token", (b"dapi",), re.compile(rb"(?<![A-Za-z0-9_])dapi([a-f0-9]{32})(?:-[0-9])?" + _TOKEN_END), "two"),
    # An Azure storage account's key, in the connection string the portal hands out.
    ("Azure storage key", (b"AccountKey=",),
     re.compile(rb"AccountKey=([A-Za-z0-9+/]{86}==)"), "cases"),
    # A webhook's URL is its credential: whoever has it posts to the channel. The secret is its last part;
    # Slack's documented placeholder (`.../T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX`) has one case only.
    ("Slack webhook", (b"hooks.slack.com/",),
     re.compile(rb"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9]{8,12}/[A-Za-z0-9]{8,12}/"
                rb"([A-Za-z0-9]{24,})" + _TOKEN_END), "cases"),
    ("Discord webhook", (b"/api/webhooks/",),
     re.compile(rb"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/([A-Za-z0-9_-]{60,70})(?![A-Za-z0-9_-])"), "cases"),
    # A JSON Web Token: a signed claim (a session, an API grant) that works until it expires. The header
    # (`eyJ...`, which only names the algorithm) stays; the claims and the signature are masked.
    ("JSON web token", (b"eyJ",),
     re.compile(rb"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,}\.(eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,})"
                rb"(?![A-Za-z0-9_-])"), "cases"),
    # A password in a URL (`postgres://app:PASSWORD@db/orders`). It must look random, two kinds of character
    # of letters and digits, eight or more, so the examples of docs and compose files (`user:password@`,
    # `postgres:postgres@`) and templates (`{password}`, `${DB_PASSWORD}`) are code.
    ("password in a URL", (b"://",),
     re.compile(rb"://[A-Za-z0-9._~%-]{0,64}:([A-Za-z0-9._~%!*+=-]{8,128})@[A-Za-z0-9.-]"),
     "two"),
)

DEFAULT_DATA_MAX_BYTES = 64 * 1024
# JSON/YAML/XML over DEFAULT_DATA_MAX_BYTES is data (an OpenAPI spec of that size is one too: its chunks
# are schemas field by field); so is a non-code file of that size under a fixture folder.
DATA_LANGUAGES_BY_SIZE = frozenset({"json", "yaml", "xml"})
SNIFF_BYTES = 16 * 1024
SNIFF_LINES = 200
MIN_SNIFF_LINES = 20  # fewer lines than this say nothing either way
ROW_SHARE = 0.7  # a file is rows when this share of its sampled lines are
BASE64_SHARE = 0.5
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]{60,}")
_LETTER = re.compile(r"[^\W\d_]")
_DIGITS = re.compile(r"\d")
_ALNUM = re.compile(r"[^\W_]")


def line_of(data: bytes, offset: int) -> int:
    """The 1-based line of byte `offset`, lines ended as nodes/file_text.py `decode_file` ends them: by LF, CRLF,
    or a CR alone (a classic Mac file; an editor and Claude Code's reader break lines there too)."""
    head = data[:offset]
    return head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1


def _has_key_body(window: bytes) -> bool:
    """True if a line of key material follows a key header: random base64 has digits and both cases, a
    path or a word run together does not."""
    for m in _KEY_BODY.finditer(window):
        run = m.group(1)
        if _B_DIGIT.search(run) and run.lower() != run and run.upper() != run:
            return True
    return False


def _looks_random(body: bytes, rule: str) -> bool:
    upper, lower = body.lower() != body, body.upper() != body
    if rule == "cases":
        return upper and lower
    return upper + lower + bool(_B_DIGIT.search(body)) >= 2


# A password or key that no issuer's shape names, found by the name it is given: a quoted value of twelve or more
# characters with two digits and both letter cases (a class name such as "PasswordInput2" has one), assigned (`=`, `:`, `=>`) to a name that ends in password, secret,
# token, api key, access key, auth key, private key or client secret (`DB_PASSWORD = "..."`, `"apiKey": "..."`).
# The value is found first (a quote after an operator), the name in the few bytes before it: a scan of the file
# for every name would be ten times slower. Unquoted values (`password: hunter2` in YAML) are not read: too many
# are examples. An issuer's shape, where one matches, names the token instead (`secret_spans`).
NAMED_SECRET = "password or key (by its name)"
_QUOTED_VALUE = re.compile(rb"(?::|=|=>)[ \t]*([\"'])([A-Za-z0-9_+/=.!@#$%^&*~-]{12,128})\1")
_SECRET_NAME = re.compile(rb"(?i:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key"
                          rb"|private[_-]?key|client[_-]?secret)(?:[_.-][A-Za-z0-9_.-]{0,24}|[A-Z][A-Za-z0-9]{0,24})?"
                          rb"[\"']?\]?[ \t]*$")
_NAME_WINDOW = 48  # bytes before the operator where the name is looked for
_PUBLIC_KEYS = (b"sk_test_", b"pk_test_", b"rk_test_", b"pk_live_")  # Stripe's test and publishable keys


def _named_secret_spans(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(start, end, NAMED_SECRET) of each value assigned to a secret's name (above)."""
    for m in _QUOTED_VALUE.finditer(data):
        value = m.group(2)
        if len(_B_DIGIT.findall(value)) >= 2 and _looks_random(value, "cases") and not value.startswith(_PUBLIC_KEYS) \
                and _SECRET_NAME.search(data, max(0, m.start() - _NAME_WINDOW), m.start()):
            yield m.start(2), m.end(2), NAMED_SECRET


def _token_spans(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of the random part of every API token and AWS secret access key in `data`, in the
    order of the rules. A substring test first: most files hold none of the prefixes, and the regexes never
    run on them."""
    for kind, hints, pattern, rule in _API_TOKENS:
        if any(h in data for h in hints):
            for m in pattern.finditer(data):
                if _looks_random(m.group(1), rule):
                    yield m.start(1), m.end(1), kind
    if any(h in data for h in _AWS_HINTS):
        for m in _AWS_SECRET.finditer(data):
            if _looks_random(m.group(1), "cases"):
                yield m.start(1), m.end(1), "AWS secret access key"


def secret_spans(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each token in `data` (API tokens, AWS secret access keys, values assigned to a
    secret's name), sorted, none
    overlapping: the byte ranges a source file is indexed with masked (nodes/file_text.py). Each is the
    token's random part; its issuer's prefix (`ghp_`, `sk_live_`) stays, to say what it was."""
    out: list[tuple[int, int, str]] = []
    for span in sorted(_token_spans(data)):
        if not out or span[0] >= out[-1][1]:
            out.append(span)
    named = [span for span in _named_secret_spans(data) if not any(span[0] < e and s < span[1] for s, e, _ in out)]
    return sorted(out + named)


def _token_secret(data: bytes) -> Optional[str]:
    """The kind and line of the first token in `data` (rule order, a secret found by its name last), or None."""
    for start, _, kind in itertools.chain(_token_spans(data), _named_secret_spans(data)):
        return f"{kind} at line {line_of(data, start)}"
    return None


def _key_material(data: bytes) -> Optional[str]:
    """Why these bytes are a key (a private key block, a PuTTY key, a GCP service-account key), or None:
    a file that holds one is a secret whatever its language, as a key file is."""
    if b"PRIVATE KEY" in data:
        for m in _KEY_HEADER.finditer(data):
            if _has_key_body(data[m.end():m.end() + KEY_BODY_WINDOW]):
                return f"{m.group(1).decode('ascii').lower()} block at line {line_of(data, m.start())}"
    if b"PuTTY-User-Key-File-" in data and (m := _PUTTY_KEY.search(data)):
        return f"PuTTY private key at line {line_of(data, m.start())}"
    if b"service_account" in data and b"\"private_key" in data and _GCP_ACCOUNT.search(data):
        return "GCP service-account key"
    return None


def secret_content(data: bytes) -> Optional[str]:
    """Why these bytes hold a secret of any kind (the detail names its kind and line, never its text), or
    None. Whether the file is then left out depends on its language too (`content_class`)."""
    return _key_material(data) or _token_secret(data)


def _is_row(line: str) -> bool:
    """A line of a table of numbers: digits are a third of its non-space characters, letters under a quarter."""
    chars = len(line) - line.count(" ") - line.count("\t")
    return len(_DIGITS.findall(line)) * 3 >= chars and len(_LETTER.findall(line)) * 4 < chars


def data_content(rel_path: str, data: bytes) -> Optional[str]:
    """Why a file that was read is data (size, rows of numbers, base64), or None. `data`: its bytes."""
    if data_name(rel_path) is not None:
        return None  # data by name that the walk let through: a user's `!pattern` asked for it
    language = detect_language(rel_path, data[:200].decode("utf-8", "replace"))
    if language in CODE_LANGUAGES:
        return None
    if len(data) > DEFAULT_DATA_MAX_BYTES:
        if language in DATA_LANGUAGES_BY_SIZE:
            return f"{language} of {len(data)} bytes > {DEFAULT_DATA_MAX_BYTES}"
        if any(d.lower() in FIXTURE_DIRS for d in _split(rel_path)[0]):
            return f"fixture of {len(data)} bytes > {DEFAULT_DATA_MAX_BYTES}"
    head = data[:SNIFF_BYTES].decode("utf-8", "replace")
    # Lines of brackets and commas alone (`},`) say nothing: a table and a config have them alike.
    lines = [ln for ln in (x.strip() for x in head.split("\n")[:SNIFF_LINES]) if _ALNUM.search(ln)]
    if len(data) > SNIFF_BYTES:
        lines = lines[:-1]  # the sample cut the last one short
    if len(lines) < MIN_SNIFF_LINES:
        return None
    rows = sum(map(_is_row, lines))
    if rows >= ROW_SHARE * len(lines):
        return f"{rows} of {len(lines)} sampled lines are numbers"
    blobs = sum(1 for ln in lines if _BASE64_LINE.fullmatch(ln))
    if blobs >= BASE64_SHARE * len(lines):
        return f"{blobs} of {len(lines)} sampled lines are base64"
    return None


def content_class(rel_path: str, data: bytes) -> Optional[tuple[str, str]]:
    """(SECRET or DATA, detail) for a file that was read and is not binary, or None if it may be indexed
    (source code that holds a token is indexed with it masked: `secret_spans`)."""
    why = _key_material(data)
    if why:
        return SECRET, why
    why = _token_secret(data)
    if why and detect_language(rel_path, data[:200].decode("utf-8", "replace")) not in CODE_LANGUAGES:
        return SECRET, why
    why = data_content(rel_path, data)
    if why:
        return DATA, why
    return None
