"""The sample store's schema, one tuple of migrations per database: entry i migrates version i to i + 1.

Never edit a released entry; append one. Both stores record the version they reached in
`observer_schema` and refuse a database whose schema is newer than they know.
"""

from __future__ import annotations

# postgres
POSTGRES_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE samples (
        id BIGSERIAL PRIMARY KEY,
        version TEXT NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        source TEXT NOT NULL,
        model TEXT,
        prompt TEXT NOT NULL,
        output TEXT NOT NULL,
        finish_reason TEXT,
        prompt_tokens BIGINT,
        output_tokens BIGINT,
        latency_s DOUBLE PRECISION,
        ttft_s DOUBLE PRECISION,
        tenant_tier TEXT,
        content_hash TEXT NOT NULL
    );
    CREATE INDEX samples_version_ts ON samples (version, ts);
    CREATE INDEX samples_content_hash ON samples (content_hash);
    CREATE TABLE scores (
        sample_id BIGINT NOT NULL REFERENCES samples (id) ON DELETE CASCADE,
        scorer TEXT NOT NULL,
        passed BOOLEAN,
        score DOUBLE PRECISION,
        reason TEXT NOT NULL,
        meta JSONB NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (sample_id, scorer)
    );
    CREATE INDEX scores_scorer ON scores (scorer, sample_id);
    """,
    # 2: shared work. Scores and golden runs carry the writing transaction's id, so every replica reads them
    # in commit order (rows of transactions still open are read once they commit: see `_FEED_VISIBLE`).
    """
    CREATE SEQUENCE scores_seq;
    ALTER TABLE scores ADD COLUMN seq BIGINT NOT NULL DEFAULT nextval('scores_seq');
    ALTER TABLE scores ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
    CREATE INDEX scores_feed ON scores (xid, seq);
    CREATE TABLE golden_runs (
        id BIGSERIAL PRIMARY KEY,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        version TEXT NOT NULL,
        golden_set TEXT NOT NULL,
        started DOUBLE PRECISION NOT NULL,
        finished DOUBLE PRECISION NOT NULL,
        body JSONB NOT NULL
    );
    CREATE INDEX golden_runs_feed ON golden_runs (xid, id);
    CREATE TABLE jobs (
        id BIGSERIAL PRIMARY KEY,
        kind TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        payload JSONB NOT NULL,
        state TEXT NOT NULL DEFAULT 'queued',
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        worker TEXT,
        lease_until DOUBLE PRECISION,
        not_before DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        updated DOUBLE PRECISION NOT NULL,
        done_count INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX jobs_ready ON jobs (kind, state, id);
    CREATE TABLE ingest_keys (
        key TEXT PRIMARY KEY,
        ids JSONB NOT NULL,
        created DOUBLE PRECISION NOT NULL
    );
    """,
    # 3: shadow-replay pairs, written once each, after they are judged.
    """
    CREATE TABLE pairs (
        id BIGSERIAL PRIMARY KEY,
        canary TEXT NOT NULL,
        baseline TEXT NOT NULL,
        sample_id BIGINT NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        body JSONB NOT NULL,
        UNIQUE (canary, sample_id)
    );
    CREATE INDEX pairs_by_canary ON pairs (canary, ts);
    """,
    # 4: the observed identity of each sample: system-prompt and sampling-parameter hashes.
    """
    ALTER TABLE samples ADD COLUMN template_hash TEXT;
    ALTER TABLE samples ADD COLUMN sampling_hash TEXT;
    """,
    # 5: spend of fleet-wide budgets (judge calls): one row per unit, kept for the budget's window.
    """
    CREATE TABLE budget_spend (
        id BIGSERIAL PRIMARY KEY,
        budget TEXT NOT NULL,
        ts DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX budget_spend_by_budget ON budget_spend (budget, ts);
    """,
    # 6: drift checks run as shared jobs: each check's report, read by every replica in commit order.
    """
    CREATE TABLE drift_reports (
        id BIGSERIAL PRIMARY KEY,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        version TEXT NOT NULL,
        checked_at DOUBLE PRECISION NOT NULL,
        body JSONB NOT NULL
    );
    CREATE INDEX drift_reports_feed ON drift_reports (xid, id);
    """,
    # 7: the W3C traceparent the sampled request carried, so its scores link to its trace.
    """
    ALTER TABLE samples ADD COLUMN traceparent TEXT;
    """,
    # 8: the keyed hash of the user's conversation: the drift tests' independent unit.
    """
    ALTER TABLE samples ADD COLUMN conversation TEXT;
    """,
    # 9: users' feedback, joined to the sampled response it is about (by the engine's response id or the trace).
    """
    ALTER TABLE samples ADD COLUMN response_id TEXT;
    CREATE INDEX samples_response_id ON samples (response_id);
    CREATE INDEX samples_trace_id ON samples ((substr(traceparent, 4, 32)));
    CREATE TABLE feedback (
        event_id TEXT PRIMARY KEY,
        version TEXT NOT NULL,
        sample_id BIGINT NOT NULL,
        unit TEXT NOT NULL,
        answered DOUBLE PRECISION NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL,
        value DOUBLE PRECISION,
        negative INTEGER NOT NULL,
        comment TEXT
    );
    CREATE INDEX feedback_by_version ON feedback (version, ts);
    CREATE INDEX feedback_by_unit ON feedback (unit, ts);
    """,
)


# sqlite
SQLITE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        version TEXT NOT NULL,
        ts REAL NOT NULL,
        source TEXT NOT NULL,
        model TEXT,
        prompt TEXT NOT NULL,
        output TEXT NOT NULL,
        finish_reason TEXT,
        prompt_tokens INTEGER,
        output_tokens INTEGER,
        latency_s REAL,
        ttft_s REAL,
        tenant_tier TEXT,
        content_hash TEXT NOT NULL
    );
    CREATE INDEX samples_version_ts ON samples (version, ts);
    CREATE TABLE scores (
        sample_id INTEGER NOT NULL REFERENCES samples (id) ON DELETE CASCADE,
        scorer TEXT NOT NULL,
        passed INTEGER,
        score REAL,
        reason TEXT NOT NULL,
        meta TEXT NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (sample_id, scorer)
    );
    CREATE INDEX scores_scorer ON scores (scorer, sample_id);
    """,
    """
    CREATE INDEX samples_content_hash ON samples (content_hash);
    """,
    # 3: shared work (one process on SQLite). `seq` orders the score feed: one writer, so commit order.
    """
    ALTER TABLE scores ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
    UPDATE scores SET seq = rowid;
    CREATE INDEX scores_feed ON scores (seq);
    CREATE TABLE golden_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        version TEXT NOT NULL,
        golden_set TEXT NOT NULL,
        started REAL NOT NULL,
        finished REAL NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        payload TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'queued',
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        worker TEXT,
        lease_until REAL,
        not_before REAL NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        done_count INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX jobs_ready ON jobs (kind, state, id);
    CREATE TABLE ingest_keys (
        key TEXT PRIMARY KEY,
        ids TEXT NOT NULL,
        created REAL NOT NULL
    );
    """,
    # 4: shadow-replay pairs, written once each, after they are judged.
    """
    CREATE TABLE pairs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        canary TEXT NOT NULL,
        baseline TEXT NOT NULL,
        sample_id BIGINT NOT NULL,
        ts REAL NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (canary, sample_id)
    );
    CREATE INDEX pairs_by_canary ON pairs (canary, ts);
    """,
    # 5: the observed identity of each sample: system-prompt and sampling-parameter hashes.
    """
    ALTER TABLE samples ADD COLUMN template_hash TEXT;
    ALTER TABLE samples ADD COLUMN sampling_hash TEXT;
    """,
    # 6: spend of fleet-wide budgets (judge calls): one row per unit, kept for the budget's window.
    """
    CREATE TABLE budget_spend (
        id INTEGER PRIMARY KEY,
        budget TEXT NOT NULL,
        ts REAL NOT NULL
    );
    CREATE INDEX budget_spend_by_budget ON budget_spend (budget, ts);
    """,
    # 7: drift checks run as shared jobs: each check's report, read back in commit order.
    """
    CREATE TABLE drift_reports (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        version TEXT NOT NULL,
        checked_at REAL NOT NULL,
        body TEXT NOT NULL
    );
    """,
    # 8: the W3C traceparent the sampled request carried, so its scores link to its trace.
    """
    ALTER TABLE samples ADD COLUMN traceparent TEXT;
    """,
    # 9: the keyed hash of the user's conversation: the drift tests' independent unit.
    """
    ALTER TABLE samples ADD COLUMN conversation TEXT;
    """,
    # 10: users' feedback, joined to the sampled response it is about (by the engine's response id or the trace).
    """
    ALTER TABLE samples ADD COLUMN response_id TEXT;
    CREATE INDEX samples_response_id ON samples (response_id);
    CREATE INDEX samples_trace_id ON samples (substr(traceparent, 4, 32));
    CREATE TABLE feedback (
        event_id TEXT PRIMARY KEY,
        version TEXT NOT NULL,
        sample_id INTEGER NOT NULL,
        unit TEXT NOT NULL,
        answered REAL NOT NULL,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        value REAL,
        negative INTEGER NOT NULL,
        comment TEXT
    );
    CREATE INDEX feedback_by_version ON feedback (version, ts);
    CREATE INDEX feedback_by_unit ON feedback (unit, ts);
    """,
)
