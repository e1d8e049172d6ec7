"""Ingestion components: repository reader and the TransformComponents of the pipeline."""
