-- Durable runs. `attempt` counts the claims of a run that did not hand it back: every write a
-- worker makes for the run names (lease_owner, attempt), so a worker that lost the run can no
-- longer write to it. `idempotency_key` lets a client retry run creation without a second run.
ALTER TABLE runs ADD COLUMN attempt BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN idempotency_key TEXT COLLATE "C";
CREATE UNIQUE INDEX runs_idempotency_key ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Runs that ended, oldest first: the event-retention sweep reads them.
CREATE INDEX runs_ended ON runs (updated_at) WHERE status NOT IN ('pending', 'running');

-- Thread time-to-live in minutes after the last update (`ttl` on create/patch).
ALTER TABLE threads ADD COLUMN ttl_minutes DOUBLE PRECISION;
CREATE INDEX threads_ttl ON threads (updated_at) WHERE ttl_minutes IS NOT NULL;
