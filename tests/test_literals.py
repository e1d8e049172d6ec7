"""Message templates in string literals, matched against a pasted message (coderag/queries/literals.py)."""

from __future__ import annotations

import pytest

from coderag.queries.literals import message_coverage, message_pieces


@pytest.mark.parametrize("literal, pieces", [
    ("No such command {name!r}.", ["no such command", "."]),
    ("%(value)r is not a valid %(kind)s.", ["is not a valid", "."]),
    ("Expected ${n} items, got ${m}", ["expected", "items, got"]),
])
def test_literals_message_pieces(literal, pieces) -> None:
    assert message_pieces(literal) == pieces


@pytest.mark.parametrize("text, query, printed", [
    ('raise BadParameter(f"{value!r} is not a valid integer range.")', "'x' is not a valid integer range.", True),
    ('msg = "Got unexpected extra argument ({args})"', "Error: Got unexpected extra argument (foo)", True),
    ("throw new TypeError(`Invalid event target ${t} given`)", "TypeError: Invalid event target undefined given", True),
    ('return fmt.Errorf("cannot open the config file %q: %w", path, err)',
     "Error: cannot open the config file \"a.yml\": EOF", True),  # Go's %q and %w
    ('bail!("unknown field `{}` in table {:?}", key, table)', "unknown field `color` in table \"theme\"", True),  # Rust
    ('raise ValueError("invalid value")', "invalid value", False),             # too few words of its own
    ('fail("%s: %s" % (a, b))', "KeyError: missing", False),                 # no words of its own at all
    ('raise BadParameter(f"{value!r} is not a valid integer range.")',        # quoted inside a report
     "When I pass --level with a negative number I get 'x' is not a valid integer range. even though the docs "
     "say negative numbers are fine and this worked before the upgrade to 8.1", False),
])
def test_literals_a_pasted_message_is_mostly_its_templates_words(text, query, printed) -> None:
    assert (message_coverage(text, query) >= 0.5) is printed
