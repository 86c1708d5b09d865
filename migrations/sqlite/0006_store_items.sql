-- The Store API: JSON documents under a namespace (labels joined by '.', which labels may not
-- contain) and a key, shared by every thread. `expires_at` is set from `ttl_minutes` on write
-- and, when reads refresh it, on read; expired rows are invisible and swept.
CREATE TABLE store_items (
    namespace   TEXT NOT NULL,
    item_key    TEXT NOT NULL,
    value       TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    ttl_minutes REAL,
    expires_at  TEXT,
    PRIMARY KEY (namespace, item_key)
);
CREATE INDEX store_items_expires_at ON store_items (expires_at) WHERE expires_at IS NOT NULL;
