"""file_classes: which names and contents are secrets or data, and which look alike but are code (issue 16)."""

from __future__ import annotations

import base64
import random

import pytest

from coderag.nodes.file_classes import DATA, SECRET, content_class, data_content, secret_content, secret_name
from coderag.nodes.secret_tokens import secret_spans


def fake_base64_lines(seed: int, n: int = 6, width: int = 64) -> str:
    """Lines of base64 that look like a key's body (random bytes, fixed seed), not a real key."""
    rnd = random.Random(seed)
    blob = base64.b64encode(bytes(rnd.randrange(256) for _ in range(n * width))).decode()
    return "\n".join(blob[i:i + width] for i in range(0, n * width, width))


def pem(kind: str, seed: int = 1) -> str:
    return f"-----BEGIN {kind}-----\n{fake_base64_lines(seed)}\n-----END {kind}-----\n"


# -- by name ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", [
    "certs/server.pem", "certs/server.key", "certs/client.p12", "certs/client.pfx", "certs/ca.crt",
    "certs/ca.cer", "certs/ca.der", "android/release.keystore", "android/app.jks", "A/Server.PEM",
    "deploy/id_rsa", "deploy/id_ed25519", "deploy/id_ecdsa_github", "id_dsa.old",
    ".env", "web/.env", ".env.local", ".env.production", ".env.example", ".env.sample", "docker/prod.env",
    ".envrc", ".netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials", ".htpasswd",
    ".aws/credentials", "ops/.aws/config", "home/.ssh/known_hosts", ".kube/config",
    "infra/terraform.tfstate", "infra/terraform.tfstate.backup", "config/secrets.yml",
    "infra/terraform.tfvars", "infra/prod.auto.tfvars", "infra/terraform.tfvars.json",
    "client_secret_1234.apps.googleusercontent.com.json",
])
def test_file_classes_secret_names(rel: str) -> None:
    assert secret_name(rel) is not None


@pytest.mark.parametrize("rel", [
    "nodes/keys.py", "src/key.go", "crypto/id_rsa.go", "auth/client_secret.py", "Makefile", "README.md",
    "src/env.py", "config/environment.ts", "web/env.d.ts", "keys.json", "tests/fixtures/sample.json",
    "docs/certificates.md", "pem.py", "credentials.py", "src/secrets_manager.py",
    "infra/main.tf", "infra/variables.tf", "infra/terraform.tfvars.example",
    "deploy/id_rsa.pub", "home/id_ed25519_github.pub",  # public keys are published: not secrets (issue 27)
])
def test_file_classes_code_that_looks_like_a_secret_is_not(rel: str) -> None:
    assert secret_name(rel) is None


# -- by content: secrets ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, kind", [
    (pem("RSA PRIVATE KEY"), "rsa private key"),
    (pem("PRIVATE KEY"), "private key"),
    (pem("EC PRIVATE KEY"), "ec private key"),
    (pem("ENCRYPTED PRIVATE KEY"), "encrypted private key"),
    (pem("OPENSSH PRIVATE KEY"), "openssh private key"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n" + fake_base64_lines(2), "pgp private key block"),
    ("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0A1B2C3D4E5F\n\n"
     + fake_base64_lines(3), "rsa private key"),
    # pasted into code: a Python string, and Go string concatenation with "\n" escapes
    ('"""Test TLS."""\n\nKEY = """' + pem("RSA PRIVATE KEY", 4) + '"""\n', "rsa private key"),
    ('var key = "-----BEGIN EC PRIVATE KEY-----\\n" +\n\t"' + fake_base64_lines(5, 1) + '\\n" +\n', "ec private key"),
])
def test_file_classes_private_key_blocks_anywhere(text: str, kind: str) -> None:
    why = secret_content(text.encode())
    assert why is not None and why.startswith(f"{kind} block at line ")


def test_file_classes_secret_detail_names_the_line_never_the_text() -> None:
    body = "import ssl\n\n\n" + pem("PRIVATE KEY", 6)
    assert content_class("src/tls.py", body.encode()) == (SECRET, "private key block at line 4")
    assert fake_base64_lines(6)[:20] not in content_class("src/tls.py", body.encode())[1]


def test_file_classes_gcp_service_account_and_aws_keys() -> None:
    key = fake_base64_lines(7).replace("\n", "\\n")
    sa = ('{\n  "type": "service_account",\n  "project_id": "demo",\n  "private_key_id": "abc",\n'
          f'  "private_key": "-----BEGIN PRIVATE KEY-----\\n{key}\\n-----END PRIVATE KEY-----\\n"\n}}\n')
    assert secret_content(sa.encode()) == "private key block at line 5"
    # with its key cut out, the account file still names a key: still a secret
    assert secret_content(b'{"type": "service_account", "private_key_id": "abc"}') == "GCP service-account key"
    aws = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
    assert secret_content(aws.encode()) == "AWS secret access key at line 3"
    assert secret_content(b'{"Credentials": {"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}}')


@pytest.mark.parametrize("text", [
    # a README that names the header in prose, or shows a block without its body
    "Keys start with `-----BEGIN PRIVATE KEY-----` and end with `-----END PRIVATE KEY-----`.\n",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA...\n-----END RSA PRIVATE KEY-----\n",
    "Paste `-----BEGIN OPENSSH PRIVATE KEY-----` into\n/api/v1/users/settings/notifications/email/preferences\n",
    # code that reads a secret is code
    "import os\nAWS_SECRET_ACCESS_KEY = os.environ['AWS_SECRET_ACCESS_KEY']\n",
    "def load(cfg):\n    return cfg['aws_secret_access_key']\n",
    'if header == "-----BEGIN RSA PRIVATE KEY-----":\n    return parse_rsa(lines)\n',
    '{"type": "service_account"}\n',
])
def test_file_classes_text_about_secrets_is_not_a_secret(text: str) -> None:
    assert secret_content(text.encode()) is None


# -- by content: data -------------------------------------------------------------------------------

def test_file_classes_rows_of_numbers_are_data_outside_code() -> None:
    rows = "\n".join(f"{i}, {i * 0.25:.2f}, {i * 3 - 7}, 1e-{i % 9}" for i in range(300)).encode()
    assert data_content("bench/timings.txt", rows) == "200 of 200 sampled lines are numbers"
    assert content_class("data/points.yaml", rows)[0] == DATA
    # the same numbers in code are a table the code owns
    assert data_content("src/table.py", rows) is None
    assert data_content("src/table.c", rows) is None
    # a CSV read at all was re-included by the user's `!pattern`: not dropped again by its rows
    assert data_content("keep/table.csv", rows) is None


def test_file_classes_base64_blobs_are_data() -> None:
    blob = "\n".join(fake_base64_lines(i, 1, 76) for i in range(40)).encode()
    assert data_content("assets/font.txt", blob) == "40 of 40 sampled lines are base64"


def test_file_classes_big_json_yaml_xml_and_fixtures_are_data() -> None:
    big = b'{"id": 1, "name": "widget", "tags": ["a", "b"]},\n' * 2000  # ~100 KB of records
    assert data_content("api/dump.json", big).startswith("json of ")
    assert data_content("k8s/all.yaml", big).startswith("yaml of ")
    assert data_content("tests/fixtures/page.html", big).startswith("fixture of ")
    assert data_content("pkg/testdata/golden.txt", big).startswith("fixture of ")
    assert data_content("src/__mocks__/api.txt", big).startswith("fixture of ")
    # ... but prose of that size outside fixtures (Django's docs are .txt) and code are not
    assert data_content("docs/ref/models.txt", b"The QuerySet API reference, with examples.\n" * 3000) is None
    assert data_content("tests/fixtures/big_module.py", big) is None


@pytest.mark.parametrize("rel, text", [
    ("tests/fixtures/sample.json", '{\n  "name": "sample",\n  "items": [\n' + '    {"id": "a", "label": "first"},\n' * 60
     + '  ]\n}\n'),
    ("requirements.txt", "".join(f"package{i}=={i}.0.{i}\n" for i in range(40))),
    ("config/app.yaml", "".join(f"setting_{i}: value {i}\n" for i in range(40))),
    ("Makefile", "test:\n\tpytest -q\n" * 30),
    ("docs/guide.md", "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 40),
    ("short.txt", "1\n2\n3\n"),
])
def test_file_classes_ordinary_files_are_not_data(rel: str, text: str) -> None:
    assert content_class(rel, text.encode()) is None


# -- by content: API tokens -------------------------------------------------------------------------
# Fake tokens of the issuers' shapes, made at run time from a seeded generator (so this file holds none
# and is indexed itself); the prefixes are split so no scanner takes the source for a token either.
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def fake(n: int, seed: int, alphabet: str = _BASE62) -> str:
    rnd = random.Random(seed)
    while True:
        s = "".join(rnd.choice(alphabet) for _ in range(n))
        if s.lower() != s and s.upper() != s or alphabet.lower() == alphabet:
            return s  # a real token's body has both cases (all but ~1e-8 of them), if its alphabet has


def fake_upper(n: int, seed: int) -> str:
    """Upper-case letters and digits, both (an AWS access key ID's body)."""
    rnd = random.Random(seed)
    while True:
        s = "".join(rnd.choice(_BASE62[:36]) for _ in range(n))
        if s.upper() != s.lower() and any(c.isdigit() for c in s):
            return s


GH, PAT, SLACK_B, SLACK_P = "gh" + "p_", "github" + "_pat_", "xo" + "xb-", "xo" + "xp-"
TOKENS = {
    "github classic": GH + fake(36, 1),
    "github oauth": "gh" + "o_" + fake(36, 2),
    "github app": "gh" + "s_" + fake(36, 3),
    "github refresh": "gh" + "r_" + fake(36, 4),
    "github user": "gh" + "u_" + fake(36, 5),
    "github fine-grained": PAT + fake(22, 6) + "_" + fake(59, 7),
    "slack bot": SLACK_B + "17653672481-19874698323-" + fake(24, 8),
    "slack user": SLACK_P + "4956821743-4956821827-13424254546-" + fake(32, 9, "0123456789abcdef"),
    "stripe live": "sk" + "_live_" + fake(24, 10),
    "stripe restricted": "rk" + "_live_" + fake(99, 11),
    "google api": "AI" + "za" + fake(35, 12, _BASE62 + "-_"),
    "openai legacy": "sk" + "-" + fake(48, 13),
    "openai project": "sk" + "-proj-" + fake(120, 14, _BASE62 + "-_"),
    "anthropic": "sk" + "-ant-api03-" + fake(93, 15, _BASE62 + "-_"),
    "aws access key id": "AK" + "IA" + fake_upper(16, 16),
    "aws temporary key id": "AS" + "IA" + fake_upper(16, 17),
    "gitlab": "gl" + "pat-" + fake(20, 18, _BASE62 + "-_"),
    "npm": "np" + "m_" + fake(36, 19),
    "pypi": "py" + "pi-AgEIcHlwaS5vcmc" + fake(70, 40, _BASE62 + "-_"),
    "hugging face": "h" + "f_" + fake(34, 41, _BASE62[10:]),
    "sendgrid": "S" + "G." + fake(22, 42, _BASE62 + "-_") + "." + fake(43, 43, _BASE62 + "-_"),
    "telegram bot": "7123456789:" + "AA" + fake(33, 44, _BASE62 + "-_"),
    "json web token": ("ey" + "JhbGciOiJIUzI1NiJ9." + "eyJ" + fake(40, 45, _BASE62 + "-_") + "."
                       + fake(43, 46, _BASE62 + "-_")),
    "shopify": "shp" + "at_" + fake(32, 47, "0123456789abcdef"),
    "digitalocean": "do" + "p_v1_" + fake(64, 48, "0123456789abcdef"),
    "databricks": "da" + "pi" + fake(32, 49, "0123456789abcdef"),
    "azure storage": "Account" + "Key=" + fake(86, 54, _BASE62 + "+/") + "==",
    "new relic": "NR" + "AK-" + fake_upper(27, 60),
    "linear": "lin" + "_api_" + fake(40, 61),
    "square access token": "sq0" + "atp-" + fake(22, 62, _BASE62 + "-_"),
    "square oauth secret": "sq0" + "csp-" + fake(43, 63, _BASE62 + "-_"),
    "age": "AGE-SECRET" + "-KEY-1" + "".join(random.Random(64).choices("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", k=58)),
    "mailgun": "ke" + "y-" + fake(32, 65),
    "mailchimp": fake(32, 66, "0123456789abcdef") + "-us6",
    "1password": "ops" + "_eyJ" + fake(260, 67, _BASE62 + "+/"),
    "doppler service": "dp" + ".st.prd." + fake(40, 70),
    "doppler personal": "dp" + ".pt." + fake(43, 71),
    "grafana service account": "gl" + "sa_" + fake(32, 72) + "_" + fake(8, 73, "0123456789abcdef"),
    "grafana cloud": "gl" + "c_eyJ" + fake(80, 74, _BASE62 + "+/") + "=",
    "postman": "PM" + "AK-" + fake(24, 75, "0123456789abcdef") + "-" + fake(34, 76, "0123456789abcdef"),
    "sentry org": "sntr" + "ys_eyJ" + fake(120, 77, _BASE62 + "+/="),
    "sentry user": "sntr" + "yu_" + fake(64, 78, "0123456789abcdef"),
    "atlassian": "ATA" + "TT3x" + fake(182, 79, _BASE62 + "-_="),
    "slack app": "xa" + "pp-1-A0" + "7QK2M9XW4T-8123456789012-" + fake(64, 80, "0123456789abcdef"),
    "mapbox": "s" + "k.eyJ1Ijoi" + fake(60, 81, _BASE62 + "-_") + "." + fake(22, 82, _BASE62 + "-_"),
    "facebook": "EA" + "ACEdEose0cBA" + fake(100, 83),
}


NAMED_VALUE = "x9K" + fake(13, 55) + "4"
HEX_KEY = "a1" + fake(30, 56, "0123456789abcdef")
SHORT_VALUE = "Tr0ub4dor&3"  # eleven characters: a password a person chose
UUID_KEY = "3f2b8c1e-9d4a-4f6b-b7e2-1a5c9d8e0f37"  # a random UUID (Heroku's API keys look so)
# Keys in one letter case that no issuer's shape names: upper case, lower case in groups, lower case (Airtable's)
UPPER_KEY = "7QK2M9XW4TB8" + "LZ0RJ5HC3VN6PDA"
GROUPED_KEY = "k3xq9v7t-m2p8" + "wd4n-zr5b"
LOWER_KEY = "k3xq9" + "v7tm2p8wd4nzr"
NAMED = "password or key (by its name)"


@pytest.mark.parametrize("kind", list(TOKENS))
@pytest.mark.parametrize("wrap", [
    "{t}\n",                                                   # a token file
    'import os\n\n\nTOKEN = "{t}"  # TODO: move to the env\n',  # pasted into code
    "headers:\n  Authorization: Bearer {t}\n",                 # a config file
    '{{"token": "{t}", "user": "ci"}}\n',                      # JSON
    "export API_TOKEN='{t}'\n",
])
def test_file_classes_api_tokens_are_secrets(kind: str, wrap: str) -> None:
    """Found in any file. A file that is not source code is a secret; a source file is indexed with the token's
    span masked (issue 27), and the span is exactly the token's random part."""
    text = wrap.format(t=TOKENS[kind])
    line = text.splitlines().index(next(ln for ln in text.splitlines() if TOKENS[kind] in ln)) + 1
    why = secret_content(text.encode())
    assert why is not None and f"at line {line}" in why, (kind, text)
    assert TOKENS[kind] not in why and TOKENS[kind][:12] not in why  # the detail never quotes it
    assert content_class("ops/deploy-token.txt", text.encode()) == (SECRET, why)
    assert content_class("src/settings.py", text.encode()) is None
    (start, end, _), = secret_spans(text.encode())
    assert TOKENS[kind].endswith(text[start:end]) and len(TOKENS[kind]) - (end - start) <= 40


@pytest.mark.parametrize("text", [
    # placeholders and prefixes in docs and code
    "export GITHUB_TOKEN=" + GH + "x" * 36 + "\n",
    "export GITHUB_TOKEN=" + GH + "X" * 36 + "\n",
    "export GITHUB_TOKEN=" + GH + "1234567890abcdefghijklmnopqrstuvwxyz\n",
    'if token.startswith("' + GH + '") or token.startswith("' + PAT + '"):\n    kind = "github"\n',
    'PATTERN = re.compile(r"' + GH + '[A-Za-z0-9]{36}")\n',
    "SLACK_TOKEN = '" + SLACK_B + "your-bot-token-here'\n",
    "SLACK_TOKEN = '" + SLACK_B + "123456789012-123456789012-abcdefghijklmnopqrstuvwx'\n",
    'stripe.api_key = "sk' + '_test_' + fake(24, 20) + '"\n',  # a test key: public in Stripe's docs
    'stripe.api_key = "sk' + '_live_' + 'x' * 24 + '"\n',
    'key = "AI' + 'za' + 'x' * 35 + '"\n',
    # the wrong length: one short, one long (a run glued to more characters is not that token)
    "ref = " + GH + fake(35, 21) + "\n",
    "ref = " + GH + fake(37, 22) + "\n",
    'key = "AI' + 'za' + fake(34, 23) + '"\n',
    # `sk-` followed by a hex digest, a slug, or too little; and `sk-` inside a longer word
    "cache key: sk-" + "3f786850e387550fdab836ed7e6dc881de23001b" + "\n",
    "python -m pip install sk-learn-compat-shim-for-very-old-environments-only\n",
    "sk-" + fake(39, 24) + "\n",
    "task-" + fake(48, 25) + "\n",
    "desk-" + fake(48, 26) + "\n",
    # a git revision and a content hash in a lock-ish file
    "revision = 'a94a8fe5ccb19ba61c4c0873d391e987982fbbd3'\nsha256 = '" + "ab" * 32 + "'\n",
    # AWS's documented example key ID, a placeholder, and a word that starts like a temporary key ID
    "aws_access_key_id = AK" + "IAIOSFODNN7EXAMPLE\n",
    "AWS_ACCESS_KEY_ID=AK" + "IA" + "X" * 16 + "\n",
    "regions = ['AS" + "IAPACIFICSOUTHEAST', 'EUROPE']\n",
    "aws_secret = '" + "x" * 40 + "'\n",
    # names that start like tokens: npm's config variables, a Hugging Face Hub call
    "npm_config_registry=https://registry.npmjs.org/\n",
    "path = h" + "f_hub_download(repo_id='org/model', filename='config.json')\n",
    # hex placeholders, and names that start like hex tokens
    "SHOPIFY_TOKEN=shp" + "at_" + "0" * 32 + "\n",
    "DO_TOKEN=do" + "p_v1_" + "x" * 64 + "\n",
    "from databricks import dapi_client, dapi" + "structures\n",
    # a secret's name with a value that is an example, a reference, or a name; and a name that only starts so
    'password = "changeme"\nDB_PASSWORD = "your-password-here"\n',
    'SECRET_KEY = os.environ["SECRET_KEY"]\napi_key = settings.API_KEY\n',
    'tokenizer_class = "BertTokenizerFast1"\npassword_field = "PasswordInput2"\n',
    # unquoted: a reference, a call, a template, a value inside a list, words
    "api_key: settings.API_KEY_V22\n",
    "token = make_token(Abc12x34Yz)\n",
    "password: ${DB_PASSWORD_12Ab}\n",
    "auth = {secret: Xk8fP2mQ9vLw3, user: ci}\n",
    "password_hint: the vault entry of 2024-01\n",
    # connection strings and arguments with a password that is an example, a template, a call or a name
    '"Default": "Server=db;User Id=sa;Password=password;"\n',
    'conn = f"Server=db;Password={password};"\nurl = "jdbc:mysql://db/app?password=${DB_PASSWORD}"\n',
    "password=getpass()\nclient = connect(host, password=pw_Value2)\nlogin(password=Password2, user=u)\n",
    # Dockerfile ENV lines that set no secret, or a reference to one
    "ENV PATH /usr/local/bin2:/opt/x3\nENV DB_PASSWORD ${DB_PASSWORD}\nENV TOKEN_TTL 3600\n",
    # XML whose names or values are not a secret's
    "<dbPassword>${DB_PASSWORD}</dbPassword>\n<tokenizer>BertTokenizerFast12</tokenizer>\n",
    '<add key="ApiBaseUrl" value="' + NAMED_VALUE + '" />\n<add key="ApiKey" value="your-api-key-here" />\n',
    # after a comma: an unquoted name, or an unquoted value
    'check(token, "' + NAMED_VALUE + '")\n',
    '("password", ' + NAMED_VALUE + ')\n',
    "fields = 'token'," + NAMED_VALUE + "\n",
    # a file's digest under a file name that holds a secret's word (Cargo's checksum lists)
    '{"files":{"src/token.rs":"' + "3f" * 32 + '","src/secret.go":"' + "9c" * 32 + '"}}\n',
    # a hex value with no letter is a number
    'access_token_ttl = "' + "12345678" * 4 + '"\n',
    # values under a secret's name that are too short, or show one digit, and UUIDs that are examples
    'password = "Ab1cd2e"\nDB_PASSWORD = "Passw0rd"\n',
    # in one letter case: digits in two places, or too short
    'RELEASE_TOKEN = "release_2024_v2_build"\nAPI_KEY = "k3x9v7t2"\n',
    'api_key = "123e4567-e89b-12d3-a456-426614174000"\n',
    "token: 12345678-1234-5678-1234-567812345678\nsecret: 00000000-0000-0000-0000-000000000000\n",
    # a bearer token that is a reference, a placeholder or words; issuers' prefixes inside a word or before a
    # placeholder
    'headers = {"Authorization": f"Bearer {token}"}\nauth = "Bearer " + token\n',
    "Authorization: Bearer YOUR_ACCESS_TOKEN\nAuthorization: Bearer <token>\nuse a bearer token instead\n",
    "monkey-" + fake(32, 69) + "\nSQUARE_TOKEN=sq0" + "atp-" + "x" * 22 + "\n",
    # the new issuers' prefixes before placeholders or inside names, and keys named so that are no secret
    "DOPPLER_TOKEN=dp" + ".st." + "x" * 40 + "\nGRAFANA=gl" + "sa_" + "X" * 32 + "_00000000\n",
    "from fbsdk import EA" + "AClient\nmapbox = 's" + "k.eyJ1Ijoi' + user\nctx = gl" + "c_CreateContextWithAttributes12Ab()\n",
    'PRIMARY_KEY = "user_id"\ncache_key = "' + NAMED_VALUE + '"\nSIGNING_KEY_PATH = "/etc/keys/signing.pem"\n',
    # Slack's documented placeholder webhook
    "url: https://hooks.slack.com/services/T00000000/B00000000/" + "X" * 24 + "\n",
    # URLs whose password is an example or a template, and URLs with a user and no password
    "DATABASE_URL: postgres://postgres:postgres@db:5432/app\n",
    'url = "postgres://user:password@localhost/db"\n',
    'url = f"postgres://{user}:{password}@{host}/db"\n',
    'url = "postgres://app:${DB_PASSWORD}@db/orders"\n',
    "git clone ssh://git@github.com:22/org/repo.git\n",
    "see http://example.com:80808080@mirror\n",
])
def test_file_classes_api_token_look_alikes_stay_indexed(text: str) -> None:
    assert content_class("ops/settings.txt", text.encode()) is None, text
    assert secret_spans(text.encode()) == [], text


SLACK_HOOK_SECRET, DISCORD_HOOK_SECRET = fake(24, 50), fake(68, 51, _BASE62 + "-_")
AWS_SECRET_KEY = fake(40, 52, _BASE62 + "/+")
URL_PASSWORD = fake(14, 53)


def test_file_classes_a_secret_is_placed_on_the_line_an_editor_shows() -> None:
    """Lines end at LF, CRLF or a CR alone (a classic Mac file), as nodes/file_text.py splits them."""
    token = TOKENS["github classic"]
    for sep in ("\n", "\r\n", "\r"):
        text = sep.join(["import os", "", f'TOKEN = "{token}"', ""])
        assert secret_content(text.encode()) == "GitHub token at line 3", repr(sep)


@pytest.mark.parametrize("text, kind, secret", [
    ('SLACK_URL = "https://hooks.slack.com/services/T4R7K2M9Q/B07QZ3W8XYZ/' + SLACK_HOOK_SECRET + '"\n',
     "Slack webhook", SLACK_HOOK_SECRET),
    ("notify:\n  discord: https://discord.com/api/webhooks/1187654321098765432/" + DISCORD_HOOK_SECRET + "\n",
     "Discord webhook", DISCORD_HOOK_SECRET),
    ('AWS_SECRET = "' + AWS_SECRET_KEY + '"\n', "AWS secret access key", AWS_SECRET_KEY),
    ("aws_secret_key: " + AWS_SECRET_KEY + "\n", "AWS secret access key", AWS_SECRET_KEY),
    ('const awsSecret = "' + AWS_SECRET_KEY + '";\n', "AWS secret access key", AWS_SECRET_KEY),
    ('DATABASE_URL = "postgres://orders:' + URL_PASSWORD + '@db.internal:5432/orders"\n', "password in a URL",
     URL_PASSWORD),
    ("cache: redis://:" + URL_PASSWORD + "@cache:6379/0\n", "password in a URL", URL_PASSWORD),
    ('DB_PASSWORD = "' + NAMED_VALUE + '"\n', "password or key (by its name)", NAMED_VALUE),
    ('{"apiKey": "' + NAMED_VALUE + '", "region": "eu"}\n', "password or key (by its name)", NAMED_VALUE),
    ("$settings['client_secret'] => '" + NAMED_VALUE + "';\n", "password or key (by its name)", NAMED_VALUE),
    # unquoted, at the end of a line: YAML, a properties file, a shell export with a comment after it
    ("database:\n  host: db\n  password: " + NAMED_VALUE + "\n", "password or key (by its name)", NAMED_VALUE),
    ("spring.datasource.password=" + NAMED_VALUE + "\r\n", "password or key (by its name)", NAMED_VALUE),
    ("export API_TOKEN=" + NAMED_VALUE + "  # rotate monthly\n", "password or key (by its name)", NAMED_VALUE),
    # connection strings: ADO.NET, ODBC, a JDBC URL's query
    ('"Default": "Server=db;Database=orders;User Id=app;Password=' + URL_PASSWORD + ';"\n',
     "password in a connection string", URL_PASSWORD),
    ("dsn = 'DRIVER={ODBC Driver 18};SERVER=db;UID=app;PWD=" + URL_PASSWORD + "'\n", "password in a connection string",
     URL_PASSWORD),
    ("url: jdbc:postgresql://db/orders?user=app&password=" + URL_PASSWORD + "\n", "password in a connection string",
     URL_PASSWORD),
    # a shell command continued on the next line, and a Dockerfile's ENV without `=`
    ("docker run -e POSTGRES_PASSWORD=" + NAMED_VALUE + " \\\n  postgres:16\n", NAMED, NAMED_VALUE),
    ("FROM python:3.12\r\nENV DB_PASSWORD " + NAMED_VALUE + "\r\nCMD app\r\n", NAMED, NAMED_VALUE),
    # XML: an element named so, and .NET's app settings
    ("<settings>\n  <server>\n    <id>deploy</id>\n    <password>" + NAMED_VALUE + "</password>\n", NAMED, NAMED_VALUE),
    ('<appSettings>\n  <add key="StripeApiKey" value="' + NAMED_VALUE + '" />\n', NAMED, NAMED_VALUE),
    # the value after its quoted name: a PHP constant, a default for a variable the environment lacks
    ("define('DB_PASSWORD', '" + NAMED_VALUE + "');\n", "password or key (by its name)", NAMED_VALUE),
    ('key = os.getenv("API_TOKEN", "' + NAMED_VALUE + '")\n', "password or key (by its name)", NAMED_VALUE),
    # hex keys with no prefix (Twilio's auth token, a 128-bit key written out), lower or upper case
    ('TWILIO_AUTH_TOKEN = "' + HEX_KEY + '"\n', "password or key (by its name)", HEX_KEY),
    ("signing_secret: " + HEX_KEY.upper() + "\n", "password or key (by its name)", HEX_KEY.upper()),
    # eight to eleven characters, in each form a value is read in; a random UUID
    ("database:\n  password: " + SHORT_VALUE + "\n", NAMED, SHORT_VALUE),
    ('const apiKey = "' + SHORT_VALUE + '";\n', NAMED, SHORT_VALUE),
    ("<password>" + SHORT_VALUE + "</password>\n", NAMED, SHORT_VALUE),
    ("ENV DB_PASSWORD " + SHORT_VALUE + "\n", NAMED, SHORT_VALUE),
    ("HEROKU_API_KEY=" + UUID_KEY + "\n", NAMED, UUID_KEY),
    # random in one letter case
    # a bearer token written out in a header, whatever issued it
    ('curl -H "Authorization: Bearer ' + HEX_KEY + '" https://api.example.com/v1/me\n', "bearer token", HEX_KEY),
    ('headers = {"Authorization": "Bearer ' + NAMED_VALUE + '"}\n', "bearer token", NAMED_VALUE),
    ("ACME_API_KEY=" + UPPER_KEY + "\n", NAMED, UPPER_KEY),
    ('DEPLOY_TOKEN = "' + GROUPED_KEY + '"\n', NAMED, GROUPED_KEY),
    ("airtable:\n  api_key: " + LOWER_KEY + "\n", NAMED, LOWER_KEY),
    # keys that say what they are by other names: a search service's admin key, a signing or service-role key
    ('ALGOLIA_ADMIN_KEY = "' + HEX_KEY + '"\n', NAMED, HEX_KEY),
    ("jwt:\n  signing_key: " + NAMED_VALUE + "\n", NAMED, NAMED_VALUE),
    ('SUPABASE_SERVICE_ROLE_KEY="' + NAMED_VALUE + '"\n', NAMED, NAMED_VALUE),
    ('{"api_token": "' + UUID_KEY.upper() + '"}\n', NAMED, UUID_KEY.upper()),
    # quotes escaped: code inside a string, or a string inside JSON
    ('cmd = "export API_TOKEN=\\"' + NAMED_VALUE + '\\""\n', NAMED, NAMED_VALUE),
    ('    "DB_PASSWORD = \\"' + SHORT_VALUE + '\\"\\n",\n', NAMED, SHORT_VALUE),
])
def test_file_classes_webhooks_aws_secrets_and_url_passwords_are_secrets(text: str, kind: str, secret: str) -> None:
    """The part that is the credential is masked (a webhook's last path segment, the key's value, the URL's
    password), and a file that is not source code holding one is a secret."""
    why = secret_content(text.encode())
    assert why is not None and why.startswith(kind) and secret not in why, why
    assert content_class("ops/notify.yaml", text.encode()) == (SECRET, why)
    (start, end, found), = secret_spans(text.encode())
    assert text[start:end] == secret and found == kind
