"""Embedding caches (bounded, LRU) and the remote /v1/embeddings embedder against a real loopback server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from observer.analyse.embed import (
    DiskCache,
    EmbeddingError,
    HashingEmbedder,
    MemoryCache,
    RemoteEmbedder,
    make_cache,
    normalise_rows,
    text_key,
)


def _vec(i: int, d: int = 4) -> np.ndarray:
    v = np.zeros(d, dtype=np.float32)
    v[i % d] = float(i)
    return v


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_cache_is_bounded_and_evicts_least_recently_used(kind: str, tmp_path: Path) -> None:
    cache = MemoryCache(3) if kind == "memory" else DiskCache(tmp_path / "c.sqlite", 3)
    keys = [bytes([i]) * 32 for i in range(5)]
    cache.put_many({keys[0]: _vec(0), keys[1]: _vec(1), keys[2]: _vec(2)})
    assert keys[0] in cache.get_many([keys[0]])  # touch 0: now 1 is the least recently used
    cache.put_many({keys[3]: _vec(3)})
    assert len(cache) == 3
    got = cache.get_many(keys)
    assert set(got) == {keys[0], keys[2], keys[3]}
    np.testing.assert_array_equal(got[keys[3]], _vec(3))
    for i in range(100):  # a flood never grows it past the bound
        cache.put_many({bytes([i]) * 31 + b"x": _vec(i)})
    assert len(cache) == 3
    cache.close()


def test_disk_cache_persists_across_instances(tmp_path: Path) -> None:
    c1 = make_cache("m", cache_dir=tmp_path, max_entries=10)
    key = text_key("m", "hello")
    c1.put_many({key: _vec(1)})
    c1.close()
    c2 = make_cache("m", cache_dir=tmp_path, max_entries=10)
    np.testing.assert_array_equal(c2.get_many([key])[key], _vec(1))
    other = make_cache("another model", cache_dir=tmp_path, max_entries=10)
    assert other.get_many([key]) == {}  # one file per model id
    c2.close()
    other.close()


def test_text_key_depends_on_model_and_text() -> None:
    assert text_key("a", "x") != text_key("b", "x")
    assert text_key("a", "x") != text_key("a", "y")
    assert text_key("a", "x" * 10_000) == text_key("a", "x" * 9_000)  # clipped to MAX_TEXT_CHARS


def test_embedder_serves_repeats_from_cache_and_keeps_order() -> None:
    emb = HashingEmbedder(dim=64, max_cache_entries=5)
    out = emb.embed(["a b", "c d", "a b"])
    assert out.shape == (3, 64) and out.dtype == np.float32
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    assert emb.encoded == 2
    emb.embed(["c d", "a b"])
    assert emb.encoded == 2 and emb.hits == 3 and emb.misses == 2
    emb.embed([f"text {i}" for i in range(50)])
    assert len(emb.cache) == 5  # memory stays bounded however many texts pass through


def test_embed_rejects_bad_input() -> None:
    emb = HashingEmbedder(dim=8)
    with pytest.raises(TypeError, match="sequence of texts"):
        emb.embed("one string")
    with pytest.raises(TypeError, match="needs strings"):
        emb.embed(["ok", 3])  # type: ignore[list-item]
    assert emb.embed([]).shape == (0, 8)


def test_normalise_rows_keeps_zero_rows() -> None:
    out = normalise_rows([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


class _Embeddings(BaseHTTPRequestHandler):
    """A scripted OpenAI-compatible /v1/embeddings server (deterministic vectors, configurable faults)."""

    mode = "ok"
    context = 64  # "tokens" are characters here
    calls: ClassVar[list[list[str]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"]
        type(self).calls.append(list(texts))
        if self.path != "/v1/embeddings" or type(self).mode == "500":
            self._reply(500, {"error": "boom"})
            return
        cut = body.get("truncate_prompt_tokens")
        if cut is None and any(len(t) > self.context for t in texts):  # as vLLM answers a text over its context
            self._reply(400, {"error": {"message": f"This model's maximum context length is {self.context} tokens."}})
            return
        if cut is not None:
            texts = [t[:self.context if cut == -1 else cut] for t in texts]
        if type(self).mode == "short":
            texts = texts[:-1]
        data = [{"index": i, "object": "embedding",
                 "embedding": [float(len(t)), 1.0, float(sum(map(ord, t)) % 7)]} for i, t in enumerate(texts)]
        data.reverse()  # the index field, not the order, says which input a vector belongs to
        self._reply(200, {"object": "list", "data": data, "model": body["model"]})

    def _reply(self, code: int, obj: Any) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture()
def server() -> Iterator[str]:
    _Embeddings.mode = "ok"
    _Embeddings.calls = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_remote_embedder_batches_orders_and_caches(server: str) -> None:
    emb = RemoteEmbedder(base_url=server, model="e5", dim=3, batch_size=2, timeout_seconds=5)
    out = emb.embed(["a", "bbb", "cc", "a"])
    assert out.shape == (4, 3)
    expected = normalise_rows([[1, 1, 97 % 7], [3, 1, (98 * 3) % 7], [2, 1, (99 * 2) % 7], [1, 1, 97 % 7]])
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert _Embeddings.calls == [["a", "cc"], ["bbb"]]  # by length, 2 per request, the repeated "a" not re-sent
    emb.embed(["bbb"])
    assert len(_Embeddings.calls) == 2
    emb.close()


def test_remote_embedder_probes_dimension_once(server: str) -> None:
    emb = RemoteEmbedder(base_url=server, model="e5")
    assert emb.dim == 3 and emb.dim == 3
    assert len(_Embeddings.calls) == 1
    emb.close()


@pytest.mark.parametrize(("mode", "message"), [("500", "HTTP 500"), ("short", "returned 1 embeddings")])
def test_remote_embedder_errors_are_precise(server: str, mode: str, message: str) -> None:
    _Embeddings.mode = mode
    emb = RemoteEmbedder(base_url=server, model="e5", dim=3)
    with pytest.raises(EmbeddingError, match=message):
        emb.embed(["x", "y"])
    emb.close()


def test_a_text_over_the_embedders_context_fails_with_a_hint_or_is_cut_when_configured(server: str) -> None:
    """Production prompts outgrow a small embedding model's context: vLLM refuses the whole batch (400), and
    the error says which setting cuts them; with truncate_tokens the server cuts them, as the local model does,
    and the cut is part of the embedder's identity (its cache and baselines)."""
    long = "x" * 100
    plain = RemoteEmbedder(base_url=server, model="e5", dim=3)
    with pytest.raises(EmbeddingError, match=r"drift\.embedder\.truncate_tokens"):
        plain.embed([long])
    cut = RemoteEmbedder(base_url=server, model="e5", dim=3, truncate_tokens=-1)
    np.testing.assert_allclose(cut.embed([long]), cut.embed(["x" * 64]))
    assert cut.revision != plain.revision
    plain.close()
    cut.close()


def test_remote_embedder_unreachable() -> None:
    from tests.support.prom import free_port

    emb = RemoteEmbedder(base_url=f"http://127.0.0.1:{free_port()}/v1", model="e5", dim=3, timeout_seconds=2)
    with pytest.raises(EmbeddingError, match="could not embed 1 texts"):
        emb.embed(["x"])
    emb.close()


def test_importing_embed_does_not_import_torch() -> None:
    code = ("import sys, observer.analyse.embed, observer.wiring.root, observer.cli.main; "
            "print('torch' in sys.modules or 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
