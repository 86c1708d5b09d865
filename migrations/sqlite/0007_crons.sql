-- Scheduled runs. `payload` is the run request each tick creates; `next_run_date` is the tick
-- due next. A tick's run is inserted in the transaction that moves `next_run_date` on (compare
-- and set), so however many replicas see it due, it starts exactly one run.
CREATE TABLE crons (
    cron_id          TEXT PRIMARY KEY,
    assistant_id     TEXT NOT NULL,
    thread_id        TEXT,
    user_id          TEXT,
    schedule         TEXT NOT NULL,
    timezone         TEXT,
    payload          TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    on_run_completed TEXT,
    enabled          BIGINT NOT NULL,
    end_time         TEXT,
    next_run_date    TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX crons_due ON crons (next_run_date) WHERE enabled = 1;
CREATE INDEX crons_thread ON crons (thread_id);
CREATE INDEX crons_assistant ON crons (assistant_id);
