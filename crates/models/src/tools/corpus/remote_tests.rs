//! The served embedder against a model server over real TCP: a stand-in for OpenAI's
//! `/v1/embeddings` (its request and answer shapes, its error body), since the real one is paid.

use super::super::{Corpus, CorpusConfig, Embedder};
use crate::llm::{ProviderConfig, ProviderKind};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::post};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the stand-in was asked, and how many calls it should answer 503 first.
#[derive(Default)]
struct Seen {
    bodies: Mutex<Vec<Value>>,
    keys: Mutex<Vec<String>>,
    busy_first: AtomicUsize,
}

/// Words of three topics; a text's vector counts its words of each (and a fourth, constant
/// dimension, so no vector is zero). Crude, but it places "motor vehicles" near the sedan.
const TOPICS: [&[&str]; 3] = [
    &[
        "sedan",
        "motor",
        "vehicles",
        "automobiles",
        "tyres",
        "engine",
    ],
    &["dough", "loaf", "bake", "flour", "yeast", "bread"],
    &["sea", "moon", "tides", "harbours", "sailors", "oceans"],
];

fn vector(text: &str) -> Vec<f32> {
    let lower = text.to_lowercase();
    let mut v: Vec<f32> = TOPICS
        .iter()
        .map(|words| words.iter().filter(|w| lower.contains(*w)).count() as f32)
        .collect();
    v.push(0.1);
    v
}

async fn embeddings(
    State(seen): State<Arc<Seen>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let key = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.keys.lock().unwrap().push(key.clone());
    seen.bodies.lock().unwrap().push(body.clone());
    if key != "Bearer sk-test" {
        let error = json!({"error": {"message": "Incorrect API key provided: sk-wr***.",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
        return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
    }
    if seen
        .busy_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        let error =
            json!({"error": {"message": "The server is overloaded", "type": "server_error"}});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(error)).into_response();
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(String::from))
            .collect(),
        _ => vec![],
    };
    // Listed last to first, each with its index, as the API allows.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": vector(text)}))
        .collect();
    Json(
        json!({"object": "list", "data": data, "model": body["model"],
        "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
    )
    .into_response()
}

/// Starts the stand-in on its own thread and runtime; returns its base URL.
fn serve(seen: Arc<Seen>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = Router::new()
                .route("/v1/embeddings", post(embeddings))
                .with_state(seen);
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    format!("http://{addr}/v1")
}

fn provider(base_url: &str, key: &str) -> ProviderConfig {
    ProviderConfig::new(ProviderKind::Openai, base_url, Some(key.to_owned().into()))
}

fn write(dir: &std::path::Path, rel: &str, text: &str) {
    std::fs::write(dir.join(rel), text).unwrap();
}

#[test]
fn a_served_model_makes_the_search_hybrid() {
    let seen = Arc::new(Seen::default());
    let url = serve(seen.clone());
    let model = Embedder::served("fake", provider(&url, "sk-test"), "text-embedding-3-small");
    let model = Arc::new(model.unwrap());
    assert_eq!(model.label(), "fake:text-embedding-3-small");
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "cars.md",
        "# Cars\n\nA sedan has four doors and an engine.",
    );
    write(
        docs.path(),
        "bread.md",
        "# Bread\n\nKnead the dough, shape the loaf, bake it.",
    );
    write(
        docs.path(),
        "tides.md",
        "# Tides\n\nThe moon pulls on the sea twice a day.",
    );
    let config = CorpusConfig {
        path: docs.path().display().to_string(),
        base_url: String::new(),
        description: String::new(),
    };
    let hour = Duration::from_secs(3600);
    let corpus = Corpus::open_with("docs", &config, index.path(), hour, Some(model)).unwrap();
    assert_eq!(corpus.embed_pending().unwrap(), 3);
    let words = corpus
        .search_ranked("motor vehicles", "", 3, false)
        .unwrap();
    assert!(words.is_empty(), "{words:#?}");
    let hybrid = corpus.search_blocking("motor vehicles", "", 3).unwrap();
    assert!(hybrid[0].url.contains("/cars.md#"), "{hybrid:#?}");

    let bodies = seen.bodies.lock().unwrap();
    assert_eq!(bodies[0]["model"], "text-embedding-3-small");
    assert_eq!(bodies[0]["input"].as_array().map(Vec::len), Some(3));
    assert_eq!(bodies.last().unwrap()["input"], json!(["motor vehicles"]));
    assert!(
        seen.keys
            .lock()
            .unwrap()
            .iter()
            .all(|k| k == "Bearer sk-test")
    );
}

#[test]
fn a_busy_server_is_asked_again_and_a_refusal_is_reported_in_its_words() {
    let seen = Arc::new(Seen::default());
    let url = serve(seen.clone());
    seen.busy_first.store(1, Ordering::SeqCst);
    let model = Embedder::served("fake", provider(&url, "sk-test"), "m").unwrap();
    let vectors = model.embed(&["a sedan", "a loaf"]).unwrap();
    assert_eq!(vectors.len(), 2);
    assert!(vectors[0][0] > 0.9 && vectors[1][1] > 0.9, "{vectors:?}");
    assert_eq!(
        seen.bodies.lock().unwrap().len(),
        2,
        "one 503, then the answer"
    );

    let wrong = Embedder::served("fake", provider(&url, "sk-wrong"), "m").unwrap();
    let err = wrong.embed(&["a sedan"]).unwrap_err().to_string();
    assert!(
        err.contains("HTTP 401") && err.contains("Incorrect API key"),
        "{err}"
    );

    // Nothing listens: said so, with the address, after the tries.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let nowhere = Embedder::served("fake", provider(&gone, "sk-test"), "m").unwrap();
    let err = nowhere.embed(&["a sedan"]).unwrap_err().to_string();
    assert!(err.contains(&gone), "{err}");
}

/// A search still answers, by words, when the model server fails while it is asked.
#[test]
fn a_search_goes_on_by_words_when_the_server_fails() {
    let seen = Arc::new(Seen::default());
    let url = serve(seen.clone());
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "cars.md",
        "# Cars\n\nA sedan has four doors and an engine.",
    );
    let config = CorpusConfig {
        path: docs.path().display().to_string(),
        base_url: String::new(),
        description: String::new(),
    };
    let good = Arc::new(Embedder::served("fake", provider(&url, "sk-test"), "m").unwrap());
    let hour = Duration::from_secs(3600);
    let corpus = Corpus::open_with("docs", &config, index.path(), hour, Some(good)).unwrap();
    assert_eq!(corpus.embed_pending().unwrap(), 1);
    drop(corpus);
    // The same model's vectors, but the key is now refused: the query cannot be embedded.
    let refused = Arc::new(Embedder::served("fake", provider(&url, "sk-wrong"), "m").unwrap());
    let corpus = Corpus::open_with("docs", &config, index.path(), hour, Some(refused)).unwrap();
    assert_eq!(corpus.vectors(), 1);
    let hits = corpus.search_blocking("sedan doors", "", 3).unwrap();
    assert!(hits[0].url.contains("/cars.md#"), "{hits:#?}");
}
