"""The LlamaIndex parts of an open index (pipelines/code_index.py CodeIndex), each built on first use: its vector
store and docstore, the query and document models, the search engine and its retrievers, the ingestion pipeline,
and a query engine for an LLM you bring. Kept apart from CodeIndex's opening, updating and searching, which
change for other reasons than how the LlamaIndex components are put together.
"""

from __future__ import annotations

from typing import Any

from coderag.base.config import StoreMode


class IndexParts:
    """CodeIndex's LlamaIndex components. It reads the index's root, folder, settings and state, and keeps each
    part in the attribute CodeIndex.__init__ sets to None (`_store`, `_docstore`, `_embed_model`, ...)."""

    @property
    def vector_store(self):
        """The vector store: EdgeVectorStore (embedded) or QdrantVectorStore (server)."""
        if self._store is None:
            from coderag.pipelines.stores import open_vector_store

            self._store = open_vector_store(self.settings, self.root, self.folder)
        return self._store

    @property
    def docstore(self):
        """KVDocumentStore with every node of the hierarchy (parents too), for auto-merging."""
        if self._docstore is None:
            from coderag.pipelines.stores import open_docstore

            self._docstore = open_docstore(self.state)
        return self._docstore

    @property
    def storage_context(self):
        """StorageContext over `docstore` and `vector_store` (what the auto-merging retriever reads parents from)."""
        if self._storage_context is None:
            from llama_index.core.storage import StorageContext

            self._storage_context = StorageContext.from_defaults(docstore=self.docstore,
                                                                 vector_store=self.vector_store)
        return self._storage_context

    @property
    def embed_model(self):
        """The index's model for queries, one thread (latency under load): its ONNX twin (0.2 s to load instead
        of ~7 s of torch imports, exported first when the cache has none), else HuggingFaceEmbedding."""
        if self._embed_model is None:
            self._embed_model = self._load_model(self.settings.retrieval.query_precision)
        return self._embed_model

    def _load_model(self, precision: str):
        """The ONNX twin at `precision`, else (a model the twin cannot represent, a failed export)
        HuggingFaceEmbedding; one thread."""
        from coderag.nodes.onnx_embedding import load_query_model

        model_dir = self.settings.model_dir()
        model = load_query_model(model_dir, self.settings.embedding.window_tokens, precision)
        if model is None:
            from coderag.nodes.embedding import load_embed_model

            model = load_embed_model(model_dir, self.settings.embedding.batch_size, threads=1)
        return model

    @property
    def document_embed_model(self):
        """The model for chunks this process embeds (refresh, the owner's watcher and dense pass): always full
        precision on every core, whatever `retrieval.query_precision` says, so an index holds the same vectors
        however its files were indexed (and the chunk-hash cache only fp32 ones): the ONNX fp32 twin, or torch
        on a CUDA GPU (nodes/embedding.py load_document_model)."""
        if self._doc_embed_model is None:
            from coderag.nodes.embedding import load_document_model

            e = self.settings.embedding
            self._doc_embed_model = load_document_model(self.settings.model_dir(), e.batch_size, e.threads, e.device,
                                                        e.window_tokens)
        return self._doc_embed_model

    @property
    def supports_text_filter(self) -> bool:
        return self.settings.store.mode == StoreMode.Embedded

    @property
    def engine(self):
        """The query pipeline (pipelines/query.py SearchEngine), built once and used by every search."""
        if self._engine is None:
            from coderag.pipelines.query import SearchEngine
            from coderag.pipelines.retriever_graph import RetrieverGraph
            from coderag.pipelines.stores import ParentReader

            graph = RetrieverGraph(self.settings, self.vector_store, lambda: self.embed_model, self.storage_context,
                                   parent_of=ParentReader(self.state), paths=self.indexed_paths,
                                   text_filter=self.supports_text_filter)
            self._engine = SearchEngine(self.root, self.settings, graph, self.tokenizer, self.checker,
                                        self.other_locations_of)
        return self._engine

    @property
    def retriever(self):
        """The retriever graph: the fusion of dense, BM25 and the files a report names under bounded auto-merging."""
        return self.engine.graph.merging

    @property
    def dense_retriever(self):
        """The dense leg alone."""
        from coderag.pipelines.search_request import DENSE

        return self.engine.graph.legs[DENSE]

    @property
    def bm25_retriever(self):
        """BM25 over the store's sparse vectors with the code-aware tokenizer."""
        from coderag.pipelines.search_request import BM25

        return self.engine.graph.legs[BM25]

    @property
    def tokenizer(self):
        """PayloadTokenizer: counts payload tokens (cl100k) and keeps what it counted, with the stored line counts."""
        if self._tokenizer is None:
            from coderag.postprocessors.tokenizer import PayloadTokenizer

            self._tokenizer = PayloadTokenizer(self.state.line_tokens_of)
        return self._tokenizer

    @property
    def ingestion_pipeline(self):
        """The IngestionPipeline (filter, splitter, path injection, dedup, cached embedding -> store)."""
        return self._ingestion().pipeline

    def as_query_engine(self, llm: Any = None, **kwargs: Any):
        """A RetrieverQueryEngine over `retriever` that writes answers with `llm`, which you bring (coderag
        itself needs none). Without one, ValueError saying how: LlamaIndex would otherwise reach for its
        global default, OpenAI, and fail on a missing package or key (README: "Python API" shows a local LLM).

        Examples:
            >>> from llama_index.llms.ollama import Ollama                     # doctest: +SKIP
            >>> engine = index.as_query_engine(llm=Ollama(model="qwen2.5-coder:7b", request_timeout=120))  # doctest: +SKIP
            >>> print(engine.query("where are failed logins retried?"))        # doctest: +SKIP
        """
        if llm is None:
            from llama_index.core import Settings as LlamaSettings

            llm = getattr(LlamaSettings, "_llm", None)  # one the user set (Settings.llm = ...), never the OpenAI default
        if llm is None:
            raise ValueError(
                "as_query_engine needs an LLM to write its answers (coderag's own search needs none): pass one, "
                'e.g. a local model served by Ollama: pip install llama-index-llms-ollama, then llm=Ollama(model='
                '"qwen2.5-coder:7b", request_timeout=120) from llama_index.llms.ollama. Without an LLM, use '
                "index.search(...) or index.retriever.retrieve(...).")
        from llama_index.core.query_engine import RetrieverQueryEngine

        return RetrieverQueryEngine.from_args(self.retriever, llm=llm, **kwargs)
