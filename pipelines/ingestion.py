"""Incremental ingestion: detect changed files, run the LlamaIndex IngestionPipeline on them, commit per batch.

The change check needs only the stdlib, pathspec and SQLite: an unchanged tree is answered without
importing LlamaIndex, torch or Qdrant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from coderag.base.config import Settings
from coderag.base.errors import ConfigError
from coderag.nodes.file_classes import RULES_VERSION as FILE_CLASSES_VERSION
from coderag.nodes.keys import DUPLICATE_OF_KEY, IS_LEAF_KEY
from coderag.nodes.scan import FileEntry, SkipLog, read_text_file
from coderag.pipelines.changes import FILE_CLASSES_KEY, SKIPS_RECHECKED_KEY, ChangeSet
from coderag.pipelines.fingerprint import check_fingerprint, model_id, stamp_model
from coderag.store.previous_cache import embedding_cache
from coderag.store.state import (LINE_TOKENS_ENCODING, SEARCHABLE, STATUS_INDEXED, STATUS_SPARSE,
                                 STORE_FORMAT, STORE_FORMAT_KEY, FileRecord, IndexState)

READING_KEY = "line_ends"  # meta: how the indexed files were read into lines and split (named for its first use)
# A CR alone ends a line too, and a notebook's lines are its cells (nodes/file_text.py decode_file); a C header's
# `extern "C"` block is read for definitions, a `.h` file that shows C++ is C++, Kotlin, Swift, Scala and Lua
# files are outlined (nodes/languages.py), and a function assigned to a name or held by an object literal's or a
# class's field is a definition, led by a doc comment a blank line above it, one that CommonJS exports takes its
# own name, a function called in place defines its constant and is read through, and an object of methods given to a
# prototype holds that type's methods (nodes/outline.py, nodes/values.py). An index records the steps it was read
# with; its upgrade indexes again the files that a step it lacks reads otherwise (pipelines/migrations.py
# resplit_read_otherwise).
READING_STEPS = ("lf, crlf, cr", "notebook cells", 'C extern "C" blocks', "C++ headers named .h",
                 "Kotlin, Swift, Scala and Lua outlined", "functions assigned, and held by fields, doc comments apart",
                 "CommonJS exports by their own names, functions called in place, prototypes extended")
READING = "; ".join(READING_STEPS)
BATCH_FILES = 64
BATCH_BYTES = 512 * 1024

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass
class IndexSummary:
    root: str
    files_seen: int = 0
    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: dict = field(default_factory=dict)
    skip_items: list = field(default_factory=list)
    notes: dict = field(default_factory=dict)  # files indexed with their text changed, by note (file_text.py)
    note_items: list = field(default_factory=list)  # (path, note, detail) of each
    chunks: int = 0  # leaf chunks written this run
    nodes: int = 0  # all nodes written this run
    embedded: int = 0
    cached: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    upgraded: dict = field(default_factory=dict)  # an older index brought up to date: what was done, how many
    started_over: bool = False  # the index had other model or chunking settings: built again (index_repository)
    rebuild_reason: str = ""  # why, in the user's words (fingerprint.SETTINGS_CHANGED, MODEL_FILES_CHANGED)

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0

    def add_later(self, later: "IndexSummary") -> None:
        """Count in a later refresh of the whole tree: what changed while this build ran, read again before
        and after a swap (coderag/owner_build.py). What it indexed, removed and wrote adds to this run's; the
        files seen and left out are its own (a whole tree's account, as it is now); the files it found
        unchanged were counted by this run."""
        for name in ("indexed", "removed", "chunks", "nodes", "embedded", "cached", "duplicates"):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        for note, n in later.notes.items():
            self.notes[note] = self.notes.get(note, 0) + n
        self.note_items.extend(later.note_items)
        self.files_seen, self.skipped, self.skip_items = later.files_seen, later.skipped, later.skip_items


class Ingestion:
    """One indexing run over a root; holds the writer lock, the state and (lazily) the pipeline."""

    def __init__(self, root: Path, settings: Settings, state: IndexState, progress: Optional[Progress] = None,
                 store=None, docstore=None, embed_loader: Optional[Callable] = None, dense: bool = True,
                 tokenizer=None):
        self.root, self.settings, self.state, self.progress = root, settings, state, progress
        self.summary = IndexSummary(root=str(root))
        self._store = store
        self._docstore = docstore
        self._embed_loader = embed_loader
        self._owns_store = store is None
        # dense=False is the BM25-first pass of a first build: chunks become searchable by BM25 at once,
        # their vectors follow in a second pass.
        self.dense = dense
        self._pipeline = None
        self._filter = None
        self._embedder = None
        # Counts the lines of the files indexed: the open index's PayloadTokenizer when there is one (one
        # cl100k per process, not one per run of the owner's dense pass), else one made on first use.
        self._tokenizer = tokenizer
        self._batch_files = 0  # files in the batch being processed (progress reports them with its chunks)

    # -- heavy parts, built on first use --
    def _build(self) -> None:
        from llama_index.core.ingestion import IngestionPipeline

        from coderag.nodes.code_splitter import CodeHierarchySplitter
        from coderag.nodes.embedding import CachedEmbedder, load_document_model
        from coderag.nodes.gitignore_filter import GitignoreFilter
        from coderag.nodes.hash_dedup import HashDeduplicator
        from coderag.nodes.path_injection import PathInjector
        from coderag.pipelines.stores import open_docstore, open_vector_store

        s = self.settings
        model_dir = s.model_dir()
        tok = str(model_dir / "tokenizer.json")
        reserve = s.embedding.window_tokens - 2 - s.chunking.max_tokens
        if reserve < 8:
            raise ConfigError(f"chunking.max_tokens ({s.chunking.max_tokens}) leaves no room for the breadcrumb in a "
                              f"{s.embedding.window_tokens}-token window; use at most {s.embedding.window_tokens - 10}.")
        self._filter = GitignoreFilter(root=str(self.root), max_line_chars=s.chunking.max_line_chars)
        self._embedder = CachedEmbedder(
            loader=self._embed_loader or (lambda: load_document_model(model_dir, s.embedding.batch_size,
                                                                      s.embedding.threads, s.embedding.device,
                                                                      s.embedding.window_tokens)),
            cache=embedding_cache(self.state, self.state.path), on_batch=lambda n: self._tick("embed", n),
            on_plan=lambda n: self._tick("to embed", n, self._batch_files),
            # Keyed by the model's files, so that the same model in another folder finds its vectors; the
            # folder keyed the caches written before.
            model_id=model_id(model_dir) or str(model_dir), legacy_model_id=str(model_dir),
            batch_size=s.embedding.batch_size)
        if self._store is None:
            self._store = open_vector_store(s, self.root)
        if self._docstore is None:
            self._docstore = open_docstore(self.state)
        self._pipeline = IngestionPipeline(
            transformations=[
                self._filter,
                CodeHierarchySplitter(tokenizer_path=tok, max_tokens=s.chunking.max_tokens,
                                      min_tokens=s.chunking.min_tokens, overlap_lines=s.chunking.overlap_lines,
                                      signatures_only_bytes=s.chunking.signatures_only_bytes,
                                      signatures_only_lines=s.chunking.signatures_only_lines),
                PathInjector(tokenizer_path=tok, max_tokens=reserve),
                HashDeduplicator(registry=self.state, max_copies=s.chunking.dedup_max_copies),
                self._embedder,
            ],
            vector_store=self._store,
            disable_cache=True,  # our chunk-hash cache replaces IngestionCache, which keys on whole batches
        )

    def _tick(self, phase: str, n: int, total: int = 0) -> None:
        if self.progress:
            self.progress(phase, n, total)

    @property
    def pipeline(self):
        if self._pipeline is None:
            self._build()
        return self._pipeline

    def _forget(self, path: str, keep_points: bool = False) -> list[str]:
        """Remove every trace of one file from the vector store, docstore, dedup table and manifest.

        With `keep_points` (a file about to be re-indexed) its points stay in the store, so the file stays
        searchable while its new vectors are computed; the ids returned are deleted by `_drop_stale_points`
        once the new points are written (node ids are stable, so most are overwritten in place). A store
        that cannot list a file's points loses them now."""
        old_ids: list[str] = []
        point_ids = getattr(self._store, "point_ids", None)
        keep = keep_points and point_ids is not None
        if keep:
            old_ids = point_ids(path)
        else:
            self._store.delete(path)
        self._docstore.delete_ref_doc(path, raise_error=False)
        # The manifest row stays with the points it describes: the query-time freshness check then calls a
        # file stale only if it really changed (not while the same content gets its dense vectors).
        self.state.delete_file(path, keep_record=keep)
        return old_ids

    def _drop_stale_points(self, old_ids: set[str], written: set[str]) -> None:
        stale = sorted(old_ids - written)
        if stale:
            self._store.delete_nodes(stale)

    def remove(self, paths: list[str]) -> set[str]:
        """Forget deleted files; return files holding duplicates of their chunks (they must be re-indexed)."""
        _ = self.pipeline
        dependents: set[str] = set()
        for p in paths:
            dependents |= self.state.dependents(p)
            self._forget(p)
        self.state.mark_dirty(dependents - set(paths))  # survives a crash before they are re-indexed
        self.state.commit()
        self.summary.removed += len(paths)
        return dependents - set(paths)

    def empty_store(self) -> None:
        """Delete every point of the store a new index writes to. Its own shard in .coderag is new and empty;
        but a shard at `store.path` or a server's collection outlives the index folder (`rm -rf .coderag`, a
        database lost), and the points left there, which no index knows, would be answers beside the new ones."""
        _ = self.pipeline  # opens the store when none was given
        self._store.clear()

    def recover(self) -> None:
        """Undo what a killed run left half-written: points of files whose batch never committed."""
        paths = self.state.inflight()
        if paths:
            _ = self.pipeline
            for p in paths:
                self._forget(p)
            self.state.clear_inflight(paths)
            self.state.commit()

    def process(self, batch: list[FileEntry], force: bool = False) -> set[str]:
        """Index one batch of new or modified files; commit. Returns dependents to re-index."""
        from coderag.nodes.reader import make_document

        self._batch_files = len(batch)
        manifest = {e.rel_path: self.state.file(e.rel_path) for e in batch}
        docs, stats = [], {}
        notes: dict[str, tuple] = {}
        skips = SkipLog()
        for e in batch:
            ft = read_text_file(e, skips, self.settings.chunking.max_file_bytes)
            old = manifest[e.rel_path]
            if ft is None:
                continue
            notes[e.rel_path] = ft.notes
            if not force and old is not None and old.sha256 == ft.sha256 and old.status == STATUS_INDEXED:
                self.state.put_file(FileRecord(e.rel_path, e.size, e.mtime_ns, ft.sha256, old.language, old.status,
                                               old.n_nodes, old.n_leaves))  # touched, not changed
                self.summary.unchanged += 1
                continue
            docs.append(make_document(ft))
            stats[e.rel_path] = e
        dependents: set[str] = set()
        pipeline = self.pipeline
        old_points: set[str] = set()
        for e in batch:
            if manifest[e.rel_path] is not None and (e.rel_path in stats or
                                                     any(p == e.rel_path for p, _, _ in skips.items)):
                dependents |= self.state.dependents(e.rel_path)
                old_points.update(self._forget(e.rel_path, keep_points=e.rel_path in stats))
        # Committed before any vector is written: a kill from here on is undone by recover().
        self.state.mark_dirty(dependents - set(stats))
        self.state.add_inflight(stats)
        self.state.commit()
        self._filter.skips.counts.clear()
        self._filter.skips.items.clear()
        self._embedder.set_enabled(self.dense)
        # Counted before any point is written: a search that meets a file's new points while its manifest
        # row is not written yet calls it stale, so nothing slow may run between the two.
        line_tokens = {d.id_: self._count_lines(d.text) for d in docs}
        nodes = pipeline.run(documents=docs) if docs else []
        if not self.dense:
            sparse = [n for n in nodes if n.metadata.get(IS_LEAF_KEY, True) and not n.metadata.get(DUPLICATE_OF_KEY)]
            if sparse:
                self._store.add(sparse)
            written = {n.node_id for n in sparse}
        else:
            written = {n.node_id for n in nodes if n.embedding is not None}  # what the pipeline upserted
        self._drop_stale_points(old_points, written)
        skips.merge(self._filter.skips)
        by_file: dict[str, list] = {}
        for n in nodes:
            by_file.setdefault(n.ref_doc_id, []).append(n)
        if nodes:
            # The docstore keeps the hierarchy and texts; vectors live in the store and the embedding cache.
            # As JSON a 384-float vector is ~8 KB, two thirds of a leaf's row.
            self._docstore.add_documents(
                [n.model_copy(update={"embedding": None}) if n.embedding is not None else n for n in nodes],
                allow_update=True)
        for path, e in stats.items():
            file_nodes = by_file.get(path, [])
            leaves = [n for n in file_nodes if n.metadata.get(IS_LEAF_KEY, True)]
            doc_lang = next((d.metadata.get("language") for d in docs if d.id_ == path), None)
            status = STATUS_INDEXED if self.dense else STATUS_SPARSE
            if not file_nodes:
                reason = next((r for p, r, _ in skips.items if p == path), None)
                status = reason or "no-chunks"
            doc = next((d for d in docs if d.id_ == path), None)
            sha = doc.metadata["content_hash"] if doc is not None else None
            self.state.put_file(FileRecord(path, e.size, e.mtime_ns, sha, doc_lang, status, len(file_nodes),
                                           len(leaves)))
            if status in SEARCHABLE and line_tokens.get(path) is not None:
                self.state.put_line_tokens(path, sha, LINE_TOKENS_ENCODING, line_tokens[path])
            file_notes = notes.get(path, ()) if status in SEARCHABLE else ()
            self.state.put_notes(path, file_notes)
            for note, detail in file_notes:
                self.summary.notes[note] = self.summary.notes.get(note, 0) + 1
                self.summary.note_items.append((path, note, detail))
            if status in SEARCHABLE:
                self.summary.indexed += 1
                self.summary.chunks += len(leaves)
                self.summary.nodes += len(file_nodes)
                self.summary.duplicates += sum(1 for n in leaves if n.metadata.get("duplicate_of"))
        # Files skipped before the pipeline (binary, encoding, ...) are remembered so they are not re-read.
        # One that vanished is not: it has no row to keep (its old chunks, if any, were forgotten above).
        for path, reason, _ in skips.items:
            e = next((x for x in batch if x.rel_path == path), None)
            if e is not None and path not in stats and reason != "vanished":
                self.state.put_file(FileRecord(path, e.size, e.mtime_ns, None, None, reason, 0, 0))
        self.state.clear_inflight(stats)
        self.state.commit()
        for k, v in skips.counts.items():
            self.summary.skipped[k] = self.summary.skipped.get(k, 0) + v
        self.summary.skip_items.extend(skips.items)
        return dependents

    def _count_lines(self, text: str) -> Optional[bytes]:
        """The token counts of the file's lines as search results show them (see line_tokens.py)."""
        from coderag.postprocessors.line_tokens import file_line_tokens
        from coderag.postprocessors.tokenizer import PayloadTokenizer

        if self._tokenizer is None:
            self._tokenizer = PayloadTokenizer()
        return file_line_tokens(text, self._tokenizer)

    def finish(self) -> None:
        if self._embedder is not None:
            self.summary.embedded = self._embedder.stats["embedded"]
            self.summary.cached = self._embedder.stats["cached"]
            if self._embedder.stats["embedded"]:
                self._embedder.release_memory()  # before the store optimizes (CodeIndex.optimize): peaks do not add up
            if self._embedder.stats["embedded"] and getattr(self._embedder.model, "onnx_file", None) is None:
                # torch embedded the chunks, so it is loaded anyway: export the ONNX twin that makes later
                # query processes start fast (an OnnxEmbedding has its file: nothing to export)
                from coderag.nodes.onnx_embedding import export_onnx

                export_onnx(self.settings.model_dir())
        if self._store is not None and self._owns_store and hasattr(self._store, "close"):
            self._store.close()


def _batches(entries: list[FileEntry]):
    batch, size = [], 0
    for e in entries:
        batch.append(e)
        size += e.size
        if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def sync(run: Ingestion, changes: ChangeSet, fp: str, progress: Optional[Progress] = None,
         force: bool = False) -> None:
    """Apply a ChangeSet: forget removed files, index new and modified ones batch by batch.

    With `force`, candidates are re-indexed even when their content hash is unchanged."""
    check_fingerprint(run.state, fp, run.root)
    if not (changes.candidates or changes.removed):
        return
    state = run.state
    run.recover()
    if state.get_meta("fingerprint") is None:
        run.empty_store()  # a new index: what its store holds already belongs to no index (see empty_store)
        state.set_meta(STORE_FORMAT_KEY, STORE_FORMAT)  # a new index: written in the current format
        state.set_meta(FILE_CLASSES_KEY, FILE_CLASSES_VERSION)  # ... and under the current file-class rules
        state.set_meta(SKIPS_RECHECKED_KEY, FILE_CLASSES_VERSION)
        state.set_meta(READING_KEY, READING)  # ... and read and split as files are now
        stamp_model(state, fp)  # ... and its model's files: the model moved is still the same (fingerprint.py)
    state.set_meta("fingerprint", fp)
    extra = run.remove(changes.removed) if changes.removed else set()
    total = len(changes.candidates)
    done = 0
    if progress:
        progress("files", 0, total)
    queue = list(changes.candidates)
    forced: set[str] = set()
    by_path = {e.rel_path: e for e in changes.entries}
    while queue or extra:  # dependents of removed files need a pass even when nothing else changed
        for batch in _batches(queue):
            extra |= run.process(batch, force=force or bool(forced & {e.rel_path for e in batch}))
            done += len(batch)
            if progress:
                progress("files", done, total)
        # Files whose duplicates pointed at a changed file are re-indexed from scratch.
        queue = [by_path[p] for p in sorted(extra - forced) if p in by_path]
        forced |= {e.rel_path for e in queue}
        extra = set()
    run.finish()
    state.set_meta("last_update", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    state.commit()
