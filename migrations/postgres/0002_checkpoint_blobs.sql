-- Large strings of checkpoint writes, stored once per thread by content (see src/store/blobs.rs).
CREATE TABLE checkpoint_blobs (
    thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    hash      TEXT COLLATE "C" NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (thread_id, hash)
);
