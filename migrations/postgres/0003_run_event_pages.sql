-- Run events in pages: one row per flush of a run's stream (see src/store/pages.rs).
CREATE TABLE run_event_pages (
    run_id    TEXT COLLATE "C" NOT NULL,
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    last_ms   BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    frames    TEXT NOT NULL,
    PRIMARY KEY (run_id, last_ms, last_seq)
);
CREATE INDEX run_event_pages_thread ON run_event_pages (thread_id);

-- Every stored frame becomes a page of its own.
INSERT INTO run_event_pages (run_id, thread_id, last_ms, last_seq, frames)
SELECT run_id, thread_id, ms, seq,
       ms || ' ' || seq || ' ' || octet_length(event) || ' ' || octet_length(data) || chr(10)
           || event || data
FROM run_events;

DROP TABLE run_events;

-- Pages, checkpoint writes and a thread's values are large, compressible text written once:
-- lz4 compresses them several times faster than the default pglz (event pages: 8.1 -> 2.6 ms
-- of Postgres time per benchmark run). Servers built without lz4, or older than Postgres 14,
-- keep pglz: the statements are run as strings so that even a syntax error is caught here.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE run_event_pages ALTER COLUMN frames SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE threads ALTER COLUMN state_values SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE checkpoints ALTER COLUMN writes SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 compression not available, keeping the default: %', SQLERRM;
END
$$;
