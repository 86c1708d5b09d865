//! Large strings in checkpoint writes are stored once per thread, by content.
//!
//! A research run writes the same text at several levels: a researcher's findings appear in its
//! own checkpoint, again in the supervisor's tool messages and notes, and again in the main
//! graph's state; `raw_notes` is the researcher's tool results joined into one string. Storing
//! each write verbatim made a run's checkpoints 3.6× its final state. Here every string of at
//! least [`MIN_BLOB`] bytes is cut into content-defined chunks (the cut points depend only on the
//! bytes around them, so a string embedded in a longer one yields mostly the same chunks), each
//! chunk is stored once per thread under its hash, and the write keeps a short reference.
//!
//! Encoding inside the stored JSON: a reference is a string `"\0@"` followed by the chunk
//! hashes; a user string that itself starts with `'\0'` is stored with one more `'\0'` in front.
//! Decoding strips that again, so every JSON value round-trips exactly.

use crate::ids::ThreadId;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

/// Strings shorter than this stay inline.
pub const MIN_BLOB: usize = 1024;
/// Chunk sizes: no cut before `MIN_CHUNK` bytes, always one by `MAX_CHUNK`, about 640 bytes
/// apart: small enough that a string embedded in a longer one loses little at its two ends,
/// large enough that the 16-byte references stay near 2.5% of the text.
const MIN_CHUNK: usize = 128;
const MAX_CHUNK: usize = 8 * 1024;
/// A cut where the top nine bits of the rolling hash are zero: on average every 512 bytes past
/// the minimum. (The top bits depend on the last 64 bytes; the low ones only on the last few.)
const CUT_SHIFT: u32 = 64 - 9;
/// A chunk hash: 96 bits of SHA-256 in URL-safe base64, 16 characters. Chunks are keyed per
/// thread, so even a thread of a million chunks has a collision chance near 1e-17.
const HASH_LEN: usize = 16;
const REF: &str = "\0@";
const ESCAPE: char = '\0';

/// One chunk to store.
#[derive(Clone, Debug, PartialEq)]
pub struct Blob {
    pub hash: String,
    pub data: String,
}

/// A reference named a chunk the store does not have.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint data refers to a missing chunk {0}")]
pub struct MissingBlob(pub String);

/// `value` as JSON text with large strings replaced by references, plus the chunks they refer
/// to, in hash order (so concurrent writers of one thread insert shared chunks in the same
/// order and cannot deadlock on each other's row locks). Written straight to text: copying
/// the value first cost as much as the rest of a checkpoint write.
pub fn externalize(value: &Value) -> Result<(String, Vec<Blob>), serde_json::Error> {
    let blobs = RefCell::new(BTreeMap::new());
    let text = serde_json::to_string(&Externalized {
        value,
        blobs: &blobs,
    })?;
    Ok((text, blobs.into_inner().into_values().collect()))
}

/// The chunks one writer has already stored for one thread. A run writes the same text in
/// many checkpoints (a researcher's findings reappear in its parent's messages, notes and
/// state); in the benchmark workload three of every four chunks a checkpoint refers to were
/// sent before by the same run. Chunks are only ever deleted with their thread, so a chunk
/// once stored stays there for the rest of the run; if the thread is deleted meanwhile, the
/// checkpoint's own insert fails on its foreign key.
#[derive(Debug)]
pub struct StoredChunks {
    thread_id: ThreadId,
    hashes: Mutex<HashSet<String>>,
}

impl StoredChunks {
    pub fn new(thread_id: ThreadId) -> Self {
        Self {
            thread_id,
            hashes: Mutex::new(HashSet::new()),
        }
    }

    /// `chunks` without those already stored for `thread_id` (all of them for another thread).
    pub fn unsent(&self, thread_id: ThreadId, mut chunks: Vec<Blob>) -> Vec<Blob> {
        if thread_id == self.thread_id {
            let stored = self.lock();
            chunks.retain(|c| !stored.contains(&c.hash));
        }
        chunks
    }

    /// Notes chunks whose write to `thread_id` has succeeded.
    pub fn record(&self, thread_id: ThreadId, hashes: impl IntoIterator<Item = String>) {
        if thread_id == self.thread_id {
            self.lock().extend(hashes);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Only ever inserted into: a writer that panicked left nothing half-done.
        self.hashes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serializes a value, encoding its strings on the way.
struct Externalized<'a> {
    value: &'a Value,
    blobs: &'a RefCell<BTreeMap<String, Blob>>,
}

impl Serialize for Externalized<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let nested = |value| Externalized {
            value,
            blobs: self.blobs,
        };
        match self.value {
            Value::String(s) => serializer.serialize_str(&encode(s, &mut self.blobs.borrow_mut())),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&nested(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, item) in map {
                    out.serialize_entry(key, &nested(item))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// The chunk hashes `value` refers to.
pub fn references(value: &Value, into: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            if let Some(hashes) = s.strip_prefix(REF) {
                into.extend(split_hashes(hashes).map(str::to_owned));
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, into)),
        Value::Object(map) => map.values().for_each(|v| references(v, into)),
        _ => {}
    }
}

/// Replaces references in `value` by the text of their chunks, in place.
pub fn internalize(value: &mut Value, chunks: &HashMap<String, String>) -> Result<(), MissingBlob> {
    match value {
        Value::String(s) if s.starts_with(ESCAPE) => *s = decode(s, chunks)?,
        Value::Array(items) => {
            for item in items {
                internalize(item, chunks)?;
            }
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                internalize(item, chunks)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn encode<'s>(s: &'s str, blobs: &mut BTreeMap<String, Blob>) -> Cow<'s, str> {
    if s.len() < MIN_BLOB {
        return if s.starts_with(ESCAPE) {
            Cow::Owned(format!("{ESCAPE}{s}"))
        } else {
            Cow::Borrowed(s)
        };
    }
    let mut out = String::with_capacity(REF.len() + HASH_LEN * (s.len() / 256 + 1));
    out.push_str(REF);
    for piece in chunks(s) {
        let hash = hash(piece);
        out.push_str(&hash);
        blobs.entry(hash.clone()).or_insert_with(|| Blob {
            hash,
            data: piece.to_owned(),
        });
    }
    Cow::Owned(out)
}

fn decode(s: &str, chunks: &HashMap<String, String>) -> Result<String, MissingBlob> {
    if let Some(hashes) = s.strip_prefix(REF) {
        if split_hashes(hashes).next().is_none() {
            return Err(MissingBlob(hashes.chars().take(HASH_LEN).collect()));
        }
        let mut text = String::new();
        for hash in split_hashes(hashes) {
            let chunk = chunks
                .get(hash)
                .ok_or_else(|| MissingBlob(hash.to_owned()))?;
            text.push_str(chunk);
        }
        return Ok(text);
    }
    Ok(s.strip_prefix(ESCAPE).unwrap_or(s).to_owned())
}

/// The hashes of a reference; nothing for text that is not one (never panics on odd input).
fn split_hashes(hashes: &str) -> impl Iterator<Item = &str> {
    let count = if hashes.is_ascii() && hashes.len().is_multiple_of(HASH_LEN) {
        hashes.len() / HASH_LEN
    } else {
        0
    };
    (0..count).filter_map(move |i| hashes.get(i * HASH_LEN..(i + 1) * HASH_LEN))
}

fn hash(piece: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let digest = super::crypt::chunk_digest(piece.as_bytes());
    let mut out = String::with_capacity(HASH_LEN);
    for group in digest[..12].chunks(3) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        for shift in [18, 12, 6, 0] {
            out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
        }
    }
    out
}

/// Content-defined cut points (a gear rolling hash over the bytes), moved forward to the next
/// char boundary so every chunk is valid UTF-8.
fn chunks(s: &str) -> Vec<&str> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let end = next_cut(bytes, start);
        let mut end = end.min(bytes.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[start..end]);
        start = end;
    }
    out
}

fn next_cut(bytes: &[u8], start: usize) -> usize {
    let limit = (start + MAX_CHUNK).min(bytes.len());
    let mut h: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(limit).skip(start) {
        h = (h << 1).wrapping_add(GEAR[b as usize]);
        if i + 1 - start >= MIN_CHUNK && h >> CUT_SHIFT == 0 {
            return i + 1;
        }
    }
    limit
}

/// 256 fixed pseudo-random words (splitmix64), the gear table of the rolling hash.
const GEAR: [u64; 256] = gear_table();

const fn gear_table() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        table[i] = z ^ (z >> 31);
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(n: usize, seed: u64) -> String {
        // Varied words, so chunk boundaries fall as they would in prose.
        let words = [
            "alpha", "beta", "gamma", "delta", "ε-zeta", "eta", "θeta", "iota",
        ];
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                words[(x >> 61) as usize]
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn round_trip(value: &Value) -> (Value, Vec<Blob>) {
        let (text, blobs) = externalize(value).unwrap();
        let stored: Value = serde_json::from_str(&text).unwrap();
        let chunks: HashMap<String, String> = blobs
            .iter()
            .map(|b| (b.hash.clone(), b.data.clone()))
            .collect();
        let mut restored = stored.clone();
        internalize(&mut restored, &chunks).unwrap();
        assert_eq!(&restored, value);
        (stored, blobs)
    }

    #[test]
    fn every_value_round_trips_and_small_ones_stay_inline() {
        let long = text(2000, 1);
        let value = json!({
            "short": "hi",
            "nul": "\0@looks like a reference",
            "nul2": "\0\0",
            "n": [1, 2.5, null, true],
            "long": long,
            "nested": [{"again": long}],
        });
        let (stored, blobs) = round_trip(&value);
        assert_eq!(stored["short"], "hi");
        assert_eq!(stored["nul"], "\0\0@looks like a reference");
        assert!(stored["long"].as_str().unwrap().starts_with(REF));
        assert_eq!(stored["long"], stored["nested"][0]["again"]);
        let total: usize = blobs.iter().map(|b| b.data.len()).sum();
        assert_eq!(total, long.len(), "a repeated string is stored once");
        assert!(blobs.iter().all(|b| b.data.len() <= MAX_CHUNK + 3));
    }

    #[test]
    fn a_string_inside_a_longer_one_shares_most_chunks() {
        let parts: Vec<String> = (0..3).map(|i| text(1500, i)).collect();
        let (_, alone) = round_trip(&json!(parts));
        let joined = parts.join("\n");
        let (_, both) = round_trip(&json!([parts, joined]));
        let extra: usize = both.iter().map(|b| b.data.len()).sum::<usize>()
            - alone.iter().map(|b| b.data.len()).sum::<usize>();
        assert!(
            extra * 5 < joined.len(),
            "the joined copy added {extra} of {} bytes",
            joined.len()
        );
    }

    #[test]
    fn a_missing_chunk_is_an_error_not_empty_text() {
        let (stored, _) = externalize(&json!(text(2000, 3))).unwrap();
        let mut stored: Value = serde_json::from_str(&stored).unwrap();
        assert!(internalize(&mut stored, &HashMap::new()).is_err());
    }

    #[test]
    fn stored_chunks_drop_only_what_this_thread_recorded() {
        let thread = ThreadId::new();
        let stored = StoredChunks::new(thread);
        let (_, first) = externalize(&json!(text(2000, 4))).unwrap();
        let (_, second) = externalize(&json!([text(2000, 4), text(2000, 5)])).unwrap();
        assert_eq!(
            stored.unsent(thread, first.clone()),
            first,
            "nothing recorded yet"
        );

        stored.record(thread, first.iter().map(|b| b.hash.clone()));
        let unsent = stored.unsent(thread, second.clone());
        assert_eq!(unsent.len(), second.len() - first.len());
        assert!(unsent.iter().all(|b| !first.contains(b)));
        assert_eq!(
            stored.unsent(ThreadId::new(), second.clone()),
            second,
            "another thread"
        );

        stored.record(ThreadId::new(), second.iter().map(|b| b.hash.clone()));
        assert_eq!(
            stored.unsent(thread, second).len(),
            unsent.len(),
            "recorded elsewhere"
        );
    }
}
