-- Every version an assistant has had: a PATCH adds one, `/latest` points the assistant back at
-- one. The `assistants` row stays the current version, so runs read one row as before.
CREATE TABLE assistant_versions (
    assistant_id TEXT COLLATE "C" NOT NULL REFERENCES assistants (assistant_id) ON DELETE CASCADE,
    version      BIGINT NOT NULL,
    graph_id     TEXT COLLATE "C" NOT NULL,
    config       TEXT NOT NULL,
    context      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    name         TEXT COLLATE "C" NOT NULL,
    description  TEXT,
    created_at   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (assistant_id, version)
);
-- Assistants written before versions were kept have their current version as their only one.
INSERT INTO assistant_versions
    (assistant_id, version, graph_id, config, context, metadata, name, description, created_at)
SELECT assistant_id, version, graph_id, config, context, metadata, name, description, updated_at
FROM assistants;
