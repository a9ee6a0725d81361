"""Embedding and scalar-feature drift of each version against a pinned baseline."""
