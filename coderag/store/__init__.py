"""Storage: the Qdrant Edge vector store, the SQLite docstore and the index state."""
