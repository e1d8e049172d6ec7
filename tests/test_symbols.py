"""chunk_symbols / chunk_defines: what a chunk defines, for a merged chunk of small siblings too."""

from __future__ import annotations

import pytest

from coderag.queries.symbols import assigns_at_top_level, chunk_defines, chunk_symbols, declares_field

MERGED = {"symbol": "LruCache.get, LruCache.put, LruCache.peek, ...",
          "symbols": ["LruCache", "LruCache.get", "LruCache.put", "LruCache.peek", "LruCache.clear"]}


@pytest.mark.parametrize("identifier, expected", [
    ("clear", True),             # past the three names the symbol shows
    ("LruCache.clear", True),
    ("LruCache", True),          # the class's head is in the chunk
    ("Cache.clear", False),      # a suffix of a name, not a dotted part of it
    ("lear", False),
    ("evict", False),
])
def test_chunk_defines_merged_chunk(identifier, expected) -> None:
    assert chunk_defines(MERGED, identifier) is expected


def test_chunk_symbols_of_plain_and_merged_chunks() -> None:
    assert chunk_symbols(MERGED) == MERGED["symbols"]
    assert chunk_symbols({"symbol": "AuthService.login"}) == ["AuthService.login"]
    assert chunk_symbols({"symbol": ""}) == [] and chunk_symbols({}) == []
    assert chunk_defines({"symbol": "AuthService.login"}, "login")


@pytest.mark.parametrize("symbol, identifier, expected", [
    ("RecursionGuard<'_, S>.new", "RecursionGuard.new", True),  # Rust impl of a generic type
    ("Map<K, List<V>>.get", "Map.get", True),                   # nested generic arguments
    ("Map<K>.get", "get", True),
    ("Mapx<K>.get", "Map.get", False),
    ("Map<K>", "Map", True),
])
def test_chunk_defines_ignores_generic_arguments(symbol, identifier, expected) -> None:
    assert chunk_defines({"symbol": symbol}, identifier) is expected


@pytest.mark.parametrize("text, name, expected", [
    ("DEFAULT_STYLES: Dict[str, Style] = {\n", "DEFAULT_STYLES", True),  # Python, annotated
    ("import sys\nWINDOWS = sys.platform == 'win32'\n", "WINDOWS", True),
    ("export const MAX_RETRIES = 3;\n", "MAX_RETRIES", True),  # JS/TS
    ("const routes: Record<string, Route> = {\n", "routes", True),
    ("pub(crate) static mut COUNTER: usize = 0;\n", "COUNTER", True),  # Rust
    ("var ErrClosed = errors.New(\"closed\")\n", "ErrClosed", True),  # Go
    ("#define CMARK_OPT_SMART (1 << 10)\n", "CMARK_OPT_SMART", True),  # C
    ("def f():\n    WINDOWS = False\n", "WINDOWS", False),  # a local
    ("if WINDOWS == True:\n    pass\n", "WINDOWS", False),  # a comparison
    ("MAX_RETRIES_TOTAL = 9\n", "MAX_RETRIES", False),  # another name that starts alike
    ("retry(MAX_RETRIES=3)\n", "MAX_RETRIES", False),  # a keyword argument
    ("Config.TIMEOUT = 3\n", "Config.TIMEOUT", False),  # dotted names are symbols' business
])
def test_symbols_assigns_at_top_level(text, name, expected) -> None:
    assert assigns_at_top_level(text, name) is expected


@pytest.mark.parametrize("text, name, expected", [
    ("@dataclass\nclass Opts:\n    \"\"\"Doc.\"\"\"\n\n    depth: int = 25\n", "depth", True),  # Python, annotated
    ("class Color(Enum):\n    RED = 1\n", "RED", True),  # an enum's member
    ("class Opts:\n    depth = 25\n", "Opts.depth", True),  # asked with its type
    ("class Opts:\n    depth = 25\n", "Other.depth", False),  # another type's
    ("export interface Options {\n  strict?: boolean;\n}\n", "strict", True),  # TypeScript
    ("export class Ajv {\n  readonly opts: Opts\n}\n", "opts", True),
    ("pub struct Opts {\n    pub depth: usize,\n}\n", "depth", True),  # Rust
    ("class Opts:\n    def run(self):\n        depth = 3\n", "depth", False),  # a method's local
    ("def run(settings):\n    depth = settings.depth\n", "depth", False),  # a function's local: no type head
    ("    depth: int = 25\n    width: int = 80\n", "depth", False),  # a window without its type's head
    ("class Opts:\n    x = 1\ndepth = 2\n", "depth", False),  # after the body: a module's (assigns_at_top_level)
    ("class Opts:\n    if depth == 3:\n        pass\n", "depth", False),  # a comparison
    ("class Opts:\n    max_depth = 3\n", "depth", False),  # another name that ends alike
    ("public class Opts {\n    private final Map<String, Integer> depth;\n}\n", "depth", True),  # Java: type first
    ("public class Opts {\n    private String name;\n}\n", "String", False),  # a field's type is not the field
    ("public class Opts {\n    int width, depth = 3;\n}\n", "depth", True),  # the second of two
    ("public class Opts {\n    int depth() { return 3; }\n}\n", "depth", False),  # a method: the splitter's symbol
    ("public class A {\n    void run() {\n        int depth = 3;\n    }\n}\n", "depth", False),  # a local
    ("public class A {\n    /**\n     * the depth, as set;\n     */\n    int x;\n}\n", "depth", False),  # prose
    ("public enum Color {\n    RED(1),\n    GREEN(2);\n}\n", "GREEN", True),  # an enum's constant
    ("public sealed class Opts\n{\n    public int Depth { get; set; }\n}\n", "Depth", True),  # C#, brace below
    ("struct node {\n    struct node *next;\n    char label[16];\n    unsigned flags : 3;\n};\n", "next", True),  # C
    ("struct node {\n    struct node *next;\n    char label[16];\n};\n", "label", True),
    ("struct node {\n    unsigned flags : 3;\n};\n", "flags", True),
    ("typedef struct {\n  bufsize_t len;\n  bufsize_t alloc;\n} cmark_chunk;\n", "alloc", True),  # C: named after
    ("typedef union {\n  int depth;\n} cell;\n", "depth", True),
    ("data class User(val id: Long, val name: String)\n", "name", True),  # Kotlin: a property in the head
    ("data class User(\n    @Json(name = \"uid\") val userId: Long,\n    var tags: List<String> = listOf(),\n)\n",
     "tags", True),
    ("class Service(repo: Repo) {\n}\n", "repo", False),  # a constructor's parameter, not a property
    ("class Handler(val onClick: (Int) -> Unit, val label: String)\n", "label", True),
    ("public record Point(int x, Map<String, Integer> counts) {}\n", "counts", True),  # a record's component
    ("class Foo(Base, metaclass=Meta):\n    pass\n", "Base", False),  # Python's bases
    ("public class A {\n    @Inject private UserRepository users;\n}\n", "users", True),  # annotated
    ("public class A\n{\n    [JsonProperty(\"x\")] public int Total { get; set; }\n}\n", "Total", True),
    ("class Account\n  attr_reader :balance, :owner\nend\n", "owner", True),  # Ruby
    ("class Account\n  attr_reader :balance_due\nend\n", "balance", False),
    ("class Mailer {\n    private string $host;\n    public $port = 25;\n}\n", "port", True),  # PHP
    ("class Mailer {\n    public function send() {\n        $host = 1;\n    }\n}\n", "host", False),
    ("type Server struct {\n\tAddr string `json:\"addr\"`\n\tHandler\n\ta, Timeout int\n}\n", "Addr", True),  # Go
    ("type Server struct {\n\tAddr string\n\thttp.Handler\n\ta, Timeout int\n}\n", "Timeout", True),
    ("type Server struct {\n\t// Port is where it listens\n\tPort int\n}\n", "where", False),
    ("class Opts:\n    \"\"\"How deep\n    the depth; goes\n    \"\"\"\n", "depth", False),  # Python: no type first
])
def test_symbols_declares_field(text, name, expected) -> None:
    assert declares_field(text, name) is expected
