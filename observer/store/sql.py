"""SQL both stores share (SQLite marks parameters `?`, psycopg `%s`): the column list and the read queries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from observer.store.base import SampleRecord, StoredSample, StoreError
from observer.store.feedback import FeedbackRecord, Response
from observer.store.jobs import ClaimedJob, DriftReportRecord, Enqueued, GoldenRunRecord, JobSpec, Release
from observer.store.pairs import PairRecord

INGEST_KEY_SECONDS = 3600.0  # an idempotency key dedupes retries for this long, then it is pruned

COLUMNS = ("id, version, ts, source, model, prompt, output, finish_reason, prompt_tokens, output_tokens, "
           "latency_s, ttft_s, tenant_tier, content_hash, template_hash, sampling_hash, traceparent, conversation, "
           "response_id")


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
                  "latency_s, ttft_s, tenant_tier, content_hash, template_hash, sampling_hash, traceparent, "
                  "conversation, response_id")


def insert_sql(mark: str) -> str:
    """INSERT of one sample row (the values of `insert_rows`)."""
    return f"INSERT INTO samples ({INSERT_COLUMNS}) VALUES ({', '.join([mark] * 18)})"


def insert_rows(samples: Sequence[SampleRecord]) -> list[tuple[Any, ...]]:
    """The rows of `samples` in INSERT_COLUMNS order, each with its content hash."""
    return [(s.version, s.ts, s.source, s.model, s.prompt, s.output, s.finish_reason, s.prompt_tokens,
             s.output_tokens, s.latency_s, s.ttft_s, s.tenant_tier, content_hash(s.prompt, s.output),
             s.template_hash, s.sampling_hash, s.traceparent, s.conversation, s.response_id)
            for s in samples]


def fingerprint_counts_query(version: str, *, since: float, until: float, mark: str) -> tuple[str, list[Any]]:
    """(template_hash, sampling_hash, count) of a version's samples with since <= ts < until that carry either
    hash; a missing one reads as the empty string (not known, e.g. a mirror that sent no sampling parameters)."""
    return ("SELECT COALESCE(template_hash, ''), COALESCE(sampling_hash, ''), COUNT(*) FROM samples "
            f"WHERE version = {mark} AND ts >= {mark} AND ts < {mark} "
            "AND (template_hash IS NOT NULL OR sampling_hash IS NOT NULL) "
            "GROUP BY COALESCE(template_hash, ''), COALESCE(sampling_hash, '')", [version, since, until])


class SqlReads:
    """The read methods both stores share; a store sets MARK and implements `_read(sql, args)` (samples with
    their scores) and `_rows(what, sql, args)` (plain rows; StoreError naming `what` on failure)."""

    MARK = "?"

    def _read(self, sql: str, args: Sequence[Any]) -> list[StoredSample]:
        raise NotImplementedError

    def _rows(self, what: str, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        raise NotImplementedError

    def responses(self, *, response_ids: Collection[str], trace_ids: Collection[str]
                  ) -> tuple[dict[str, Response], dict[str, Response]]:
        """The sampled responses with these engine response ids, and with these trace ids (the newest each)."""
        return find_responses(lambda sql, args: self._rows("find the answers feedback is about", sql, args),
                              self.MARK, response_ids=response_ids, trace_ids=trace_ids)

    def unit_feedback(self, units: Collection[str], *, since: float) -> dict[str, int]:
        """Feedback events stored per unit with ts >= since."""
        keys = sorted(units)
        rows = self._rows("count feedback per conversation", unit_feedback_sql(self.MARK, len(keys)),
                          (since, *keys)) if keys else []
        return {str(u): int(n) for u, n in rows}

    def stored_feedback_ids(self, ids: Collection[str]) -> set[str]:
        """The event ids among `ids` stored before."""
        keys = sorted(ids)
        rows = self._rows("look up feedback event ids", stored_feedback_ids_sql(self.MARK, len(keys)),
                          keys) if keys else []
        return {str(r[0]) for r in rows}

    def feedback(self, version: str, *, since: float, until: float, limit: int) -> list[FeedbackRecord]:
        """A version's feedback events in [since, until) on answers from `since` on, oldest first."""
        return [feedback_record(r) for r in self._rows(f"read feedback of {version}", feedback_sql(self.MARK, limit),
                                                       (version, since, until, since))]

    def judged_feedback(self, scorer: str, *, since: float, limit: int) -> list[tuple[bool, bool | None]]:
        """(users passed, `scorer` passed) per answer with feedback since `since`."""
        return judged_rows(self._rows("read judged feedback", judged_feedback_sql(self.MARK, limit), (scorer, since)))

    def answered(self, version: str, *, since: float, until: float) -> int:
        """The version's sampled live answers in [since, until)."""
        return int(self._rows(f"count answers of {version}", ANSWERED_SQL.format(m=self.MARK),
                              (version, since, until))[0][0])

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
    """Canonical JSON of a job payload or a golden run; StoreError naming `what` when it is not JSON.

    Not observer.jsonsafe: that encoder makes any value presentable (NaN → null, an object → its text), while
    the store must refuse what it could not read back as written."""
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


# --- fleet-wide budgets ---

def spend_sql(mark: str) -> tuple[str, str, str]:
    """(forget spend older than the window, count the window's spend, record one unit), for `mark`."""
    return (f"DELETE FROM budget_spend WHERE budget = {mark} AND ts <= {mark}",
            f"SELECT COUNT(*) FROM budget_spend WHERE budget = {mark}",
            f"INSERT INTO budget_spend (budget, ts) VALUES ({mark}, {mark})")


def spend_one(execute: Callable[[str, tuple[Any, ...]], Any], mark: str, budget: str, *, limit: int,
              window_seconds: float, now: float) -> bool:
    """Within one transaction that excludes other spenders: True and one unit recorded when fewer than `limit`
    were spent in the last `window_seconds`, else False."""
    forget, count, record = spend_sql(mark)
    execute(forget, (budget, now - window_seconds))
    if int(execute(count, (budget,)).fetchone()[0]) >= limit:
        return False
    execute(record, (budget, now))
    return True


# --- shared work: the statements both stores run (SQLite marks `?`, psycopg `%s`) ---

PENDING_JOBS_SQL = "SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'running')"
JOB_COUNTS_SQL = "SELECT kind, state, COUNT(*) FROM jobs GROUP BY kind, state"
LEASE_RAN_OUT = ("'lease ran out on its last attempt (' || attempts || ' of ' || max_attempts || '): the replica "
                 "running it died or hung'")  # the error of a job whose replica died on its last attempt


def job_rows(jobs: Sequence[JobSpec], now: float) -> list[tuple[Any, ...]]:
    """INSERT values of `jobs` (kind, key, payload JSON, max_attempts, not_before, created, updated)."""
    return [(j.kind, j.key, encode_json(j.payload, what=f"job {j.key!r}"), j.max_attempts, now, now, now)
            for j in jobs]


def insert_job_sql(mark: str, *, json_cast: str = "") -> str:
    """INSERT of one job row that skips a key already known."""
    return (f"INSERT INTO jobs (kind, key, payload, max_attempts, not_before, created, updated) VALUES "
            f"({mark}, {mark}, {mark}{json_cast}, {mark}, {mark}, {mark}, {mark}) ON CONFLICT (key) DO NOTHING")


def enqueue_rows(insert: Callable[[tuple[Any, ...]], int], rows: Sequence[tuple[Any, ...]], *, pending: int,
                 max_queued: int) -> Enqueued:
    """Insert rows one by one while fewer than `max_queued` jobs are pending; `insert` returns rows added."""
    added = duplicate = dropped = 0
    for row in rows:
        if pending >= max_queued:
            dropped += 1
        elif insert(row):
            added += 1
            pending += 1
        else:
            duplicate += 1
    return Enqueued(added=added, duplicate=duplicate, dropped=dropped)


def _fenced(mark: str) -> str:
    return f"id = {mark} AND worker = {mark} AND attempts = {mark} AND state = 'running'"


def renew_sql(mark: str) -> str:
    """Extend a held job's lease: (lease_until, id, worker, attempt)."""
    return f"UPDATE jobs SET lease_until = {mark} WHERE {_fenced(mark)}"


def complete_sql(mark: str) -> str:
    """The fenced completion: (updated, id, worker, attempt); 1 row when the claim was still current."""
    return (f"UPDATE jobs SET state = 'done', done_count = done_count + 1, updated = {mark}, error = NULL "
            f"WHERE {_fenced(mark)}")


def release_sql(mark: str) -> str:
    """Give a failed attempt back: (not_before, updated, error, id, worker, attempt); RETURNING the new state."""
    return (f"UPDATE jobs SET state = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END, "
            f"not_before = {mark}, updated = {mark}, error = {mark}, lease_until = NULL WHERE {_fenced(mark)} "
            "RETURNING state")


def released(row: Sequence[Any] | None) -> Release:
    """What `release_sql` did, from its RETURNING row (None: the claim was no longer current)."""
    return "lost" if row is None else ("failed" if row[0] == "failed" else "queued")


def prune_jobs_sql(mark: str) -> str:
    """Delete finished jobs last updated before (cutoff)."""
    return f"DELETE FROM jobs WHERE state IN ('done', 'failed') AND updated < {mark}"


def insert_golden_run_sql(mark: str, *, json_cast: str = "") -> str:
    """INSERT of one stored golden run (version, golden_set, started, finished, body JSON)."""
    return (f"INSERT INTO golden_runs (version, golden_set, started, finished, body) "
            f"VALUES ({mark}, {mark}, {mark}, {mark}, {mark}{json_cast})")


def golden_run_row(r: GoldenRunRecord) -> tuple[Any, ...]:
    return (r.version, r.golden_set, r.started, r.finished, encode_json(r.body, what="a golden run"))


def insert_drift_report_sql(mark: str, *, json_cast: str = "") -> str:
    """INSERT of one stored drift report (version, checked_at, body JSON)."""
    return f"INSERT INTO drift_reports (version, checked_at, body) VALUES ({mark}, {mark}, {mark}{json_cast})"


def drift_report_row(r: DriftReportRecord) -> tuple[Any, ...]:
    return (r.version, r.checked_at, encode_json(r.body, what="a drift report"))


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


def insert_pair_sql(mark: str, *, json_cast: str = "") -> str:
    """INSERT of one shadow pair; a second pair for the same (canary, sample) is ignored."""
    return (f"INSERT INTO pairs (canary, baseline, sample_id, ts, body) VALUES ({mark}, {mark}, {mark}, {mark}, "
            f"{mark}{json_cast}) ON CONFLICT (canary, sample_id) DO NOTHING")


def pair_row(p: PairRecord) -> tuple[Any, ...]:
    return (p.canary, p.baseline, int(p.sample_id), float(p.ts),
            json.dumps(dict(p.body), allow_nan=False, separators=(",", ":")))


def pairs_sql(mark: str, limit: int) -> str:
    return (f"SELECT canary, baseline, sample_id, ts, body FROM pairs WHERE canary = {mark} AND ts >= {mark} "
            f"ORDER BY ts, id LIMIT {max(0, int(limit))}")


def paired_samples_sql(mark: str, n: int) -> str:
    return f"SELECT sample_id FROM pairs WHERE canary = {mark} AND sample_id IN ({', '.join([mark] * n)})"


def pair_record(row: Sequence[Any]) -> PairRecord:
    canary, baseline, sid, ts, body = row
    data = json.loads(body) if isinstance(body, str) else body
    return PairRecord(canary=canary, baseline=baseline, sample_id=int(sid), ts=float(ts),
                      body=MappingProxyType(data))


FEEDBACK_COLUMNS = "event_id, version, sample_id, unit, answered, ts, kind, value, negative, comment"


def insert_feedback_sql(mark: str) -> str:
    """INSERT of one feedback event, nothing when its id is stored already (a retried batch)."""
    return (f"INSERT INTO feedback ({FEEDBACK_COLUMNS}) VALUES ({', '.join([mark] * 10)}) "
            "ON CONFLICT (event_id) DO NOTHING")


def feedback_row(e: FeedbackRecord) -> tuple[Any, ...]:
    return (e.event_id, e.version, e.sample_id, e.unit, e.answered, e.ts, e.kind, e.value, int(e.negative),
            e.comment)


def feedback_record(row: Sequence[Any]) -> FeedbackRecord:
    event_id, version, sample_id, unit, answered, ts, kind, value, negative, comment = row
    return FeedbackRecord(event_id=event_id, version=version, sample_id=int(sample_id), unit=unit,
                          answered=float(answered), ts=float(ts), kind=kind,
                          value=None if value is None else float(value), negative=bool(negative), comment=comment)


def feedback_sql(mark: str, limit: int) -> str:
    return (f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE version = {mark} AND ts >= {mark} AND ts < {mark} "
            f"AND answered >= {mark} ORDER BY ts, event_id LIMIT {max(0, int(limit))}")


ANSWERED_SQL = "SELECT COUNT(*) FROM samples WHERE version = {m} AND ts >= {m} AND ts < {m} AND source <> 'golden'"

TRACE_ID = "substr(traceparent, 4, 32)"
"""The trace id inside a stored W3C traceparent (`00-<trace id>-<span id>-<flags>`); indexed by this expression."""


def responses_sql(mark: str, *, by: str, n: int) -> str:
    """Samples whose `by` (response_id, or TRACE_ID) is one of n values, newest first."""
    return (f"SELECT {by}, id, version, ts, conversation FROM samples WHERE {by} IN ({', '.join([mark] * n)}) "
            "ORDER BY ts DESC, id DESC")


def find_responses(read: Callable[[str, Sequence[Any]], Sequence[Sequence[Any]]], mark: str, *,
                   response_ids: Collection[str], trace_ids: Collection[str]
                   ) -> tuple[dict[str, Response], dict[str, Response]]:
    """The sampled responses with these engine response ids, and with these trace ids, through `read`."""
    found = [responses_by_key(read(responses_sql(mark, by=by, n=len(keys)), keys)) if keys else {}
             for by, keys in (("response_id", sorted(response_ids)), (TRACE_ID, sorted(trace_ids)))]
    return found[0], found[1]


def responses_by_key(rows: Sequence[Sequence[Any]]) -> dict[str, Response]:
    """The newest response per key of rows from `responses_sql`."""
    out: dict[str, Response] = {}
    for key, sid, version, ts, conversation in rows:
        out.setdefault(str(key), Response(sample_id=int(sid), version=version, ts=float(ts),
                                          unit=conversation or f"sample:{int(sid)}"))
    return out


def unit_feedback_sql(mark: str, n: int) -> str:
    return (f"SELECT unit, COUNT(*) FROM feedback WHERE ts >= {mark} AND unit IN ({', '.join([mark] * n)}) "
            "GROUP BY unit")


def stored_feedback_ids_sql(mark: str, n: int) -> str:
    return f"SELECT event_id FROM feedback WHERE event_id IN ({', '.join([mark] * n)})"


def judged_feedback_sql(mark: str, limit: int) -> str:
    """(users passed, scorer passed) per answer with feedback since a time and a score of one scorer."""
    return ("SELECT MAX(f.negative), s.passed FROM feedback f JOIN scores s ON s.sample_id = f.sample_id "
            f"AND s.scorer = {mark} WHERE f.ts >= {mark} GROUP BY f.sample_id, s.passed "
            f"ORDER BY MAX(f.answered) DESC LIMIT {max(0, int(limit))}")


def judged_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[bool, bool | None]]:
    return [(not bool(negative), None if passed is None else bool(passed)) for negative, passed in rows]
