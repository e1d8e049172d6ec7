"""The pinned public code bases the eval runs retrieval against: one record per corpus, a published package
archive (a PyPI sdist or an npm tarball) at an exact version, pinned by its sha256, and the folder in it
that is indexed. eval/corpora.py fetches them; eval/datasets/ holds their labelled queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Corpus:
    """One pinned code base.

    ``subdir`` is the folder inside the archive's top-level directory that is indexed
    and that gold paths are relative to ("" for the whole archive). It leaves out
    compiled output and wrapper code that is not in the corpus' language.
    """

    name: str
    registry: str  # "pypi" | "npm"
    package: str
    version: str
    sha256: str
    archive: str  # file name of the archive as published
    subdir: str
    languages: tuple[str, ...]
    description: str = ""
    excluded: tuple[str, ...] = field(default=())  # what subdir leaves out, for the record


CORPORA: dict[str, Corpus] = {
    c.name: c
    for c in (
        Corpus(
            name="click",
            registry="pypi",
            package="click",
            version="8.1.8",
            sha256="ed53c9d8990d83c2a27deae68e4ee337473f6330c040a31d4225c9574d16096a",
            archive="click-8.1.8.tar.gz",
            subdir="",
            languages=("python",),
            description="Command line interface toolkit: the whole sdist (src/click, tests, docs).",
        ),
        Corpus(
            name="rich",
            registry="pypi",
            package="rich",
            version="13.9.4",
            sha256="439594978a49a09530cff7ebc4b5c7103ef57baf48d5ea3184f21d9a2befa098",
            archive="rich-13.9.4.tar.gz",
            subdir="",
            languages=("python",),
            description="Terminal rendering library: the whole sdist (the rich package, 78 modules).",
        ),
        Corpus(
            name="rxjs",
            registry="npm",
            package="rxjs",
            version="7.8.1",
            sha256="c532167725ab7d085123209156c93cef22f2479cb9c8527060f1cd903aa9d149",
            archive="rxjs-7.8.1.tgz",
            subdir="src",
            languages=("typescript",),
            description="Reactive extensions: the TypeScript sources shipped in the npm package.",
            excluded=("dist/ (compiled JavaScript and .d.ts)",),
        ),
        Corpus(
            name="pydantic-core",
            registry="pypi",
            package="pydantic-core",
            version="2.27.2",
            sha256="eb026e5a4c1fee05726072337ff51d1efb6f59090b7da90d30ea58625b1ffb39",
            archive="pydantic_core-2.27.2.tar.gz",
            subdir="src",
            languages=("rust",),
            description="Pydantic's validation core: the Rust crate sources.",
            excluded=("python/ (Python stubs and schema builders)", "tests/ (Python tests)"),
        ),
        Corpus(
            name="cmark-gfm",
            registry="pypi",
            package="cmarkgfm",
            version="2024.11.20",
            sha256="5dd01cf61975a8a57213cdef5ed870e936032f13fe93d60ddf659ffb9cf73c6a",
            archive="cmarkgfm-2024.11.20.tar.gz",
            subdir="third_party/cmark",
            languages=("c",),
            description="GitHub's CommonMark parser in C, as vendored by the cmarkgfm sdist.",
            excluded=("src/cmarkgfm (the Python/cffi wrapper)",),
        ),
        Corpus(
            name="jinja2",
            registry="pypi",
            package="jinja2",
            version="3.1.6",
            sha256="0137fb05990d35f1275a587e9aee6d56da821fc83491a0fb838183be43f66d6d",
            archive="jinja2-3.1.6.tar.gz",
            subdir="",
            languages=("python",),
            description="Template engine: the whole sdist (src/jinja2, tests, docs, examples).",
        ),
        Corpus(
            name="zod-core",
            registry="npm",
            package="zod",
            version="4.1.12",
            sha256="2ef9d7a7d822b059c9bd21f87caa4fdc48220d437353678984df942fb67b43fa",
            archive="zod-4.1.12.tgz",
            subdir="src/v4/core",
            languages=("typescript",),
            description="Schema validation: the TypeScript sources of Zod 4's core (schemas, checks, JSON Schema).",
            excluded=("src/v3, src/v4/classic, src/v4/mini, src/v4/locales (other layers)", "compiled .js/.d.ts"),
        ),
        Corpus(
            name="sqlalchemy-engine",
            registry="pypi",
            package="sqlalchemy",
            version="2.0.36",
            sha256="7f2767680b6d2398aea7082e45a774b2b0767b5c8d8ffb9c8b683088ea9b29c5",
            archive="sqlalchemy-2.0.36.tar.gz",
            subdir="lib/sqlalchemy/engine",
            languages=("python",),
            description="SQLAlchemy's engine layer (connections, results, URLs, reflection); questions written "
                        "after every ranking default they report on was chosen.",
            excluded=("the rest of lib/sqlalchemy (orm, sql, dialects, ...)", "test/, doc/"),
        ),
        # Three corpora whose questions were written after both rankers (the rules and the learned model)
        # were fixed, by readers who saw neither's results: the comparison of the two no tuning has touched.
        Corpus(
            name="anyio",
            registry="pypi",
            package="anyio",
            version="4.16.0",
            sha256="59bb03251907983d1603d27c3087ddb1e93299ea2163adcdba37899a4fb12ffb",
            archive="anyio-4.16.0.tar.gz",
            subdir="src",
            languages=("python",),
            description="Async concurrency and networking over asyncio and trio: the anyio package's sources.",
            excluded=("tests/, docs/",),
        ),
        Corpus(
            name="ajv",
            registry="npm",
            package="ajv",
            version="8.20.0",
            sha256="b2f0b3a893bbb8cc5efb6814f08b1499e19e31d5dd73683f5893382f48f6e7b3",
            archive="ajv-8.20.0.tgz",
            subdir="lib",
            languages=("typescript",),
            description="JSON Schema validator: the TypeScript sources shipped in the npm package (compiler, "
                        "vocabularies, runtime).",
            excluded=("dist/ (compiled JavaScript and .d.ts)",),
        ),
        Corpus(
            name="orjson",
            registry="pypi",
            package="orjson",
            version="3.13.0",
            sha256="d1de5eb04485110c5da4c657e49168995d55e076b1ce60f1a042e254f4186c4f",
            archive="orjson-3.13.0.tar.gz",
            subdir="src",
            languages=("rust",),
            description="A JSON library for Python written in Rust: the crate's sources.",
            excluded=("include/ (vendored C and Rust)", "pysrc/ (Python stubs)", "test/ (Python tests)"),
        ),
        # Two more written the same way, as a tune split: what a ranking change is chosen on before it is
        # scored, once, on the three above.
        Corpus(
            name="markdown-it",
            registry="pypi",
            package="markdown-it-py",
            version="4.3.0",
            sha256="91a58fa5b72c71a40cf7177250fd767480d7a2bb3ac426ccfb76fb90305fdaaa",
            archive="markdown_it_py-4.3.0.tar.gz",
            subdir="markdown_it",
            languages=("python",),
            description="A CommonMark parser in Python: the markdown_it package's sources.",
            excluded=("tests/",),
        ),
        Corpus(
            name="cryptography-rust",
            registry="pypi",
            package="cryptography",
            version="50.0.2",
            sha256="7b46165bb56eb4704e2eaaf86f3c940d19154535d9b0ca7d6d590b04060e00d5",
            archive="cryptography-50.0.2.tar.gz",
            subdir="src/rust/src",
            languages=("rust",),
            description="The Rust core of the cryptography package: its Python bindings over OpenSSL (keys, "
                        "X.509, PKCS, ciphers).",
            excluded=("src/cryptography (Python)", "src/rust/cryptography-* (the inner crates)", "tests/, docs/"),
        ),
        Corpus(
            name="query-core",
            registry="npm",
            package="@tanstack/query-core",
            version="5.108.4",
            sha256="7660b37f747ce33f1e5456299009dbe217a08514f402c13e633ae95727e361e0",
            archive="tanstack-query-core-5.108.4.tgz",
            subdir="src",
            languages=("typescript",),
            description="TanStack Query's framework-free core (caches, observers, retries): the TypeScript sources "
                        "shipped in the npm package, type declarations and all.",
            excluded=("build/ (compiled JavaScript and .d.ts)",),
        ),
        Corpus(
            name="attrs",
            registry="pypi",
            package="attrs",
            version="26.1.0",
            sha256="d03ceb89cb322a8fd706d4fb91940737b6642aa36998fe130a9bc96c985eff32",
            archive="attrs-26.1.0.tar.gz",
            subdir="src",
            languages=("python",),
            description="Classes without boilerplate: the attr and attrs packages with their .pyi stubs (the stubs "
                        "declare what the modules do, so a question about behaviour must pass them by).",
            excluded=("tests/, docs/, changelog.d/",),
        ),
        Corpus(
            name="router-core",
            registry="npm",
            package="@tanstack/router-core",
            version="1.171.39",
            sha256="0c9345f2830bda69901d464a293d101f10635d3c935f7f1e310681b71bd2e962",
            archive="tanstack-router-core-1.171.39.tgz",
            subdir="src",
            languages=("typescript",),
            description="TanStack Router's framework-free core (path matching, search params, loading, redirects, "
                        "server rendering): the TypeScript sources shipped in the npm package.",
            excluded=("dist/ (compiled JavaScript and .d.ts)",),
        ),
        Corpus(
            name="jpype-java",
            registry="pypi",
            package="JPype1",
            version="1.7.1",
            sha256="3cd88838dc3d2d546f7eaeadaaff864e590010c15f2b6a44b6f37e60796a14b2",
            archive="jpype1-1.7.1.tar.gz",
            subdir="native/jpype_module/src/main/java",
            languages=("java",),
            description="JPype's Java side (class loading, type management, reflection, the shutdown of the JVM): "
                        "the Java sources of the PyPI sdist, interfaces and native declarations beside the code.",
            excluded=("native/common, native/python (C++)", "jpype/ (Python)", "test/"),
        ),
        Corpus(
            name="tomlkit",
            registry="pypi",
            package="tomlkit",
            version="0.15.3",
            sha256="b3c3020ec1a4bd469d12e31fb4da938e7f6ba758cdbec3fd9047db63120eaf81",
            archive="tomlkit-0.15.3.tar.gz",
            subdir="tomlkit",
            languages=("python",),
            description="A style-preserving TOML parser and writer: the tomlkit package (parser, source scanner, "
                        "document container, item types, public API).",
            excluded=("tests/", "docs/"),
        ),
        Corpus(
            name="jiter",
            registry="pypi",
            package="jiter",
            version="0.19.0",
            sha256="ba3064f8be276d7cfb83c2fb85c858be533da2c2f80f9b048c3781b45a57a195",
            archive="jiter-0.19.0.tar.gz",
            subdir="crates/jiter/src",
            languages=("rust",),
            description="pydantic's iterable JSON parser, the Rust sources of its jiter crate: the byte-level parser, "
                        "string and number decoders, SIMD scanners, the value tree, serde and the conversion to "
                        "Python objects.",
            excluded=("crates/jiter-python/", "crates/jiter/benches/", "crates/jiter/tests/",
                      "crates/jiter/examples/"),
        ),
        Corpus(
            name="trpc-server",
            registry="npm",
            package="@trpc/server",
            version="11.25.2",
            sha256="43d5562bf3d3ca2ba55bb37a91020c19d90ddaa3359a1eb55e5fefc62c6cb29a",
            archive="trpc-server-11.25.2.tgz",
            subdir="src",
            languages=("typescript",),
            description="tRPC's server package, its TypeScript sources: router and procedure builders, middleware, "
                        "errors, the HTTP resolver with JSON-lines and server-sent-event streams, observables and "
                        "the adapters (Node HTTP, fetch, WebSocket, AWS Lambda, Express, Next.js).",
            excluded=("dist/ (compiled JavaScript and .d.ts)",),
        ),
    )
}
