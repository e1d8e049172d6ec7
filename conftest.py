"""Loaded by pytest before tests/conftest.py, for the whole suite (and the `coderag` processes tests start,
which inherit the environment): no `coderag search` starts a background owner unless a test asks for one
(tests/test_daemon.py removes the variable and stops the owner it starts)."""

import os

os.environ.setdefault("CODERAG_NO_DAEMON", "1")
