"""Secrets and data files never reach the index or any answer (issue 16): one real build of a repository
that holds each kind, then every output (search XML/JSON, expand_result, status, index --verbose) and
every byte under .coderag/ is searched for the unique marker each file carries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_files
from test_file_classes import fake_base64_lines


def _marker(name: str) -> str:
    # letters only: one token for BM25, and valid inside base64 bodies
    return f"zq{name}mark"


def _key_block(kind: str, marker: str, seed: int) -> str:
    lines = fake_base64_lines(seed).split("\n")
    lines[2] = marker + lines[2][len(marker):]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"


def _aws_key(marker: str) -> str:
    return (marker + "K7MDENG/bPxRfiCYEXAMPLEKEYwJalrXUtnFEMI")[:40]


M = {k: _marker(k) for k in (
    "pem", "cert", "idrsa", "idrsapub", "dotenv", "envexample", "gcp", "pastedkey", "awsdir", "awsfile", "npmrc",
    "csv", "tsv", "svg", "yarn", "pipfile", "composer", "gemfile", "snap", "notebook", "bigjson", "numbers",
    "blob", "fixture", "keysmodule", "samplefixture", "makefile", "readme", "yamlpassword", "tfvars")}

# path -> (text, the marker it holds); every one of these must be skipped with its reason
SECRETS = {
    "certs/server.pem": _key_block("RSA PRIVATE KEY", M["pem"], 1),
    "certs/server.crt": _key_block("CERTIFICATE", M["cert"], 2),
    "deploy/id_rsa": _key_block("OPENSSH PRIVATE KEY", M["idrsa"], 3),
    ".env": f"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY={_aws_key(M['dotenv'])}\n",
    ".env.example": f"DATABASE_URL=postgres://app:{M['envexample']}@db/app\n",
    "config/service-account.json": json.dumps({
        "type": "service_account", "project_id": "shop-prod", "private_key_id": "4f1e2d",
        "private_key": _key_block("PRIVATE KEY", M["gcp"], 4),
        "client_email": "indexer@shop-prod.iam.gserviceaccount.com"}, indent=2) + "\n",
    "src/shop/tls.py": ('"""TLS settings for the test server."""\n\nPORT = 8443\n\nKEY = """\\\n'
                        + _key_block("EC PRIVATE KEY", M["pastedkey"], 5) + '"""\n\n\ndef tls_port():\n'
                        "    return PORT\n"),
    ".aws/credentials": f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                        f"aws_secret_access_key = {_aws_key(M['awsdir'])}\n",
    "ops/credentials": f"[deploy]\naws_secret_access_key = {_aws_key(M['awsfile'])}\n",
    ".npmrc": f"//registry.npmjs.org/:_authToken=npm_{M['npmrc']}\n",
    # a password unquoted at a line's end, in a config that is not code
    "config/database.yml": f"production:\n  adapter: postgresql\n  password: {M['yamlpassword']}X7Q9\n",
    "infra/prod.tfvars": f'region = "eu-west-1"\ndb_instance_class = "{M["tfvars"]}"\n',
}
DATA = {
    "bench/results.csv": f"name,{M['csv']},ms\n" + "".join(f"case{i},{i},{i * 0.5}\n" for i in range(200)),
    "bench/results.tsv": f"name\t{M['tsv']}\n" + "".join(f"case{i}\t{i}\n" for i in range(200)),
    "docs/logo.svg": f'<svg xmlns="http://www.w3.org/2000/svg"><title>{M["svg"]}</title>'
                     '<path d="M0 0L10 10"/></svg>\n',
    "yarn.lock": f'"{M["yarn"]}@^1.0.0":\n  version "1.0.0"\n',
    "Pipfile.lock": json.dumps({"default": {M["pipfile"]: {"version": "==1.0"}}}) + "\n",
    "composer.lock": json.dumps({"packages": [{"name": M["composer"]}]}) + "\n",
    "Gemfile.lock": f"GEM\n  specs:\n    {M['gemfile']} (1.0.0)\n",
    "web/__snapshots__/app.test.js.snap": f"exports[`renders {M['snap']}`] = `<div/>`;\n",
    "notebooks/analysis.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": [f"print('{M['notebook']}')"]}]}),
    "data/catalog.json": json.dumps([{"sku": f"{M['bigjson']}{i}" if i == 0 else f"sku{i}", "price": i,
                                      "title": "a product of the catalog"} for i in range(1500)], indent=1) + "\n",
    "data/points.txt": f"# {M['numbers']}\n" + "".join(f"{i} {i * 0.25:.2f} {i * 7 % 13}\n" for i in range(300)),
    "assets/blob.txt": M["blob"] + "\n" + "\n".join(fake_base64_lines(10 + i, 1, 76) for i in range(40)) + "\n",
    "tests/fixtures/page.html": f"<html><body><h1>{M['fixture']}</h1>\n"
                                + "<p>Row of a captured page, kept as a test fixture.</p>\n" * 1500 + "</body></html>\n",
}
# Code and docs that look like the above but are not: indexed, and their markers found (the checks can fail).
KEPT = {
    "src/shop/keys.py": f'"""Signing keys of the shop."""\n\n\ndef rotate_signing_keys(store):\n'
                        f'    """Rotate every signing key ({M["keysmodule"]})."""\n    return store.rotate()\n',
    "tests/fixtures/sample.json": json.dumps({"name": M["samplefixture"], "items": [
        {"id": i, "label": f"item {i}"} for i in range(40)]}, indent=2) + "\n",
    "Makefile": f"test:\n\tpytest -q  # {M['makefile']}\n",
    # a public key is published by design: no secret (issue 27)
    "deploy/id_rsa.pub": f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{M['idrsapub']} deploy@build\n",
    "README.md": f"# Shop\n\nTLS keys begin with `-----BEGIN PRIVATE KEY-----`; never commit one ({M['readme']}).\n",
    # the user tries to bring secrets back and data too: secrets stay out, data stays out unless named
    ".coderagignore": "!*.pem\n!.env\n!id_rsa\n!.aws/\n",
}
HIDDEN = {**SECRETS, **DATA}
HIDDEN_MARKERS = [m for k, m in M.items() if k not in ("keysmodule", "samplefixture", "makefile", "readme", "idrsapub")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """(root, output of `coderag index --verbose`): one build for the whole module."""
    from coderag.cli import main

    root = write_files(tmp_path_factory.mktemp("secrets") / "shop", {**HIDDEN, **KEPT})
    res = CliRunner().invoke(main, ["index", "--verbose", str(root)])
    assert res.exit_code == 0, res.output
    return root, res.output


@pytest.fixture(scope="module")
def index(built):
    from coderag import CodeIndex

    with CodeIndex.open(built[0], create=False) as idx:
        yield idx


def _leaks(text: str) -> list[str]:
    return [m for m in HIDDEN_MARKERS if m in text]


def test_secrets_every_secret_and_data_file_is_listed_with_its_reason(built) -> None:
    _, out = built
    listed = dict(re.findall(r"^    (\S+): ([a-z-]+)", out, re.M))
    assert {p: listed.get(p) for p in SECRETS} == {p: "secret" for p in SECRETS}
    assert {p: listed.get(p) for p in DATA} == {p: "data" for p in DATA}
    assert not set(KEPT) & set(listed)
    assert _leaks(out) == []


def test_secrets_status_counts_every_skip_class_and_shows_no_secret(built, index) -> None:
    from coderag.cli import main

    res = CliRunner().invoke(main, ["status", str(built[0])])
    assert res.exit_code == 0, res.output
    assert f"skipped:     {len(SECRETS)} secret, {len(DATA)} data\n" in res.output
    assert f"files:       {len(KEPT)} indexed" in res.output
    assert _leaks(res.output) == []


def test_secrets_nothing_of_them_is_stored(built, index) -> None:
    root, _ = built
    for path in HIDDEN:  # no manifest row (never opened), or one that says why it was left out
        rec = index.state.file(path)
        assert rec is None or (rec.status in ("secret", "data") and rec.n_nodes == 0), (path, rec)
        assert index.docstore.get_ref_doc_info(path) is None, path
    # Every byte of the index: the SQLite file and its WAL, the shard, the log. The kept files' markers are
    # found there, so a leaked one would be too.
    found = set()
    for p in (root / ".coderag").rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            found |= {m for m in M.values() if m.encode() in data}
    assert {M["keysmodule"], M["readme"]} <= found
    assert found & set(HIDDEN_MARKERS) == set()


@pytest.mark.parametrize("query", [
    *HIDDEN_MARKERS[:4], M["gcp"], M["csv"], M["numbers"],
    "BEGIN RSA PRIVATE KEY", "aws_secret_access_key", "service_account private_key", "authToken registry",
])
@pytest.mark.parametrize("retriever", ["bm25", "hybrid"])
def test_secrets_no_search_answer_holds_them(index, query: str, retriever: str) -> None:
    res = index.search(query, retriever=retriever, max_tokens=4000)
    # The answer echoes the query (meta, "no results" message); every shown line is in a result's text.
    assert _leaks("\n".join(r.text for r in res)) == []
    assert _leaks(res.to_xml().replace(query, "")) == [] and _leaks(res.to_json().replace(query, "")) == []
    assert not {r.file_path for r in res} & set(HIDDEN)


def test_secrets_kept_files_are_found(index) -> None:
    """The positive control: the look-alikes (keys.py, a small fixture, the README that names a key header)
    are indexed and answer by their markers."""
    for name, path in (("keysmodule", "src/shop/keys.py"), ("samplefixture", "tests/fixtures/sample.json"),
                       ("readme", "README.md"), ("makefile", "Makefile")):
        res = index.search(M[name], retriever="bm25")
        assert path in {r.file_path for r in res}, (name, res.to_xml())
        assert M[name] in res.to_xml()
    assert index.state.file("deploy/id_rsa.pub").status == "indexed"


@pytest.mark.parametrize("path", sorted(HIDDEN))
def test_secrets_expand_result_refuses_them(index, path: str) -> None:
    from coderag.pipelines.expand import expand_result

    try:
        out = json.dumps(expand_result(index, f"{path}:1-5", None))
    except ValueError as exc:
        out = str(exc)
    assert _leaks(out) == []
