"""SQL both stores share (SQLite marks parameters `?`, psycopg `%s`): the column list and the read queries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from observer.store.base import SampleRecord, StoredSample, StoreError
from observer.store.jobs import ClaimedJob

INGEST_KEY_SECONDS = 3600.0  # an idempotency key dedupes retries for this long, then it is pruned

COLUMNS = ("id, version, ts, source, model, prompt, output, finish_reason, prompt_tokens, output_tokens, "
           "latency_s, ttft_s, tenant_tier, content_hash")


def samples_query(version: str, *, since: float | None, until: float | None, limit: int | None,
                  source: str | None, mark: str) -> tuple[str, list[Any]]:
    """A version's samples with since <= ts < until (of `source`), newest first, at most `limit`."""
    where: list[str] = [f"version = {mark}"]
    args: list[Any] = [version]
    for clause, value in ((f"ts >= {mark}", since), (f"ts < {mark}", until), (f"source = {mark}", source)):
        if value is not None:
            where.append(clause)
            args.append(value)
    sql = f"SELECT {COLUMNS} FROM samples WHERE {' AND '.join(where)} ORDER BY ts DESC, id DESC"
    if limit is not None:
        sql += f" LIMIT {max(0, int(limit))}"
    return sql, args


def unscored_query(version: str, scorer: str, *, limit: int, mark: str) -> tuple[str, list[Any]]:
    """Up to `limit` of a version's samples `scorer` has not scored, newest first."""
    sql = (f"SELECT {COLUMNS} FROM samples s WHERE version = {mark} AND NOT EXISTS "
           f"(SELECT 1 FROM scores c WHERE c.sample_id = s.id AND c.scorer = {mark}) "
           f"ORDER BY ts DESC, id DESC LIMIT {max(0, int(limit))}")
    return sql, [version, scorer]


def content_hash(prompt: str, output: str) -> str:
    """SHA-256 of the prompt and output (length-prefixed, so the boundary is unambiguous)."""
    h = hashlib.sha256()
    for part in (prompt, output):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()

INSERT_COLUMNS = ("version, ts, source, model, prompt, output, finish_reason, prompt_tokens, output_tokens, "
                  "latency_s, ttft_s, tenant_tier, content_hash")


def insert_sql(mark: str) -> str:
    """INSERT of one sample row (the values of `insert_rows`)."""
    return f"INSERT INTO samples ({INSERT_COLUMNS}) VALUES ({', '.join([mark] * 13)})"


def insert_rows(samples: Sequence[SampleRecord]) -> list[tuple[Any, ...]]:
    """The rows of `samples` in INSERT_COLUMNS order, each with its content hash."""
    return [(s.version, s.ts, s.source, s.model, s.prompt, s.output, s.finish_reason, s.prompt_tokens,
             s.output_tokens, s.latency_s, s.ttft_s, s.tenant_tier, content_hash(s.prompt, s.output))
            for s in samples]


class SqlReads:
    """The read methods both stores share; a store sets MARK and implements `_read(sql, args)`."""

    MARK = "?"

    def _read(self, sql: str, args: Sequence[Any]) -> list[StoredSample]:
        raise NotImplementedError

    def samples(self, version: str, *, since: float | None = None, until: float | None = None,
                limit: int | None = None, source: str | None = None) -> list[StoredSample]:
        """Return a version's samples with since <= ts < until, newest first."""
        return self._read(*samples_query(version, since=since, until=until, limit=limit, source=source,
                                         mark=self.MARK))

    def unscored(self, version: str, scorer: str, *, limit: int) -> list[StoredSample]:
        """Return up to `limit` of a version's samples that `scorer` has not scored, newest first."""
        return self._read(*unscored_query(version, scorer, limit=limit, mark=self.MARK))

    def samples_by_id(self, ids: Sequence[int]) -> list[StoredSample]:
        """The stored samples with these ids (missing ones, e.g. pruned, are left out), newest first."""
        out: list[StoredSample] = []
        for start in range(0, len(ids), 500):
            out.extend(self._read(*by_id_query(ids[start:start + 500], mark=self.MARK)))
        return out


def by_id_query(ids: Sequence[int], *, mark: str) -> tuple[str, list[Any]]:
    """The samples with these ids, newest first."""
    return (f"SELECT {COLUMNS} FROM samples WHERE id IN ({', '.join([mark] * len(ids))}) ORDER BY ts DESC, id DESC",
            [int(i) for i in ids])


def encode_json(value: Mapping[str, Any], *, what: str) -> str:
    """Canonical JSON of a job payload or a golden run; StoreError naming `what` when it is not JSON."""
    try:
        return json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"could not store {what}: not JSON-serialisable: {e}") from e


def claimed(row: Sequence[Any], *, worker: str) -> ClaimedJob:
    """A ClaimedJob from (id, kind, key, payload, attempts, lease_until); payload JSON text or a dict."""
    jid, kind, key, payload, attempts, lease_until = row
    body = json.loads(payload) if isinstance(payload, str) else dict(payload)
    return ClaimedJob(id=int(jid), kind=kind, key=key, payload=MappingProxyType(body), attempt=int(attempts),
                      worker=worker, lease_until=float(lease_until))


def job_error(error: str) -> str:
    """A job's last error as stored: one line, bounded."""
    return " ".join(error.split())[:500]


def encode_meta(meta: Mapping[str, Any], *, scorer: str, sample_id: int) -> str:
    """A score's meta as canonical JSON; StoreError naming the score when it is not JSON-serialisable."""
    try:
        return json.dumps(dict(meta), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"could not attach score {scorer!r} to sample {sample_id}: meta is not "
                         f"JSON-serialisable: {e}") from e
