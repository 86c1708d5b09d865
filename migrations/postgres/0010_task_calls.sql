-- Model and tool calls that finished inside a step that has not ended yet (LangGraph's pending
-- writes, per call): a step redone after its worker died replays them instead of paying again.
-- A step's rows are deleted once its checkpoint is written.
--
-- UNLOGGED: the rows are a cache of work, written and deleted within a step, not worth the
-- WAL; a crash of Postgres itself (or a failover) empties the table, and the calls are then
-- made again, as they were before this table existed.
CREATE UNLOGGED TABLE task_calls (
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    task_id   TEXT COLLATE "C" NOT NULL,
    call_key  TEXT COLLATE "C" NOT NULL,
    result    TEXT NOT NULL,
    PRIMARY KEY (task_id, call_key)
);
CREATE INDEX task_calls_thread ON task_calls (thread_id);
