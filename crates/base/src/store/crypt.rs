//! Encryption at rest of what users put in: checkpoint writes and tasks (and the chunks large
//! strings are stored in), thread values and interrupts, run inputs and options (`kwargs`),
//! stored stream events, store item values, cron payloads, and assistants' config and context
//! (and their versions'). AES-256-GCM with a fresh random nonce per value
//! and, as associated data, the column's name and the row's identity (its thread, run,
//! checkpoint or item key): a sealed value copied to another column, row or owner does not
//! open. Values of the first format (`enc1`, bound to the column only) are still read, and
//! sealed anew in the current format when their row is next written.
//!
//! Keys come from the environment: `DR_ENCRYPTION_KEY` (the one new writes use) and
//! `DR_ENCRYPTION_PREVIOUS_KEYS` (comma-separated, still read), each 32 bytes in base64. A
//! sealed value names its key by an 8-hex-digit id (the start of the key's SHA-256), so keys
//! rotate without downtime: first give every replica the new key as a previous one, then make
//! it the current one (old rows stay readable as long as their key is listed).
//!
//! A sealed value is stored as a JSON string, `"enc2:<key id>:<base64url of nonce ‖ ciphertext>"`,
//! so the columns keep holding JSON. Rows written before encryption was turned on stay readable
//! as they are. Metadata (of threads, runs, assistants, checkpoints) is not sealed: searches
//! filter on it. Searching thread values or store item values is refused while sealing is on.
//!
//! The keys are process-wide, installed once at start-up (like the metrics recorder): every
//! store row of the process is sealed alike, and the row codecs need no key passed down.

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::{Arc, RwLock};

/// The key new writes use.
pub const KEY_ENV: &str = "DR_ENCRYPTION_KEY";
/// Keys still read, comma-separated.
pub const PREVIOUS_KEYS_ENV: &str = "DR_ENCRYPTION_PREVIOUS_KEYS";

/// The format new values are sealed in: bound to the column and the row.
const PREFIX: &str = "\"enc2:";
/// The first format, bound to the column only: still opened.
const PREFIX_V1: &str = "\"enc1:";

/// The row a sealed value belongs to, as its associated data holds it: the parts of its key,
/// joined by a separator no id or namespace holds.
pub fn row_of(parts: &[&str]) -> String {
    parts.join("\u{1f}")
}

/// Where a sealed value lives: its associated data.
#[derive(Clone, Copy, Debug)]
pub enum Column {
    CheckpointWrites,
    CheckpointTasks,
    CheckpointChunk,
    ThreadValues,
    ThreadInterrupts,
    RunKwargs,
    RunEvents,
    ItemValue,
    TaskCallResult,
    CronPayload,
    AssistantConfig,
    AssistantContext,
    VersionConfig,
    VersionContext,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::CheckpointWrites => "checkpoints.writes",
            Column::CheckpointTasks => "checkpoints.tasks",
            Column::CheckpointChunk => "checkpoint_blobs.data",
            Column::ThreadValues => "threads.state_values",
            Column::ThreadInterrupts => "threads.interrupts",
            Column::RunKwargs => "runs.kwargs",
            Column::RunEvents => "run_event_pages.frames",
            Column::ItemValue => "store_items.value",
            Column::TaskCallResult => "task_calls.result",
            Column::CronPayload => "crons.payload",
            Column::AssistantConfig => "assistants.config",
            Column::AssistantContext => "assistants.context",
            Column::VersionConfig => "assistant_versions.config",
            Column::VersionContext => "assistant_versions.context",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CryptError {
    #[error("{env}: {why}")]
    BadKey { env: &'static str, why: String },
    #[error(
        "a stored value was sealed with key {0}, which is neither {KEY_ENV} nor among \
         {PREVIOUS_KEYS_ENV}"
    )]
    UnknownKey(String),
    #[error("a stored value of {0} does not open with its key: it was changed or damaged")]
    Damaged(&'static str),
    #[error("could not seal a value: {0}")]
    Seal(&'static str),
}

struct Key {
    id: String,
    key: LessSafeKey,
    /// For chunk hashes: a key of its own, derived from this one.
    hashing: ring::hmac::Key,
}

/// The current key and the previous ones.
pub struct Keys {
    current: Key,
    previous: Vec<Key>,
    random: SystemRandom,
}

/// Shows key ids only, never key material.
impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous: Vec<&str> = self.previous.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keys")
            .field("current", &self.current.id)
            .field("previous", &previous)
            .finish()
    }
}

impl Keys {
    /// Reads the keys from the environment; `None` when `DR_ENCRYPTION_KEY` is unset or empty.
    pub fn from_env() -> Result<Option<Keys>, CryptError> {
        let current = std::env::var(KEY_ENV).unwrap_or_default();
        let previous = std::env::var(PREVIOUS_KEYS_ENV).unwrap_or_default();
        if current.trim().is_empty() {
            if !previous.trim().is_empty() {
                return Err(CryptError::BadKey {
                    env: KEY_ENV,
                    why: format!("empty, while {PREVIOUS_KEYS_ENV} is set"),
                });
            }
            return Ok(None);
        }
        Keys::parse(&current, &previous).map(Some)
    }

    /// Keys from their base64 text: the current one and a comma-separated list of previous.
    pub fn parse(current: &str, previous: &str) -> Result<Keys, CryptError> {
        let current = key(KEY_ENV, current)?;
        let previous = previous
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| key(PREVIOUS_KEYS_ENV, k))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Keys {
            current,
            previous,
            random: SystemRandom::new(),
        })
    }

    fn chunk_digest(&self, text: &[u8]) -> [u8; 32] {
        let tag = ring::hmac::sign(&self.current.hashing, text);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// The id new writes are sealed under.
    pub fn current_id(&self) -> &str {
        &self.current.id
    }

    fn find(&self, id: &str) -> Option<&Key> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
    }

    fn seal(&self, column: Column, row: &str, plain: &str) -> Result<String, CryptError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| CryptError::Seal("no randomness"))?;
        let mut data = plain.as_bytes().to_vec();
        self.current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(bound(column, row)),
                &mut data,
            )
            .map_err(|_| CryptError::Seal("AES-GCM refused the value"))?;
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&data);
        Ok(format!(
            "{PREFIX}{}:{}\"",
            self.current.id,
            base64url::encode(&sealed)
        ))
    }

    fn open(&self, column: Column, aad: &str, id: &str, body: &str) -> Result<String, CryptError> {
        let key = self
            .find(id)
            .ok_or_else(|| CryptError::UnknownKey(id.to_owned()))?;
        let damaged = || CryptError::Damaged(column.name());
        let mut sealed = base64url::decode(body).ok_or_else(damaged)?;
        if sealed.len() < NONCE_LEN {
            return Err(damaged());
        }
        let data = sealed.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&sealed).map_err(|_| damaged())?;
        let mut data = data;
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(aad), &mut data)
            .map_err(|_| damaged())?;
        String::from_utf8(plain.to_vec()).map_err(|_| damaged())
    }
}

/// The associated data of the current format: column and row.
fn bound(column: Column, row: &str) -> String {
    format!("{}\u{1e}{row}", column.name())
}

fn key(env: &'static str, text: &str) -> Result<Key, CryptError> {
    let bad = |why: &str| CryptError::BadKey {
        env,
        why: why.to_owned(),
    };
    let bytes = base64url::decode_any(text.trim())
        .ok_or_else(|| bad("not base64 (make one with `openssl rand -base64 32`)"))?;
    if bytes.len() != 32 {
        return Err(bad(&format!(
            "a key is 32 bytes in base64, this one is {} bytes",
            bytes.len()
        )));
    }
    let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| bad("unusable key"))?;
    let digest = Sha256::digest(&bytes);
    let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let master = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes);
    let derived = ring::hmac::sign(&master, b"deep-research chunk hashes v1");
    Ok(Key {
        id,
        key: LessSafeKey::new(unbound),
        hashing: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref()),
    })
}

static KEYS: RwLock<Option<Arc<Keys>>> = RwLock::new(None);

/// Makes `keys` the process's keys (`None`: store values as they are).
pub fn install(keys: Option<Keys>) {
    *KEYS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = keys.map(Arc::new);
}

fn keys() -> Option<Arc<Keys>> {
    KEYS.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Whether `stored` is sealed in the current format under the current key (nothing for
/// `reseal` to do).
pub fn is_current(stored: &str) -> bool {
    let Some(keys) = keys() else {
        return false;
    };
    matches!(sealed_parts(stored), Some((Version::RowBound, id, _)) if id == keys.current_id())
}

/// Whether values are sealed.
pub fn enabled() -> bool {
    keys().is_some()
}

/// The digest that names a chunk of `text`: keyed (HMAC-SHA256 under a key derived from the
/// current one) when sealing is on, so a stolen database cannot confirm a guessed text by its
/// hash, nor show two owners' equal texts as equal; plain SHA-256 otherwise.
pub fn chunk_digest(text: &[u8]) -> [u8; 32] {
    match keys() {
        Some(keys) => keys.chunk_digest(text),
        None => Sha256::digest(text).into(),
    }
}

/// `text` (a value's stored JSON) sealed for `column` of `row` (`row_of`), or as it is when
/// sealing is off.
pub fn seal(column: Column, row: &str, text: String) -> Result<String, CryptError> {
    match keys() {
        Some(keys) => keys.seal(column, row, &text),
        None => Ok(text),
    }
}

/// A stored value of `column` of `row` opened: sealed ones with their key, others as they are.
pub fn open<'a>(column: Column, row: &str, stored: &'a str) -> Result<Cow<'a, str>, CryptError> {
    let Some((version, id, body)) = sealed_parts(stored) else {
        return Ok(Cow::Borrowed(stored));
    };
    let keys = keys().ok_or_else(|| CryptError::UnknownKey(id.to_owned()))?;
    let aad = match version {
        Version::RowBound => bound(column, row),
        Version::ColumnOnly => column.name().to_owned(),
    };
    keys.open(column, &aad, id, body).map(Cow::Owned)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// `enc1`: bound to the column.
    ColumnOnly,
    /// `enc2`: bound to the column and the row.
    RowBound,
}

/// The format, key id and body of a sealed value; `None` for anything else (plain JSON, or
/// text that only starts like a sealed value).
fn sealed_parts(stored: &str) -> Option<(Version, &str, &str)> {
    let (version, rest) = match stored.strip_prefix(PREFIX) {
        Some(rest) => (Version::RowBound, rest),
        None => (Version::ColumnOnly, stored.strip_prefix(PREFIX_V1)?),
    };
    let inner = rest.strip_suffix('"')?;
    let (id, body) = inner.split_once(':')?;
    let well_formed = id.len() == 8
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then_some((version, id, body))
}

/// Base64 without padding, URL-safe alphabet for sealed values; keys are read in either
/// alphabet, padded or not.
mod base64url {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }

    fn value(b: u8) -> Option<u32> {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        Some(u32::from(v))
    }

    /// Decodes unpadded URL-safe base64.
    pub fn decode(text: &str) -> Option<Vec<u8>> {
        if text.bytes().any(|b| b == b'+' || b == b'/') {
            return None;
        }
        decode_any(text)
    }

    /// Decodes base64 in either alphabet, with or without padding.
    pub fn decode_any(text: &str) -> Option<Vec<u8>> {
        let text = text.trim_end_matches('=');
        if text.len() % 4 == 1 {
            return None;
        }
        let mut out = Vec::with_capacity(text.len() * 3 / 4);
        for chunk in text.as_bytes().chunks(4) {
            let mut n = 0u32;
            for (i, b) in chunk.iter().enumerate() {
                n |= value(*b)? << (18 - 6 * i);
            }
            for i in 0..chunk.len() - 1 {
                out.push(((n >> (16 - 8 * i)) & 0xff) as u8);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    #[test]
    fn base64_round_trips() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            assert_eq!(
                base64url::decode(&base64url::encode(&bytes)).unwrap(),
                bytes
            );
        }
        assert_eq!(
            base64url::decode_any(A).unwrap(),
            (0..32).collect::<Vec<u8>>()
        );
    }

    #[test]
    fn sealed_values_open_only_with_their_key_and_column() {
        let keys = Keys::parse(A, "").unwrap();
        let run = row_of(&["run-1"]);
        let aad = bound(Column::RunKwargs, &run);
        let sealed = keys
            .seal(Column::RunKwargs, &run, r#"{"input": "secret"}"#)
            .unwrap();
        assert!(!sealed.contains("secret"));
        assert!(
            serde_json::from_str::<String>(&sealed).is_ok(),
            "stored as a JSON string"
        );
        let (version, id, body) = sealed_parts(&sealed).unwrap();
        assert_eq!(version, Version::RowBound);
        assert_eq!(id, keys.current_id());
        assert_eq!(
            keys.open(Column::RunKwargs, &aad, id, body).unwrap(),
            r#"{"input": "secret"}"#
        );
        // Another column, or another row of the same column: damaged.
        for other in [
            bound(Column::ItemValue, &run),
            bound(Column::RunKwargs, "run-2"),
        ] {
            assert!(matches!(
                keys.open(Column::RunKwargs, &other, id, body),
                Err(CryptError::Damaged(_))
            ));
        }
        // Rotated: B is current, A still read.
        let rotated = Keys::parse(B, A).unwrap();
        assert!(rotated.open(Column::RunKwargs, &aad, id, body).is_ok());
        assert_ne!(rotated.current_id(), keys.current_id());
        // A dropped: the value names a key nobody has.
        let only_b = Keys::parse(B, "").unwrap();
        assert!(matches!(
            only_b.open(Column::RunKwargs, &aad, id, body),
            Err(CryptError::UnknownKey(_))
        ));
        // Tampered.
        let mut bytes = body.as_bytes().to_vec();
        bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(keys.open(Column::RunKwargs, &aad, id, &tampered).is_err());
    }

    /// Values of the first format (bound to the column only) still open, wherever they are.
    #[test]
    fn values_of_the_first_format_still_open() {
        let keys = Keys::parse(A, "").unwrap();
        let mut nonce = [0u8; NONCE_LEN];
        nonce[0] = 7;
        let mut data = br#"{"old": true}"#.to_vec();
        keys.current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Column::ItemValue.name()),
                &mut data,
            )
            .unwrap();
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&data);
        let stored = format!(
            "{PREFIX_V1}{}:{}\"",
            keys.current_id(),
            base64url::encode(&sealed)
        );
        let (version, id, body) = sealed_parts(&stored).unwrap();
        assert_eq!(version, Version::ColumnOnly);
        let aad = Column::ItemValue.name();
        assert_eq!(
            keys.open(Column::ItemValue, aad, id, body).unwrap(),
            r#"{"old": true}"#
        );
    }

    /// Chunk hashes under a key say nothing of the text to whoever lacks the key: not its
    /// SHA-256, and not the same under another key.
    #[test]
    fn chunk_hashes_are_keyed() {
        let text = b"a paragraph someone might guess";
        let (a, b) = (Keys::parse(A, "").unwrap(), Keys::parse(B, "").unwrap());
        let plain: [u8; 32] = Sha256::digest(text).into();
        assert_ne!(a.chunk_digest(text), plain);
        assert_ne!(a.chunk_digest(text), b.chunk_digest(text));
        assert_eq!(
            a.chunk_digest(text),
            Keys::parse(A, B).unwrap().chunk_digest(text)
        );
    }

    #[test]
    fn bad_keys_are_refused_with_the_reason() {
        assert!(Keys::parse("short", "").is_err());
        assert!(Keys::parse(A, "not base64!").is_err());
        assert!(
            Keys::parse(&A[..20], "")
                .unwrap_err()
                .to_string()
                .contains("32 bytes")
        );
    }

    #[test]
    fn plain_values_pass_through() {
        assert!(sealed_parts(r#"{"a": 1}"#).is_none());
        assert!(sealed_parts(r#""enc1: not really""#).is_none());
    }
}
