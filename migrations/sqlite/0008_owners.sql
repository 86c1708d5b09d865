-- Owners: every assistant, thread, cron and store item belongs to the identity that created it
-- (runs, checkpoints and events belong to their thread). '' is the one owner of a server that
-- runs without authentication or with a single shared key, so existing rows stay visible there.
-- An assistant with no owner (NULL) is a system assistant: readable by all, changed by none.
ALTER TABLE assistants ADD COLUMN owner TEXT;
UPDATE assistants SET owner = '' WHERE json_extract(metadata, '$.created_by') IS NOT 'system';
CREATE INDEX assistants_owner ON assistants (owner);

ALTER TABLE threads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX threads_owner ON threads (owner, updated_at);

ALTER TABLE crons ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX crons_owner ON crons (owner);

-- Store items are keyed by owner first: two users' `("memories",)` namespaces never meet.
-- SQLite cannot change a primary key in place, so the table is rebuilt.
CREATE TABLE store_items_owned (
    owner       TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    item_key    TEXT NOT NULL,
    value       TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    ttl_minutes REAL,
    expires_at  TEXT,
    PRIMARY KEY (owner, namespace, item_key)
);
INSERT INTO store_items_owned
    SELECT '', namespace, item_key, value, created_at, updated_at, ttl_minutes, expires_at
    FROM store_items;
DROP TABLE store_items;
ALTER TABLE store_items_owned RENAME TO store_items;
CREATE INDEX store_items_expires_at ON store_items (expires_at) WHERE expires_at IS NOT NULL;

