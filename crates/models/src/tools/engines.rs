//! The search engines `web_search` can use, each in its own wire format: the request one query
//! makes, and the hits its answer holds. Everything around them (retries, slots, de-duplication,
//! page summaries, the text the model sees) is shared in `web_search.rs`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One search result.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SearchHit {
    #[serde(default)]
    pub title: String,
    pub url: String,
    /// The engine's short snippet.
    #[serde(default)]
    pub content: String,
    /// The full page text, when the engine returns it (Tavily, Exa).
    #[serde(default)]
    pub raw_content: Option<String>,
    #[serde(default)]
    pub score: Option<f64>,
}

/// One query of a search call and the locations it returned, best first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryFound {
    pub query: String,
    pub results: Vec<Found>,
}

/// A location a query returned, with the engine's score when it gives one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Found {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// The first `max_chars` characters of `text`, cut on a char boundary (Python slice semantics).
pub fn truncate_chars(text: &str, max_chars: usize) -> &str {
    // A string of at most `max_chars` bytes has at most that many chars: no need to count.
    if text.len() <= max_chars {
        return text;
    }
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// A search engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `POST /search`, `Authorization: Bearer`; returns page text (`raw_content`).
    Tavily,
    /// `POST /search`, `x-api-key`; returns page text (`contents.text`).
    Exa,
    /// `GET /res/v1/web/search`, `X-Subscription-Token`; returns snippets only.
    Brave,
    /// A self-hosted SearXNG (`GET /search?format=json`); no key; snippets only.
    Searxng,
}

/// What a query asks of the engine beyond its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryOptions {
    pub max_results: u32,
    /// Tavily only: `general`, `news` or `finance`.
    pub topic: String,
    /// Tavily only: `basic` or `advanced`.
    pub depth: String,
    pub include_domains: Vec<String>,
    pub exclude_domains: Vec<String>,
    /// Characters of page text to ask for, where the engine returns page text.
    pub max_content_length: usize,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self {
            max_results: 5,
            topic: "general".into(),
            depth: "basic".into(),
            include_domains: vec![],
            exclude_domains: vec![],
            max_content_length: 50_000,
        }
    }
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Self::Tavily => "Tavily",
            Self::Exa => "Exa",
            Self::Brave => "Brave Search",
            Self::Searxng => "SearXNG",
        }
    }

    /// The short name metrics and traces use.
    pub fn id(self) -> &'static str {
        match self {
            Self::Tavily => "tavily",
            Self::Exa => "exa",
            Self::Brave => "brave",
            Self::Searxng => "searxng",
        }
    }

    /// The name a run's own key for this engine has in `configurable.apiKeys`.
    pub fn run_key(self) -> &'static str {
        match self {
            Self::Tavily => "TAVILY_API_KEY",
            Self::Exa => "EXA_API_KEY",
            Self::Brave => "BRAVE_SEARCH_API_KEY",
            Self::Searxng => "SEARXNG_API_KEY",
        }
    }

    /// Whether a query cannot be made without a key.
    pub fn needs_key(self) -> bool {
        !matches!(self, Self::Searxng)
    }

    /// The request for one query.
    pub fn request(
        self,
        client: &reqwest::Client,
        base_url: &str,
        key: Option<&str>,
        query: &str,
        opts: &QueryOptions,
    ) -> reqwest::RequestBuilder {
        let base = base_url.trim_end_matches('/');
        let key = key.unwrap_or_default();
        match self {
            Self::Tavily => {
                let mut body = json!({
                    "query": query,
                    "max_results": opts.max_results,
                    "include_raw_content": true,
                    "topic": opts.topic,
                    "search_depth": opts.depth,
                });
                if !opts.include_domains.is_empty() {
                    body["include_domains"] = json!(opts.include_domains);
                }
                if !opts.exclude_domains.is_empty() {
                    body["exclude_domains"] = json!(opts.exclude_domains);
                }
                client
                    .post(format!("{base}/search"))
                    .bearer_auth(key)
                    .json(&body)
            }
            Self::Exa => {
                let mut body = json!({
                    "query": query,
                    "numResults": opts.max_results,
                    "type": "auto",
                    "contents": {"text": {"maxCharacters": opts.max_content_length}},
                });
                if !opts.include_domains.is_empty() {
                    body["includeDomains"] = json!(opts.include_domains);
                }
                if !opts.exclude_domains.is_empty() {
                    body["excludeDomains"] = json!(opts.exclude_domains);
                }
                client
                    .post(format!("{base}/search"))
                    .header("x-api-key", key)
                    .json(&body)
            }
            Self::Brave => client
                .get(format!("{base}/res/v1/web/search"))
                .header("X-Subscription-Token", key)
                .header(reqwest::header::ACCEPT, "application/json")
                .query(&[
                    ("q", with_sites(query, &opts.include_domains)),
                    ("count", opts.max_results.min(20).to_string()),
                    ("extra_snippets", "true".into()),
                ]),
            Self::Searxng => {
                let mut req = client
                    .get(format!("{base}/search"))
                    .header(reqwest::header::ACCEPT, "application/json")
                    .query(&[
                        ("q", with_sites(query, &opts.include_domains)),
                        ("format", "json".into()),
                    ]);
                if !key.is_empty() {
                    req = req.bearer_auth(key);
                }
                req
            }
        }
    }

    /// The hits of a successful answer, at most `max_results`, without excluded domains and,
    /// when domains are included, only theirs (engines without such filters get them here).
    pub fn hits(self, body: &[u8], opts: &QueryOptions) -> Result<Vec<SearchHit>, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let list = match self {
            Self::Tavily | Self::Exa | Self::Searxng => v.get("results"),
            Self::Brave => v.pointer("/web/results"),
        };
        let items = match list {
            Some(Value::Array(items)) => items.as_slice(),
            // Brave leaves `web` out when nothing was found.
            None if self == Self::Brave => &[],
            _ => return Err("no `results` list in the answer".into()),
        };
        Ok(items
            .iter()
            .filter_map(|item| self.hit(item))
            .filter(|h| allowed(&h.url, opts))
            .take(opts.max_results as usize)
            .collect())
    }

    fn hit(self, item: &Value) -> Option<SearchHit> {
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        let url = text("url");
        if url.is_empty() {
            return None;
        }
        let (content, raw) = match self {
            Self::Tavily => (text("content").to_owned(), item["raw_content"].as_str()),
            Self::Exa => {
                let page = item["text"].as_str();
                let snippet = item["summary"]
                    .as_str()
                    .or_else(|| item["highlights"][0].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| page.map(|p| first_chars(p, 300)).unwrap_or_default());
                (snippet, page)
            }
            Self::Brave => {
                let mut snippet = strip_tags(text("description"));
                for extra in item["extra_snippets"].as_array().into_iter().flatten() {
                    if let Some(e) = extra.as_str() {
                        snippet.push('\n');
                        snippet.push_str(&strip_tags(e));
                    }
                }
                (snippet, None)
            }
            Self::Searxng => (text("content").to_owned(), None),
        };
        Some(SearchHit {
            title: text("title").to_owned(),
            url: url.to_owned(),
            content,
            raw_content: raw.map(str::to_owned),
            score: item["score"].as_f64(),
        })
    }
}

/// `query` limited to `domains` with `site:` operators (for engines without a domain filter).
fn with_sites(query: &str, domains: &[String]) -> String {
    match domains {
        [] => query.to_owned(),
        [one] => format!("{query} site:{one}"),
        many => format!(
            "{query} ({})",
            many.iter()
                .map(|d| format!("site:{d}"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
    }
}

/// Whether `url`'s host is allowed by the include and exclude lists (a domain covers its
/// subdomains).
fn allowed(url: &str, opts: &QueryOptions) -> bool {
    let host = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
        .unwrap_or_default();
    let under = |d: &String| {
        let d = d.trim_start_matches("*.").to_ascii_lowercase();
        host == d || host.ends_with(&format!(".{d}"))
    };
    !opts.exclude_domains.iter().any(under)
        && (opts.include_domains.is_empty() || opts.include_domains.iter().any(under))
}

/// Brave marks matches with `<strong>`; the model wants plain text.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

fn first_chars(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// The message in an engine's error answer: Tavily `{"detail": {"error"}}`, Exa `{"error"}`,
/// Brave `{"error": {"detail"}}`, or the text itself.
pub fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    [
        "/detail/error",
        "/detail",
        "/error/detail",
        "/error/message",
        "/error",
        "/message",
    ]
    .iter()
    .find_map(|p| v.pointer(p).and_then(Value::as_str))
    .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_reads_its_own_answer() {
        let opts = QueryOptions::default();
        let brave = json!({"type": "search", "web": {"results": [
            {"title": "A", "url": "https://a.example/x", "description": "about <strong>cobalt</strong> &amp; more",
             "extra_snippets": ["more <strong>text</strong>"]}]}});
        let h = Engine::Brave
            .hits(brave.to_string().as_bytes(), &opts)
            .unwrap();
        assert_eq!(h[0].content, "about cobalt & more\nmore text");
        assert_eq!(h[0].raw_content, None);
        let exa = json!({"requestId": "r", "results": [
            {"title": "B", "url": "https://b.example/", "text": "the whole page", "score": 0.9}]});
        let h = Engine::Exa.hits(exa.to_string().as_bytes(), &opts).unwrap();
        assert_eq!(h[0].raw_content.as_deref(), Some("the whole page"));
        assert_eq!(h[0].content, "the whole page");
        let searx = json!({"query": "q", "results": [
            {"title": "C", "url": "https://c.example/", "content": "snippet", "engine": "wikipedia"}]});
        let h = Engine::Searxng
            .hits(searx.to_string().as_bytes(), &opts)
            .unwrap();
        assert_eq!(h[0].content, "snippet");
        assert!(
            Engine::Brave
                .hits(b"{\"type\":\"search\"}", &opts)
                .unwrap()
                .is_empty()
        );
        assert!(Engine::Exa.hits(b"{}", &opts).is_err());
    }

    #[test]
    fn domain_lists_filter_hits_and_subdomains_count() {
        let opts = QueryOptions {
            include_domains: vec!["example.org".into()],
            exclude_domains: vec!["bad.example.org".into()],
            max_results: 2,
            ..QueryOptions::default()
        };
        let body = json!({"results": [
            {"url": "https://example.org/a"}, {"url": "https://bad.example.org/b"},
            {"url": "https://other.net/c"}, {"url": "https://docs.example.org/d"},
            {"url": "https://example.org/e"}]});
        let urls: Vec<String> = Engine::Searxng
            .hits(body.to_string().as_bytes(), &opts)
            .unwrap()
            .into_iter()
            .map(|h| h.url)
            .collect();
        assert_eq!(
            urls,
            ["https://example.org/a", "https://docs.example.org/d"]
        );
        assert_eq!(
            with_sites("q", &["a.org".into(), "b.org".into()]),
            "q (site:a.org OR site:b.org)"
        );
    }

    #[test]
    fn error_messages_are_found_in_every_shape() {
        assert_eq!(
            error_message(br#"{"detail": {"error": "bad key"}}"#).unwrap(),
            "bad key"
        );
        assert_eq!(
            error_message(br#"{"error": "Invalid API key"}"#).unwrap(),
            "Invalid API key"
        );
        assert_eq!(
            error_message(br#"{"type": "ErrorResponse", "error": {"code": "RATE_LIMITED", "detail": "slow down", "status": 429}}"#).unwrap(),
            "slow down"
        );
        assert_eq!(error_message(b"<html>"), None);
    }
}
