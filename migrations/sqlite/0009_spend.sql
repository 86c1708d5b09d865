-- What each run spent, by owner (resolved from the run's thread when recorded), kept after its
-- thread is deleted: per-owner spend limits sum it over a rolling day.
CREATE TABLE spend (
    run_id     TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    usd        REAL NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX spend_owner ON spend (owner, updated_at);
