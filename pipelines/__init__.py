"""Wiring: the ingestion pipeline, the query pipeline and the CodeIndex facade."""
