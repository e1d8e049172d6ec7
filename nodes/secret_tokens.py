"""Secrets inside a file's bytes, by their shapes: API tokens by their issuers' prefixes, AWS keys, webhooks,
JSON web tokens, passwords in URLs, and random values assigned to a password's or key's name.

`secret_spans` gives the byte ranges a source file is indexed with masked (nodes/file_text.py); `token_secret`
names the first one, which makes a file that is not source code a secret (nodes/file_classes.py). Both count
lines as the indexer splits them (`line_of`). A new shape bumps file_classes.RULES_VERSION, so an index built
before reads its files again. Stdlib only, like file_classes: the walk imports them.
"""

from __future__ import annotations

import itertools
import re
from typing import Iterator, Optional

B_DIGIT = re.compile(rb"[0-9]")  # a digit in bytes (file_classes reads key bodies with it too)

# The value, not the name: code that reads the variable (`os.environ["AWS_SECRET_ACCESS_KEY"]`) is code.
# Also the `SecretAccessKey` of AWS's JSON answers (`aws sts assume-role`), and a key under a shorter name of
# the same (`AWS_SECRET`, `aws_secret_key`, `awsSecret`). The value has no prefix of its own, so it must look
# random (both cases): a placeholder of forty `x` is not a key.
_AWS_SECRET = re.compile(rb"(?:secret_?access_?key|aws_?secret\w{0,16})[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})"
                         rb"(?![A-Za-z0-9/+])", re.IGNORECASE)
_AWS_HINTS = (b"ccess_key", b"CCESS_KEY", b"ccessKey", b"ccess_Key", b"ws_secret", b"WS_SECRET", b"wsSecret",
              b"ws_Secret", b"WSSecret")

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
    # New Relic's user keys and Linear's API keys (both: one case and digits, or both cases), Square's access
    # tokens and OAuth secrets, age's secret keys (upper-case bech32), Mailgun's `key-` keys, Mailchimp's
    # (hex and the data centre they live in), 1Password's service account tokens.
    ("New Relic key", (b"NRAK-",), re.compile(rb"(?<![A-Za-z0-9_-])NRAK-([A-Z0-9]{27})(?![A-Za-z0-9_-])"), "two"),
    ("Linear API key", (b"lin_api_",), re.compile(rb"(?<![A-Za-z0-9_])lin_api_([A-Za-z0-9]{40})" + _TOKEN_END),
     "two"),
    ("Square token", (b"sq0atp-", b"sq0csp-"),
     re.compile(rb"(?<![A-Za-z0-9_-])sq0(?:atp-([A-Za-z0-9_-]{22})|csp-([A-Za-z0-9_-]{43}))(?![A-Za-z0-9_-])"),
     "cases"),
    ("age secret key", (b"AGE-SECRET-KEY-1",),
     re.compile(rb"AGE-SECRET-KEY-1([QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})(?![A-Za-z0-9])"), "two"),
    ("Mailgun key", (b"key-",), re.compile(rb"(?<![A-Za-z0-9_-])key-([A-Za-z0-9]{32})(?![A-Za-z0-9_-])"), "two"),
    ("Mailchimp key", (b"-us",), re.compile(rb"(?<![A-Za-z0-9_-])([a-f0-9]{32}-us[0-9]{1,2})(?![A-Za-z0-9_-])"),
     "two"),
    ("1Password token", (b"ops_eyJ",), re.compile(rb"(?<![A-Za-z0-9_])ops_(eyJ[A-Za-z0-9+/]{250,}={0,3})"), "cases"),
    # Doppler's service, personal, CLI and service-account tokens (a service token names its config:
    # `dp.st.prd.<40>`), Grafana's service-account and Cloud tokens, Postman's API keys, Sentry's organisation
    # and user auth tokens, Atlassian's API tokens, Slack's app-level tokens, Mapbox's secret tokens (`sk.` and
    # a JWT-like body of two parts, which the JSON web token rule does not read), Facebook's access tokens.
    ("Doppler token", (b"dp.",),
     re.compile(rb"(?<![A-Za-z0-9_.-])dp\.(?:st|sa|ct|pt|scim|audit)\.(?:[a-z0-9_-]{1,40}\.)?([A-Za-z0-9]{40,44})"
                rb"(?![A-Za-z0-9_-])"), "cases"),
    ("Grafana token", (b"glsa_",),
     re.compile(rb"(?<![A-Za-z0-9_])glsa_([A-Za-z0-9]{32}_[A-Fa-f0-9]{8})" + _TOKEN_END), "cases"),
    ("Grafana token", (b"glc_eyJ",),
     re.compile(rb"(?<![A-Za-z0-9_])glc_(eyJ[A-Za-z0-9+/]{29,400}={0,2})(?![A-Za-z0-9+/=_])"), "cases"),
    ("Postman key", (b"PMAK-",),
     re.compile(rb"(?<![A-Za-z0-9_-])PMAK-([a-f0-9]{24}-[a-f0-9]{34})(?![A-Za-z0-9_-])"), "two"),
    ("Sentry token", (b"sntrys_",),
     re.compile(rb"(?<![A-Za-z0-9_])sntrys_(eyJ[A-Za-z0-9+/=_]{50,})(?![A-Za-z0-9+/=_])"), "cases"),
    ("Sentry token", (b"sntryu_",), re.compile(rb"(?<![A-Za-z0-9_])sntryu_([a-f0-9]{64})" + _TOKEN_END), "two"),
    ("Atlassian token", (b"ATATT3",),
     re.compile(rb"(?<![A-Za-z0-9_-])ATATT3([A-Za-z0-9_=-]{180,})(?![A-Za-z0-9_=-])"), "cases"),
    ("Slack token", (b"xapp-",),
     re.compile(rb"(?<![A-Za-z0-9_-])xapp-[0-9]-[A-Z0-9]{8,}-[0-9]{8,}-([a-f0-9]{64})(?![A-Za-z0-9_-])"), "two"),
    ("Mapbox token", (b"sk.eyJ",),
     re.compile(rb"(?<![A-Za-z0-9_.-])sk\.(eyJ[A-Za-z0-9_-]{50,}\.[A-Za-z0-9_-]{20,})(?![A-Za-z0-9_.-])"), "cases"),
    ("Facebook token", (b"EAA",), re.compile(rb"(?<![A-Za-z0-9_])EAA([A-Za-z0-9]{90,})" + _TOKEN_END), "cases"),
    # A bearer token written out in an Authorization header (`"Authorization": "Bearer <token>"`, a curl
    # line): whoever has it is the caller. Two kinds of character, sixteen or more: `Bearer {token}`,
    # `Bearer ` + a variable and `Bearer YOUR_TOKEN` are code.
    ("bearer token", (b"earer ",),
     re.compile(rb"(?<![A-Za-z0-9_])[Bb]earer[ \t]+([A-Za-z0-9._~+/-]{16,}=*)(?![A-Za-z0-9._~+/=-])"), "two"),
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
    # The same in a connection string's fields (ADO.NET and ODBC `...;Password=...;`, `PWD=...`, a JDBC URL's
    # `&password=...`: a field after `;`, `?`, `&` or a string's quote), read as a URL's: eight or more
    # characters of two kinds, up to the next field or quote.
    # A template (`{password}`, `${DB_PASSWORD}`) or a call or argument (`password=getpass()`, `password=pw,`)
    # is code.
    ("password in a connection string", (b"assword=", b"ASSWORD=", b"wd=", b"WD="),
     re.compile(rb"[;?&\"'][ \t]*(?i:password|pwd)=([^;&\"'\s<>{}$(),\[\]]{8,128})(?=[;&\"'\s<]|\Z)"), "two"),
)


def line_of(data: bytes, offset: int, start: int = 0, line: int = 1) -> int:
    """The 1-based line of byte `offset`, lines ended as nodes/file_text.py `decode_file` ends them: by LF, CRLF,
    or a CR alone (a classic Mac file; an editor and Claude Code's reader break lines there too). Counted on
    from byte `start` of line `line`, so that the lines of many offsets cost one pass (`start`, like `offset`,
    must not fall between the CR and the LF of a CRLF: a token's first byte never does)."""
    return (line + data.count(b"\n", start, offset) + data.count(b"\r", start, offset)
            - data.count(b"\r\n", start, offset))


def _looks_random(body: bytes, rule: str) -> bool:
    upper, lower = body.lower() != body, body.upper() != body
    if rule == "cases":
        return upper and lower
    return upper + lower + bool(B_DIGIT.search(body)) >= 2


# A password or key that no issuer's shape names, found by the name it is given: a value of eight or more
# characters assigned (`=`, `:`, `=>`) to a name that ends in password, secret, token, api key, access key,
# auth key, private key, client secret, or an admin, master, signing, encryption or service-role key
# (`DB_PASSWORD = "..."`, `"apiKey": "..."`, `password: ...` in YAML, `ALGOLIA_ADMIN_KEY=...`,
# `db.password=...` in a properties file, `export API_TOKEN=...`), or quoted after the quoted name as the
# next argument (`define('DB_PASSWORD', '...')`, `os.getenv("API_TOKEN", "...")`). The value must look random:
# two digits and both letter cases (a class name such as "PasswordInput2" has one digit; "Tr0ub4dor&3" is a
# password), thirty-two or more hex digits with letters among them (Twilio's and Mailgun's keys, a 128-bit key
# written out: a digest under a secret's name is masked too, which costs a search nothing), a random UUID
# (Heroku's API keys), or sixteen or more letters and digits in one case with digits in three or more places
# among the letters (a key whose issuer writes it in one case, under a name that says what it is: a name or a
# version in words, `release_2024_v2`, has digits in fewer places). An unquoted value must end its line (a
# comment may follow, or a shell's line continuation: `docker run -e DB_PASSWORD=... \`) and not be a dotted name: `api_key: settings.API_KEY_V2`,
# `token = make_token(...)` and `${TOKEN}` are code. A Dockerfile's `ENV NAME value` (the form without `=`) is
# read as `NAME=value`. A quote may be escaped (`"export API_TOKEN=\"...\""`, code inside a string or JSON).
# The value is found first (after an operator), the name in the few bytes before it: a scan of the file for
# every name would be ten times slower. An issuer's shape, where one matches, names the token instead
# (`secret_spans`).
NAMED_SECRET = "password or key (by its name)"
_VALUE_CHARS = rb"[A-Za-z0-9_+/=.!@#$%^&*~-]"
_VALUE = _VALUE_CHARS + rb"{8,128}"  # a value's length, in every form it is read in
_ASSIGNED_VALUE = re.compile(rb"(:|=>|=|(?<=[\"']),)[ \t]*(?:\\?([\"'])(" + _VALUE + rb")\\?\2"
                             rb"|((?=[A-Za-z0-9+/])" + _VALUE + rb")"
                             rb"(?=[ \t]+#|[ \t]*(?:\\[ \t]*)?(?:[\r\n]|\Z)))")
_DOCKER_ENV = re.compile(rb"^[ \t]*ENV[ \t]+([A-Za-z_][A-Za-z0-9_]{0,63})[ \t]+(" + _VALUE + rb")[ \t]*\r?$",
                         re.MULTILINE)
_DOTTED_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_HEX_KEY = re.compile(rb"[0-9a-f]{32,}|[0-9A-F]{32,}")
_B_LETTER = re.compile(rb"[A-Za-z]")
_B_ALNUM, _B_DIGITS, _B_LETTERS = re.compile(rb"[A-Za-z0-9]"), re.compile(rb"[0-9]+"), re.compile(rb"[A-Za-z]+")
_ONE_CASE_LENGTH, _ONE_CASE_PLACES = 16, 3  # letters and digits; separate runs of digits, and of letters
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
# A random UUID nearly always shows 12 or more of the 16 hex digits (14 on average); an example counting up
# (`12345678-1234-5678-1234-567812345678`) or of one digit shows fewer. The examples docs copy are public.
_UUID_DIGITS = 12
_EXAMPLE_UUIDS = (b"123e4567-e89b-12d3-a456-426614174000", b"550e8400-e29b-41d4-a716-446655440000")
_SECRET_NAME = re.compile(rb"(?i:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key"
                          rb"|private[_-]?key|client[_-]?secret|(?:admin|master|signing|encryption|service[_-]?role)[_-]?key)"
                          rb"((?:[_.-][A-Za-z0-9_.-]{0,24}|[A-Z][A-Za-z0-9]{0,24})?)"
                          rb"[\"']?\]?[ \t]*$")
_NAME_WINDOW = 48  # bytes before the operator where the name is looked for
_PUBLIC_KEYS = (b"sk_test_", b"pk_test_", b"rk_test_", b"pk_live_")  # Stripe's test and publishable keys
# The same in XML: an element named so (`<dbPassword>...</dbPassword>`, Maven's `<password>` in settings.xml),
# and .NET's app settings (`<add key="StripeApiKey" value="..." />`), the name in the key attribute.
_XML_ELEMENT = re.compile(rb"<([A-Za-z_][\w.-]{0,40})>(" + _VALUE + rb")</\1>")
_XML_SETTING = re.compile(rb"\bkey=([\"'])([^\"'<>]{1,64})\1\s+value=([\"'])(" + _VALUE + rb")\3")


def _random_kind(value: bytes) -> Optional[str]:
    """"cases", "hex", "uuid" or "one case" for a value that looks like a generated password or key (above),
    None for a word, a name or a placeholder."""
    if len(B_DIGIT.findall(value)) < 2 or value.startswith(_PUBLIC_KEYS):
        return None
    if _UUID.fullmatch(value):
        random = len(set(value.lower()) - {ord("-")}) >= _UUID_DIGITS and value.lower() not in _EXAMPLE_UUIDS
        return "uuid" if random else None
    if _looks_random(value, "cases"):
        return "cases"
    if _HEX_KEY.fullmatch(value) and _B_LETTER.search(value):
        return "hex"
    if len(_B_ALNUM.findall(value)) >= _ONE_CASE_LENGTH and len(_B_DIGITS.findall(value)) >= _ONE_CASE_PLACES \
            and len(_B_LETTERS.findall(value)) >= _ONE_CASE_PLACES:
        return "one case"
    return None


def _names_a_secret(data: bytes, start: int, end: int, kind: str) -> bool:
    """Whether `data[start:end]` (the bytes before a value, or the name it is given) ends in a secret's name. A
    hex value under a name with a dotted tail is a file's digest (`"src/token.rs": "<sha256>"` in a checksum
    list), not a key."""
    name = _SECRET_NAME.search(data, start, end)
    return name is not None and not (kind == "hex" and b"." in name.group(1))


def _named_secret_spans(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(start, end, NAMED_SECRET) of each value assigned to a secret's name (above)."""
    for m in _ASSIGNED_VALUE.finditer(data):
        group = 3 if m.group(3) is not None else 4
        value = m.group(group)
        if group == 4 and (m.group(1) == b"," or _DOTTED_NAME.fullmatch(value)):
            continue
        kind = _random_kind(value)
        if kind is None:
            continue
        if _names_a_secret(data, max(0, m.start() - _NAME_WINDOW), m.start(), kind):
            yield m.start(group), m.end(group), NAMED_SECRET
    for pattern, hint, name_group, value_group in ((_XML_ELEMENT, b"</", 1, 2), (_XML_SETTING, b"value=", 2, 4),
                                                   (_DOCKER_ENV, b"ENV", 1, 2)):
        if hint in data:
            for m in pattern.finditer(data):
                kind = _random_kind(m.group(value_group))
                if kind is not None and _names_a_secret(data, m.start(name_group), m.end(name_group), kind):
                    yield m.start(value_group), m.end(value_group), NAMED_SECRET


def _token_spans(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of the random part of every API token and AWS secret access key in `data`, in the
    order of the rules. A substring test first: most files hold none of the prefixes, and the regexes never
    run on them."""
    for kind, hints, pattern, rule in _API_TOKENS:
        if any(h in data for h in hints):
            for m in pattern.finditer(data):
                body = m.lastindex or 0  # the one group of the body that matched (Square's has two)
                if _looks_random(m.group(body), rule):
                    yield m.start(body), m.end(body), kind
    if any(h in data for h in _AWS_HINTS):
        for m in _AWS_SECRET.finditer(data):
            if _looks_random(m.group(1), "cases"):
                yield m.start(1), m.end(1), "AWS secret access key"


def secret_spans(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each token in `data` (API tokens, AWS secret access keys, values assigned to a
    secret's name), sorted, none overlapping: the byte ranges a source file is indexed with masked
    (nodes/file_text.py). Each is the token's random part; its issuer's prefix (`ghp_`, `sk_live_`) stays, to
    say what it was."""
    out: list[tuple[int, int, str]] = []
    for span in sorted(_token_spans(data)):
        if not out or span[0] >= out[-1][1]:
            out.append(span)
    named: list[tuple[int, int, str]] = []
    for span in sorted(_named_secret_spans(data)):  # an issuer's shape names a token first; one span a value
        if not any(span[0] < e and s < span[1] for s, e, _ in out) and (not named or span[0] >= named[-1][1]):
            named.append(span)
    return sorted(out + named)


def token_secret(data: bytes) -> Optional[str]:
    """The kind and line of the first token in `data` (rule order, a secret found by its name last), or None."""
    for start, _, kind in itertools.chain(_token_spans(data), _named_secret_spans(data)):
        return f"{kind} at line {line_of(data, start)}"
    return None
