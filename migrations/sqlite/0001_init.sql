-- Portable schema shared with Postgres: ids, JSON and timestamps are TEXT (timestamps in the
-- fixed-width `Timestamp` format, which sorts as text), numbers are BIGINT. JSON filters go
-- through json_each at query time. Foreign keys need `PRAGMA foreign_keys = ON` (set on connect).

CREATE TABLE assistants (
    assistant_id TEXT PRIMARY KEY,
    graph_id     TEXT NOT NULL,
    config       TEXT NOT NULL,
    context      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    version      BIGINT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX assistants_created_at ON assistants (created_at);

CREATE TABLE threads (
    thread_id        TEXT PRIMARY KEY,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    state_updated_at TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT NOT NULL,
    config           TEXT NOT NULL,
    -- `values` is a reserved word in SQL.
    state_values     TEXT,
    error            TEXT,
    interrupts       TEXT NOT NULL
);
CREATE INDEX threads_updated_at ON threads (updated_at);

CREATE TABLE runs (
    run_id             TEXT PRIMARY KEY,
    thread_id          TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    assistant_id       TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    status             TEXT NOT NULL,
    metadata           TEXT NOT NULL,
    multitask_strategy TEXT NOT NULL,
    kwargs             TEXT NOT NULL,
    lease_owner        TEXT,
    lease_expires_at   TEXT,
    -- Set when someone asks a running run to stop; its worker reads it on lease renewal.
    cancel_action      TEXT
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
CREATE INDEX runs_pending ON runs (created_at, run_id) WHERE status = 'pending';
CREATE INDEX runs_lease ON runs (lease_expires_at) WHERE status = 'running';
-- The one-running-run-per-thread rule, enforced even if two claimers race.
CREATE UNIQUE INDEX runs_one_running_per_thread ON runs (thread_id) WHERE status = 'running';

CREATE TABLE checkpoints (
    thread_id            TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    checkpoint_ns        TEXT NOT NULL,
    checkpoint_id        TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    run_id               TEXT,
    step                 BIGINT NOT NULL,
    source               TEXT NOT NULL,
    metadata             TEXT NOT NULL,
    writes               TEXT NOT NULL,
    next_nodes           TEXT NOT NULL,
    tasks                TEXT NOT NULL,
    created_at           TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_run ON checkpoints (thread_id, run_id);

CREATE TABLE run_events (
    run_id    TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    ms        BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    event     TEXT NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (run_id, ms, seq)
);
CREATE INDEX run_events_thread ON run_events (thread_id);
