-- Scheduled runs. `payload` is the run request each tick creates; `next_run_date` is the tick
-- due next. A tick's run is inserted in the transaction that moves `next_run_date` on (compare
-- and set), so however many replicas see it due, it starts exactly one run.
CREATE TABLE crons (
    cron_id          TEXT COLLATE "C" PRIMARY KEY,
    assistant_id     TEXT COLLATE "C" NOT NULL,
    thread_id        TEXT COLLATE "C",
    user_id          TEXT,
    schedule         TEXT NOT NULL,
    timezone         TEXT,
    payload          TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    on_run_completed TEXT,
    enabled          BIGINT NOT NULL,
    end_time         TEXT COLLATE "C",
    next_run_date    TEXT COLLATE "C",
    created_at       TEXT COLLATE "C" NOT NULL,
    updated_at       TEXT COLLATE "C" NOT NULL
);
CREATE INDEX crons_due ON crons (next_run_date) WHERE enabled = 1;
CREATE INDEX crons_thread ON crons (thread_id);
CREATE INDEX crons_assistant ON crons (assistant_id);
