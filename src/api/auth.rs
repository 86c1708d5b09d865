//! Who a request comes from: an API key (hashed in a keys file, or the one shared
//! `server.api_key`) or a bearer JWT, turned into the `Owner` its resources belong to. Also the
//! per-owner request limit, and the per-address limit on failed attempts that slows guessing.

use super::AppState;
use super::error::AppError;
use crate::config::{AuthSettings, Settings};
use crate::store::Owner;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, Instant};

/// The authenticated caller, put on every request by `authenticate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub owner: Owner,
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AppError> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| AppError::Unauthorized("Authentication required".into()))
    }
}

/// Why the service cannot authenticate as configured (it refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error(
        "no authentication is configured: set [auth] keys_file, jwt_secret or jwks_url (or \
         server.api_key for one shared key), or run `serve --no-auth` for local use"
    )]
    Unconfigured,
    #[error(
        "authentication is disabled and the server would listen on {host}, which is not \
         loopback: anyone who reaches it would act as the one local owner. Listen on \
         127.0.0.1, configure credentials, or set [auth] open_beyond_loopback = true \
         (DR__AUTH__OPEN_BEYOND_LOOPBACK=true) if that is what you mean"
    )]
    OpenBeyondLoopback { host: String },
    #[error(
        "both a keys file and JWTs are configured: set [auth] jwt_owners to \"separate\" (a \
         token's owner is its own, jwt:<claim>) or \"shared\" (a token names the keys file's \
         owner of that name)"
    )]
    MixedOwners,
    #[error("could not read the keys file {path}: {detail}")]
    KeysFile { path: String, detail: String },
}

/// One entry of the keys file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    owner: String,
    sha256: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

/// The hex SHA-256 of a key, as the keys file stores it.
pub fn key_digest(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn keys_file_error(path: &Path, detail: String) -> AuthSetupError {
    AuthSetupError::KeysFile {
        path: path.display().to_string(),
        detail,
    }
}

fn parse_keys(path: &Path, text: &str) -> Result<HashMap<String, Owner>, AuthSetupError> {
    let fail = |detail: String| keys_file_error(path, detail);
    // A file caught between its truncation and its write reads empty; taking that for "no keys"
    // would lock every owner out until the next change. Revoking all keys is `keys = []`.
    if text.trim().is_empty() {
        return Err(fail(
            "the file is empty (being written?); write `keys = []` to revoke every key".into(),
        ));
    }
    let file: KeysFile = toml::from_str(text).map_err(|e| fail(e.message().to_owned()))?;
    let mut keys = HashMap::new();
    for entry in file.keys {
        let digest = entry.sha256.trim().to_ascii_lowercase();
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(fail(format!(
                "the key of owner '{}' is not a hex SHA-256 (64 hex digits)",
                entry.owner
            )));
        }
        let owner = Owner::named(&entry.owner)
            .ok_or_else(|| fail("every key needs a non-empty owner".into()))?;
        if owner.as_str().starts_with(JWT_OWNER_PREFIX) {
            return Err(fail(format!(
                "owner '{}': names starting with '{JWT_OWNER_PREFIX}' are those of JWT subjects",
                entry.owner
            )));
        }
        keys.insert(digest, owner);
    }
    Ok(keys)
}

/// The keys file, read again when it changes (checked at most every `KEYS_RECHECK`): adding or
/// revoking a key needs no restart. A file that cannot be read or parsed keeps the keys last
/// read, with an error in the log. Changes are told by content, not modification time: a write
/// lands as a truncation and a write within one tick of the file system's clock, and a read
/// between them must not be the last one.
struct KeysFileWatch {
    path: Option<std::path::PathBuf>,
    state: std::sync::RwLock<KeysState>,
}

struct KeysState {
    keys: HashMap<String, Owner>,
    /// The SHA-256 of the text last read, usable or not (an error is logged once per change).
    seen: Option<String>,
    checked: Instant,
}

const KEYS_RECHECK: Duration = Duration::from_secs(2);

/// What the owners of tokens are named with `jwt_owners = "separate"`.
const JWT_OWNER_PREFIX: &str = "jwt:";

/// The longest owner name a token may give.
const MAX_OWNER_CHARS: usize = 256;

impl KeysFileWatch {
    fn open(path: Option<std::path::PathBuf>) -> Result<Self, AuthSetupError> {
        let (keys, seen) = match &path {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| keys_file_error(p, e.to_string()))?;
                (parse_keys(p, &text)?, Some(key_digest(&text)))
            }
            None => (HashMap::new(), None),
        };
        Ok(Self {
            path,
            state: std::sync::RwLock::new(KeysState {
                keys,
                seen,
                checked: Instant::now(),
            }),
        })
    }

    fn configured(&self) -> bool {
        self.path.is_some()
    }

    fn owner_of(&self, digest: &str) -> Option<Owner> {
        self.refresh();
        self.read().keys.get(digest).cloned()
    }

    fn names(&self, owner: &Owner) -> bool {
        self.refresh();
        self.read().keys.values().any(|o| o == owner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, KeysState> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Re-reads the file when its text changed since the last read.
    fn refresh(&self) {
        let Some(path) = &self.path else { return };
        if self.read().checked.elapsed() < KEYS_RECHECK {
            return;
        }
        let mut state = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() < KEYS_RECHECK {
            return;
        }
        state.checked = Instant::now();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                if state.seen.take().is_some() {
                    tracing::error!(path = %path.display(), %error, "the keys file cannot be read; the keys read before stay in force");
                }
                return;
            }
        };
        let digest = key_digest(&text);
        if state.seen.as_deref() == Some(digest.as_str()) {
            return;
        }
        state.seen = Some(digest);
        match parse_keys(path, &text) {
            Ok(keys) => {
                tracing::info!(path = %path.display(), keys = keys.len(), "keys file re-read");
                state.keys = keys;
            }
            Err(error) => {
                tracing::error!(%error, "the keys file changed and cannot be used; the keys read before stay in force");
            }
        }
    }
}

/// Verifies bearer JWTs: HMAC with the shared secret, or a public key from the JWKS URL.
struct JwtVerifier {
    secret: Option<DecodingKey>,
    jwks: Option<Jwks>,
    issuer: Option<String>,
    audience: Option<String>,
    owner_claim: String,
    /// `jwt:` with `jwt_owners = "separate"`, else nothing.
    prefix: &'static str,
}

/// The JWKS document, fetched on first use and again when a token names a key id it does not
/// list: at most once a minute after a fetch that worked, once every five seconds after one
/// that failed. The fetch happens outside the lock, so tokens naming made-up key ids (or a
/// key server that hangs) cannot make every other request wait on it.
struct Jwks {
    url: String,
    client: reqwest::Client,
    state: std::sync::Mutex<JwksState>,
}

#[derive(Default)]
struct JwksState {
    keys: Option<JwkSet>,
    last_attempt: Option<Instant>,
    last_failed: bool,
}

const JWKS_REFRESH: Duration = Duration::from_secs(60);
const JWKS_RETRY: Duration = Duration::from_secs(5);

impl Jwks {
    fn state(&self) -> std::sync::MutexGuard<'_, JwksState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn key(&self, kid: Option<&str>) -> Result<DecodingKey, String> {
        let known = |set: &JwkSet| match kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        };
        let fetch_now = {
            let mut state = self.state();
            if let Some(jwk) = state.keys.as_ref().and_then(known) {
                return decoding_key(&jwk);
            }
            let gap = if state.last_failed {
                JWKS_RETRY
            } else {
                JWKS_REFRESH
            };
            let due = state.last_attempt.is_none_or(|at| at.elapsed() >= gap);
            if due {
                // Claimed before the fetch: requests meanwhile do not start their own.
                state.last_attempt = Some(Instant::now());
            }
            due
        };
        if !fetch_now {
            return Err("the token's key id is not among the JWKS keys".into());
        }
        let fetched = self.fetch().await;
        let mut state = self.state();
        state.last_failed = fetched.is_err();
        let set = fetched?;
        let found = known(&set);
        state.keys = Some(set);
        drop(state);
        decoding_key(&found.ok_or("the token's key id is not among the JWKS keys")?)
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let response = self
            .client
            .get(&self.url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| {
                tracing::warn!(error = %e, "could not fetch the JWKS");
                "the signing keys could not be fetched".to_owned()
            })?;
        response.json::<JwkSet>().await.map_err(|e| {
            tracing::warn!(error = %e, "the JWKS is not a valid key set");
            "the signing keys could not be read".to_owned()
        })
    }
}

fn decoding_key(jwk: &jsonwebtoken::jwk::Jwk) -> Result<DecodingKey, String> {
    DecodingKey::from_jwk(jwk).map_err(|e| format!("unusable JWKS key: {e}"))
}

const HMAC_ALGS: [Algorithm; 3] = [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];

impl JwtVerifier {
    fn new(a: &AuthSettings) -> Option<Self> {
        if a.jwt_secret.is_none() && a.jwks_url.is_none() {
            return None;
        }
        let jwks = a.jwks_url.as_ref().map(|url| Jwks {
            url: url.clone(),
            client: crate::outbound::client_builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            state: std::sync::Mutex::new(JwksState::default()),
        });
        if a.jwks_url.is_some() && a.jwt_issuer.is_none() && a.jwt_audience.is_none() {
            tracing::warn!(
                "[auth] jwks_url is set without jwt_issuer or jwt_audience: any token the \
                 identity provider signs, for any application, is accepted here"
            );
        }
        Some(Self {
            secret: a
                .jwt_secret
                .as_ref()
                .map(|s| DecodingKey::from_secret(s.expose_secret().as_bytes())),
            jwks,
            issuer: a.jwt_issuer.clone(),
            audience: a.jwt_audience.clone(),
            owner_claim: a.owner_claim.clone(),
            prefix: if a.jwt_owners == crate::config::JwtOwners::Separate {
                JWT_OWNER_PREFIX
            } else {
                ""
            },
        })
    }

    async fn verify(&self, token: &str) -> Result<Owner, String> {
        let head = jsonwebtoken::decode_header(token).map_err(|e| format!("malformed JWT: {e}"))?;
        // HMAC tokens only ever meet the shared secret and signed ones only the JWKS keys, so
        // a public key can never be used as an HMAC secret (algorithm confusion).
        let key = if HMAC_ALGS.contains(&head.alg) {
            self.secret
                .clone()
                .ok_or("HMAC-signed tokens are not accepted here")?
        } else {
            let jwks = self
                .jwks
                .as_ref()
                .ok_or("only HMAC-signed tokens are accepted here")?;
            jwks.key(head.kid.as_deref()).await?
        };
        let mut rules = Validation::new(head.alg);
        rules.leeway = 30;
        rules.set_required_spec_claims(&["exp"]);
        // A token is not valid before its `nbf`, when it has one.
        rules.validate_nbf = true;
        match &self.audience {
            Some(aud) => rules.set_audience(&[aud]),
            None => rules.validate_aud = false,
        }
        if let Some(iss) = &self.issuer {
            rules.set_issuer(&[iss]);
        }
        let claims =
            jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &rules)
                .map_err(|e| format!("invalid token: {e}"))?
                .claims;
        let name = match claims.get(&self.owner_claim) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => return Err(format!("the token has no '{}' claim", self.owner_claim)),
        };
        // Taken as written: " alice " is not alice, and no owner hides a control character.
        let usable = !name.is_empty()
            && name.trim() == name
            && name.chars().count() <= MAX_OWNER_CHARS
            && !name.chars().any(char::is_control);
        if !usable {
            return Err(format!(
                "the token's '{}' claim is not an owner name (empty, padded, over \
                 {MAX_OWNER_CHARS} characters or with control characters)",
                self.owner_claim
            ));
        }
        Owner::named(&format!("{}{name}", self.prefix))
            .ok_or_else(|| format!("the token has no '{}' claim", self.owner_claim))
    }
}

/// Everything `authenticate` needs, built once at start-up.
pub struct Authenticator {
    disabled: bool,
    /// Callers are told apart (keys file or JWT), rather than all being one local or shared
    /// owner.
    separate: bool,
    shared_key: Option<SecretString>,
    keys: KeysFileWatch,
    jwt: Option<JwtVerifier>,
    per_owner: Option<DefaultKeyedRateLimiter<Owner>>,
    failures: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_address: Option<DefaultKeyedRateLimiter<IpAddr>>,
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_minute: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    NonZeroU32::new(per_minute).map(|n| RateLimiter::keyed(Quota::per_minute(n)))
}

impl Authenticator {
    /// Reads the keys file; refuses a service with no way to authenticate unless disabled.
    pub fn from_settings(settings: &Settings) -> Result<Self, AuthSetupError> {
        let a = &settings.auth;
        if !a.disabled && settings.api_key.is_none() && !a.has_identities() {
            return Err(AuthSetupError::Unconfigured);
        }
        let tokens = a.jwt_secret.is_some() || a.jwks_url.is_some();
        if a.keys_file.is_some() && tokens && a.jwt_owners == crate::config::JwtOwners::Unset {
            return Err(AuthSetupError::MixedOwners);
        }
        let keys = KeysFileWatch::open(a.keys_file.clone())?;
        let separate = a.has_identities();
        // Credentials configured win over `disabled`, which only allows running without any.
        let configured = settings.api_key.is_some() || a.has_identities();
        Ok(Self {
            disabled: !configured,
            separate,
            shared_key: settings.api_key.clone(),
            keys,
            jwt: JwtVerifier::new(a),
            // One local or shared owner is not limited against itself.
            per_owner: limiter(a.requests_per_minute).filter(|_| separate),
            failures: limiter(a.failed_auth_per_minute),
            per_address: limiter(a.requests_per_minute_per_address),
        })
    }

    /// Whether callers are told apart, so per-owner limits apply.
    pub fn separates_owners(&self) -> bool {
        self.separate
    }

    async fn owner_of(&self, headers: &HeaderMap) -> Result<Owner, String> {
        if self.disabled {
            return Ok(Owner::local());
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        if let Some(token) = bearer.filter(|t| t.matches('.').count() == 2)
            && let Some(jwt) = &self.jwt
        {
            return jwt.verify(token).await;
        }
        let Some(key) = api_key.or(bearer).map(str::trim).filter(|k| !k.is_empty()) else {
            return Err(
                "Missing credentials: send an API key in the x-api-key header, or \
                        Authorization: Bearer <token>"
                    .into(),
            );
        };
        if let Some(shared) = &self.shared_key
            && constant_time_eq(key.as_bytes(), shared.expose_secret().as_bytes())
        {
            return Ok(Owner::local());
        }
        // Looked up by digest: the lookup's timing says nothing about the key itself.
        self.keys
            .owner_of(&key_digest(key))
            .ok_or_else(|| "Invalid API key".into())
    }

    /// Whether `owner` has lost its access: on a server whose only identities are the keys
    /// file, an owner none of its keys names any more. (With JWTs, an owner not in the file
    /// may still hold tokens, so nobody is taken for revoked.) Crons of a revoked owner do not
    /// fire.
    pub fn is_revoked(&self, owner: &Owner) -> bool {
        if self.disabled || self.jwt.is_some() || !self.keys.configured() {
            return false;
        }
        *owner != Owner::local() && !self.keys.names(owner)
    }

    /// Counts a failed attempt from `ip`; past the per-address budget, the answer is a 429
    /// with the wait instead of a 401 (valid credentials are still served: a client behind the
    /// same address as a guesser is not locked out, and keys are too long to guess anyway).
    fn refuse_failure(&self, ip: Option<IpAddr>, why: String) -> AppError {
        let (Some(ip), Some(failures)) = (ip, &self.failures) else {
            return AppError::Unauthorized(why);
        };
        // Addresses are unbounded: forget the ones whose budget is whole again.
        if failures.len() > 10_000 {
            failures.retain_recent();
        }
        match failures.check_key(&ip) {
            Ok(()) => AppError::Unauthorized(why),
            Err(not_until) => {
                tracing::warn!(%ip, "too many failed authentication attempts from one address");
                AppError::TooMany {
                    detail: "Too many failed authentication attempts from this address".into(),
                    retry_after: wait_secs(&not_until),
                }
            }
        }
    }

    fn within_address_rate(&self, ip: Option<IpAddr>) -> Result<(), AppError> {
        let (Some(ip), Some(limit)) = (ip, &self.per_address) else {
            return Ok(());
        };
        if limit.len() > 10_000 {
            limit.retain_recent();
        }
        limit.check_key(&ip).map_err(|not_until| AppError::TooMany {
            detail: "Too many requests from this address: slow down".into(),
            retry_after: wait_secs(&not_until),
        })
    }

    fn within_rate(&self, owner: &Owner) -> Result<(), AppError> {
        let Some(limit) = &self.per_owner else {
            return Ok(());
        };
        limit
            .check_key(owner)
            .map_err(|not_until| AppError::TooMany {
                detail: "Too many requests: slow down".into(),
                retry_after: wait_secs(&not_until),
            })
    }
}

/// Whole seconds (at least one) until a limiter lets the next request through.
fn wait_secs(not_until: &governor::NotUntil<governor::clock::QuantaInstant>) -> u64 {
    let now = governor::clock::Clock::now(&governor::clock::DefaultClock::default());
    not_until.wait_time_from(now).as_secs().max(1)
}

/// Compares secrets without leaking how many leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Paths open without credentials: health, server info, API docs, the research app's page
/// (what it then calls needs the key), and metrics unless the operator closed them.
fn is_public(path: &str, metrics_public: bool) -> bool {
    matches!(path, "/ok" | "/info" | "/openapi.json")
        || (path == "/metrics" && metrics_public)
        || path.starts_with("/docs")
        || super::web::PATHS.contains(&path)
}

/// Puts the caller's `Principal` on the request, or answers 401 (429 for an address that failed
/// too often, or an owner over its request rate).
pub(super) async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let auth = &state.auth;
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if req.method() != Method::OPTIONS
        && let Err(limited) = auth.within_address_rate(ip)
    {
        return limited.into_response();
    }
    let metrics_public = state.settings.telemetry.metrics_public;
    if req.method() == Method::OPTIONS || is_public(req.uri().path(), metrics_public) {
        return next.run(req).await;
    }
    match auth.owner_of(req.headers()).await {
        Ok(owner) => {
            if let Err(limited) = auth.within_rate(&owner) {
                return limited.into_response();
            }
            req.extensions_mut().insert(Principal { owner });
            next.run(req).await
        }
        Err(why) => auth.refuse_failure(ip, why).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_hex_sha256() {
        assert_eq!(
            key_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_keys_file_with_a_bad_digest_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("keys.toml");
        let bad = "[[keys]]\nowner = \"a\"\nsha256 = \"xyz\"\n";
        assert!(parse_keys(&path, bad).is_err());
        let nameless = "[[keys]]\nowner = \" \"\nsha256 = \"".to_owned() + &"a".repeat(64) + "\"\n";
        assert!(parse_keys(&path, &nameless).is_err());
    }

    fn keys_text(owner: &str, key: &str) -> String {
        format!(
            "[[keys]]\nowner = \"{owner}\"\nsha256 = \"{}\"\n",
            key_digest(key)
        )
    }

    /// Makes the next lookup re-read the file, as if `KEYS_RECHECK` had passed.
    fn due(watch: &KeysFileWatch) {
        let mut state = watch.state.write().unwrap();
        state.checked = Instant::now() - KEYS_RECHECK - Duration::from_millis(1);
    }

    #[test]
    fn a_change_is_read_even_when_the_modification_time_did_not_move() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("keys.toml");
        std::fs::write(&path, keys_text("alice", "alice-key")).unwrap();
        let stamp = std::fs::metadata(&path).unwrap().modified().unwrap();
        let watch = KeysFileWatch::open(Some(path.clone())).unwrap();
        // Caught mid-write: the file is empty. The keys stay; nobody is locked out.
        std::fs::write(&path, "").unwrap();
        due(&watch);
        assert!(watch.owner_of(&key_digest("alice-key")).is_some());
        // The write completes within the same tick of the file system's clock.
        std::fs::write(&path, keys_text("bob", "bob-key")).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(stamp).unwrap();
        due(&watch);
        assert!(watch.owner_of(&key_digest("alice-key")).is_none());
        assert!(watch.owner_of(&key_digest("bob-key")).is_some());
        // Revoking every key is said in so many words.
        std::fs::write(&path, "keys = []\n").unwrap();
        due(&watch);
        assert!(watch.owner_of(&key_digest("bob-key")).is_none());
    }

    #[test]
    fn an_empty_keys_file_is_refused_at_start() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("keys.toml");
        std::fs::write(&path, "\n  \n").unwrap();
        let error = KeysFileWatch::open(Some(path)).err().unwrap().to_string();
        assert!(error.contains("keys = []"), "{error}");
    }
}
