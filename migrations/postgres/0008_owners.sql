-- Owners: every assistant, thread, cron and store item belongs to the identity that created it
-- (runs, checkpoints and events belong to their thread). '' is the one owner of a server that
-- runs without authentication or with a single shared key, so existing rows stay visible there.
-- An assistant with no owner (NULL) is a system assistant: readable by all, changed by none.
ALTER TABLE assistants ADD COLUMN owner TEXT COLLATE "C";
UPDATE assistants SET owner = '' WHERE CAST(metadata AS JSONB) ->> 'created_by' IS DISTINCT FROM 'system';
CREATE INDEX assistants_owner ON assistants (owner);

ALTER TABLE threads ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX threads_owner ON threads (owner, updated_at);

ALTER TABLE crons ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX crons_owner ON crons (owner);

-- Store items are keyed by owner first: two users' `("memories",)` namespaces never meet.
ALTER TABLE store_items ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE store_items DROP CONSTRAINT store_items_pkey;
ALTER TABLE store_items ADD PRIMARY KEY (owner, namespace, item_key);

