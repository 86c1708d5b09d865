//! Many users on one service: API keys and JWTs name owners, and owner B, trying every endpoint
//! on owner A's assistants, threads, runs, checkpoints, crons and store items, learns and
//! changes nothing (404, never 403 or the resource). Also: failed-authentication and request
//! rate limits, and the hygiene every request passes (Host, content type, read timeouts).

use crate::support;

use deep_research::api::auth::key_digest;
use deep_research::config::{AuthSettings, Settings};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;
use support::{Backend, TestApp, spawn_app_on, test_settings};
use tempfile::TempDir;

pub(crate) const ALICE: &str = "key-of-alice-0123456789";
pub(crate) const BOB: &str = "key-of-bob-0123456789";
const JWT_SECRET: &str = "a-shared-jwt-secret-for-tests";

/// A keys file for alice and bob (only digests stored) and settings that require keys.
pub(crate) fn keyed_settings(dir: &TempDir) -> Settings {
    let path = dir.path().join("keys.toml");
    let text = format!(
        "[[keys]]\nowner = \"alice\"\nsha256 = \"{}\"\n\n[[keys]]\nowner = \"bob\"\nsha256 = \"{}\"\n",
        key_digest(ALICE),
        key_digest(BOB)
    );
    std::fs::write(&path, text).unwrap();
    Settings {
        auth: AuthSettings {
            disabled: false,
            keys_file: Some(path),
            jwt_secret: Some(JWT_SECRET.into()),
            jwt_audience: Some("deep-research".into()),
            owner_claim: "sub".into(),
            jwt_owners: deep_research::config::JwtOwners::Separate,
            requests_per_minute: 0,
            failed_auth_per_minute: 0,
            ..Default::default()
        },
        ..test_settings()
    }
}

async fn keyed_app(dir: &TempDir, backend: Backend) -> Option<TestApp> {
    spawn_app_on(backend, keyed_settings(dir)).await
}

/// One caller: a key (or bearer token) and the app.
struct As<'a> {
    app: &'a TestApp,
    header: (&'static str, String),
}

impl<'a> As<'a> {
    fn key(app: &'a TestApp, key: &str) -> Self {
        Self {
            app,
            header: ("x-api-key", key.to_owned()),
        }
    }

    fn bearer(app: &'a TestApp, token: &str) -> Self {
        Self {
            app,
            header: ("authorization", format!("Bearer {token}")),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self
            .app
            .client
            .request(method, self.app.url(path))
            .header(self.header.0, &self.header.1);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = tokio::time::timeout(Duration::from_secs(20), req.send())
            .await
            .unwrap_or_else(|_| panic!("{path} did not answer"))
            .unwrap();
        let status = resp.status();
        let text = tokio::time::timeout(Duration::from_secs(20), resp.text())
            .await
            .unwrap_or_else(|_| panic!("{path} did not end"))
            .unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, body).await;
        assert!(status.is_success(), "{path}: {status} {v}");
        v
    }
}

/// Alice's world: an assistant, a thread with a finished run (so checkpoints and events), a
/// cron on the thread, a stateless cron and a store item.
struct World {
    assistant: String,
    thread: String,
    run: String,
    checkpoint: String,
    cron: String,
    stateless_cron: String,
}

async fn alice_builds(alice: &As<'_>) -> World {
    let assistant = alice
        .ok(
            Method::POST,
            "/assistants",
            Some(json!({"graph_id": "agent", "name": "alice's"})),
        )
        .await["assistant_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let thread = alice
        .ok(
            Method::POST,
            "/threads",
            Some(json!({"metadata": {"who": "alice"}})),
        )
        .await["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let input = json!({"messages": [{"role": "user", "content": "hi"}]});
    alice
        .ok(
            Method::POST,
            &format!("/threads/{thread}/runs/wait"),
            Some(json!({"assistant_id": assistant, "input": input, "stream_resumable": true})),
        )
        .await;
    let runs = alice
        .ok(Method::GET, &format!("/threads/{thread}/runs"), None)
        .await;
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let state = alice
        .ok(Method::GET, &format!("/threads/{thread}/state"), None)
        .await;
    let checkpoint = state["checkpoint"]["checkpoint_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cron = alice
        .ok(
            Method::POST,
            &format!("/threads/{thread}/runs/crons"),
            Some(json!({"assistant_id": assistant, "schedule": "0 0 1 1 *", "input": input})),
        )
        .await["cron_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stateless_cron = alice
        .ok(
            Method::POST,
            "/runs/crons",
            Some(json!({"assistant_id": "agent", "schedule": "0 0 1 1 *", "input": input})),
        )
        .await["cron_id"]
        .as_str()
        .unwrap()
        .to_owned();
    alice
        .ok(
            Method::PUT,
            "/store/items",
            Some(json!({"namespace": ["memories"], "key": "k", "value": {"who": "alice"}})),
        )
        .await;
    World {
        assistant,
        thread,
        run,
        checkpoint,
        cron,
        stateless_cron,
    }
}

/// Every endpoint family, as bob, on alice's resources: each answers 404 (or, for searches, a
/// list without them) and changes nothing.
async fn bob_tries_everything(bob: &As<'_>, w: &World) {
    let (a, t, r, cp, c, sc) = (
        &w.assistant,
        &w.thread,
        &w.run,
        &w.checkpoint,
        &w.cron,
        &w.stateless_cron,
    );
    let input = json!({"messages": [{"role": "user", "content": "mine now"}]});
    let run_body = json!({"assistant_id": "agent", "input": input});
    let probes: Vec<(Method, String, Option<Value>)> = vec![
        // Assistants.
        (Method::GET, format!("/assistants/{a}"), None),
        (
            Method::PATCH,
            format!("/assistants/{a}"),
            Some(json!({"name": "bob's"})),
        ),
        (Method::DELETE, format!("/assistants/{a}"), None),
        (
            Method::POST,
            format!("/assistants/{a}/versions"),
            Some(json!({})),
        ),
        (
            Method::POST,
            format!("/assistants/{a}/latest"),
            Some(json!({"version": 1})),
        ),
        (Method::GET, format!("/assistants/{a}/graph"), None),
        (Method::GET, format!("/assistants/{a}/schemas"), None),
        (Method::GET, format!("/assistants/{a}/subgraphs"), None),
        // Threads, state and history.
        (Method::GET, format!("/threads/{t}"), None),
        (
            Method::PATCH,
            format!("/threads/{t}"),
            Some(json!({"metadata": {"who": "bob"}})),
        ),
        (Method::DELETE, format!("/threads/{t}"), None),
        (Method::POST, format!("/threads/{t}/copy"), None),
        (Method::GET, format!("/threads/{t}/state"), None),
        (Method::GET, format!("/threads/{t}/report"), None),
        (Method::GET, format!("/threads/{t}/state/{cp}"), None),
        (
            Method::POST,
            format!("/threads/{t}/state/checkpoint"),
            Some(json!({"checkpoint": {"checkpoint_id": cp}})),
        ),
        (
            Method::POST,
            format!("/threads/{t}/state"),
            Some(json!({"values": {"messages": []}})),
        ),
        (
            Method::POST,
            format!("/threads/{t}/history"),
            Some(json!({})),
        ),
        (Method::GET, format!("/threads/{t}/history"), None),
        (Method::GET, format!("/threads/{t}/stream"), None),
        (
            Method::POST,
            format!("/threads/{t}/commands"),
            Some(json!({"id": 1, "method": "state.get", "params": {"namespace": []}})),
        ),
        (
            Method::POST,
            format!("/threads/{t}/commands"),
            Some(
                json!({"id": 2, "method": "run.start", "params": {"assistant_id": "agent", "input": input}}),
            ),
        ),
        (
            Method::POST,
            format!("/threads/{t}/stream/events"),
            Some(json!({"channels": ["values"]})),
        ),
        // Runs.
        (Method::GET, format!("/threads/{t}/runs"), None),
        (
            Method::POST,
            format!("/threads/{t}/runs"),
            Some(run_body.clone()),
        ),
        (
            Method::POST,
            format!("/threads/{t}/runs/stream"),
            Some(run_body.clone()),
        ),
        (
            Method::POST,
            format!("/threads/{t}/runs/wait"),
            Some(run_body.clone()),
        ),
        (
            Method::POST,
            format!("/threads/{t}/runs"),
            Some(json!({"assistant_id": "agent", "input": input, "if_not_exists": "create"})),
        ),
        (Method::GET, format!("/threads/{t}/runs/{r}"), None),
        (Method::DELETE, format!("/threads/{t}/runs/{r}"), None),
        (Method::GET, format!("/threads/{t}/runs/{r}/join"), None),
        (Method::POST, format!("/threads/{t}/runs/{r}/cancel"), None),
        (Method::GET, format!("/threads/{t}/runs/{r}/stream"), None),
        (
            Method::POST,
            "/runs/cancel".into(),
            Some(json!({"run_ids": [r]})),
        ),
        (
            Method::POST,
            "/runs/cancel".into(),
            Some(json!({"thread_id": t, "run_ids": [r]})),
        ),
        // Crons.
        (Method::GET, format!("/runs/crons/{c}"), None),
        (
            Method::PATCH,
            format!("/runs/crons/{c}"),
            Some(json!({"enabled": false})),
        ),
        (Method::DELETE, format!("/runs/crons/{c}"), None),
        (Method::DELETE, format!("/runs/crons/{sc}"), None),
        (
            Method::POST,
            format!("/threads/{t}/runs/crons"),
            Some(json!({"assistant_id": "agent", "schedule": "* * * * *"})),
        ),
        (
            Method::POST,
            "/runs/crons".into(),
            Some(json!({"assistant_id": a, "schedule": "* * * * *"})),
        ),
    ];
    for (method, path, body) in probes {
        let (status, v) = bob.call(method.clone(), &path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {v}");
        assert!(v["detail"].is_string(), "{method} {path}: {v}");
        let text = v.to_string();
        assert!(
            !text.contains("alice") && !text.contains("who"),
            "{method} {path} leaks: {text}"
        );
    }
    // Another owner's item reads as a missing one does.
    let v = bob
        .ok(Method::GET, "/store/items?namespace=memories&key=k", None)
        .await;
    assert_eq!(v, Value::Null);
    // Searches and counts show none of alice's.
    let listed = [
        (Method::POST, "/assistants/search", json!({"limit": 100})),
        (Method::POST, "/threads/search", json!({"limit": 100})),
        (Method::POST, "/runs/crons/search", json!({"limit": 100})),
        (
            Method::POST,
            "/store/items/search",
            json!({"namespace_prefix": []}),
        ),
        (Method::POST, "/store/namespaces", json!({})),
    ];
    for (method, path, body) in listed {
        let v = bob.ok(method, path, Some(body)).await;
        let text = v.to_string();
        assert!(
            !text.contains(a)
                && !text.contains(t)
                && !text.contains(c)
                && !text.contains("memories"),
            "{path} shows alice's: {text}"
        );
    }
    let v = bob
        .ok(Method::POST, "/threads/count", Some(json!({})))
        .await;
    assert_eq!(v, 0, "bob has no threads");
    let v = bob
        .ok(Method::POST, "/runs/crons/count", Some(json!({})))
        .await;
    assert_eq!(v, 0, "bob has no crons");
    let v = bob
        .ok(Method::POST, "/assistants/count", Some(json!({})))
        .await;
    assert_eq!(
        v, 5,
        "bob sees the system assistants of the five test graphs only"
    );
    // Pruning alice's thread prunes nothing; creating on her ids is a conflict, not a copy.
    let v = bob
        .ok(
            Method::POST,
            "/threads/prune",
            Some(json!({"thread_ids": [t]})),
        )
        .await;
    assert_eq!(v["pruned_count"], 0);
    let (status, v) = bob
        .call(
            Method::POST,
            "/threads",
            Some(json!({"thread_id": t, "if_exists": "do_nothing"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let (status, v) = bob
        .call(
            Method::POST,
            "/assistants",
            Some(json!({"graph_id": "agent", "assistant_id": a, "if_exists": "do_nothing"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    // Bob's own item under the same namespace and key is his alone.
    bob.ok(
        Method::PUT,
        "/store/items",
        Some(json!({"namespace": ["memories"], "key": "k", "value": {"mine": "bob"}})),
    )
    .await;
    let (status, _) = bob
        .call(
            Method::DELETE,
            "/store/items",
            Some(json!({"namespace": ["memories"], "key": "k"})),
        )
        .await;
    assert!(status.is_success());
}

/// Alice's world after bob's attempts: all there, unchanged.
async fn alice_checks(alice: &As<'_>, w: &World) {
    let a = alice
        .ok(Method::GET, &format!("/assistants/{}", w.assistant), None)
        .await;
    assert_eq!(
        (a["name"].as_str(), a["version"].as_i64()),
        (Some("alice's"), Some(1))
    );
    let t = alice
        .ok(Method::GET, &format!("/threads/{}", w.thread), None)
        .await;
    assert_eq!(t["metadata"]["who"], "alice");
    assert_eq!(t["status"], "idle", "bob started no run on it");
    let runs = alice
        .ok(Method::GET, &format!("/threads/{}/runs", w.thread), None)
        .await;
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    let cron = alice
        .ok(Method::GET, &format!("/runs/crons/{}", w.cron), None)
        .await;
    assert_eq!(cron["enabled"], true);
    assert_eq!(cron["user_id"], "alice");
    alice
        .ok(
            Method::GET,
            &format!("/runs/crons/{}", w.stateless_cron),
            None,
        )
        .await;
    let item = alice
        .ok(Method::GET, "/store/items?namespace=memories&key=k", None)
        .await;
    assert_eq!(item["value"]["who"], "alice");
    let threads = alice
        .ok(Method::POST, "/threads/count", Some(json!({})))
        .await;
    assert_eq!(threads, 1);
}

async fn no_leaks_between_owners(backend: Backend) {
    let dir = TempDir::new().unwrap();
    let Some(app) = keyed_app(&dir, backend).await else {
        return;
    };
    let (alice, bob) = (As::key(&app, ALICE), As::key(&app, BOB));
    let world = alice_builds(&alice).await;
    bob_tries_everything(&bob, &world).await;
    alice_checks(&alice, &world).await;
    // System assistants: readable by both, changed by neither.
    for who in [&alice, &bob] {
        who.ok(Method::GET, "/assistants/agent", None).await;
        for (method, body) in [
            (
                Method::PATCH,
                Some(json!({"config": {"configurable": {"x": 1}}})),
            ),
            (Method::DELETE, None),
        ] {
            let (status, v) = who.call(method, "/assistants/agent", body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_sees_and_touches_nothing_of_another_on_sqlite() {
    no_leaks_between_owners(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_sees_and_touches_nothing_of_another_on_postgres() {
    no_leaks_between_owners(Backend::Postgres).await;
}

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

#[tokio::test]
async fn credentials_are_checked_and_name_the_owner() {
    let dir = TempDir::new().unwrap();
    let app = keyed_app(&dir, Backend::Sqlite).await.unwrap();
    let nobody = app
        .client
        .post(app.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(nobody.status(), 401);
    let v: Value = nobody.json().await.unwrap();
    assert!(v["detail"].as_str().unwrap().contains("x-api-key"), "{v}");
    let (status, v) = As::key(&app, "wrong")
        .call(Method::POST, "/threads", Some(json!({})))
        .await;
    assert_eq!(
        (status, v["detail"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("Invalid API key"))
    );
    // Keys work as bearer tokens too (some clients only send Authorization).
    As::bearer(&app, ALICE)
        .ok(Method::POST, "/threads/count", Some(json!({})))
        .await;
    // Health and docs need nothing.
    for path in ["/ok", "/info", "/openapi.json"] {
        assert_eq!(
            app.client.get(app.url(path)).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }

    // A JWT's `sub` is its owner: carol's thread is not alice's.
    let aud = "deep-research";
    let carol = hs256(json!({"sub": "carol", "aud": aud, "exp": in_an_hour()}));
    let carols = As::bearer(&app, &carol);
    let t = carols.ok(Method::POST, "/threads", Some(json!({}))).await;
    let path = format!("/threads/{}", t["thread_id"].as_str().unwrap());
    carols.ok(Method::GET, &path, None).await;
    let (status, _) = As::key(&app, ALICE).call(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let refused = [
        (
            "expired",
            hs256(json!({"sub": "carol", "aud": aud, "exp": 1_000_000})),
        ),
        ("no expiry", hs256(json!({"sub": "carol", "aud": aud}))),
        (
            "another audience",
            hs256(json!({"sub": "carol", "aud": "other", "exp": in_an_hour()})),
        ),
        (
            "no subject",
            hs256(json!({"aud": aud, "exp": in_an_hour()})),
        ),
        (
            "another secret",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &json!({"sub": "carol", "aud": aud, "exp": in_an_hour()}),
                &jsonwebtoken::EncodingKey::from_secret(b"not-the-secret"),
            )
            .unwrap(),
        ),
        // alg "none": header {"alg":"none"}, no signature.
        (
            "unsigned",
            format!(
                "eyJhbGciOiJub25lIn0.{}.",
                support::base64_url(
                    json!({"sub": "carol", "aud": aud, "exp": in_an_hour()})
                        .to_string()
                        .as_bytes()
                )
            ),
        ),
    ];
    for (why, token) in refused {
        let (status, v) = As::bearer(&app, &token)
            .call(Method::POST, "/threads/count", Some(json!({})))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {v}");
    }
}

/// An Ed25519 key made for this test only, and its public half as a JWK.
const ED_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+YeDw2JMT1b05xewEb1qjcOEBaR4vMAAIzcpRdBt5Z
-----END PRIVATE KEY-----
";
const ED_PUBLIC_X: &str = "RKRnTPG-HK0JSp8-eO6RqsGfVGjv7kLoexHeAsPfcPM";

#[tokio::test]
async fn tokens_signed_by_a_jwks_key_are_accepted() {
    // The identity provider's JWKS, on a real HTTP server.
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": ED_PUBLIC_X, "kid": "k1", "alg": "EdDSA", "use": "sig"}]});
    let router = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings = Settings {
        auth: AuthSettings {
            jwks_url: Some(jwks_url),
            jwt_issuer: Some("https://idp.example".into()),
            owner_claim: "org".into(),
            ..Default::default()
        },
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let sign = |kid: &str, claims: Value| {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some(kid.into());
        let key = jsonwebtoken::EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap();
        jsonwebtoken::encode(&header, &claims, &key).unwrap()
    };
    let iss = "https://idp.example";
    // Two users of one organisation share its threads (owner_claim = "org").
    let ann = sign(
        "k1",
        json!({"sub": "ann", "org": "acme", "iss": iss, "exp": in_an_hour()}),
    );
    let ben = sign(
        "k1",
        json!({"sub": "ben", "org": "acme", "iss": iss, "exp": in_an_hour()}),
    );
    let t = As::bearer(&app, &ann)
        .ok(Method::POST, "/threads", Some(json!({})))
        .await;
    let path = format!("/threads/{}", t["thread_id"].as_str().unwrap());
    As::bearer(&app, &ben).ok(Method::GET, &path, None).await;
    for (why, token) in [
        (
            "unknown key id",
            sign(
                "k2",
                json!({"org": "acme", "iss": iss, "exp": in_an_hour()}),
            ),
        ),
        (
            "another issuer",
            sign(
                "k1",
                json!({"org": "acme", "iss": "https://evil", "exp": in_an_hour()}),
            ),
        ),
        // An HMAC token cannot use the public key as its secret: no secret is configured.
        (
            "hmac",
            hs256(json!({"org": "acme", "iss": iss, "exp": in_an_hour()})),
        ),
    ] {
        let (status, v) = As::bearer(&app, &token)
            .call(Method::GET, &path, None)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {v}");
    }
}

#[tokio::test]
async fn guessing_keys_is_slowed_and_owners_are_rate_limited() {
    let dir = TempDir::new().unwrap();
    let mut settings = keyed_settings(&dir);
    settings.auth.failed_auth_per_minute = 5;
    settings.auth.requests_per_minute = 20;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let mut statuses = vec![];
    for i in 0..8 {
        let (status, _) = As::key(&app, &format!("guess-{i}"))
            .call(Method::POST, "/threads/count", Some(json!({})))
            .await;
        statuses.push(status.as_u16());
    }
    // Five failures a minute are answered 401; past them, 429 with the wait.
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429, 429]);
    // A right key from the same address is still served (a client behind the guesser's NAT).
    As::key(&app, ALICE)
        .ok(Method::POST, "/threads/count", Some(json!({})))
        .await;

    let dir = TempDir::new().unwrap();
    let mut settings = keyed_settings(&dir);
    settings.auth.requests_per_minute = 20;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let bob = As::key(&app, BOB);
    for _ in 0..20 {
        bob.ok(Method::POST, "/threads/count", Some(json!({})))
            .await;
    }
    let resp = app
        .client
        .post(app.url("/threads/count"))
        .header("x-api-key", BOB)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Alice has her own budget.
    As::key(&app, ALICE)
        .ok(Method::POST, "/threads/count", Some(json!({})))
        .await;

    // Per address, public routes included (off by default: a proxy would share one address).
    let mut settings = test_settings();
    settings.auth.requests_per_minute_per_address = 3;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let mut statuses = vec![];
    for _ in 0..4 {
        let resp = app.client.get(app.url("/ok")).send().await.unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test]
async fn a_server_with_no_credentials_refuses_to_start_unless_told() {
    let settings = Settings {
        auth: AuthSettings::default(),
        ..test_settings()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let store = std::sync::Arc::new(
        deep_research::store::connect("sqlite::memory:", 1, Default::default())
            .await
            .unwrap(),
    );
    let error = deep_research::app::Application::with_store(
        listener,
        store,
        settings,
        support::graphs::registry(),
    )
    .await
    .err()
    .expect("refused");
    assert!(error.to_string().contains("--no-auth"), "{error}");
}

/// Requests that would create something, sent the ways a hostile page or client might: each
/// is refused and nothing is created.
#[tokio::test]
async fn hostile_requests_are_refused_and_change_nothing() {
    let app = support::spawn_app().await;
    // A form or text body is what any web page may send cross-origin without a preflight.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let resp = app
            .client
            .post(app.url("/threads"))
            .header("content-type", content_type)
            .body(r#"{"metadata": {}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 415, "{content_type}");
    }
    // DNS rebinding: a page on another name pointed at 127.0.0.1.
    let resp = app
        .client
        .post(app.url("/threads"))
        .header("host", "evil.example:2024")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let count: Value = app
        .client
        .post(app.url("/threads/count"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(count, 0);
}

fn raw_connect(app: &TestApp) -> std::net::TcpStream {
    let addr = app.address.trim_start_matches("http://");
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_hold_connections() {
    let settings = Settings {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(500),
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let app = std::sync::Arc::new(app);
    let a = app.clone();
    tokio::task::spawn_blocking(move || {
        // Headers that never finish: the server hangs up.
        let mut s = raw_connect(&a);
        s.write_all(b"POST /threads HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
        let started = std::time::Instant::now();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        assert!(started.elapsed() < Duration::from_secs(5), "held {:?}", started.elapsed());
        // A body announced and never sent: 408.
        let mut s = raw_connect(&a);
        s.write_all(
            b"POST /threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
        )
        .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    })
    .await
    .unwrap();
}

async fn start_slow(who: &As<'_>, secs: f64) -> (StatusCode, Value) {
    let t = who.ok(Method::POST, "/threads", Some(json!({}))).await;
    let tid = t["thread_id"].as_str().unwrap().to_owned();
    who.call(
        Method::POST,
        &format!("/threads/{tid}/runs"),
        Some(json!({"assistant_id": "slow", "input": {"messages": []},
                    "config": {"configurable": {"sleep_secs": secs}}})),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_owner_has_run_limits_and_the_queue_is_bounded() {
    let dir = TempDir::new().unwrap();
    let mut settings = keyed_settings(&dir);
    settings.run_limits.owner_max_inflight_runs = 2;
    settings.run_limits.owner_runs_per_minute = 3;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let (alice, bob) = (As::key(&app, ALICE), As::key(&app, BOB));
    for _ in 0..2 {
        let (status, v) = start_slow(&alice, 30.0).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (status, v) = start_slow(&alice, 30.0).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("at once"), "{v}");
    // Bob is not held back by alice.
    let (status, v) = start_slow(&bob, 0.01).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Alice's third run of the minute (the refused one did not count) is her last.
    let threads = alice
        .ok(Method::POST, "/threads/search", Some(json!({"limit": 10})))
        .await;
    for t in threads.as_array().unwrap() {
        let tid = t["thread_id"].as_str().unwrap();
        for run in alice
            .ok(Method::GET, &format!("/threads/{tid}/runs"), None)
            .await
            .as_array()
            .unwrap()
        {
            let rid = run["run_id"].as_str().unwrap();
            alice
                .call(
                    Method::POST,
                    &format!("/threads/{tid}/runs/{rid}/cancel?wait=1"),
                    None,
                )
                .await;
        }
    }
    let (status, v) = start_slow(&alice, 0.01).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (status, v) = start_slow(&alice, 0.01).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("last minute"), "{v}");

    // The service-wide queue: one waiting run at most.
    let mut settings = test_settings();
    settings.run_limits.max_pending_runs = 1;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let local = As::key(&app, "unused");
    let t = local.ok(Method::POST, "/threads", Some(json!({}))).await;
    let tid = t["thread_id"].as_str().unwrap();
    let body = json!({"assistant_id": "slow", "input": {"messages": []}, "multitask_strategy": "enqueue",
                      "config": {"configurable": {"sleep_secs": 30}}});
    let path = format!("/threads/{tid}/runs");
    local.ok(Method::POST, &path, Some(body.clone())).await;
    // The first is claimed and running; the second waits behind it; a third finds the queue full.
    tokio::time::sleep(Duration::from_millis(500)).await;
    local.ok(Method::POST, &path, Some(body.clone())).await;
    let (status, v) = local.call(Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("queue is full"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_deadline_is_stopped_with_the_reason() {
    let mut settings = test_settings();
    settings.run_limits.run_deadline = Some(Duration::from_secs(1));
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let local = As::key(&app, "unused");
    let t = local.ok(Method::POST, "/threads", Some(json!({}))).await;
    let tid = t["thread_id"].as_str().unwrap();
    let started = std::time::Instant::now();
    local
        .call(
            Method::POST,
            &format!("/threads/{tid}/runs/wait"),
            Some(json!({"assistant_id": "slow", "input": {"messages": []},
                        "config": {"configurable": {"sleep_secs": 30}}})),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let runs = local
        .ok(Method::GET, &format!("/threads/{tid}/runs"), None)
        .await;
    assert_eq!(runs[0]["status"], "error", "{runs}");
    let thread = local
        .ok(Method::GET, &format!("/threads/{tid}"), None)
        .await;
    assert_eq!(thread["error"]["error"], "RunDeadlineExceeded", "{thread}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_past_its_daily_spend_cannot_start_runs() {
    let dir = TempDir::new().unwrap();
    let mut settings = keyed_settings(&dir);
    settings.run_limits.owner_daily_usd = 1.0;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let (alice, bob) = (As::key(&app, ALICE), As::key(&app, BOB));
    let (status, v) = start_slow(&alice, 0.01).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // What alice's research runs spent today, as the executor records it.
    let run_id = v["run_id"].as_str().unwrap().parse().unwrap();
    let thread_id = v["thread_id"].as_str().unwrap();
    let now = deep_research::time::Timestamp::now();
    let owner = deep_research::store::Owner::named("alice").unwrap();
    app.store
        .record_spend(run_id, &owner, 50_000, 1.25, now)
        .await
        .unwrap();
    let (status, v) = start_slow(&alice, 0.01).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("daily limit"), "{v}");
    let (status, v) = start_slow(&bob, 0.01).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // The record outlives alice's thread (deleting threads does not reset the day).
    let tid = thread_id.to_string();
    alice
        .call(Method::DELETE, &format!("/threads/{tid}"), None)
        .await;
    let (status, _) = start_slow(&alice, 0.01).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}
