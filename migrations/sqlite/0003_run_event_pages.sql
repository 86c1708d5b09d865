-- Run events in pages: one row per flush of a run's stream (see src/store/pages.rs).
CREATE TABLE run_event_pages (
    run_id    TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    last_ms   BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    frames    TEXT NOT NULL,
    PRIMARY KEY (run_id, last_ms, last_seq)
);
CREATE INDEX run_event_pages_thread ON run_event_pages (thread_id);

-- Every stored frame becomes a page of its own (lengths in bytes, as the reader expects).
INSERT INTO run_event_pages (run_id, thread_id, last_ms, last_seq, frames)
SELECT run_id, thread_id, ms, seq,
       ms || ' ' || seq || ' ' || length(CAST(event AS BLOB)) || ' '
           || length(CAST(data AS BLOB)) || char(10) || event || data
FROM run_events;

DROP TABLE run_events;
