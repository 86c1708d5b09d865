//! Sentence embeddings from a model server: an OpenAI-compatible `POST {base_url}/embeddings`
//! (OpenAI, Ollama, llama.cpp's `llama-server --embeddings`, vLLM, LM Studio), the other choice
//! beside the in-process model. `[search.local] embedding_model = "provider:model"` names one of
//! `[providers]` (of kind `openai`) and the model it serves.
//!
//! Corpus search is synchronous code (a blocking task, a background thread, the `eval` command
//! inside the main runtime), and an async client cannot be driven from there: the calls run on
//! a thread of their own with a one-thread runtime, and a caller waits for its answer on a
//! channel, which is allowed anywhere.

use crate::llm::ProviderConfig;
use secrecy::ExposeSecret;
use serde::Deserialize;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

/// Texts sent in one request: OpenAI takes 2,048 inputs, llama.cpp fewer tokens per batch.
pub const BATCH: usize = 32;

/// One request's time, connection to last byte.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Tries of a request the server answered busy (429, 5xx) or that failed to connect.
const TRIES: u32 = 3;

/// A request and where its answer goes.
type Job = (Vec<String>, mpsc::Sender<Result<Vec<Vec<f32>>, String>>);

/// The client: a channel to the thread that makes the calls.
pub struct Remote {
    jobs: Mutex<mpsc::Sender<Job>>,
}

/// Where to ask and what for.
#[derive(Clone)]
struct Target {
    url: String,
    model: String,
    provider: ProviderConfig,
}

impl Remote {
    /// Starts the thread that calls `provider`'s `/embeddings` for `model`.
    pub fn start(provider: ProviderConfig, model: &str) -> Result<Self, String> {
        let client = crate::llm::http_client().map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for embedding calls: {e}"))?;
        let target = Target {
            url: format!("{}/embeddings", provider.base_url.trim_end_matches('/')),
            model: model.to_owned(),
            provider,
        };
        let (jobs, incoming) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("embedding-calls".into())
            .spawn(move || {
                // Ends when the last sender (the `Remote`) is dropped.
                for (texts, reply) in incoming {
                    let answer = runtime.block_on(call(&client, &target, &texts));
                    let _ = reply.send(answer);
                }
            })
            .map_err(|e| format!("a thread for embedding calls: {e}"))?;
        Ok(Self {
            jobs: Mutex::new(jobs),
        })
    }

    /// One unit-length vector a text, in order; one request per `BATCH` texts.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let (reply, answer) = mpsc::channel();
            let owned = batch.iter().map(|t| (*t).to_owned()).collect();
            self.jobs
                .lock()
                .map_err(|_| "the embedding client was poisoned by a panic".to_owned())?
                .send((owned, reply))
                .map_err(|_| "the embedding thread has stopped".to_owned())?;
            let vectors = answer
                .recv()
                .map_err(|_| "the embedding thread has stopped".to_owned())??;
            out.extend(vectors);
        }
        Ok(out)
    }
}

/// The part of an embeddings answer read here.
#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

/// One request, tried again while the server says it is busy or cannot be reached.
async fn call(
    client: &reqwest::Client,
    target: &Target,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, String> {
    let mut last = String::new();
    for attempt in 0..TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        match request(client, target, texts).await {
            Ok(vectors) => return Ok(vectors),
            Err(Failure::Busy(why)) => last = why,
            Err(Failure::Final(why)) => return Err(why),
        }
    }
    Err(last)
}

enum Failure {
    /// Worth another try: 429, 5xx, a connection that failed or timed out.
    Busy(String),
    Final(String),
}

async fn request(
    client: &reqwest::Client,
    target: &Target,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, Failure> {
    let where_ = format!("{} ({})", target.url, target.model);
    let body = serde_json::json!({
        "model": target.model,
        "input": texts,
        "encoding_format": "float",
    });
    let mut builder = client.post(&target.url).timeout(TIMEOUT).json(&body);
    if let Some(key) = &target.provider.api_key {
        builder = builder.bearer_auth(key.expose_secret());
    }
    for (name, value) in &target.provider.headers {
        builder = builder.header(name.as_str(), value.expose_secret());
    }
    let response = builder.send().await.map_err(|e| {
        let why = format!("{where_}: {}", with_causes(&e));
        if e.is_connect() || e.is_timeout() {
            Failure::Busy(why)
        } else {
            Failure::Final(why)
        }
    })?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| Failure::Busy(format!("{where_}: reading the answer: {e}")))?;
    if !status.is_success() {
        let why = format!(
            "{where_}: HTTP {}: {}",
            status.as_u16(),
            error_message(&text)
        );
        return Err(if status.as_u16() == 429 || status.is_server_error() {
            Failure::Busy(why)
        } else {
            Failure::Final(why)
        });
    }
    let answer: Answer = serde_json::from_str(&text)
        .map_err(|e| Failure::Final(format!("{where_}: not an embeddings answer: {e}")))?;
    vectors_in_order(answer, texts.len()).map_err(|why| Failure::Final(format!("{where_}: {why}")))
}

/// The answer's vectors in the order of the inputs, each of length 1 (not every server
/// normalises), all of one width.
fn vectors_in_order(answer: Answer, asked: usize) -> Result<Vec<Vec<f32>>, String> {
    if answer.data.len() != asked {
        return Err(format!("{} vectors for {asked} texts", answer.data.len()));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; asked];
    for (position, item) in answer.data.into_iter().enumerate() {
        let at = item.index.unwrap_or(position);
        let slot = slots
            .get_mut(at)
            .ok_or_else(|| format!("a vector for input {at} of {asked}"))?;
        if slot.is_some() {
            return Err(format!("two vectors for input {at}"));
        }
        *slot = Some(unit(item.embedding)?);
    }
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    let width = vectors.first().map_or(0, Vec::len);
    if vectors.len() != asked || vectors.iter().any(|v| v.len() != width) {
        return Err("vectors of different widths, or some missing".into());
    }
    Ok(vectors)
}

fn unit(mut v: Vec<f32>) -> Result<Vec<f32>, String> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if v.is_empty() || !norm.is_finite() || norm == 0.0 {
        return Err("an empty or zero vector".into());
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Ok(v)
}

/// An error and what caused it ("error sending request: … Connection refused").
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// What a provider's error body says (`{"error": {"message": ...}}`, `{"error": "..."}`), else
/// its first characters.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let said = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_owned)
    });
    said.unwrap_or_else(|| crate::tools::engines::truncate_chars(body.trim(), 300).to_owned())
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod server_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn item(index: usize, embedding: Vec<f32>) -> Item {
        Item {
            index: Some(index),
            embedding,
        }
    }

    #[test]
    fn vectors_come_back_in_input_order_and_of_length_one() {
        let answer = Answer {
            data: vec![item(1, vec![0.0, 2.0]), item(0, vec![3.0, 4.0])],
        };
        let v = vectors_in_order(answer, 2).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
    }

    #[test]
    fn answers_that_do_not_fit_the_question_are_refused() {
        let short = Answer {
            data: vec![item(0, vec![1.0])],
        };
        assert!(
            vectors_in_order(short, 2)
                .unwrap_err()
                .contains("1 vectors for 2")
        );
        let twice = Answer {
            data: vec![item(0, vec![1.0]), item(0, vec![1.0])],
        };
        assert!(
            vectors_in_order(twice, 2)
                .unwrap_err()
                .contains("two vectors")
        );
        let widths = Answer {
            data: vec![item(0, vec![1.0]), item(1, vec![1.0, 0.0])],
        };
        assert!(vectors_in_order(widths, 2).unwrap_err().contains("widths"));
        let zero = Answer {
            data: vec![item(0, vec![0.0, 0.0])],
        };
        assert!(vectors_in_order(zero, 1).unwrap_err().contains("zero"));
    }

    #[test]
    fn a_providers_error_message_is_what_is_reported() {
        assert_eq!(
            error_message(r#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(
            error_message(r#"{"error":"input too large"}"#),
            "input too large"
        );
        assert_eq!(error_message("Bad Gateway"), "Bad Gateway");
    }
}
