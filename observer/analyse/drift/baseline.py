"""Immutable, content-addressed drift baselines and the one-active-per-model registry.

A baseline file is `<dir>/<sha256>.npz` (NumPy arrays, no pickle): prompt and output embeddings, scalar
feature columns and a JSON metadata blob. Its name is the sha256 of its canonical bytes (a fixed header,
the canonical JSON of the metadata, then each array's name, dtype, shape and raw bytes in name order), so
a tampered file no longer matches its name and is refused. `active.json` maps each model to its active
baseline; every change is appended to `history.jsonl` and logged — promotion is an explicit action.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.analyse.drift.features import extract
from observer.analyse.drift.units import Units, assign
from observer.analyse.embed import Embedder
from observer.errors import BaselineError
from observer.store.base import StoredSample

log = logging.getLogger("observer.drift.baseline")

FORMAT = "observer-baseline/1"
FIELDS: tuple[str, ...] = ("prompts", "outputs")
KEY_CHARS = 32  # a stored conversation key's length (observer.sample.conversation.KEY_HEX)
HASH = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class BaselineMeta:
    """What a baseline was made from, and with which embedder."""

    model: str
    source_version: str
    since: float | None
    until: float | None
    n: int
    created_at: float
    created_by: str
    embedder_model: str
    embedder_revision: str
    dim: int
    source: str | None = None
    quality: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    note: str = ""
    units: str = ""
    """What the baseline's independent units are (conversations, slices, mixed); empty: pinned before units."""
    unit_count: int = 0
    calibration: Mapping[str, Any] = field(default_factory=dict)
    """The baseline's own A/A (observer.analyse.drift.calibrate.Calibration.as_json); empty: not measured."""


@dataclass(frozen=True)
class Baseline:
    """A pinned snapshot: embeddings per field, scalar feature columns, each sample's conversation key and time
    (its unit), metadata, and its content hash."""

    meta: BaselineMeta
    embeddings: Mapping[str, npt.NDArray[np.float32]]
    features: Mapping[str, npt.NDArray[Any]]
    hash: str = ""
    keys: npt.NDArray[np.str_] | None = None
    """Each sample's conversation key ("" without one); None: pinned before units were kept."""
    ts: npt.NDArray[np.float64] | None = None

    def short(self) -> str:
        """The first 12 hex digits of the hash (what the CLI shows)."""
        return self.hash[:12]

    def units(self, slice_seconds: float) -> Units:
        """The baseline's units: conversations, and time slices of `slice_seconds` for samples without a key.
        BaselineError for a baseline pinned before units were kept: it cannot be tested fairly."""
        if self.keys is None or self.ts is None:
            raise BaselineError(
                f"baseline {self.short()} of model {self.meta.model!r} was pinned before drift tests took "
                "conversations and time slices as their units (it keeps no sample times), and testing it sample "
                "by sample false-alarms on chat traffic: pin it again (`observer baseline pin --version "
                f"{self.meta.source_version} --promote`) over the same period")
        return assign([k or None for k in self.keys.tolist()], self.ts.tolist(), slice_seconds=slice_seconds)


def _arrays(b: Baseline) -> dict[str, npt.NDArray[Any]]:
    out: dict[str, npt.NDArray[Any]] = {f"emb.{k}": np.ascontiguousarray(v, dtype=np.float32)
                                        for k, v in b.embeddings.items()}
    for k, v in b.features.items():
        arr = np.asarray(v)
        out[f"feat.{k}"] = np.ascontiguousarray(arr.astype(np.float64 if arr.dtype.kind == "f" else "<U16"))
    if b.keys is not None and b.ts is not None:
        out["unit.key"] = np.ascontiguousarray(np.asarray(b.keys).astype(f"<U{KEY_CHARS}"))
        out["unit.ts"] = np.ascontiguousarray(np.asarray(b.ts, dtype=np.float64))
    return out


def _meta_json(meta: BaselineMeta) -> bytes:
    # json, not observer.jsonsafe: hashed and read back, so a value that is not JSON is refused, not coerced.
    return json.dumps(asdict(meta), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def content_hash(meta: BaselineMeta, arrays: Mapping[str, npt.NDArray[Any]]) -> str:
    """sha256 over the canonical bytes of a baseline (metadata JSON, then arrays in name order)."""
    h = hashlib.sha256(FORMAT.encode() + b"\n")
    blob = _meta_json(meta)
    h.update(len(blob).to_bytes(8, "big") + blob)
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        head = json.dumps([name, arr.dtype.newbyteorder("<").str, list(arr.shape)]).encode()
        h.update(len(head).to_bytes(8, "big") + head)
        h.update(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
    return h.hexdigest()


def seal(b: Baseline) -> Baseline:
    """Return `b` with its content hash filled in."""
    return replace(b, hash=content_hash(b.meta, _arrays(b)))


MIN_UNITS = 50
"""Independent units (conversations, time slices) a baseline needs: fewer cannot tell a window's drift from the
baseline's own luck."""


def build(samples: Sequence[StoredSample], embedder: Embedder, *, model: str, source_version: str,
          since: float | None, until: float | None, created_by: str, created_at: float,
          max_samples: int, slice_seconds: float, seed: int = 0, source: str | None = None, note: str = "",
          min_units: int = MIN_UNITS) -> Baseline:
    """Embed `samples` (a seeded subsample of whole units, at most `max_samples` samples) into a sealed
    baseline; BaselineError with the numbers and the fix when they hold fewer than `min_units` units."""
    if not samples:
        raise BaselineError(f"no stored samples for version {source_version!r} in the chosen time range; "
                            "widen --since/--until or check that sampling is on")
    ordered = sorted(samples, key=lambda s: (s.ts, s.id))
    units = assign([s.conversation for s in ordered], [s.ts for s in ordered], slice_seconds=slice_seconds)
    if units.count < min_units:
        span = (ordered[-1].ts - ordered[0].ts) / 3600.0
        more = (f"{min_units - units.count} more conversations" if units.kind == "conversations" else
                f"about {(min_units - units.count) * slice_seconds / 3600.0:.1f} more hours of traffic (time "
                f"slices of {slice_seconds:g} s: samples carry no conversation key)")
        raise BaselineError(f"{len(ordered)} samples of {source_version!r} over {span:.1f} h hold "
                            f"{units.describe()}; a baseline needs {min_units} independent units: pin over a "
                            f"longer period ({more})")
    keep = _whole_units(units, max_samples, seed)
    chosen = [s for s, k in zip(ordered, keep, strict=True) if k]
    embeddings = {"prompts": embedder.embed([s.prompt for s in chosen]),
                  "outputs": embedder.embed([s.output for s in chosen])}
    meta = BaselineMeta(model=model, source_version=source_version, since=since, until=until, n=len(chosen),
                        created_at=created_at, created_by=created_by, embedder_model=embedder.model_id,
                        embedder_revision=str(getattr(embedder, "revision", "")), dim=embedder.dim,
                        source=source, quality=_quality(chosen), note=note, units=units.kind,
                        unit_count=units.subset(keep).count)
    return seal(Baseline(meta=meta, embeddings=embeddings, features=extract(chosen),
                         keys=np.array([s.conversation or "" for s in chosen], dtype=f"<U{KEY_CHARS}"),
                         ts=np.array([s.ts for s in chosen], dtype=np.float64)))


def _whole_units(units: Units, most: int, seed: int) -> npt.NDArray[np.bool_]:
    """Samples of a seeded choice of whole units holding at most `most` samples (a conversation is kept with
    all its turns, or left out)."""
    sizes = units.sizes()
    keep = np.zeros(units.count, dtype=bool)
    total = 0.0
    for u in np.random.default_rng(seed).permutation(units.count):
        if total + sizes[u] <= most:
            keep[u] = True
            total += sizes[u]
    out: npt.NDArray[np.bool_] = keep[units.index]
    return out


def _quality(samples: Sequence[StoredSample]) -> dict[str, dict[str, float]]:
    """Pass rate and mean score per scorer over the samples that scorer scored."""
    acc: dict[str, list[tuple[bool | None, float | None]]] = {}
    for s in samples:
        for name, score in s.scores.items():
            acc.setdefault(name, []).append((score.passed, score.score))
    out: dict[str, dict[str, float]] = {}
    for name, rows in sorted(acc.items()):
        decided = [p for p, _ in rows if p is not None]
        scores = [x for _, x in rows if x is not None and np.isfinite(x)]
        entry = {"scored": float(len(rows))}
        if decided:
            entry["pass_rate"] = sum(decided) / len(decided)
        if scores:
            entry["mean_score"] = float(np.mean(scores))
        out[name] = entry
    return out


def check_compatible(b: Baseline, embedder: Embedder) -> None:
    """Refuse a baseline made with another embedder or dimension (never compare across models)."""
    revision = str(getattr(embedder, "revision", ""))
    if b.meta.embedder_model != embedder.model_id or (
            b.meta.embedder_revision and revision and b.meta.embedder_revision != revision):
        raise BaselineError(
            f"baseline {b.short()} of model {b.meta.model!r} was embedded with {b.meta.embedder_model} "
            f"({b.meta.embedder_revision}) but the configured embedder is {embedder.model_id} ({revision}); "
            "pin a new baseline with this embedder and promote it")
    if b.meta.dim != embedder.dim:
        raise BaselineError(f"baseline {b.short()} has dimension {b.meta.dim} but the embedder produces "
                            f"{embedder.dim}; pin a new baseline")


class BaselineRepo:
    """Baselines on disk under one directory, with the active-per-model registry and its history."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        return self.root / f"{digest}.npz"

    def save(self, b: Baseline) -> str:
        """Write a sealed baseline (idempotent: the same content gets the same name); return its hash."""
        if not HASH.match(b.hash) or b.hash != content_hash(b.meta, _arrays(b)):
            raise BaselineError("refusing to save a baseline whose hash does not match its content; seal() it")
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(b.hash)
        if path.exists():
            return b.hash
        arrays = _arrays(b)
        arrays["meta"] = np.frombuffer(_meta_json(b.meta), dtype=np.uint8)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, allow_pickle=False, **arrays)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        log.info("pinned baseline %s for model %s (%d samples of %s)", b.hash[:12], b.meta.model, b.meta.n,
                 b.meta.source_version)
        return b.hash

    def resolve(self, ref: str) -> str:
        """Turn a full hash or a unique prefix (≥ 6 hex digits) into a full hash."""
        ref = ref.strip().lower()
        if HASH.match(ref):
            return ref
        if not re.fullmatch(r"[0-9a-f]{6,63}", ref):
            raise BaselineError(f"{ref!r} is not a baseline hash (give at least 6 hex digits)")
        matches = [p.stem for p in self.root.glob(f"{ref}*.npz")] if self.root.exists() else []
        if len(matches) != 1:
            raise BaselineError(f"baseline {ref!r} matches {len(matches)} baselines in {self.root}; "
                                "give more digits" if matches else f"no baseline {ref!r} in {self.root}")
        return matches[0]

    def load(self, ref: str) -> Baseline:
        """Read and verify a baseline; a missing, unreadable or tampered file raises BaselineError."""
        digest = self.resolve(ref)
        path = self._path(digest)
        try:
            with np.load(path, allow_pickle=False) as z:
                meta_raw = bytes(z["meta"].tobytes())
                arrays = {k: z[k] for k in z.files if k != "meta"}
            meta = BaselineMeta(**json.loads(meta_raw))
        except FileNotFoundError as e:
            raise BaselineError(f"baseline {digest[:12]} not found in {self.root}") from e
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
            raise BaselineError(f"could not read baseline {path}: {e}; the file is damaged, pin a new one") from e
        actual = content_hash(meta, arrays)
        if actual != digest:
            raise BaselineError(f"baseline {path} was modified after it was pinned (content hash {actual[:12]} "
                                f"≠ name {digest[:12]}); refusing to compare against it — pin a new baseline")
        embeddings = {k[4:]: v for k, v in arrays.items() if k.startswith("emb.")}
        features = {k[5:]: v for k, v in arrays.items() if k.startswith("feat.")}
        keys, ts = arrays.get("unit.key"), arrays.get("unit.ts")
        for name, emb in embeddings.items():
            if emb.ndim != 2 or emb.shape[1] != meta.dim or len(emb) != meta.n:
                raise BaselineError(f"baseline {digest[:12]} field {name}: shape {emb.shape} does not match "
                                    f"n={meta.n}, dim={meta.dim}")
        if keys is not None and ts is not None and not (len(keys) == len(ts) == meta.n):
            raise BaselineError(f"baseline {digest[:12]}: {len(keys)} unit keys and {len(ts)} times for n={meta.n}")
        return Baseline(meta=meta, embeddings=embeddings, features=features, hash=digest, keys=keys, ts=ts)

    def all(self) -> list[Baseline]:
        """Every readable baseline, newest first (damaged files are skipped with a warning)."""
        out: list[Baseline] = []
        for path in sorted(self.root.glob("*.npz")) if self.root.exists() else []:
            try:
                out.append(self.load(path.stem))
            except BaselineError as e:
                log.warning("skipping baseline: %s", e)
        return sorted(out, key=lambda b: b.meta.created_at, reverse=True)

    def active_map(self) -> dict[str, str]:
        """Model → active baseline hash."""
        path = self.root / "active.json"
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise BaselineError(f"could not read {path}: {e}") from e
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise BaselineError(f"{path} must map model names to baseline hashes")
        return {str(k): v for k, v in data.items()}

    def active(self, model: str) -> Baseline | None:
        """The active baseline of `model`, verified; None when none was promoted."""
        digest = self.active_map().get(model)
        return None if digest is None else self.load(digest)

    def promote(self, ref: str, *, by: str, at: float, reason: str = "") -> Baseline:
        """Make a baseline the active one of its model; logged and appended to history.jsonl."""
        b = self.load(ref)
        current = self.active_map()
        previous = current.get(b.meta.model)
        current[b.meta.model] = b.hash
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(current, f, indent=2, sort_keys=True)
        os.replace(tmp, self.root / "active.json")
        entry = {"at": at, "model": b.meta.model, "from": previous, "to": b.hash, "by": by, "reason": reason}
        with (self.root / "history.jsonl").open("a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
        log.warning("baseline of model %s changed from %s to %s by %s%s", b.meta.model,
                    (previous or "none")[:12], b.hash[:12], by, f": {reason}" if reason else "")
        return b

    def history(self) -> list[dict[str, Any]]:
        """Every promotion, oldest first."""
        path = self.root / "history.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
