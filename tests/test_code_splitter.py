"""CodeHierarchySplitter on real files in 14 languages: exact line ranges, hierarchy, symbols, token budget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CPP_HEADER, GO_SERVER, write_files

pytest.importorskip("tree_sitter_language_pack")

from llama_index.core.schema import NodeRelationship  # noqa: E402

from coderag.nodes.code_splitter import DEFAULT_MAX_TOKENS, DEFAULT_MIN_TOKENS, CodeHierarchySplitter  # noqa: E402
from coderag.nodes.ignore import IgnoreMatcher  # noqa: E402
from coderag.nodes.languages import detect_language  # noqa: E402
from coderag.nodes.reader import make_document  # noqa: E402
from coderag.nodes.scan import SkipLog, read_text_file, walk  # noqa: E402
from coderag.queries.symbols import chunk_defines, chunk_symbols  # noqa: E402


@dataclass(frozen=True)
class Def:
    """One definition we expect: its node starts on `first` (stripped) and ends on `last` (stripped).

    `first` is the doc comment, decorator or attribute above the definition when there is one, so
    the test fails if any of them is left out of the chunk. `sig` must appear in the signature node
    of the signatures-only split.
    """

    symbol: str
    kind: str
    first: str
    last: str
    parent: str | None = None
    sig: str = ""


@dataclass(frozen=True)
class Case:
    path: str
    text: str
    defs: tuple[Def, ...]


CASES: dict[str, Case] = {
    "python": Case("app/auth.py", '''\
"""Authentication helpers."""
import functools


def retry(times):
    """Retry a call a few times."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            for _ in range(times):
                try:
                    return fn(*args, **kwargs)
                except OSError:
                    pass
            return fn(*args, **kwargs)
        return inner
    return wrap


class AuthService:
    """Validates users; the café's tokens are ünïcode."""

    # Seconds to wait between attempts.
    DELAY = 0.5

    def __init__(self, store):
        self.store = store

    @retry(3)
    @staticmethod
    def login(user, password):
        """Log a user in."""
        return user == password

    # Checks a session token.
    def validate_token(self, token):
        return token in self.store


def one_liner(): return 1
''', (
        Def("retry", "function", "def retry(times):", "return wrap", sig="def retry(times):"),
        Def("AuthService", "class", "class AuthService:", "return token in self.store", sig="class AuthService:"),
        Def("AuthService.__init__", "method", "def __init__(self, store):", "self.store = store", "AuthService"),
        Def("AuthService.login", "method", "@retry(3)", "return user == password", "AuthService",
            sig="def login(user, password):"),
        Def("AuthService.validate_token", "method", "# Checks a session token.", "return token in self.store",
            "AuthService", sig="def validate_token(self, token):"),
        Def("one_liner", "function", "def one_liner(): return 1", "def one_liner(): return 1",
            sig="def one_liner(): return 1"),
    )),
    "javascript": Case("web/cart.js", '''\
/**
 * A shopping cart.
 */
class Cart {
  constructor() {
    this.items = [];
  }

  /** Adds an item. */
  add(item) {
    this.items.push(item);
  }

  total() {
    return this.items.reduce((s, i) => s + i.price, 0);
  }
}

// Formats a price in euros.
const formatPrice = (cents) => {
  return (cents / 100).toFixed(2) + " EUR";
};

function checkout(cart) {
  return formatPrice(cart.total());
}

/**
 * Empties the cart.
 */

Cart.prototype.clear = function clear() {
  this.items = [];
};

exports.discount = (cart, rate) => cart.total() * rate;

const formats = {
  /** Cents as euros. */
  euros(cents) {
    return formatPrice(cents);
  },
  plain: function (cents) {
    return String(cents);
  },
};

Object.assign(Wallet.prototype, {
  pay(amount) {
    return this.balance - amount;
  },
  refund(amount) {
    return this.balance + amount;
  },
});

(function () {
  // Registers the cart with the page.
  function register(cart) {
    return cart;
  }
})();

/** Price formats, made once. */
const currency = (function () {
  const symbol = "EUR";
  return { symbol };
})();

module.exports = function createCart(items) {
  return new Cart(items);
};
''', (
        Def("Cart", "class", "/**", "}", sig="class Cart {"),
        Def("Cart.add", "method", "/** Adds an item. */", "}", "Cart", sig="add(item) {"),
        Def("Cart.total", "method", "total() {", "}", "Cart"),
        Def("formatPrice", "function", "// Formats a price in euros.", "};", sig="const formatPrice = (cents) => {"),
        Def("checkout", "function", "function checkout(cart) {", "}", sig="function checkout(cart) {"),
        Def("Cart.clear", "function", "/**", "};", sig="Cart.prototype.clear = function clear() {"),
        Def("exports.discount", "function", "exports.discount = (cart, rate) => cart.total() * rate;",
            "exports.discount = (cart, rate) => cart.total() * rate;",
            sig="exports.discount = (cart, rate) => cart.total() * rate;"),
        Def("formats", "object", "const formats = {", "};", sig="const formats = {"),
        Def("formats.euros", "method", "/** Cents as euros. */", "},", "formats", sig="euros(cents) {"),
        Def("formats.plain", "method", "plain: function (cents) {", "},", "formats", sig="plain: function (cents) {"),
        Def("Wallet", "object", "Object.assign(Wallet.prototype, {", "});", sig="Object.assign(Wallet.prototype, {"),
        Def("Wallet.pay", "method", "pay(amount) {", "},", "Wallet", sig="pay(amount) {"),
        Def("Wallet.refund", "method", "refund(amount) {", "},", "Wallet", sig="refund(amount) {"),
        Def("register", "function", "// Registers the cart with the page.", "}", sig="function register(cart) {"),
        Def("currency", "function", "/** Price formats, made once. */", "})();", sig="const currency = (function () {"),
        Def("createCart", "function", "module.exports = function createCart(items) {", "};",
            sig="module.exports = function createCart(items) {"),
    )),
    "typescript": Case("web/users.ts", '''\
export interface User {
  id: string;
  name: string;
}

/** Caches users by id. */
export class UserCache {
  private items = new Map<string, User>();

  @memoize()
  lookup(id: string): User | undefined {
    return this.items.get(id);
  }

  store(user: User): void {
    this.items.set(user.id, user);
  }

  // Empties the cache when the session ends.
  private onLogout = (reason: string): void => {
    this.items.clear();
  };
}

// Fetches a user record over HTTP.
export async function fetchUser(id: string): Promise<User> {
  const res = await fetch(`/users/${id}`);
  return res.json();
}
''', (
        Def("User", "interface", "export interface User {", "}"),
        Def("UserCache", "class", "/** Caches users by id. */", "}", sig="export class UserCache {"),
        Def("UserCache.lookup", "method", "@memoize()", "}", "UserCache", sig="lookup(id: string): User | undefined {"),
        Def("UserCache.store", "method", "store(user: User): void {", "}", "UserCache"),
        Def("UserCache.onLogout", "method", "// Empties the cache when the session ends.", "};", "UserCache",
            sig="private onLogout = (reason: string): void => {"),
        Def("fetchUser", "function", "// Fetches a user record over HTTP.", "}",
            sig="export async function fetchUser(id: string): Promise<User> {"),
    )),
    "tsx": Case("web/Badge.tsx", '''\
import React from "react";

type Props = { label: string; count: number };

/** A small counter badge. */
export function Badge({ label, count }: Props) {
  return (
    <span className="badge">
      {label}: {count}
    </span>
  );
}

export class Panel extends React.Component<Props> {
  render() {
    return <div>{this.props.label}</div>;
  }
}
''', (
        Def("Badge", "function", "/** A small counter badge. */", "}",
            sig="export function Badge({ label, count }: Props) {"),
        Def("Panel", "class", "export class Panel extends React.Component<Props> {", "}"),
        Def("Panel.render", "method", "render() {", "}", "Panel", sig="render() {"),
    )),
    "go": Case("cmd/server.go", GO_SERVER + '''
// NewServer makes a server.
func NewServer(
	addr string,
) *Server {
	return &Server{addr: addr}
}
''', (
        Def("Server", "type", "// Server serves the health endpoint.", "}"),
        Def("Server.Start", "method", "// Start listens on the configured address.", "}",
            sig="func (s *Server) Start() error {"),
        Def("NewServer", "function", "// NewServer makes a server.", "}", sig=") *Server {"),
    )),
    "rust": Case("src/lib.rs", '''\
use std::collections::HashMap;

/// A key-value store.
#[derive(Debug, Default)]
pub struct S {
    items: HashMap<String, String>,
}

impl S {
    /// Makes an empty store.
    pub fn new() -> Self {
        S { items: HashMap::new() }
    }

    #[inline]
    pub fn get(&self, key: &str) -> Option<&String> {
        self.items.get(key)
    }
}

/// Adds two numbers.
pub fn add(a: i32, b: i32) -> i32 {
    a + b
}
''', (
        Def("S", "struct", "/// A key-value store.", "}", sig="pub struct S {"),
        Def("S.new", "method", "/// Makes an empty store.", "}", "S", sig="pub fn new() -> Self {"),
        Def("S.get", "method", "#[inline]", "}", "S", sig="pub fn get(&self, key: &str) -> Option<&String> {"),
        Def("add", "function", "/// Adds two numbers.", "}", sig="pub fn add(a: i32, b: i32) -> i32 {"),
    )),
    "java": Case("src/main/java/Billing.java", '''\
package billing;

import java.util.List;

/**
 * Computes invoice totals.
 */
public class Billing {
    private final double taxRate;

    public Billing(double taxRate) {
        this.taxRate = taxRate;
    }

    /** Sums the items and adds tax. */
    @Override
    public double total(List<Double> items) {
        double sum = 0;
        for (double i : items) {
            sum += i;
        }
        return sum * (1 + taxRate);
    }
}
''', (
        Def("Billing", "class", "/**", "}", sig="public class Billing {"),
        Def("Billing.Billing", "method", "public Billing(double taxRate) {", "}", "Billing",
            sig="public Billing(double taxRate) {"),
        Def("Billing.total", "method", "/** Sums the items and adds tax. */", "}", "Billing",
            sig="public double total(List<Double> items) {"),
    )),
    "c": Case("src/buffer.c", '''\
#include <stdlib.h>

/* A growable byte buffer. */
struct buffer {
    char *data;
    size_t len;
};

/* Allocates a buffer of `cap` bytes. */
struct buffer *buffer_new(size_t cap) {
    struct buffer *b = malloc(sizeof *b);
    b->data = malloc(cap);
    b->len = 0;
    return b;
}

void buffer_free(struct buffer *b)
{
    free(b->data);
    free(b);
}
''', (
        Def("buffer", "struct", "/* A growable byte buffer. */", "};", sig="struct buffer {"),
        Def("buffer_new", "function", "/* Allocates a buffer of `cap` bytes. */", "}",
            sig="struct buffer *buffer_new(size_t cap) {"),
        Def("buffer_free", "function", "void buffer_free(struct buffer *b)", "}",
            sig="void buffer_free(struct buffer *b)"),
    )),
    "cpp": Case("src/shapes.cpp", '''\
#include <cmath>

namespace geo {

// A circle.
class Circle {
public:
    explicit Circle(double r) : r_(r) {}

    // Area of the circle.
    double area() const {
        return M_PI * r_ * r_;
    }

private:
    double r_;
};

template <typename T>
T square(T x) {
    return x * x;
}

}  // namespace geo
''', (
        Def("geo", "namespace", "namespace geo {", "}  // namespace geo", sig="namespace geo {"),
        Def("geo.Circle", "class", "// A circle.", "};", "geo", sig="class Circle {"),
        Def("geo.Circle.area", "method", "// Area of the circle.", "}", "geo.Circle", sig="double area() const {"),
        Def("geo.square", None, "template <typename T>", "}", "geo", sig="T square(T x) {"),
    )),
    "csharp": Case("src/Greeter.cs", '''\
using System;

namespace Demo
{
    /// <summary>Greets people.</summary>
    public class Greeter
    {
        public string Name { get; set; }

        /// <summary>Says hello.</summary>
        [Obsolete("use Greet2")]
        public string Greet(string who)
        {
            return $"Hello {who}, from {Name}";
        }
    }
}
''', (
        Def("Demo", "namespace", "namespace Demo", "}"),
        Def("Demo.Greeter", "class", "/// <summary>Greets people.</summary>", "}", "Demo", sig="public class Greeter"),
        Def("Demo.Greeter.Greet", "method", "/// <summary>Says hello.</summary>", "}", "Demo.Greeter",
            sig="public string Greet(string who)"),
    )),
    "kotlin": Case("src/main/kotlin/demo/Point.kt", '''\
package demo

import kotlin.math.abs

/** A point on a plane. */
data class Point(val x: Int, val y: Int) {
    /** Distance from the origin, squared. */
    fun norm(): Int {
        return x * x + y * y
    }

    companion object {
        fun origin(): Point = Point(0, 0)
    }
}

fun String.shout(): String = uppercase()
''', (
        Def("Point", "class", "/** A point on a plane. */", "}", sig="data class Point(val x: Int, val y: Int) {"),
        Def("Point.norm", "method", "/** Distance from the origin, squared. */", "}", "Point", sig="fun norm(): Int {"),
        Def("Point.Companion", "class", "companion object {", "}", "Point", sig="companion object {"),
        Def("Point.Companion.origin", "method", "fun origin(): Point = Point(0, 0)",
            "fun origin(): Point = Point(0, 0)", "Point.Companion", sig="fun origin(): Point = Point(0, 0)"),
        Def("shout", "function", "fun String.shout(): String = uppercase()", "fun String.shout(): String = uppercase()",
            sig="fun String.shout(): String = uppercase()"),
    )),
    "swift": Case("Sources/Demo/Point.swift", '''\
import Foundation

/// A point on a plane.
public struct Point: Codable {
    let x: Int
    let y: Int

    /// Distance from the origin, squared.
    func norm() -> Int {
        return x * x + y * y
    }

    init(x: Int, y: Int) {
        self.x = x
        self.y = y
    }
}

protocol Shape {
    func area() -> Double
}
''', (
        Def("Point", "class", "/// A point on a plane.", "}", sig="public struct Point: Codable {"),
        Def("Point.norm", "method", "/// Distance from the origin, squared.", "}", "Point", sig="func norm() -> Int {"),
        Def("Point.init", "method", "init(x: Int, y: Int) {", "}", "Point", sig="init(x: Int, y: Int) {"),
        Def("Shape", "interface", "protocol Shape {", "}", sig="protocol Shape {"),
        Def("Shape.area", "method", "func area() -> Double", "func area() -> Double", "Shape",
            sig="func area() -> Double"),
    )),
    "scala": Case("src/main/scala/demo/Point.scala", '''\
package demo

/** A point on a plane. */
case class Point(x: Int, y: Int) {
  /** Distance from the origin, squared. */
  def norm: Int = {
    x * x + y * y
  }
}

object Points {
  def origin: Point = Point(0, 0)
}

trait Shape {
  def area(): Double
}
''', (
        Def("Point", "class", "/** A point on a plane. */", "}", sig="case class Point(x: Int, y: Int) {"),
        Def("Point.norm", "method", "/** Distance from the origin, squared. */", "}", "Point", sig="def norm: Int = {"),
        Def("Points", "class", "object Points {", "}", sig="object Points {"),
        Def("Points.origin", "method", "def origin: Point = Point(0, 0)", "def origin: Point = Point(0, 0)", "Points",
            sig="def origin: Point = Point(0, 0)"),
        Def("Shape", "trait", "trait Shape {", "}", sig="trait Shape {"),
        Def("Shape.area", "method", "def area(): Double", "def area(): Double", "Shape", sig="def area(): Double"),
    )),
    "lua": Case("lua/strings.lua", '''\
-- Helpers for strings.
local M = {}

--- Joins two strings with a space.
function M.join(a, b)
  return a .. " " .. b
end

local function trim(s)
  return (s:gsub("^%s+", ""))
end

--- Splits a string at a separator.
M.split = function(s, sep)
  return vim.split(s, sep)
end

local upper = function(s)
  return s:upper()
end

M.case = {
  -- Title case.
  title = function(s)
    return (s:gsub("^%l", string.upper))
  end,
}

return M
''', (
        Def("M.join", "function", "--- Joins two strings with a space.", "end", sig="function M.join(a, b)"),
        Def("trim", "function", "local function trim(s)", "end", sig="local function trim(s)"),
        Def("M.split", "function", "--- Splits a string at a separator.", "end", sig="M.split = function(s, sep)"),
        Def("upper", "function", "local upper = function(s)", "end", sig="local upper = function(s)"),
        Def("M.case", "object", "M.case = {", "}", sig="M.case = {"),
        Def("M.case.title", "method", "-- Title case.", "end,", "M.case", sig="title = function(s)"),
    )),
    "ruby": Case("lib/account.rb", '''\
# A bank account.
class Account
  attr_reader :balance

  def initialize(balance = 0)
    @balance = balance
  end

  # Deposits money.
  def deposit(amount)
    @balance += amount
  end
end
''', (
        Def("Account", "class", "# A bank account.", "end", sig="class Account"),
        Def("Account.initialize", "method", "def initialize(balance = 0)", "end", "Account"),
        Def("Account.deposit", "method", "# Deposits money.", "end", "Account", sig="def deposit(amount)"),
    )),
    "php": Case("src/Mailer.php", '''\
<?php

namespace App;

/**
 * Sends mail.
 */
class Mailer
{
    private $from;

    /** Sends one message. */
    public function send($to, $body)
    {
        return mail($to, "Hi", $body, "From: " . $this->from);
    }
}

function helper($x)
{
    return $x * 2;
}
''', (
        Def("Mailer", "class", "/**", "}", sig="class Mailer"),
        Def("Mailer.send", "method", "/** Sends one message. */", "}", "Mailer", sig="public function send($to, $body)"),
        Def("helper", "function", "function helper($x)", "}", sig="function helper($x)"),
    )),
    "markdown": Case("docs/guide.md", '''\
# Guide

Intro text.

## Install

Run the installer.

```python
# not a heading
```

## Usage

Call login.

### Advanced

More details.

Setext title
------------

Under it.
''', (
        Def("Guide", "section", "# Guide", "Under it.", sig="# Guide"),
        Def("Guide > Install", "section", "## Install", "```", "Guide", sig="## Install"),
        Def("Guide > Usage > Advanced", "section", "### Advanced", "More details.", "Guide > Usage"),
        Def("Guide > Setext title", "section", "Setext title", "Under it.", "Guide", sig="Setext title"),
    )),
    "rst": Case("docs/manual.rst", '''\
======
Manual
======

Intro paragraph.

Install
=======

Run pip install.

Details
-------

Fine print.
''', (
        Def("Manual", "section", "======", "Fine print.", sig="Manual"),
        Def("Manual > Install", "section", "Install", "Fine print.", "Manual", sig="Install"),
        Def("Manual > Install > Details", "section", "Details", "Fine print.", "Manual > Install", sig="Details"),
    )),
    "text": Case("NOTES.txt", '''\
These are notes.
They have no structure.

Second paragraph.
''', ()),
}
LANGUAGES = list(CASES)
CODE_LANGUAGES = [lang for lang in LANGUAGES if lang not in ("markdown", "rst", "text")]


# -- helpers ------------------------------------------------------------------------------------

def _file_lines(root: Path, rel: str) -> list[str]:
    """The file's lines as an editor numbers them (line 1 = lines[0])."""
    text = (root / rel).read_text(encoding="utf-8")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _document(root: Path, rel: str):
    """The Document the real reader makes of a file on disk."""
    entry = next(e for e in walk(root, IgnoreMatcher(root), SkipLog()) if e.rel_path == rel)
    ft = read_text_file(entry, SkipLog())
    assert ft is not None, rel
    return make_document(ft)


def _split(splitter: CodeHierarchySplitter, root: Path, lang: str):
    return splitter.split_document(_document(root, CASES[lang].path))


def _is_filler(line: str) -> bool:
    s = line.strip()
    return not s or s == "end" or not any(ch.isalnum() for ch in s)


def _by_symbol(nodes, symbol: str, kind: str | None = None):
    """The one node of `symbol` that is the whole definition (not a window or gap block of it)."""
    found = [n for n in nodes if n.metadata["symbol"] == symbol and n.metadata["kind"] not in ("block", "window")
             and kind in (None, n.metadata["kind"])]
    assert len(found) == 1, f"{symbol}: expected one definition node, got {[(n.metadata['kind'], n.metadata['start_line']) for n in found]}"
    return found[0]


@pytest.fixture(scope="module")
def lang_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("langs") / "repo"
    write_files(root, {c.path: c.text for c in CASES.values()})
    return root


# (max_tokens, min_tokens): the default budget and a small one that forces windows in every language, each
# with small siblings merged (the default floor, and a floor equal to the small budget) and without.
BUDGETS = [(200, DEFAULT_MIN_TOKENS), (200, 0), (24, 24), (24, 0)]


@pytest.fixture(scope="module")
def splitters(tokenizer_path: str) -> dict[tuple[int, int], CodeHierarchySplitter]:
    return {(mx, mn): CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=mx, min_tokens=mn)
            for mx, mn in BUDGETS}


@pytest.fixture(scope="module")
def count_tokens(tokenizer_path: str):
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(tokenizer_path)
    tk.no_truncation()
    tk.no_padding()
    return lambda text: len(tk.encode(text, add_special_tokens=False).ids)


# -- every node, every language -------------------------------------------------------------------

@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_detects_fixture_language(lang: str) -> None:
    assert detect_language(CASES[lang].path) == lang


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_node_text_is_exact_file_lines(lang, budget, lang_repo, splitters) -> None:
    rel = CASES[lang].path
    lines = _file_lines(lang_repo, rel)
    doc = _document(lang_repo, rel)
    nodes = splitters[budget].split_document(doc)
    assert nodes, f"{rel}: no nodes"
    for n in nodes:
        m = n.metadata
        s, e = m["start_line"], m["end_line"]
        assert 1 <= s <= e <= len(lines), (rel, s, e, len(lines))
        assert n.text == "\n".join(lines[s - 1:e]), f"{rel}:{s}-{e} {m['symbol']!r}\n--- node\n{n.text}\n--- file\n" \
            + "\n".join(lines[s - 1:e])
        assert doc.text[n.start_char_idx:n.end_char_idx] == n.text, f"{rel}:{s}-{e} char offsets"
        assert m["file_path"] == rel and m["language"] == lang
        assert n.ref_doc_id == rel


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_children_lie_inside_their_parent(lang, budget, lang_repo, splitters) -> None:
    nodes = _split(splitters[budget], lang_repo, lang)
    by_id = {n.node_id: n for n in nodes}
    assert len(by_id) == len(nodes), "node ids must be unique"
    for n in nodes:
        m = n.metadata
        kids = n.relationships.get(NodeRelationship.CHILD, [])
        assert m["is_leaf"] == (not kids), f"{m['symbol']}: is_leaf={m['is_leaf']} with {len(kids)} children"
        for k in kids:
            child = by_id[k.node_id]
            assert child.relationships[NodeRelationship.PARENT].node_id == n.node_id
            cm = child.metadata
            assert m["start_line"] <= cm["start_line"] <= cm["end_line"] <= m["end_line"], \
                f"child {cm['symbol']} {cm['start_line']}-{cm['end_line']} outside {m['symbol']} " \
                f"{m['start_line']}-{m['end_line']}"
        parent = n.relationships.get(NodeRelationship.PARENT)
        if parent is not None:
            assert n.node_id in {k.node_id for k in by_id[parent.node_id].relationships[NodeRelationship.CHILD]}
        # Siblings other than overlapping windows never share a line.
        starts = [(by_id[k.node_id].metadata["start_line"], by_id[k.node_id].metadata["end_line"],
                   by_id[k.node_id].metadata["kind"]) for k in kids]
        assert starts == sorted(starts), f"{m['symbol']}: children out of line order"
        for (s1, e1, k1), (s2, _, k2) in zip(starts, starts[1:]):
            assert s2 > s1
            if not (k1 == k2 == "window"):
                assert s2 > e1, f"{m['symbol']}: siblings overlap at lines {s2}-{e1}"


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_leaves_cover_every_content_line(lang, budget, lang_repo, splitters) -> None:
    """Nothing of a file is lost: each line with a letter or digit lies in some leaf."""
    lines = _file_lines(lang_repo, CASES[lang].path)
    nodes = _split(splitters[budget], lang_repo, lang)
    covered = set()
    for n in nodes:
        if n.metadata["is_leaf"]:
            covered.update(range(n.metadata["start_line"], n.metadata["end_line"] + 1))
    missing = [(i, lines[i - 1]) for i in range(1, len(lines) + 1) if i not in covered and not _is_filler(lines[i - 1])]
    assert not missing, f"lines in no leaf: {missing}"


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_leaves_fit_token_budget(lang, budget, lang_repo, splitters, count_tokens) -> None:
    max_tokens = budget[0]
    nodes = _split(splitters[budget], lang_repo, lang)
    for n in nodes:
        if n.metadata["is_leaf"] and not n.metadata.get("embed_truncated"):
            assert count_tokens(n.text) <= max_tokens, f"{n.metadata['symbol']} {n.metadata['start_line']}-" \
                f"{n.metadata['end_line']}: {count_tokens(n.text)} tokens > {max_tokens}"
        if n.metadata.get("embed_truncated"):
            # Only a single line longer than the budget may be flagged.
            assert n.metadata["start_line"] == n.metadata["end_line"]
            assert count_tokens(n.text) > max_tokens


@pytest.mark.parametrize("lang", [lang for lang in LANGUAGES if CASES[lang].defs])
def test_code_splitter_definition_keeps_doc_comment_and_decorators(lang, lang_repo, splitters) -> None:
    """Each definition's chunk starts at its leading doc comment/decorator/attribute and ends with its body
    (small siblings not merged: the fixture's definitions are all small)."""
    lines = _file_lines(lang_repo, CASES[lang].path)
    nodes = _split(splitters[(200, 0)], lang_repo, lang)
    by_id = {n.node_id: n for n in nodes}
    for d in CASES[lang].defs:
        n = _by_symbol(nodes, d.symbol, d.kind)
        m = n.metadata
        got_first, got_last = lines[m["start_line"] - 1].strip(), lines[m["end_line"] - 1].strip()
        assert (got_first, got_last) == (d.first, d.last), f"{d.symbol}: lines {m['start_line']}-{m['end_line']}"
        if d.kind is not None:
            assert m["kind"] == d.kind, d.symbol
        parent = n.relationships.get(NodeRelationship.PARENT)
        got_parent = by_id[parent.node_id].metadata["symbol"] if parent else None
        assert got_parent == d.parent, f"{d.symbol}: parent {got_parent!r}, expected {d.parent!r}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_code_splitter_ids_are_stable_across_runs(lang, lang_repo, splitters, tokenizer_path) -> None:
    first = [(n.node_id, n.text) for n in _split(splitters[(200, DEFAULT_MIN_TOKENS)], lang_repo, lang)]
    again = [(n.node_id, n.text) for n in _split(CodeHierarchySplitter(tokenizer_path=tokenizer_path), lang_repo, lang)]
    assert first == again


# -- long definitions, long lines, huge files -----------------------------------------------------

LONG_FUNCTIONS = {
    "python": ("long.py", "long_function", "# Adds up all the steps.\ndef long_function(values):\n    total = 0\n",
               "    total = total + compute_step_{i}(values[{i}])", "    return total\n"),
    "javascript": ("long.js", "longFunction", "/** Adds up all the steps. */\nfunction longFunction(values) {\n  let total = 0;\n",
                   "  total += computeStep{i}(values[{i}]);", "  return total;\n}\n"),
    "go": ("long.go", "LongFunction", "package main\n\n// LongFunction adds up all the steps.\nfunc LongFunction(values []int) int {\n\ttotal := 0\n",
           "\ttotal += computeStep{i}(values[{i}])", "\treturn total\n}\n"),
    "rust": ("long.rs", "long_function", "/// Adds up all the steps.\nfn long_function(values: &[i32]) -> i32 {\n    let mut total = 0;\n",
             "    total += compute_step_{i}(values[{i}]);", "    total\n}\n"),
    "java": ("Long.java", "Calc.longFunction", "class Calc {\n    /** Adds up all the steps. */\n    int longFunction(int[] values) {\n        int total = 0;\n",
             "        total += computeStep{i}(values[{i}]);", "        return total;\n    }\n}\n"),
    "c": ("long.c", "long_function", "/* Adds up all the steps. */\nint long_function(int *values) {\n    int total = 0;\n",
          "    total += compute_step_{i}(values[{i}]);", "    return total;\n}\n"),
    "ruby": ("long.rb", "long_function", "# Adds up all the steps.\ndef long_function(values)\n  total = 0\n",
             "  total += compute_step_{i}(values[{i}])", "  total\nend\n"),
}


@pytest.mark.parametrize("lang", list(LONG_FUNCTIONS))
def test_code_splitter_long_function_becomes_overlapping_windows(lang, tmp_path, tokenizer_path, count_tokens) -> None:
    rel, symbol, head, line, tail = LONG_FUNCTIONS[lang]
    write_files(tmp_path, {rel: head + "\n".join(line.format(i=i) for i in range(40)) + "\n" + tail})
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=64, overlap_lines=2)
    nodes = sp.split_document(_document(tmp_path, rel))
    lines = _file_lines(tmp_path, rel)
    fn = _by_symbol(nodes, symbol)
    assert fn.metadata["is_leaf"] is False
    assert lines[fn.metadata["start_line"] - 1].lstrip().startswith(("#", "/", "//")), "doc comment left out"
    assert lines[fn.metadata["end_line"] - 1].strip() in ("}", "end", "return total", "total")
    kids = [n for n in nodes if n.parent_node is not None and n.parent_node.node_id == fn.node_id]
    assert len(kids) >= 3 and all(k.metadata["kind"] == "window" and k.metadata["symbol"] == symbol for k in kids)
    spans = [(k.metadata["start_line"], k.metadata["end_line"]) for k in kids]
    assert spans[0][0] == fn.metadata["start_line"] and spans[-1][1] == fn.metadata["end_line"]
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert s2 == e1 + 1 - 2, f"windows {s1}-{e1} and {s2}-{e2} do not share exactly 2 lines"
    for k in kids:
        assert count_tokens(k.text) <= 64
        assert k.text == "\n".join(lines[k.metadata["start_line"] - 1:k.metadata["end_line"]])


def test_code_splitter_long_lines_share_fewer_lines_and_each_window_adds_one(tmp_path, tokenizer_path,
                                                                            count_tokens) -> None:
    # Prose written one paragraph to a line, short and long: a window of a short line and a long one is
    # followed by a long line that does not fit beside the long one, so a window that began with the two
    # lines of overlap would hold only a line the window before held.
    def paragraph(i: int, n: int) -> str:
        return " ".join(f"w{i}x{j}" for j in range(n))

    paragraphs = [paragraph(i, 3 if i % 3 == 0 else 11) for i in range(15)]
    write_files(tmp_path, {"notes.txt": "\n".join(paragraphs) + "\n"})
    limit = 64
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=limit, overlap_lines=2)
    per_line = [count_tokens(p) for p in paragraphs]
    short, long = per_line[0], per_line[1]
    assert short + long <= limit < 2 * long, per_line
    nodes = sp.split_document(_document(tmp_path, "notes.txt"))
    spans = [(n.metadata["start_line"], n.metadata["end_line"]) for n in nodes if n.metadata["is_leaf"]]
    assert spans[0][0] == 1 and spans[-1][1] == len(paragraphs)
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert e2 > e1 and s2 > s1, f"window {s2}-{e2} adds no line to {s1}-{e1}"
        assert s2 <= e1 + 1, f"windows {s1}-{e1} and {s2}-{e2} leave a line out"
        # As many lines of overlap as fit beside the first new line, up to two.
        if s2 > max(e1 + 1 - 2, s1 + 1):
            assert sum(per_line[s2 - 2:e1 + 1]) > limit, f"windows {s1}-{e1} and {s2}-{e2} could share more"
    lines = _file_lines(tmp_path, "notes.txt")
    for n in nodes:
        assert count_tokens(n.text) <= limit
        assert n.text == "\n".join(lines[n.metadata["start_line"] - 1:n.metadata["end_line"]])


def test_code_splitter_overlong_line_is_flagged_embed_truncated(tmp_path, tokenizer_path, count_tokens) -> None:
    write_files(tmp_path, {"blob.py": 'def tiny():\n    return "' + "word " * 120 + '"\n\n\nX = 1\n'})
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=48)
    nodes = sp.split_document(_document(tmp_path, "blob.py"))
    flagged = [n for n in nodes if n.metadata.get("embed_truncated")]
    assert [(n.metadata["start_line"], n.metadata["end_line"]) for n in flagged] == [(2, 2)]
    assert count_tokens(flagged[0].text) > 48
    others = [n for n in nodes if n.metadata["is_leaf"] and not n.metadata.get("embed_truncated")]
    assert others and all(count_tokens(n.text) <= 48 for n in others)


@pytest.mark.parametrize("limit", ["bytes", "lines"])
@pytest.mark.parametrize("lang", [lang for lang in LANGUAGES if CASES[lang].defs])
def test_code_splitter_huge_file_keeps_signatures_only(lang, limit, lang_repo, tokenizer_path) -> None:
    kwargs = {"signatures_only_bytes": 64} if limit == "bytes" else {"signatures_only_lines": 5}
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path, **kwargs)
    case = CASES[lang]
    lines = _file_lines(lang_repo, case.path)
    nodes = sp.split_document(_document(lang_repo, case.path))
    assert nodes
    for n in nodes:
        m = n.metadata
        assert m["signatures_only"] is True and m["kind"] == "signature"
        assert n.text == "\n".join(lines[m["start_line"] - 1:m["end_line"]])
    for d in case.defs:
        if not d.sig:
            continue
        # The signature node of this definition starts where its full chunk would: doc comment, decorators.
        sigs = [n for n in nodes if n.metadata["symbol"] == d.symbol
                and lines[n.metadata["start_line"] - 1].strip() == d.first]
        assert len(sigs) == 1, f"{d.symbol}: {len(sigs)} signature nodes starting with {d.first!r}"
        text = sigs[0].text
        assert d.sig in text, f"{d.symbol}: signature {text!r} lacks {d.sig!r}"
        # Signatures never carry a body: at most a few lines of head.
        assert text.count("\n") <= 4, f"{d.symbol}: signature {text!r} is too long"


# -- small siblings merged up to the floor ---------------------------------------------------------

@dataclass(frozen=True)
class MergeCase:
    path: str
    text: str
    alone: tuple[str, ...]  # definitions big enough to keep their own leaf, symbol and lines
    together: tuple[tuple[str, tuple[str, ...]], ...]  # (parent symbol or "", definitions that share one leaf)


MERGE_CASES: dict[str, MergeCase] = {
    "python": MergeCase("geo/point.py", '''\
"""Points and the grid they live on."""
import math
import os
from typing import Iterator

ORIGIN = (0, 0)
UNIT = 1.0


class Point:
    """A point in the plane."""

    x: float
    y: float

    def __init__(self, x, y):
        self.x, self.y = x, y

    @property
    def norm(self):
        return math.hypot(self.x, self.y)

    def as_tuple(self):
        return (self.x, self.y)

    def distance_to(self, other, metric="euclidean"):
        """Distance to another point: euclidean, manhattan or chebyshev, by name."""
        dx, dy = abs(self.x - other.x), abs(self.y - other.y)
        if metric == "euclidean":
            return math.hypot(dx, dy)
        if metric == "manhattan":
            return dx + dy
        if metric == "chebyshev":
            return max(dx, dy)
        raise ValueError(f"unknown metric {metric!r}; use euclidean, manhattan or chebyshev")

    def __repr__(self):
        return f"Point({self.x}, {self.y})"

    def __eq__(self, other):
        return self.as_tuple() == other.as_tuple()


class Pair:
    def first(self):
        return 1

    def second(self):
        return 2


def origin():
    return Point(*ORIGIN)


def unit():
    return Point(UNIT, 0)


def walk_grid(width, height, step=1) -> Iterator[Point]:
    """Every point of a width x height grid, row by row, `step` apart; the environment can shrink it."""
    limit = int(os.environ.get("GRID_LIMIT", "0")) or width * height
    count = 0
    for row in range(0, height, step):
        for col in range(0, width, step):
            if count >= limit:
                return
            count += 1
            yield Point(col, row)
''', alone=("Point.distance_to", "walk_grid"),
        together=(("Point", ("Point.__init__", "Point.norm", "Point.as_tuple")),
                  ("Point", ("Point.__repr__", "Point.__eq__")),
                  ("", ("Pair", "Pair.first", "Pair.second", "origin", "unit")))),
    "typescript": MergeCase("web/directory.ts", '''\
import { Injectable } from "./di";
import type { User } from "./user";

export const DEFAULT_PAGE = 1;
export const MAX_PAGE_SIZE = 100;

/** Users by id, with paging. */
@Injectable()
export class UserDirectory {
  private users = new Map<string, User>();
  private hits = 0;

  get size(): number {
    return this.users.size;
  }

  has(id: string): boolean {
    return this.users.has(id);
  }

  /** One page of users sorted by name; pages start at 1 and hold at most MAX_PAGE_SIZE users. */
  page(pageNumber: number = DEFAULT_PAGE, pageSize: number = MAX_PAGE_SIZE): User[] {
    if (pageNumber < 1 || pageSize < 1 || pageSize > MAX_PAGE_SIZE) {
      throw new RangeError(`page ${pageNumber} of size ${pageSize} is out of range`);
    }
    this.hits += 1;
    const sorted = [...this.users.values()].sort((a, b) => a.name.localeCompare(b.name));
    const start = (pageNumber - 1) * pageSize;
    return sorted.slice(start, start + pageSize);
  }

  clear(): void {
    this.users.clear();
  }

  count(): number {
    return this.hits;
  }
}

export function isAdmin(u: User): boolean {
  return u.roles.includes("admin");
}

export function displayName(u: User): string {
  return u.nickname ?? u.name;
}
''', alone=("UserDirectory.page",),
        together=(("UserDirectory", ("UserDirectory.size", "UserDirectory.has")),
                  ("UserDirectory", ("UserDirectory.clear", "UserDirectory.count")),
                  ("", ("isAdmin", "displayName")))),
    "go": MergeCase("shop/order.go", '''\
package shop

import "fmt"

// Item is a line of an order.
type Item struct {
	Name  string
	Cents int
}

// Label is what the receipt shows.
func (i Item) Label() string { return i.Name }

func (i Item) Price() int { return i.Cents }

// Total sums the items and adds the tax, rounded to whole cents; a negative price is an error.
func Total(items []Item, taxRate float64) (int, error) {
	sum := 0
	for _, it := range items {
		if it.Cents < 0 {
			return 0, fmt.Errorf("item %q has a negative price %d", it.Name, it.Cents)
		}
		sum += it.Cents
	}
	return sum + int(float64(sum)*taxRate+0.5), nil
}
''', alone=("Total",), together=(("", ("Item", "Item.Label", "Item.Price")),)),
}


def _merge_split(root: Path, rel: str, tokenizer_path: str, **kwargs):
    return CodeHierarchySplitter(tokenizer_path=tokenizer_path, **kwargs).split_document(_document(root, rel))


def _span(n) -> tuple[int, int]:
    return n.metadata["start_line"], n.metadata["end_line"]


def _holder(nodes, symbol: str):
    """The smallest leaf whose definitions include `symbol`."""
    found = [n for n in nodes if n.metadata["is_leaf"] and symbol in chunk_symbols(n.metadata)]
    assert found, f"no leaf holds {symbol}: {[(n.metadata['symbol'], _span(n)) for n in nodes]}"
    return min(found, key=lambda n: _span(n)[1] - _span(n)[0])


def _parent_symbol(nodes, n) -> str:
    rel = n.relationships.get(NodeRelationship.PARENT)
    return next(p.metadata["symbol"] for p in nodes if p.node_id == rel.node_id) if rel else ""


@pytest.fixture(scope="module")
def merge_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("merge") / "repo"
    write_files(root, {c.path: c.text for c in MERGE_CASES.values()})
    return root


@pytest.mark.parametrize("lang", list(MERGE_CASES))
def test_code_splitter_merges_small_siblings(lang, merge_repo, tokenizer_path, count_tokens) -> None:
    """Accessors, fields, constants and short functions share leaves of the same parent; fewer leaves."""
    case = MERGE_CASES[lang]
    lines = _file_lines(merge_repo, case.path)
    merged = _merge_split(merge_repo, case.path, tokenizer_path)
    plain = _merge_split(merge_repo, case.path, tokenizer_path, min_tokens=0)
    leaves = [n for n in merged if n.metadata["is_leaf"]]
    assert len(leaves) < len([n for n in plain if n.metadata["is_leaf"]]) - len(case.together)
    for parent, names in case.together:
        holder = _holder(merged, names[0])
        m = holder.metadata
        assert set(names) <= set(m["symbols"]), f"{names} apart: {m['symbol']} holds {m['symbols']}"
        assert _parent_symbol(merged, holder) == parent
        if m["kind"] == "group":  # named after its first three definitions
            defs = [x for x in m["symbols"] if x != parent]
            assert m["symbol"] == ", ".join(defs[:3]) + (", ..." if len(defs) > 3 else "")
            if parent and m["start_line"] == _by_symbol(merged, parent).metadata["start_line"]:
                assert m["symbols"][0] == parent  # the class's head is in it: "where is the class" finds it
        else:  # a container collapsed into one leaf keeps its own name
            assert m["symbol"] == m["symbols"][0]
        assert count_tokens(holder.text) <= DEFAULT_MAX_TOKENS
        assert holder.text == "\n".join(lines[m["start_line"] - 1:m["end_line"]])
        for name in names:  # each definition's own lines, decorators and doc comments included, are inside
            own = _by_symbol(plain, name)
            assert m["start_line"] <= own.metadata["start_line"] and own.metadata["end_line"] <= m["end_line"]


@pytest.mark.parametrize("lang", list(MERGE_CASES))
def test_code_splitter_big_definition_keeps_its_own_leaf(lang, merge_repo, tokenizer_path) -> None:
    case = MERGE_CASES[lang]
    merged = _merge_split(merge_repo, case.path, tokenizer_path)
    plain = _merge_split(merge_repo, case.path, tokenizer_path, min_tokens=0)
    for name in case.alone:
        before, after = _by_symbol(plain, name), _by_symbol(merged, name)
        assert (after.metadata["kind"], _span(after), after.text) == (before.metadata["kind"], _span(before), before.text)
        assert after.metadata["is_leaf"] and "symbols" not in after.metadata
        assert _parent_symbol(merged, after) == _parent_symbol(plain, before)


def test_code_splitter_small_class_is_one_leaf(merge_repo, tokenizer_path) -> None:
    """A class whose members would all merge is one leaf: no parent over a single child of its own lines."""
    nodes = _merge_split(merge_repo, "geo/point.py", tokenizer_path, min_tokens=16)
    pair = _by_symbol(nodes, "Pair")
    assert pair.metadata["kind"] == "class" and pair.metadata["is_leaf"]
    assert pair.metadata["symbols"] == ["Pair", "Pair.first", "Pair.second"]
    assert not pair.relationships.get(NodeRelationship.CHILD)
    assert chunk_defines(pair.metadata, "second") and not chunk_defines(pair.metadata, "norm")


MERGE_BUDGETS = [(200, DEFAULT_MIN_TOKENS), (200, 200), (60, 40), (24, 24)]


def _all_files() -> list[tuple[str, str]]:
    return [("langs", c.path) for c in CASES.values()] + [("merge", c.path) for c in MERGE_CASES.values()]


@pytest.fixture(scope="module")
def both_repos(lang_repo: Path, merge_repo: Path) -> dict[str, Path]:
    return {"langs": lang_repo, "merge": merge_repo}


@pytest.mark.parametrize("budget", MERGE_BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
def test_code_splitter_merged_leaves_respect_floor_and_ceiling(budget, both_repos, tokenizer_path, count_tokens) -> None:
    """No leaf passes max_tokens (but a single overlong line), and no two neighbouring leaves of one parent
    are both under the floor while they would fit in one leaf together."""
    mx, mn = budget
    for repo, rel in _all_files():
        nodes = _merge_split(both_repos[repo], rel, tokenizer_path, max_tokens=mx, min_tokens=mn)
        by_id = {n.node_id: n for n in nodes}
        lines = _file_lines(both_repos[repo], rel)
        for n in nodes:
            if n.metadata["is_leaf"] and not n.metadata.get("embed_truncated"):
                assert count_tokens(n.text) <= mx, (rel, n.metadata["symbol"], _span(n))
        siblings: dict[str, list] = {}
        for n in nodes:
            rel_parent = n.relationships.get(NodeRelationship.PARENT)
            siblings.setdefault(rel_parent.node_id if rel_parent else "", []).append(n)
        for kids in siblings.values():
            for a, b in zip(kids, kids[1:]):
                if not (a.metadata["is_leaf"] and b.metadata["is_leaf"]) or "window" in (a.metadata["kind"],
                                                                                          b.metadata["kind"]):
                    continue
                both = "\n".join(lines[a.metadata["start_line"] - 1:b.metadata["end_line"]])
                small = count_tokens(a.text) < mn and count_tokens(b.text) < mn
                assert not (small and count_tokens(both) <= mx), \
                    f"{rel}: {a.metadata['symbol']} {_span(a)} and {b.metadata['symbol']} {_span(b)} left apart"
        assert len(by_id) == len(nodes)


@pytest.mark.parametrize("budget", MERGE_BUDGETS, ids=lambda b: f"max{b[0]}-min{b[1]}")
def test_code_splitter_merging_leaves_big_definitions_alone(budget, both_repos, tokenizer_path, count_tokens) -> None:
    """Every definition leaf of min_tokens or more is the same leaf (symbol, kind, lines) with or without merging."""
    mx, mn = budget
    for repo, rel in _all_files():
        plain = _merge_split(both_repos[repo], rel, tokenizer_path, max_tokens=mx, min_tokens=0)
        merged = {(n.metadata["symbol"], n.metadata["kind"], _span(n)) for n in
                  _merge_split(both_repos[repo], rel, tokenizer_path, max_tokens=mx, min_tokens=mn) if n.metadata["is_leaf"]}
        for n in plain:
            if n.metadata["is_leaf"] and n.metadata["kind"] not in ("block", "window") and count_tokens(n.text) >= mn:
                assert (n.metadata["symbol"], n.metadata["kind"], _span(n)) in merged, (rel, n.metadata["symbol"])


@pytest.mark.parametrize("lang", [lang for lang in LANGUAGES if CASES[lang].defs])
def test_code_splitter_merged_definition_keeps_doc_comment_and_decorators(lang, lang_repo, splitters) -> None:
    """Merged or not, a definition's lines (doc comment, decorators, attributes, body) lie in one leaf that
    names it, under the node of its parent (or it is that parent, collapsed into one leaf)."""
    plain = _split(splitters[(200, 0)], lang_repo, lang)
    merged = _split(splitters[(200, DEFAULT_MIN_TOKENS)], lang_repo, lang)
    for d in CASES[lang].defs:
        own = _by_symbol(plain, d.symbol, d.kind)
        if not own.metadata["is_leaf"]:
            continue  # a parent: its leaves are its members
        holder = _holder(merged, d.symbol)
        assert holder.metadata["start_line"] <= own.metadata["start_line"]
        assert own.metadata["end_line"] <= holder.metadata["end_line"]
        under = _parent_symbol(merged, holder)
        assert d.parent in (under or None, holder.metadata["symbol"]) or (d.parent or "").startswith(under), \
            f"{d.symbol}: held by {holder.metadata['symbol']} under {under!r}, expected under {d.parent!r}"


# JavaScript that gives functions to something without defining methods: a record with one hook among its data, a
# getter of one property, and a test's callbacks; and beside them the forms that do define (for the control).
JS_NOT_DEFINITIONS = '''\
const contains = {
  keyword: "contains",
  type: "array",
  schemaType: ["object", "boolean"],
  code(cxt) {
    return cxt.ok();
  },
};

Object.defineProperty(Wallet.prototype, "empty", {
  get() {
    return this.balance === 0;
  },
});

describe("wallet", function () {
  function fill(wallet) {
    return wallet;
  }
  it("pays", function () {
    fill(new Wallet());
  });
});

Object.assign(Wallet.prototype, {
  pay(amount) {
    return this.balance - amount;
  },
});
'''


def test_code_splitter_javascript_data_getters_and_test_callbacks_stay_code(tmp_path, tokenizer_path) -> None:
    """An object literal is a container of methods only when they are at least half of it, a call gives methods
    to a prototype only with names and objects after it, and only a function called in place is read through:
    the record's hook, a property's getter and a test's helper are no definitions (the prototype's method is)."""
    root = write_files(tmp_path / "repo", {"lib/wallet.js": JS_NOT_DEFINITIONS})
    nodes = CodeHierarchySplitter(tokenizer_path=tokenizer_path, min_tokens=0).split_document(
        _document(root, "lib/wallet.js"))
    symbols = {n.metadata["symbol"] for n in nodes if n.metadata["symbol"]}
    assert symbols == {"Wallet", "Wallet.pay"}


def test_code_splitter_javascript_amd_module_is_read_inside(tmp_path, tokenizer_path) -> None:
    """An AMD module's code is the function `define` is given after the list of its dependencies: its definitions
    are the file's, where the whole file was one call."""
    text = ('define(["./core", "./var/slice"], function (jQuery, slice) {\n'
            '  function access(elems, fn) {\n    return slice.call(elems, fn);\n  }\n'
            '  jQuery.access = function (elems) {\n    return access(elems, null);\n  };\n'
            '  return jQuery;\n});\n')
    root = write_files(tmp_path / "repo", {"src/core/access.js": text})
    nodes = CodeHierarchySplitter(tokenizer_path=tokenizer_path, min_tokens=0).split_document(
        _document(root, "src/core/access.js"))
    assert {n.metadata["symbol"] for n in nodes if n.metadata["symbol"]} == {"access", "jQuery.access"}


@pytest.mark.parametrize("opening, closing", [("function f{}() {{", "}}"), ("(function () {{", "}})();")],
                         ids=["functions", "called-in-place"])
def test_code_splitter_nesting_past_the_stack_is_split_as_deep_as_the_outline_reads(
        opening, closing, tmp_path, tokenizer_path) -> None:
    """A file nested a thousand levels deep (generated, or hostile) is split, every line in a leaf: definitions
    are read MAX_NESTING levels deep and what lies deeper is their code, where reading it all ran out of stack."""
    from coderag.nodes.outline import MAX_NESTING

    depth = 1200  # past Python's default stack of 1,000 frames, one level a frame at least
    text = "".join(opening.format(i) + "\n" for i in range(depth)) + "return 1;\n" + (closing.format() + "\n") * depth
    root = write_files(tmp_path / "repo", {"gen/deep.js": text})
    nodes = CodeHierarchySplitter(tokenizer_path=tokenizer_path).split_document(_document(root, "gen/deep.js"))
    leaves = [n for n in nodes if n.metadata["is_leaf"]]
    covered = {i for n in leaves for i in range(n.metadata["start_line"], n.metadata["end_line"] + 1)}
    lines = text.splitlines()
    assert not [i for i in range(1, len(lines) + 1) if i not in covered and not _is_filler(lines[i - 1])]
    depths = [n.metadata["symbol"].count(".") for n in nodes if n.metadata["symbol"]]
    assert max(depths, default=None) == (MAX_NESTING if opening.startswith("function") else None)


def test_code_splitter_floor_above_ceiling_is_refused(tokenizer_path) -> None:
    from pydantic import ValidationError

    from coderag.base.config import ChunkingSettings

    with pytest.raises(ValueError, match="min_tokens"):
        CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=40, min_tokens=41)
    with pytest.raises(ValidationError, match="min_tokens"):
        ChunkingSettings(max_tokens=40, min_tokens=41)
    assert CodeHierarchySplitter(tokenizer_path=tokenizer_path, max_tokens=24).min_tokens == 24
    assert ChunkingSettings().min_tokens == DEFAULT_MIN_TOKENS


def test_code_splitter_floor_is_in_the_index_fingerprint() -> None:
    """An index chunked with another floor must ask for --rebuild."""
    from coderag.base.config import Settings
    from coderag.pipelines.fingerprint import fingerprint

    base = fingerprint(Settings())
    assert fingerprint(Settings(chunking={"min_tokens": 0})) != base
    assert fingerprint(Settings(chunking={"min_tokens": DEFAULT_MIN_TOKENS})) == base


def test_code_splitter_merged_symbol_is_shortened_before_the_path(tokenizer_path) -> None:
    from coderag.nodes.path_injection import PathInjector, breadcrumb

    path = "src/shop/orders/line_items.py"
    symbol = "LineItem.price_cents, LineItem.quantity_count, LineItem.discount_rate, ..."
    full = PathInjector(tokenizer_path=tokenizer_path, max_tokens=200)
    assert full.make(path, symbol, "python") == breadcrumb(path, symbol, "python")
    short = PathInjector(tokenizer_path=tokenizer_path, max_tokens=32).make(path, symbol, "python")
    assert short == breadcrumb(path, "LineItem.price_cents, ...", "python")


OVERLOADS_TS = """\
import { Subscription } from './Subscription';

export function schedule(parent: Subscription, work: () => void, delay: number, repeat: true): void;
export function schedule(parent: Subscription, work: () => void, delay?: number, repeat?: false): Subscription;

export function schedule(parent: Subscription, work: () => void, delay = 0, repeat = false): Subscription | void {
  const timer = setTimeout(() => {
    work();
    if (repeat) {
      schedule(parent, work, delay, true);
    }
  }, delay);
  parent.add(() => clearTimeout(timer));
  if (!repeat) {
    return parent;
  }
}
"""


def test_code_splitter_typescript_overload_signatures_define_their_function(tmp_path, tokenizer_path) -> None:
    """The overload signatures of a function are where its callers' types are declared: the leaf that holds
    them defines the function (once, however many overloads), so a search for the name ranks it as a
    definition, not as a mention."""
    root = write_files(tmp_path / "repo", {"src/schedule.ts": OVERLOADS_TS})
    nodes = CodeHierarchySplitter(tokenizer_path=tokenizer_path).split_document(_document(root, "src/schedule.ts"))
    leaves = [n for n in nodes if not n.child_nodes]
    lines = OVERLOADS_TS.split("\n")
    first_overload = next(i for i, ln in enumerate(lines, 1) if ln.startswith("export function schedule(parent"))
    holding = [n for n in leaves if n.metadata["start_line"] <= first_overload <= n.metadata["end_line"]]
    assert len(holding) == 1
    meta = holding[0].metadata
    assert chunk_defines(meta, "schedule") and meta["symbol"] == "schedule", meta
    assert chunk_symbols(meta).count("schedule") == 1
    body = [n for n in leaves if n.metadata["kind"] == "function"]
    assert [n.metadata["symbol"] for n in body] == ["schedule"] and "setTimeout" in body[0].text


WRAPPED_TS = """\
import * as core from "./core";

/** An object schema: each key of the shape parses its own value. */
export const $ZodObject: core.$constructor<$ZodObject> = /*@__PURE__*/ core.$constructor("$ZodObject", (inst, def) => {
  $ZodType.init(inst, def);
  const shape = def.shape;
  inst._zod.parse = (payload, ctx) => {
    const input = payload.value;
    for (const key of Object.keys(shape)) {
      const result = shape[key]._zod.run({ value: input[key], issues: [] }, ctx);
      payload.value[key] = result.value;
    }
    return payload;
  };
});

export const EMPTY = new Observable<never>((subscriber) => subscriber.complete());

const limit = 10;
"""


def test_code_splitter_typescript_constant_defined_by_a_wrapped_function(tmp_path, tokenizer_path) -> None:
    """`const $ZodObject = core.$constructor("$ZodObject", (inst, def) => {...})` is how zod defines every
    schema type (and `forwardRef(...)`, `new Observable(...)` others): the constant is a definition, its
    comment above included, not a symbol-less block, so a search for the name ranks it as one and its
    breadcrumb names it. A plain constant stays what it was."""
    root = write_files(tmp_path / "repo", {"src/schemas.ts": WRAPPED_TS})
    nodes = CodeHierarchySplitter(tokenizer_path=tokenizer_path).split_document(_document(root, "src/schemas.ts"))
    leaves = [n for n in nodes if not n.child_nodes]
    lines = WRAPPED_TS.split("\n")
    doc = next(i for i, ln in enumerate(lines, 1) if ln.startswith("/** An object schema"))
    end = next(i for i, ln in enumerate(lines, 1) if ln == "});")
    obj = [n for n in nodes if n.metadata["symbol"] == "$ZodObject"]
    assert obj and obj[0].metadata["kind"] == "function", [n.metadata for n in nodes]
    assert (obj[0].metadata["start_line"], obj[0].metadata["end_line"]) == (doc, end)
    assert chunk_defines(obj[0].metadata, "$ZodObject")
    empty = next(i for i, ln in enumerate(lines, 1) if ln.startswith("export const EMPTY"))
    holding = [n for n in leaves if n.metadata["start_line"] <= empty <= n.metadata["end_line"]]
    assert len(holding) == 1 and chunk_defines(holding[0].metadata, "EMPTY"), holding[0].metadata
    assert not any(chunk_defines(n.metadata, "limit") for n in leaves)


def _long_interface(name: str, members: int) -> str:
    body = "\n".join(f"  /**\n   * How long to wait before attempt {i}, in milliseconds.\n   */\n  delay{i}?: number"
                     for i in range(members))
    return f"/** The options of a retried request. */\nexport interface {name} {{\n{body}\n}}\n"


DECLARATIONS_TS = _long_interface("RetryOptions", 30) + """
/** Which requests share one queue. */
export type Scope = { id: string }

export enum Mode { Online = "online", Always = "always" }

export class Retryer {
  /** Waits, then runs the request again until it succeeds or the attempts run out. */
  run(options: RetryOptions, attempt: number): Promise<void> {
    if (attempt > 3) {
      return Promise.reject(new Error("gave up"))
    }
    return new Promise((resolve) => setTimeout(resolve, options.delay0 ?? 1000 * 2 ** attempt))
  }
}
"""

STUB_PYI = """\
from typing import Callable

def retry(times: int) -> Callable[..., object]: ...

class Backoff:
    factor: float
    def delay(self, attempt: int) -> float: ...
"""

DECLARATIONS_CPP = """\
struct Point {
  int x;
  int y;
};

struct Counter {
  int n = 0;
  void bump() { n += 1; }
};
"""


def test_code_splitter_marks_leaves_that_only_declare(tmp_path, tokenizer_path) -> None:
    """An interface (each window of a long one too), a type alias and an enum only declare; a class's method
    does something, and so does a struct that holds one. Every leaf of a stub file declares."""
    root = write_files(tmp_path / "repo", {"src/retry.ts": DECLARATIONS_TS, "src/retry.pyi": STUB_PYI,
                                           "src/retry.d.ts": "export declare function retry(times: number): void;\n"
                                                             "export declare const LIMIT: number;\n",
                                           "src/retry.py": "def retry(times):\n    return times\n",
                                           "src/shapes.cpp": DECLARATIONS_CPP})
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path)
    leaves = [n for n in sp.split_document(_document(root, "src/retry.ts")) if not n.child_nodes]
    declares = {(n.metadata["kind"], n.metadata["symbol"]): n.metadata.get("declaration", False) for n in leaves}
    windows = [n for n in leaves if n.metadata["symbol"] == "RetryOptions"]
    assert len(windows) > 1 and all(n.metadata["kind"] == "window" for n in windows)
    assert all(n.metadata.get("declaration") for n in windows)
    assert any(v for (kind, symbol), v in declares.items() if "Scope" in symbol), declares
    assert any(v for (kind, symbol), v in declares.items() if "Mode" in symbol), declares
    method = [n for n in leaves if "Retryer" in n.metadata["symbol"]]
    assert method and not any(n.metadata.get("declaration") for n in method), declares

    for rel in ("src/retry.pyi", "src/retry.d.ts"):
        stub = [n for n in sp.split_document(_document(root, rel)) if not n.child_nodes]
        assert stub and all(n.metadata.get("declaration") for n in stub), rel
    module = [n for n in sp.split_document(_document(root, "src/retry.py")) if not n.child_nodes]
    assert module and not any(n.metadata.get("declaration") for n in module)

    merged = [n for n in sp.split_document(_document(root, "src/shapes.cpp")) if not n.child_nodes]
    assert [n.metadata.get("declaration", False) for n in merged] == [False]  # one leaf, and it holds a method
    unmerged = CodeHierarchySplitter(tokenizer_path=tokenizer_path, min_tokens=0)
    cpp = {n.metadata["symbol"]: n.metadata.get("declaration", False)
           for n in unmerged.split_document(_document(root, "src/shapes.cpp")) if not n.child_nodes}
    assert cpp["Point"] and not any(v for s, v in cpp.items() if "Counter" in s), cpp


# -- a `.h` file is C or C++ by what it holds ----------------------------------------------------------

# A licence comment fills the first 200 characters: only the whole text shows C++.
WIDGET_H = ("// Copyright notice long enough that the first 200 characters of this header show nothing of its\n"
            "// language, as a licence header does: the reader must look at the whole text.\n" + CPP_HEADER)

BUFFER_H = '''\
#ifndef BUFFER_H
#define BUFFER_H

#ifdef __cplusplus
extern "C" {
#endif

struct buffer {
    unsigned char *data;
    size_t len;
};

#ifdef __cplusplus
}
#endif

#endif
'''


@pytest.mark.parametrize("text, expected", [
    (WIDGET_H, "cpp"),
    (BUFFER_H, "c"),  # `extern "C"` is for C++ callers of a C header
    ("template <typename T>\nT twice(T x);\n", "cpp"),
    ("using Callback = void (*)(int);\n", "cpp"),
    ("struct point { int x; int y; };\n/* public: nothing */\n", "c"),
])
def test_a_header_is_cpp_when_its_text_shows_cpp(text: str, expected: str) -> None:
    assert detect_language("include/x.h", text) == expected
    assert detect_language("include/x.h") == "c" and detect_language("src/x.c", text) == "c"  # by name alone


def test_a_cpp_header_named_h_is_split_as_cpp(tmp_path: Path, tokenizer_path: str) -> None:
    """The reader keeps the language of the whole text, so the C++ grammar outlines the header: its class is
    a definition inside its namespace, where the C grammar gave unnamed windows."""
    root = write_files(tmp_path / "repo", {"include/ui/widget.h": WIDGET_H, "include/buffer.h": BUFFER_H})
    sp = CodeHierarchySplitter(tokenizer_path=tokenizer_path)
    doc = _document(root, "include/ui/widget.h")
    assert doc.metadata["language"] == "cpp"
    assert any(chunk_defines(n.metadata, "ui.Widget") for n in sp.split_document(doc) if not n.child_nodes)
    assert _document(root, "include/buffer.h").metadata["language"] == "c"
