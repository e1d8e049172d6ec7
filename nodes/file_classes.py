"""File classes that are never indexed: secrets (by name and by content) and data (by name and by content).

Two reasons, each a skip reason of its own in the skip report and in `coderag status`:

- `secret`: private keys, certificates, keystores, `.env` files, credential files, and any file whose bytes
  hold a private key block or a GCP service-account key. A hard rule: the names are checked before any
  ignore file (IgnoreMatcher), so a user's `!pattern` cannot re-include them, and such a file is never
  opened; the content check runs on every file read. An API token (GitHub, GitLab, Slack, Stripe live,
  Google API, OpenAI/Anthropic-style `sk-`, npm, PyPI, Hugging Face, SendGrid, Telegram, Shopify,
  DigitalOcean, Databricks), an Azure storage key, a Slack or Discord webhook, a JSON web token, a password in
  a URL or a connection string, an AWS access key ID or secret access key, or a random value assigned to a name
  like `DB_PASSWORD` or `apiKey` makes a file a secret too, unless the file is source code (CODE_LANGUAGES):
  there the token is one line of hundreds, so the file is indexed with the token's characters masked
  (nodes/secret_tokens.py, nodes/file_text.py) rather than lost to search.
- `data`: CSV/TSV, images as text (SVG, ...), lock files, snapshots (`data_name`: below every ignore file's
  patterns, so `!*.csv` in a .coderagignore brings CSVs back), big JSON/YAML/XML, big fixtures, notebooks that
  cannot be read as cells, and files that are mostly numeric rows or base64 (`content_class`). One chunk per
  row costs most of a first index's embedding time and never answers a question about the code.

Stdlib only: the walk of a no-change run imports this.
"""

from __future__ import annotations

import re
from typing import Optional

from coderag.nodes.file_roles import FIXTURE_DIRS
from coderag.nodes.languages import EXTENSIONS, detect_language
from coderag.nodes.file_text import notebook_cells
from coderag.nodes.notebook import is_notebook
from coderag.nodes.secret_tokens import B_DIGIT, line_of, token_secret

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
# web tokens, passwords in URLs; 6: random values assigned to a password's or key's name; 7: such values
# unquoted at a line's end or in XML, and hex keys; passwords in connection strings; Terraform's `.tfvars`
# files; 8: such values of eight to eleven characters, and random UUIDs under a secret's name; 9: random
# values in one letter case under a secret's name; 10: New Relic, Linear, Square, age, Mailgun, Mailchimp and
# 1Password tokens, and bearer tokens written out in a header; 11: Doppler, Grafana, Postman, Sentry, Atlassian,
# Slack app, Mapbox and Facebook tokens, and values under an admin, master, signing, encryption or
# service-role key's name.
RULES_VERSION = "11"
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
    ".tfstate", ".tfvars",                                                # Terraform state and variable values:
                                                                          # plaintext secrets (Terraform's own
                                                                          # .gitignore template leaves them out)
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
# Names that end so (a suffix of two parts): Terraform's variable values as JSON.
SECRET_ENDINGS = (".tfvars.json",)
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
    ".lock", ".lockfile", ".lockb",                                                          # lock files
    ".snap", ".ambr",                                                                        # test snapshots
})
DATA_NAMES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "packages.lock.json", "conda-lock.yml",
    "Package.resolved", "go.sum", "go.work.sum",
})
DATA_DIRS = frozenset({"__snapshots__"})
# Lock files list versions that the manifest next to them (pyproject.toml, package.json, Cargo.toml) already
# names, so BM25 loses nothing. A notebook (`*.ipynb`) is indexed as its cells (nodes/notebook.py), never as
# its raw JSON, whose outputs (base64 images, tables) are most of the bytes: one that cannot be read so is data.


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
    if name.endswith(SECRET_ENDINGS):
        return f"{next(x for x in SECRET_ENDINGS if name.endswith(x))} file"
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
_PUTTY_KEY = re.compile(rb"PuTTY-User-Key-File-\d+:")
_GCP_ACCOUNT = re.compile(rb"\"type\"\s*:\s*\"service_account\"")

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


def _has_key_body(window: bytes) -> bool:
    """True if a line of key material follows a key header: random base64 has digits and both cases, a
    path or a word run together does not."""
    for m in _KEY_BODY.finditer(window):
        run = m.group(1)
        if B_DIGIT.search(run) and run.lower() != run and run.upper() != run:
            return True
    return False


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
    return _key_material(data) or token_secret(data)


def _is_row(line: str) -> bool:
    """A line of a table of numbers: digits are a third of its non-space characters, letters under a quarter."""
    chars = len(line) - line.count(" ") - line.count("\t")
    return len(_DIGITS.findall(line)) * 3 >= chars and len(_LETTER.findall(line)) * 4 < chars


def data_content(rel_path: str, data: bytes) -> Optional[str]:
    """Why a file that was read is data (size, rows of numbers, base64), or None. `data`: its bytes."""
    if data_name(rel_path) is not None:
        return None  # data by name that the walk let through: a user's `!pattern` asked for it
    if is_notebook(rel_path):  # read as decode_file reads it, so that the two agree on every notebook
        readable = notebook_cells(data) is not None
        return None if readable else "a notebook of another kernel, or not one source line per line of its JSON"
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
    (source code that holds a token is indexed with it masked: secret_tokens.secret_spans)."""
    why = _key_material(data)
    if why:
        return SECRET, why
    # Source code holding a token is indexed with it masked (file_text.decode_file reads the tokens there), so
    # the tokens are looked for here only in the other files.
    if detect_language(rel_path, data[:200].decode("utf-8", "replace")) not in CODE_LANGUAGES:
        why = token_secret(data)
        if why:
            return SECRET, why
    why = data_content(rel_path, data)
    if why:
        return DATA, why
    return None
