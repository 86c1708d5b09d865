-- What each run spent, by owner (resolved from the run's thread when recorded), kept after its
-- thread is deleted: per-owner spend limits sum it over a rolling day.
CREATE TABLE spend (
    run_id     TEXT COLLATE "C" PRIMARY KEY,
    owner      TEXT COLLATE "C" NOT NULL,
    tokens     BIGINT NOT NULL,
    usd        DOUBLE PRECISION NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL
);
CREATE INDEX spend_owner ON spend (owner, updated_at);
