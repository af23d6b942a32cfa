"""Curation: ingest, clean, dedupe, embed, the test set and the training pool (no arena imports)."""

INGESTED = "ingested"
"""The prompt set ``arena ingest`` fills unless told otherwise (here, so the CLI names it without loading curation)."""
