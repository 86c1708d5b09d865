//! Context windows: configured per provider, or asked of a local model server once per model
//! (llama.cpp `GET /props`, Ollama `POST /api/show`). The research graph uses them to size what
//! it sends after a context overflow, instead of guessing from the model's name.

use super::endpoint::Endpoint;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Mutex;

/// How long a probe may take; a server that does not answer has no known window.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Windows found so far (also the ones found unknown, so a server is asked once).
#[derive(Default)]
pub(super) struct ContextWindows(Mutex<HashMap<(String, String), Option<u32>>>);

impl ContextWindows {
    pub async fn get(&self, endpoint: &Endpoint, model: &str) -> Option<u32> {
        let settings = endpoint.settings();
        if let Some(window) = settings.context_window {
            return Some(window);
        }
        if !settings.local {
            return None;
        }
        // Held across the probe so concurrent callers ask the server once.
        let mut known = self.0.lock().await;
        let key = (endpoint.name.clone(), model.to_owned());
        if let Some(window) = known.get(&key) {
            return *window;
        }
        let window = probe(endpoint, model).await;
        tracing::info!(provider = %endpoint.name, model, ?window, "context window of the model server");
        known.insert(key, window);
        window
    }
}

async fn probe(endpoint: &Endpoint, model: &str) -> Option<u32> {
    let root = server_root(endpoint.base_url());
    let props = endpoint
        .get(&format!("{root}/props"))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await;
    if let Ok(response) = props
        && response.status().is_success()
        && let Ok(body) = response.json::<Value>().await
        && let Some(window) = llama_cpp_window(&body)
    {
        return Some(window);
    }
    let show = endpoint
        .post(&format!("{root}/api/show"))
        .timeout(PROBE_TIMEOUT)
        .json(&json!({"model": model}))
        .send()
        .await
        .ok()?;
    if !show.status().is_success() {
        return None;
    }
    ollama_window(&show.json::<Value>().await.ok()?)
}

/// The server's address without the OpenAI-compatible `/v1` suffix.
fn server_root(base_url: &str) -> &str {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed)
}

fn llama_cpp_window(props: &Value) -> Option<u32> {
    [
        &props["default_generation_settings"]["n_ctx"],
        &props["n_ctx"],
    ]
    .into_iter()
    .find_map(Value::as_u64)
    .and_then(|n| u32::try_from(n).ok())
    .filter(|n| *n > 0)
}

/// Ollama: the `num_ctx` the model runs with (its `parameters`), else what the model supports.
fn ollama_window(show: &Value) -> Option<u32> {
    let configured = show["parameters"].as_str().and_then(|params| {
        params.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u32>().ok())?
        })
    });
    configured.or_else(|| {
        show["model_info"].as_object()?.iter().find_map(|(k, v)| {
            k.ends_with(".context_length")
                .then(|| v.as_u64().and_then(|n| u32::try_from(n).ok()))?
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_read_from_llama_cpp_and_ollama_answers() {
        assert_eq!(
            llama_cpp_window(&json!({"default_generation_settings": {"n_ctx": 32768}})),
            Some(32768)
        );
        assert_eq!(llama_cpp_window(&json!({"n_ctx": 4096})), Some(4096));
        assert_eq!(llama_cpp_window(&json!({"model_path": "x"})), None);
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 8192",
                          "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&show), Some(8192));
        assert_eq!(
            ollama_window(&json!({"model_info": {"llama.context_length": 131072}})),
            Some(131072)
        );
        assert_eq!(
            server_root("http://127.0.0.1:8080/v1/"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(server_root("http://h:11434"), "http://h:11434");
    }
}
