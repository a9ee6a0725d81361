"""The configured embedder for drift checks: the bundled MiniLM (lazy) or a remote /v1/embeddings server."""

from __future__ import annotations

import os
from collections.abc import Mapping

from observer.analyse.embed import Embedder, RemoteEmbedder, load_local_embedder
from observer.config.drift import EmbedderSpec


def make_embedder(spec: EmbedderSpec, *, environ: Mapping[str, str] | None = None) -> Embedder:
    """Build the configured embedder (the local model's weights load on its first use)."""
    if spec.kind == "remote":
        assert spec.url is not None and spec.model is not None  # checked by EmbedderSpec
        source = os.environ if environ is None else environ
        key = source.get(spec.api_key_env) if spec.api_key_env else None
        return RemoteEmbedder(base_url=spec.url, model=spec.model, api_key=key, dim=spec.dim,
                              timeout_seconds=spec.timeout_seconds, batch_size=spec.batch_size,
                              cache_dir=spec.cache_dir, max_cache_entries=spec.max_cache_entries,
                              truncate_tokens=spec.truncate_tokens)
    return load_local_embedder(cache_dir=spec.cache_dir, max_cache_entries=spec.max_cache_entries,
                               batch_size=spec.batch_size)
