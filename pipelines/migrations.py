"""Migrations: what an index written by an older coderag lacks, added once when it is opened or updated,
without re-embedding (line token counts, the current payload format, files the current rules call
secrets or data), but for source files that hold a token, embedded again masked, and files that an older
coderag read or split otherwise (their line ends, a notebook's cells, a C header's `extern "C"` block, a C++
header named `.h`, a Kotlin, Swift, Scala or Lua file, a function assigned to a name, a doc comment a blank
line above its definition), split again. Each step records in the index's meta table
that it ran."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from coderag.base.config import Settings, StoreMode
from coderag.nodes.file_classes import DATA, SECRET
from coderag.nodes.file_classes import RULES_VERSION as FILE_CLASSES_VERSION
from coderag.nodes.ignore import IgnoreMatcher
from coderag.nodes.file_text import MASKED_NOTE
from coderag.nodes.notebook import is_notebook
from coderag.nodes.outline import DOC_COMMENT_APART
from coderag.nodes.safe_path import open_regular
from coderag.nodes.scan import FileEntry, SkipLog, read_text_file
from coderag.pipelines.changes import SKIPS_RECHECKED_KEY, ChangeSet
from coderag.pipelines.fingerprint import fingerprint
from coderag.nodes.languages import GRAMMARS, detect_language
from coderag.pipelines.ingestion import (FILE_CLASSES_KEY, READING, READING_KEY, READING_STEPS, Ingestion, Progress,
                                        sync)
from coderag.store.state import (LINE_TOKENS_ENCODING, SEARCHABLE, STORE_FORMAT, STORE_FORMAT_KEY, FileRecord,
                                 IndexState)

# Deleted points keep their bytes in the shard's payload pages and WAL until the shard is rebuilt.
PURGED_NOTE = 'indexed files dropped as secrets or data ("coderag index --rebuild" also scrubs the shard\'s files)'
REMASKED_NOTE = 'indexed files indexed again with their tokens masked ("coderag index --rebuild" also scrubs the ' \
                "shard's files)"
LONE_CR_NOTE = "files whose lines end in a CR alone (a classic Mac file) indexed again with their line numbers"
NOTEBOOKS_NOTE = "notebooks indexed again as their cells"
EXTERN_C_NOTE = 'C files indexed again with the definitions of their extern "C" block'
CPP_HEADERS_NOTE = "C++ headers named .h indexed again as C++ (they were read as C)"
OUTLINED_NOTE = "Kotlin, Swift, Scala and Lua files indexed again along their definitions"
OUTLINED_SINCE = frozenset({"kotlin", "swift", "scala", "lua"})  # files that were line windows before a grammar
ASSIGNED_NOTE = "files indexed again with the functions assigned to names or held by object literals, and the doc " \
                "comments a blank line above what they document, as definitions"
NAMED_VALUES_NOTE = "files indexed again with a named function or class that CommonJS exports under its own name, " \
                    "the definitions that functions called in place make and hold, and the methods given to a prototype"
_EXTERN_C = b'extern "C"'
# What the step of named values reads otherwise (nodes/values.py): a named function or class assigned to `exports`
# or `module.exports` (nodes/languages.py export_slots), which took the slot's name; a value that calls a function in
# place, `= (() => {` or `= (function () {`, which was code between definitions; a statement that does, whose
# function held the whole file as one block, `(function () {` or `!function () {` starting a line, or an AMD
# module's, `define([` starting one; an object literal given to a prototype, `Foo.prototype = {` (named
# `Foo.prototype`) or `_.extend(Foo.prototype, {`. The patterns match more than that (a parenthesised sum): such a
# file is split again to the same chunks, and the embedding cache keeps its vectors.
_NAMED_VALUE = re.compile(rb"\bexports[ \t]*=[ \t]*(?:async[ \t]+)?(?:function\b[ \t*]*|class[ \t]+)[\w$]"
                          rb"|=[ \t]*\([ \t]*(?:async\b[ \t]*)?(?:function\b|\(|[\w$]+[ \t]*=>)"
                          rb"|(?m:^[ \t]*;?[ \t]*[(!][ \t]*(?:async\b[ \t]*)?(?:function\b|\())"
                          rb"|\.prototype[ \t]*[=,]|(?m:^[ \t]*[\w$.]+[ \t]*\([ \t]*\[)")
(_LINE_ENDS_STEP, _NOTEBOOKS_STEP, _EXTERN_C_STEP, _CPP_HEADERS_STEP, _OUTLINED_STEP, _ASSIGNED_STEP,
 _NAMED_VALUES_STEP) = READING_STEPS
_LONE_CR = re.compile(rb"\r(?!\n)")


def fill_line_tokens(root: Path, state: IndexState, progress: Optional[Progress] = None) -> int:
    """Count the lines of indexed files that have no counts yet (an index built before coderag stored them):
    a tokenizer pass over each file, no re-embedding. Returns the files counted."""
    todo = state.without_line_tokens(LINE_TOKENS_ENCODING)
    if not todo:
        return 0
    from coderag.postprocessors.line_tokens import file_line_tokens
    from coderag.postprocessors.tokenizer import PayloadTokenizer

    tok, done = PayloadTokenizer(), 0
    for i, (path, sha) in enumerate(todo, 1):
        p = root / path
        try:
            st = p.stat()
        except OSError:
            continue
        ft = read_text_file(FileEntry(path, str(p), st.st_size, st.st_mtime_ns), SkipLog())
        if ft is None or ft.sha256 != sha:
            continue  # gone or changed since it was indexed: the next run re-indexes it
        counts = file_line_tokens(ft.text, tok)
        if counts is not None:
            state.put_line_tokens(path, sha, LINE_TOKENS_ENCODING, counts)
            done += 1
        if i % 500 == 0 or i == len(todo):
            state.commit()
            if progress:
                progress("line tokens", i, len(todo))
    state.commit()
    return done


def upgrade_store(root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                  store: Any = None) -> int:
    """Bring an embedded store written before STORE_FORMAT to it (payloads only; see
    EdgeVectorStore.upgrade_payloads). Once per index: later runs read the meta key and return. `store`:
    the process's open store (an owner holds the shard), else the shard is opened here."""
    if state.get_meta(STORE_FORMAT_KEY) == STORE_FORMAT:
        return 0
    done = 0
    if state.get_meta("fingerprint") is not None and settings.store.mode == StoreMode.Embedded:
        from coderag.pipelines.stores import open_vector_store

        own = store is None
        if own:
            store = open_vector_store(settings, root)
        try:
            done = store.upgrade_payloads(lambda n: progress and progress("upgrade", n, 0))
            if done >= settings.store.hnsw_min_chunks:
                # Qdrant copies a point whose payload changes out of its indexed segment: rebuild the HNSW
                # index, as after a bulk load (without it a dense query scans the copied points one by one).
                if progress:
                    progress("optimize", 0, 0)
                store.optimize()
        finally:
            if own:
                store.close()
    state.set_meta(STORE_FORMAT_KEY, STORE_FORMAT)
    state.commit()
    return done


def purge_reclassified(root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                       store: Any = None) -> tuple[int, int]:
    """Forget the indexed files that the current file-class rules call secrets or data (an index built
    before a rule existed may hold a key or a token), as a run forgets a file that became a skip: points,
    docstore nodes and dedup rows go, files holding copies of their chunks are marked for re-indexing, and
    the manifest keeps the file with its reason (so it is counted and not read again). Source files that
    hold a token are indexed again now, with it masked (nodes/file_text.py): an index of before the token
    rules holds them as they are. Once per rules version (file_classes.RULES_VERSION, in the meta table):
    each indexed file is read once. Returns (files forgotten, files indexed again masked)."""
    if state.get_meta(FILE_CLASSES_KEY) == FILE_CLASSES_VERSION:
        return 0, 0
    indexed = sorted((p, r) for p, r in state.files().items() if r.status in SEARCHABLE)
    found: dict[str, FileRecord] = {}
    remask: list[FileEntry] = []
    masked = state.noted(MASKED_NOTE)  # indexed masked already (by this run, say): nothing to do again
    matcher = IgnoreMatcher(root)
    for i, (path, rec) in enumerate(indexed, 1):
        skips = matcher.skips = SkipLog()  # the names first: a secret by name is never opened
        size, mtime_ns, ft = rec.size, rec.mtime_ns, None
        if not matcher.is_ignored(path):
            p = root / path
            try:
                st = p.stat()
            except OSError:
                st = None  # gone: the next run's walk removes it
            if st is not None:
                size, mtime_ns = st.st_size, st.st_mtime_ns  # the content that was read and classed
                ft = read_text_file(FileEntry(path, str(p), size, mtime_ns), skips, settings.chunking.max_file_bytes)
        reason = next((r for _, r, _ in skips.items if r in (SECRET, DATA)), None)
        if reason is not None:
            found[path] = FileRecord(path, size, mtime_ns, None, None, reason, 0, 0)
        elif ft is not None and path not in masked and any(note == MASKED_NOTE for note, _ in ft.notes):
            remask.append(ft.entry)
        if progress and (i % 500 == 0 or i == len(indexed)):
            progress("recheck", i, len(indexed))
    if found or remask:
        run = Ingestion(root, settings, state, progress, store=store)
        if found:
            run.remove(sorted(found))
            for rec in found.values():
                state.put_file(rec)
        if remask:  # the same content, indexed again: what the pipeline makes of it now is masked
            sync(run, ChangeSet(remask, remask, 0, [], SkipLog()), fingerprint(settings), progress, force=True)
        else:
            run.finish()
    state.set_meta(FILE_CLASSES_KEY, FILE_CLASSES_VERSION)
    state.commit()
    return len(found), len(remask)


def _read_otherwise(path: str, data: bytes, lacking: set[str]) -> Optional[str]:
    """Why a reading step the index lacks (`lacking`, of READING_STEPS) splits a file's bytes otherwise than the
    index holds them, as the note that counts it; None where none does."""
    language = detect_language(path)  # by its name
    if _NOTEBOOKS_STEP in lacking and is_notebook(path):
        return NOTEBOOKS_NOTE  # one that a `!*.ipynb` brought in was indexed as its raw JSON
    if _LINE_ENDS_STEP in lacking and b"\r" in data and _LONE_CR.search(data):
        return LONE_CR_NOTE  # each such line was one line: its answers gave wrong line numbers
    if _OUTLINED_STEP in lacking and language in OUTLINED_SINCE:
        return OUTLINED_NOTE  # line windows, where its definitions are leaves now
    if language == "c":  # a `.c` or `.h` file
        if _CPP_HEADERS_STEP in lacking and detect_language(path, data.decode("utf-8", "replace")) == "cpp":
            return CPP_HEADERS_NOTE  # a C++ header read as C: its namespaces, classes and templates unnamed
        if _EXTERN_C_STEP in lacking and _EXTERN_C in data:
            return EXTERN_C_NOTE  # what the block defines was one unnamed window
    grammar = GRAMMARS.get(language)
    # The assignment step reads otherwise every file of a language whose grammar reads assignments (JavaScript,
    # TypeScript, Lua: a function assigned to a name or held by an object literal may be anywhere), and in other
    # outlined languages a doc comment a blank line above what it documents. A file split again to the same
    # chunks costs its reading and splitting; the embedding cache keeps its vectors.
    if _ASSIGNED_STEP in lacking and grammar is not None:
        if grammar.assignments or DOC_COMMENT_APART.search(data):
            return ASSIGNED_NOTE  # such a function was code between definitions; such a comment a chunk alone
    if _NAMED_VALUES_STEP in lacking and grammar is not None and grammar.export_slots and _NAMED_VALUE.search(data):
        return NAMED_VALUES_NOTE  # `module.exports = class Application` was "module.exports", its methods under it
    return None


def resplit_read_otherwise(root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                           store: Any = None) -> dict[str, int]:
    """Index again the files that a reading step the index lacks splits otherwise (`_read_otherwise`). Once per
    index and step (READING_KEY in the meta table lists the steps it was read with): each indexed file's bytes
    are read once, and decoded only for a C file to be checked for C++; only the files found are split and
    embedded again, not the whole index (as a new SPLITTER_VERSION would). Returns the files indexed again, by
    description."""
    done = state.get_meta(READING_KEY)
    if done == READING:
        return {}
    lacking = set(READING_STEPS) - set((done or "").split("; "))
    indexed = sorted(p for p, r in state.files().items() if r.status in SEARCHABLE)
    found: list[FileEntry] = []
    why: dict[str, int] = {}
    for i, path in enumerate(indexed, 1):
        p = root / path
        fh, _, _ = open_regular(p, root)  # never blocks, never leaves the root
        if fh is not None:  # gone or unreadable: the next run's walk deals with it
            try:
                with fh:
                    st = os.fstat(fh.fileno())
                    data = fh.read(settings.chunking.max_file_bytes + 1)
            except OSError:
                data = b""
            note = _read_otherwise(path, data, lacking)
            if note is not None:
                found.append(FileEntry(path, str(p), st.st_size, st.st_mtime_ns))
                why[note] = why.get(note, 0) + 1
        if progress and (i % 500 == 0 or i == len(indexed)):
            progress("reading", i, len(indexed))
    if found:
        run = Ingestion(root, settings, state, progress, store=store)
        sync(run, ChangeSet(found, found, 0, [], SkipLog()), fingerprint(settings), progress, force=True)
    state.set_meta(READING_KEY, READING)
    state.commit()
    return why


def drop_new_secrets(root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                     store: Any = None) -> dict[str, int]:
    """`purge_reclassified` for an index classed by older file-class rules (an upgrade of coderag with a new
    kind of token), with what it did by description (as `upgrade_index` reports). CodeIndex.open runs it
    before the index serves anything; on a current index it is one read of the meta table."""
    if state.get_meta(FILE_CLASSES_KEY) == FILE_CLASSES_VERSION:
        return {}
    purged, remasked = purge_reclassified(root, settings, state, progress, store=store)
    return {k: v for k, v in ((PURGED_NOTE, purged), (REMASKED_NOTE, remasked)) if v}


def upgrade_index(root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                  store: Any = None) -> dict[str, int]:
    """Everything an index written by an older coderag lacks, added once and without re-embedding: the
    token counts of its files' lines, then the current payload format, then the removal of files that are
    secrets or data by the current rules, then the files read or split otherwise now, split again. `store`:
    the process's open store (see upgrade_store). Returns what was done, by description, leaving out what was
    not needed."""
    counted = fill_line_tokens(root, state, progress)
    rewritten = upgrade_store(root, settings, state, progress, store=store)
    rechecked = drop_new_secrets(root, settings, state, progress, store=store)
    # Every caller runs this after a run whose walk read the skipped files again (changes.retry_statuses).
    if state.get_meta(SKIPS_RECHECKED_KEY) != FILE_CLASSES_VERSION:
        state.set_meta(SKIPS_RECHECKED_KEY, FILE_CLASSES_VERSION)
        state.commit()
    resplit = resplit_read_otherwise(root, settings, state, progress, store=store)
    return {**{k: v for k, v in (("files' line token counts stored", counted),
                                 ("stored chunks rewritten in the current format", rewritten)) if v},
            **rechecked, **resplit}
