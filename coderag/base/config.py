"""Settings: qdrant.yaml and flags parsed once into one pydantic model."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coderag.base.errors import ConfigError

CONFIG_ENV = "CODERAG_CONFIG"
CONFIG_FILE_NAME = "qdrant.yaml"


class StoreMode(str, Enum):
    Embedded = "embedded"
    Server = "server"


class Quantization(str, Enum):
    Off = "none"
    Int8 = "int8"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class StoreSettings(_Section):
    mode: StoreMode = Field(default=StoreMode.Embedded, description="embedded: Qdrant Edge in this process; server: a Qdrant server or cluster at `url`.")
    path: Optional[str] = Field(default=None, description="Embedded shard folder, of one repository (another is refused; a repository moved with its .coderag takes it with it); default <root>/.coderag/shard.")
    url: Optional[str] = Field(default=None, description="Qdrant server URL, e.g. http://localhost:6333 (server mode).")
    api_key_env: str = Field(default="QDRANT_API_KEY", description="Name of the environment variable holding the API key (never the key itself).")
    collection_prefix: str = Field(default="coderag", pattern=r"^[A-Za-z0-9_-]+$", description="Server collections are named <prefix>_<root name>_<hash of root path>.")
    on_disk: bool = Field(default=False, description="Keep dense vectors on disk (mmap) instead of RAM.")
    hnsw_m: int = Field(default=16, ge=4, le=128, description="HNSW edges per node.")
    hnsw_ef_construct: int = Field(default=100, ge=8, le=1000, description="HNSW build-time candidate list.")
    quantization: Quantization = Field(default=Quantization.Off, description="none or int8 (scalar quantization of dense vectors).")
    hnsw_min_chunks: int = Field(default=5000, ge=1, description="The HNSW graph is built after a `coderag index` run (or a payload upgrade) that wrote at least this many chunks; below, dense queries scan every vector (5 ms at 95k).")


class EmbeddingSettings(_Section):
    model_path: Optional[str] = Field(default=None, description="Local sentence-transformers model folder; default: the bundled all-MiniLM-L6-v2.")
    batch_size: int = Field(default=16, ge=1, le=1024, description="Chunks per embedding batch (ONNX Runtime keeps the activation memory of the largest).")
    window_tokens: int = Field(default=256, ge=16, le=8192, description="The model's input window, special tokens included.")
    threads: int = Field(default=0, ge=0, le=256, description="Threads that embed chunks when indexing (ONNX Runtime, or torch); 0 = all cores.")
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="Where chunks are embedded: auto = a CUDA GPU when torch sees one, else the CPU through the model's ONNX twin (queries always run on the CPU).")


class ChunkingSettings(_Section):
    max_tokens: int = Field(default=200, ge=16, description="Most model tokens of source text in one leaf chunk; the breadcrumb gets the rest of the window.")
    min_tokens: int = Field(default=48, ge=0, description="Consecutive small siblings (imports, fields, accessors, short functions) are merged into chunks of at least this many tokens (at most max_tokens); 0 = never merge.")
    overlap_lines: int = Field(default=2, ge=0, le=50, description="Lines shared by neighbouring windows of a long body.")
    signatures_only_bytes: int = Field(default=1024 * 1024, gt=0, description="Larger files keep only their signatures.")
    signatures_only_lines: int = Field(default=20_000, gt=0, description="Files with more lines keep only their signatures.")
    max_file_bytes: int = Field(default=8 * 1024 * 1024, gt=0, description="Larger files are skipped.")
    max_line_chars: int = Field(default=5_000, gt=0, description="Files with a longer line are skipped as minified or data.")
    dedup_max_copies: int = Field(default=2, ge=1, description="Identical chunks beyond this many copies are indexed once; the other places are recorded.")

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> "ChunkingSettings":
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be at most max_tokens ({self.max_tokens})")
        return self


class RetrievalSettings(_Section):
    query_precision: Literal["fp32", "int8"] = Field(default="int8", description="Weights of the query embedder (ONNX): int8 takes about half the time of fp32 on one core, same recall on the eval.")
    embed_process: bool = Field(default=True, description="Resident processes (coderag mcp/serve, CodeIndex.warm_up) embed queries in a helper process, overlapped with the BM25 leg (~100 MB more memory).")
    dense_top_k: int = Field(default=25, ge=1, le=1000, description="Candidates from the dense leg.")
    report_dense_top_k: int = Field(default=40, ge=1, le=1000, description="Candidates from the dense leg for a long query (a bug report): its embedding is of a whole description, so the code it means ranks deeper than a question's does.")
    source_quota_depth: int = Field(default=50, ge=0, le=1000, description="How deep the dense and BM25 legs of a short query look for source files when docs, tests and examples fill their first candidates, as they do in a whole repository: each leg keeps its first candidates and adds source ones from below, to this depth, until it holds as many source candidates as its depth. 0 = off. Not for long reports, nor for a query that asks for tests or docs.")
    sparse_top_k: int = Field(default=30, ge=1, le=1000, description="Candidates from the BM25 leg.")
    query_adapter: bool = Field(default=False, description="Map each query's embedding through the linear adapter shipped in the package (pipelines/query_adapter.py, learned from mined commit messages by `coderag train-adapter`) before the dense leg looks up its nearest chunks. The index is not rebuilt when it changes. It finds the code a change description names more often and natural-language questions of corpora it never saw less often (eval/RESULTS.md), so it is off by default.")
    ranker: Literal["blend", "learned", "rules"] = Field(default="blend", description="How candidates are ordered: `rules`, the hand-set fusion below (fusion, weights and boosts); `learned`, the LightGBM ranker shipped in the package (pipelines/ranker.py, trained on commit messages, test descriptions, docstrings and names mined from the histories of public repositories, by `coderag train-ranker`); `blend` (the default), the rules' scores times the learned ranker's probabilities to the power learned_share. On repositories neither saw, the learned ranker wins on commit messages and test descriptions and loses on natural-language questions; the blend keeps most of both (eval/RESULTS.md).")
    learned_share: float = Field(default=0.25, ge=0.0, le=1.0, description="ranker=blend: the learned ranker's share of the order, a geometric weight (0 = the rules' order, 1 = the learned ranker's).")
    fusion: Literal["scores", "rrf"] = Field(default="scores", description="How a question's candidates are combined: `scores`, each leg's score over its best score, raised to score_power, weighted (score_dense_weight, sparse_weight) and summed; `rrf`, weighted reciprocal rank fusion (k=60, dense_weight). Long reports and queries about one name always use RRF.")
    score_power: float = Field(default=3.0, gt=0.0, le=16.0, description="Score fusion: the power of each leg's score over its best score (higher: a leg's clear first counts for more).")
    score_dense_weight: float = Field(default=1.75, ge=0.0, description="Score fusion: weight of the dense leg.")
    dense_weight: float = Field(default=1.25, ge=0.0, description="RRF weight of the dense leg (long reports, queries about one name, and questions with fusion=rrf).")
    sparse_weight: float = Field(default=1.0, ge=0.0, description="Weight of the BM25 leg, in both fusions.")
    fusion_top_k: int = Field(default=40, ge=1, le=1000, description="Fused candidates passed on to merging and packing.")
    merge_ratio: float = Field(default=0.3, ge=0.0, le=1.0, description="Auto-merge: share of a parent's children that must hit.")
    max_parent_lines: int = Field(default=120, ge=1, description="Auto-merge never returns a parent longer than this.")
    merge_min_score_ratio: float = Field(default=0.5, ge=0.0, le=1.0, description="Children below this x best score do not count for merging.")
    gap_lines: int = Field(default=3, ge=0, le=100, description="Chunks of one file this close are merged into one block.")
    merge_max_lines: int = Field(default=120, ge=1, description="...but not into a block longer than this (overlapping chunks always merge).")
    cut_ratio: float = Field(default=0.15, ge=0.0, le=1.0, description="Dynamic cut for questions fused on scores: drop results below this x best score (0 = off).")
    rrf_cut_ratio: float = Field(default=0.3, ge=0.0, le=1.0, description="The dynamic cut for queries fused on ranks: a query about one name, and every question with fusion=rrf (RRF's scores are closer together).")
    keyword_boost: float = Field(default=0.5, ge=0.0, description="Score boost for results containing the keywords.")
    phrase_boost: float = Field(default=1.5, ge=0.0, description="Score boost for results that contain a sentence-like query word for word (a docstring or an error message quoted).")
    tests_docs_weight: float = Field(default=0.6, ge=0.0, le=2.0, description="Score factor for tests, docs and plain text (1 = no preference for source code).")
    freshness_max_files: int = Field(default=8, ge=0, description="Changed files re-indexed before answering; more are marked stale.")
    read_queries: bool = Field(default=True, description="Read long queries (bug reports) before searching: each leg gets the part it is good at (coderag/queries/reader.py).")
    named_files_weight: float = Field(default=1.0, ge=0.0, description="Fusion weight of the leg that searches the files a long query names (traceback frames, paths).")
    report_noise_weight: float = Field(default=0.3, ge=0.0, le=2.0, description="Score factor, for every query, of issue templates, changelogs and release notes: a description of a change or a bug matches them word for word, and they are never where it is made. A question about what changed in a release keeps them at 1.")
    unnamed_window_weight: float = Field(default=0.7, ge=0.0, le=2.0, description="Score factor, for questions (not long reports), of line windows that define no symbol: pieces of data tables, licenses, PKG-INFO, a header's declarations.")
    declaration_weight: float = Field(default=0.5, ge=0.0, le=2.0, description="Score factor, for questions (not long reports or one-name queries), of code that only declares (interfaces, type aliases, enums, structs, the signatures of stub files) and declares no name the question spells.")
    leg_agreement: bool = Field(default=True, description="When the dense and the BM25 leg put the same file first, the answer starts in that file (its best chunk first).")
    report_file_evidence: float = Field(default=0.0, ge=0.0, le=4.0, description="For long queries: share of a file's next best chunk scores added to each of its chunks (a file hit several times is more likely right).")
    report_cut_ratio: float = Field(default=0.0, ge=0.0, le=1.0, description="The dynamic cut for long queries (bug reports): 0 fills the budget, since a report's boosted best chunk would otherwise cut the rest of the right file.")
    report_non_code_weight: float = Field(default=0.5, ge=0.0, le=2.0, description="Score factor, for long queries, of docs, config and data files (a report is fixed in code).")


class ServiceSettings(_Section):
    idle_exit_s: float = Field(default=600.0, ge=0.0, description="A background owner that a `coderag search` starts (`coderag serve --idle-exit`) exits after this many seconds without a request and with no indexing under way; 0 = never.")


class Settings(_Section):
    """Everything configurable, as read from qdrant.yaml."""

    store: StoreSettings = Field(default_factory=StoreSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)

    def model_dir(self) -> Path:
        """The embedding model folder: configured, or the default one (base/model_files.py: the bundled
        all-MiniLM-L6-v2, with the weights of our fine-tune put in where the package ships them)."""
        if self.embedding.model_path:
            return Path(self.embedding.model_path).expanduser()
        from coderag.base.model_files import shipped_model_dir

        return shipped_model_dir()


def render_errors(exc: ValidationError, source: str) -> str:
    lines = [f"Invalid settings in {source}:"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {got!r})"
        hint = ""
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:  # a section's name mistyped
            near = _near_section(str(err["loc"][0]), set(Settings.model_fields))
            hint = f"; did you mean {near!r}?" if near else f"; the sections are {', '.join(Settings.model_fields)}"
        lines.append(f"  {key}: {err['msg']}{got_s}{hint}")
    return "\n".join(lines)


# Qdrant's own configuration file is also called qdrant.yaml, and `service` is one of its sections too. Its
# top-level keys (config/config.yaml of the Qdrant server) tell such a file from ours with a section mistyped.
_OUR_SECTIONS_ALONE = frozenset(Settings.model_fields) - {"service"}
_QDRANT_SERVER_KEYS = frozenset({"log_level", "logger", "storage", "service", "cluster", "telemetry_disabled", "tls",
                                 "debugger", "gpu", "inference", "audit"})


def _near_section(key: str, sections: set[str]) -> Optional[str]:
    import difflib

    near = difflib.get_close_matches(key, sorted(sections), n=1, cutoff=0.8)
    return near[0] if near else None


def _is_ours(data: Any) -> bool:
    """Whether a <root>/qdrant.yaml is coderag's (else it is another tool's, Qdrant's own, and left alone): its
    sections are all ours, or one is a section only coderag has, or, with no key of Qdrant's own file, one nearly
    is (a typo). Such a file is then checked whole, so a mistyped section is an error that names it, where the
    whole file was silently left unread before."""
    if not isinstance(data, dict) or not data:
        return False
    keys = {str(k) for k in data}
    if keys <= set(Settings.model_fields) or keys & _OUR_SECTIONS_ALONE:
        return True
    return not keys & _QDRANT_SERVER_KEYS and any(_near_section(k, set(_OUR_SECTIONS_ALONE)) for k in keys)


def load_settings(root: str | os.PathLike | None = None, config_path: str | os.PathLike | None = None) -> Settings:
    """Settings from --config, then $CODERAG_CONFIG, then <root>/qdrant.yaml if it is a coderag file, else defaults."""
    import yaml  # only when a file is read

    explicit = config_path or os.environ.get(CONFIG_ENV)
    candidates = [Path(explicit)] if explicit else ([Path(root) / CONFIG_FILE_NAME] if root else [])
    for path in candidates:
        if not path.is_file():
            if explicit:
                raise ConfigError(f"Config file {path} does not exist. Fix --config or ${CONFIG_ENV}.")
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
        if not explicit and not _is_ours(data):
            continue  # someone else's qdrant.yaml
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must be a mapping with sections store/embedding/chunking/retrieval/service, not {type(data).__name__}.")
        try:
            return _anchored(Settings.model_validate(data), path.resolve().parent)
        except ValidationError as exc:
            raise ConfigError(render_errors(exc, str(path))) from exc
    return Settings()


def _anchored(settings: Settings, folder: Path) -> Settings:
    """`store.path` and `embedding.model_path` of a settings file in `folder`, made absolute (`~` expanded, a
    relative path read from the file's folder). Read from the working folder instead, they named another shard
    (an empty one) or no model at all when a command ran in a subfolder, and the model's path, which the
    index's fingerprint holds, differed between two shells, so one of them built the index again."""
    def absolute(value: Optional[str]) -> Optional[str]:
        return str(folder / Path(value).expanduser()) if value else value

    return settings.model_copy(update={
        "store": settings.store.model_copy(update={"path": absolute(settings.store.path)}),
        "embedding": settings.embedding.model_copy(update={"model_path": absolute(settings.embedding.model_path)})})
