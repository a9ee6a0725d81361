"""Pinned baselines: content hash, tamper and mismatch refusal, one active per model, logged promotion."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from observer.analyse.drift import baseline as bl
from observer.analyse.embed import HashingEmbedder
from observer.errors import BaselineError
from observer.store.base import SampleRecord, StoredSample
from observer.store.sqlite import SqliteStore


def _store(tmp_path: Path, n: int = 60, version: str = "stable") -> SqliteStore:
    store = SqliteStore(tmp_path / "samples.db")
    store.add([SampleRecord(version=version, prompt=f"question {i} about topic {i % 7}",
                            output=f"answer {i} with detail {i % 5}", ts=1000.0 + i, model="llama",
                            finish_reason="stop" if i % 10 else "length", prompt_tokens=20 + i % 9,
                            output_tokens=50 + i % 13, latency_s=0.5 + (i % 4) / 10) for i in range(n)])
    return store


def _pin(samples: list[StoredSample], emb: HashingEmbedder, **kw: object) -> bl.Baseline:
    args: dict = dict(model="llama", source_version="stable", since=1000.0, until=2000.0, created_by="test",
                      created_at=5000.0, max_samples=1000, slice_seconds=1.0, min_units=1)
    args.update(kw)
    return bl.build(samples, emb, **args)


def test_pin_save_load_roundtrip(tmp_path: Path) -> None:
    store = _store(tmp_path)
    emb = HashingEmbedder(dim=32)
    samples = store.samples("stable", since=1000, until=2000)
    b = _pin(samples, emb)
    repo = bl.BaselineRepo(tmp_path / "baselines")
    digest = repo.save(b)
    assert digest == b.hash and len(digest) == 64
    loaded = repo.load(digest[:10])
    assert loaded.hash == digest and loaded.meta == b.meta
    assert loaded.meta.n == 60 and loaded.meta.dim == 32 and loaded.meta.embedder_model == "hashing-32"
    np.testing.assert_array_equal(loaded.embeddings["prompts"], b.embeddings["prompts"])
    assert loaded.features["finish_reason"].tolist().count("length") == 6
    assert repo.save(loaded) == digest  # idempotent: same content, same name
    assert [x.hash for x in repo.all()] == [digest]


def test_hash_is_content_addressed() -> None:
    emb = HashingEmbedder(dim=16)
    s = [StoredSample(version="v", prompt=f"p{i}", output=f"o{i}", ts=float(i), id=i) for i in range(5)]
    a, b = _pin(s, emb), _pin(s, emb)
    assert a.hash == b.hash
    assert _pin(s, emb, created_by="someone else").hash != a.hash
    assert _pin(s[:4], emb).hash != a.hash


def test_subsample_is_bounded_and_seeded(tmp_path: Path) -> None:
    samples = _store(tmp_path).samples("stable")
    emb = HashingEmbedder(dim=16)
    a = _pin(samples, emb, max_samples=25, seed=3)
    assert a.meta.n == 25 and a.embeddings["outputs"].shape == (25, 16) and len(a.features["refusal"]) == 25
    assert _pin(samples, emb, max_samples=25, seed=3).hash == a.hash


def test_empty_range_is_refused_with_advice(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"no stored samples for version .stable.*--since"):
        _pin([], HashingEmbedder(dim=8))


def test_tampered_file_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    repo = bl.BaselineRepo(tmp_path / "b")
    b = _pin(store.samples("stable"), HashingEmbedder(dim=16))
    repo.save(b)
    path = tmp_path / "b" / f"{b.hash}.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["emb.prompts"] = arrays["emb.prompts"].copy()
    arrays["emb.prompts"][0, 0] += 0.01  # one number nudged
    with path.open("wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(BaselineError, match="modified after it was pinned"):
        repo.load(b.hash)
    path.write_bytes(b"not a zip")
    with pytest.raises(BaselineError, match="damaged"):
        repo.load(b.hash)
    assert repo.all() == []  # listed baselines skip damaged files


def test_embedder_or_dimension_mismatch_is_refused() -> None:
    s = [StoredSample(version="v", prompt=f"p{i}", output=f"o{i}", ts=float(i)) for i in range(5)]
    b = _pin(s, HashingEmbedder(dim=16))
    bl.check_compatible(b, HashingEmbedder(dim=16))
    with pytest.raises(BaselineError, match=r"embedded with hashing-16.*configured embedder is hashing-32"):
        bl.check_compatible(b, HashingEmbedder(dim=32))
    other = HashingEmbedder(dim=16)
    other.revision = "2"
    with pytest.raises(BaselineError, match="pin a new baseline"):
        bl.check_compatible(b, other)


def test_one_active_per_model_and_promotion_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = bl.BaselineRepo(tmp_path)
    emb = HashingEmbedder(dim=8)
    s = [StoredSample(version="v", prompt=f"p{i}", output=f"o{i}", ts=float(i)) for i in range(5)]
    first, second = _pin(s, emb), _pin(s, emb, note="after fine-tune")
    other_model = _pin(s, emb, model="mistral")
    for b in (first, second, other_model):
        repo.save(b)
    assert repo.active("llama") is None  # pinning never activates by itself
    with caplog.at_level(logging.WARNING, logger="observer.drift.baseline"):
        repo.promote(first.hash, by="alice", at=10.0, reason="launch")
        repo.promote(second.hash[:8], by="bob", at=20.0)
        repo.promote(other_model.hash, by="bob", at=30.0)
    assert repo.active("llama").hash == second.hash  # type: ignore[union-attr]
    assert repo.active_map() == {"llama": second.hash, "mistral": other_model.hash}
    history = repo.history()
    assert [(h["from"], h["to"], h["by"]) for h in history[:2]] == [(None, first.hash, "alice"),
                                                                     (first.hash, second.hash, "bob")]
    assert "changed from" in caplog.text and "alice" in caplog.text


def test_resolve_errors(tmp_path: Path) -> None:
    repo = bl.BaselineRepo(tmp_path)
    with pytest.raises(BaselineError, match="not a baseline hash"):
        repo.resolve("xyz")
    with pytest.raises(BaselineError, match="no baseline"):
        repo.resolve("abcdef")
    (tmp_path / "active.json").write_text(json.dumps(["nope"]))
    with pytest.raises(BaselineError, match="must map model names"):
        repo.active_map()


def test_quality_scores_of_pinned_samples_are_kept_in_the_metadata(tmp_path: Path) -> None:
    store = _store(tmp_path, n=20)
    ids = [s.id for s in store.samples("stable")]
    for i, sid in enumerate(ids):
        store.attach_score(sid, scorer="judge", passed=i % 4 != 0, score=float(i % 5), reason="r", meta={})
    b = _pin(store.samples("stable"), HashingEmbedder(dim=8))
    q = b.meta.quality["judge"]
    assert q["scored"] == 20 and q["pass_rate"] == pytest.approx(0.75) and q["mean_score"] == pytest.approx(2.0)
    repo = bl.BaselineRepo(tmp_path / "b")
    assert repo.load(repo.save(b)).meta.quality == b.meta.quality
