"""The section `coderag init-claude` writes into CLAUDE.md, left out of the text the index holds.

It tells the agent how to use coderag, in words that match almost any question about code ("where
something is implemented, defined, configured or documented"): indexed, it came first for the README's own
example question. Its lines are blanked, not removed, so every other line of the file keeps its number
and an answer that shows lines around it shows the same text the index holds; the two marker comments
stay and say what was there.

Stdlib only: the scanner of a no-change run imports it.
"""

from __future__ import annotations

import re

BEGIN = "<!-- coderag:begin (managed by `coderag init-claude`; edit outside these markers) -->"
END = "<!-- coderag:end -->"
_SECTION = re.compile(rf"^{re.escape(BEGIN)}[ \t]*\n(.*?)^{re.escape(END)}", re.M | re.S)


def blank_managed_sections(text: str) -> str:
    """`text` with the lines between each BEGIN/END marker pair made empty (a BEGIN without its END is
    left as it is: the user removed the end, and the rest of the file is theirs).

    Examples:
        >>> text = f"# Notes\\n{BEGIN}\\n## Code search\\nUse search_code.\\n{END}\\nMine.\\n"
        >>> blank_managed_sections(text).split("\\n")[2:6]
        ['', '', '<!-- coderag:end -->', 'Mine.']
    """
    if BEGIN not in text:
        return text
    return _SECTION.sub(lambda m: m.group(0)[:m.start(1) - m.start(0)] + "\n" * m.group(1).count("\n") + END, text)
