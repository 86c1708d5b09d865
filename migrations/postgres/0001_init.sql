-- Portable schema shared with SQLite: ids, JSON and timestamps are TEXT (timestamps in the
-- fixed-width `Timestamp` format, which sorts as text), numbers are BIGINT. JSON filters cast
-- to jsonb at query time. Key and sort columns use the "C" collation so they order bytewise,
-- like SQLite, whatever the cluster's locale.

CREATE TABLE assistants (
    assistant_id TEXT COLLATE "C" PRIMARY KEY,
    graph_id     TEXT COLLATE "C" NOT NULL,
    config       TEXT NOT NULL,
    context      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    name         TEXT COLLATE "C" NOT NULL,
    description  TEXT,
    version      BIGINT NOT NULL,
    created_at   TEXT COLLATE "C" NOT NULL,
    updated_at   TEXT COLLATE "C" NOT NULL
);
CREATE INDEX assistants_created_at ON assistants (created_at);

CREATE TABLE threads (
    thread_id        TEXT COLLATE "C" PRIMARY KEY,
    created_at       TEXT COLLATE "C" NOT NULL,
    updated_at       TEXT COLLATE "C" NOT NULL,
    state_updated_at TEXT COLLATE "C" NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT COLLATE "C" NOT NULL,
    config           TEXT NOT NULL,
    -- `values` is a reserved word in SQL.
    state_values     TEXT,
    error            TEXT,
    interrupts       TEXT NOT NULL
);
CREATE INDEX threads_updated_at ON threads (updated_at);

CREATE TABLE runs (
    run_id             TEXT COLLATE "C" PRIMARY KEY,
    thread_id          TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    assistant_id       TEXT COLLATE "C" NOT NULL,
    created_at         TEXT COLLATE "C" NOT NULL,
    updated_at         TEXT COLLATE "C" NOT NULL,
    status             TEXT COLLATE "C" NOT NULL,
    metadata           TEXT NOT NULL,
    multitask_strategy TEXT COLLATE "C" NOT NULL,
    kwargs             TEXT NOT NULL,
    lease_owner        TEXT COLLATE "C",
    lease_expires_at   TEXT COLLATE "C",
    -- Set when someone asks a running run to stop; its worker reads it on lease renewal.
    cancel_action      TEXT COLLATE "C"
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
CREATE INDEX runs_pending ON runs (created_at, run_id) WHERE status = 'pending';
CREATE INDEX runs_lease ON runs (lease_expires_at) WHERE status = 'running';
-- The one-running-run-per-thread rule, enforced even if two claimers race.
CREATE UNIQUE INDEX runs_one_running_per_thread ON runs (thread_id) WHERE status = 'running';

CREATE TABLE checkpoints (
    thread_id            TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    checkpoint_ns        TEXT COLLATE "C" NOT NULL,
    checkpoint_id        TEXT COLLATE "C" NOT NULL,
    parent_checkpoint_id TEXT COLLATE "C",
    run_id               TEXT COLLATE "C",
    step                 BIGINT NOT NULL,
    source               TEXT COLLATE "C" NOT NULL,
    metadata             TEXT NOT NULL,
    writes               TEXT NOT NULL,
    next_nodes           TEXT NOT NULL,
    tasks                TEXT NOT NULL,
    created_at           TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_run ON checkpoints (thread_id, run_id);

CREATE TABLE run_events (
    run_id    TEXT COLLATE "C" NOT NULL,
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    ms        BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    event     TEXT COLLATE "C" NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (run_id, ms, seq)
);
CREATE INDEX run_events_thread ON run_events (thread_id);
