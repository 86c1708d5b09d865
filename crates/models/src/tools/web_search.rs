//! The web search tool (`tavily_search` in ODR, and the same tool on Exa, Brave Search or
//! SearXNG): run several queries at once, de-duplicate the hits by URL, summarise each page with
//! a model, and format the lot as one tool-result string (ODR §4.1). Each engine's wire format
//! is in `engines.rs`.
//!
//! Deliberate departures from ODR (§3.10, §10): page summaries and engine calls run under
//! process-wide semaphores instead of unbounded fan-out, and a failed or timed-out summary falls
//! back to the engine's short snippet rather than up to 50,000 characters of raw page.

use async_trait::async_trait;
use futures::future::{join_all, try_join_all};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use super::engines::{Engine, Found, QueryFound, QueryOptions, SearchHit, truncate_chars};

/// Tool result when no query returned anything (exact ODR text).
pub const NO_RESULTS: &str = "No valid search results found. Please try different search queries or use a different search API.";

/// A server asking us to wait longer than this is treated as a hard failure: holding a researcher
/// for minutes is worse than letting it see the error and move on.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Upper bound for exponential backoff between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Characters of a page kept with its source for the citation check. The state keeps every
/// source of a run, so this bounds what a run stores per page (the summariser may have read
/// more: `max_content_length`).
pub const SOURCE_TEXT_CHARS: usize = 12_000;

/// Error bodies can be whole HTML pages; keep messages readable.
const MAX_ERROR_DETAIL: usize = 300;

/// How to reach one search engine. `Debug` prints the key as `[REDACTED]`.
#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub engine: Engine,
    pub base_url: String,
    pub api_key: Option<SecretString>,
    /// The variable that holds the key, named when it is missing.
    pub api_key_env: String,
    /// Per HTTP attempt, from connect to the end of the body.
    pub timeout: Duration,
    /// Attempts in all for retryable failures (1 = no retry).
    pub max_attempts: u32,
    /// First backoff delay; doubles per attempt unless the server sends `Retry-After`.
    pub base_delay: Duration,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            engine: Engine::Tavily,
            base_url: "https://api.tavily.com".to_owned(),
            api_key: None,
            api_key_env: "TAVILY_API_KEY".to_owned(),
            timeout: Duration::from_secs(30),
            max_attempts: 3,
            base_delay: Duration::from_millis(500),
        }
    }
}

/// Why a search failed. The display text is what the researcher sees after
/// `Error executing tool: ` (with the engine's name before it), so it never contains the API key.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SearchError {
    #[error("rate limit exceeded{}", retry_hint(.retry_after))]
    RateLimited { retry_after: Option<Duration> },
    #[error("the API key was rejected: {0}")]
    Auth(String),
    #[error("the request was rejected: {0}")]
    BadRequest(String),
    #[error("unavailable: {0}")]
    Transient(String),
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    #[error("no API key configured: set {0}")]
    MissingKey(String),
    #[error("search cancelled")]
    Cancelled,
}

impl SearchError {
    /// A short class name for metrics and traces.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RateLimited { .. } => "rate_limited",
            Self::Auth(_) => "auth",
            Self::BadRequest(_) => "bad_request",
            Self::Transient(_) => "transient",
            Self::InvalidResponse(_) => "invalid_response",
            Self::MissingKey(_) => "missing_key",
            Self::Cancelled => "cancelled",
        }
    }
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    retry_after.map_or_else(String::new, |d| {
        format!(" (retry after {}s)", d.as_secs_f64())
    })
}

/// A search engine client whose every HTTP attempt takes a permit from a process-wide semaphore.
#[derive(Clone, Debug)]
pub struct WebSearch {
    config: SearchConfig,
    client: reqwest::Client,
    in_flight: Arc<Semaphore>,
}

impl WebSearch {
    pub fn new(config: SearchConfig, client: reqwest::Client, in_flight: Arc<Semaphore>) -> Self {
        Self {
            config,
            client,
            in_flight,
        }
    }

    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// Runs one query, retrying rate limits and transient failures; traced and counted.
    #[tracing::instrument(name = "search", skip_all, fields(
        otel.name = format!("search {}", self.config.engine.id()), otel.kind = "client",
        search.api = self.config.engine.id(), search.results = tracing::field::Empty,
        error.type = tracing::field::Empty))]
    pub async fn search(
        &self,
        query: &str,
        opts: &QueryOptions,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let engine = self.config.engine.id();
        let started = std::time::Instant::now();
        let result = self.search_with_retries(query, opts).await;
        let span = tracing::Span::current();
        let outcome = match &result {
            Ok(hits) => {
                span.record("search.results", hits.len());
                "ok"
            }
            Err(error) => {
                let kind = error.kind();
                span.record("error.type", kind);
                kind
            }
        };
        crate::telemetry::metrics::search_call(engine, outcome, started.elapsed());
        result
    }

    async fn search_with_retries(
        &self,
        query: &str,
        opts: &QueryOptions,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let key = self.api_key()?;
        let mut attempt = 1;
        loop {
            let err = match self.attempt(key, query, opts).await {
                Ok(hits) => return Ok(hits),
                Err(err) => err,
            };
            let Some(delay) = self.retry_delay(&err, attempt) else {
                return Err(err);
            };
            tracing::warn!(%err, attempt, ?delay, engine = self.config.engine.id(), "search failed; retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    fn api_key(&self) -> Result<Option<&str>, SearchError> {
        match self
            .config
            .api_key
            .as_ref()
            .map(|k| k.expose_secret().trim())
        {
            Some(key) if !key.is_empty() => Ok(Some(key)),
            _ if self.config.engine.needs_key() => {
                Err(SearchError::MissingKey(self.config.api_key_env.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn attempt(
        &self,
        key: Option<&str>,
        query: &str,
        opts: &QueryOptions,
    ) -> Result<Vec<SearchHit>, SearchError> {
        // The permit covers the body read too: that is when the connection is still busy.
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| SearchError::Cancelled)?;
        let engine = self.config.engine;
        let response = engine
            .request(&self.client, &self.config.base_url, key, query, opts)
            .timeout(self.config.timeout)
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let retry_after = parse_retry_after(response.headers());
        let bytes = response.bytes().await.map_err(transport_error)?;
        if !status.is_success() {
            return Err(status_error(status, retry_after, &bytes));
        }
        engine
            .hits(&bytes, opts)
            .map_err(SearchError::InvalidResponse)
    }

    /// `None` means give up: the error is final or the attempts are spent.
    fn retry_delay(&self, err: &SearchError, attempt: u32) -> Option<Duration> {
        if attempt >= self.config.max_attempts {
            return None;
        }
        match err {
            SearchError::RateLimited {
                retry_after: Some(wait),
            } => (*wait <= MAX_RETRY_AFTER).then_some(*wait),
            SearchError::RateLimited { retry_after: None } | SearchError::Transient(_) => {
                Some(backoff(self.config.base_delay, attempt))
            }
            _ => None,
        }
    }
}

fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

fn transport_error(err: reqwest::Error) -> SearchError {
    let (builder, timeout) = (err.is_builder(), err.is_timeout());
    let text = err.without_url().to_string();
    if builder {
        return SearchError::BadRequest(text);
    }
    if timeout {
        return SearchError::Transient(format!("request timed out: {text}"));
    }
    SearchError::Transient(text)
}

fn status_error(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> SearchError {
    let detail = format!("HTTP {}: {}", status.as_u16(), error_detail(body));
    match status.as_u16() {
        429 => SearchError::RateLimited { retry_after },
        401 | 403 => SearchError::Auth(detail),
        400..=499 => SearchError::BadRequest(detail),
        500..=599 => SearchError::Transient(detail),
        _ => SearchError::InvalidResponse(detail),
    }
}

/// The engine's error message, or the body as (shortened) text.
fn error_detail(body: &[u8]) -> String {
    let text = super::engines::error_message(body)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    truncate_chars(text.trim(), MAX_ERROR_DETAIL).to_owned()
}

/// `Retry-After` as delta-seconds or an HTTP date.
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// A model's digest of one web page.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema)]
pub struct PageSummary {
    pub summary: String,
    pub key_excerpts: String,
}

impl PageSummary {
    /// The text shown to the researcher in place of the page.
    pub fn render(&self) -> String {
        format!(
            "<summary>\n{}\n</summary>\n\n<key_excerpts>\n{}\n</key_excerpts>",
            self.summary, self.key_excerpts
        )
    }
}

/// Summarises page text; implemented over the model layer elsewhere so this tool stays
/// independent of it. Errors are plain text because the tool only logs them.
#[async_trait]
pub trait PageSummarizer: Send + Sync {
    /// Takes the page text by value: a burst of summaries holds thousands of pages, and each
    /// can be let go once its prompt is written.
    async fn summarize(&self, content: String) -> Result<PageSummary, String>;
}

/// Per-call knobs of `web_search`.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// What each query asks of the engine (results, domains, Tavily's topic and depth), and
    /// the characters of page text kept for the summariser (`max_content_length`).
    pub query: QueryOptions,
    /// Per summary, counted from when it holds a slot (queueing is not the model's fault).
    pub summary_timeout: Duration,
    /// Process-wide cap on concurrent summaries.
    pub summary_slots: Arc<Semaphore>,
    /// Pages of at most this many characters are shown as they are: a summary of a short page
    /// costs a model call and says no more. Excerpts of a longer page are this long.
    pub verbatim_chars: usize,
    /// What a longer page is shown as.
    pub long_pages: LongPages,
    /// The run's summaries so far (reused per location) and its budget.
    pub ledger: Arc<SummaryLedger>,
    /// The research topic the queries serve. A corpus ranks what a query finds by it; a web
    /// engine has no such parameter and is sent the query alone.
    pub topic: String,
}

impl SearchOptions {
    /// ODR defaults (50,000 characters, 60 s) over the given shared slots. There is no `Default`
    /// on purpose: a fresh semaphore per call would defeat the process-wide cap.
    pub fn new(summary_slots: Arc<Semaphore>) -> Self {
        Self {
            query: QueryOptions::default(),
            summary_timeout: Duration::from_secs(60),
            summary_slots,
            verbatim_chars: 0,
            long_pages: LongPages::Summary,
            ledger: Arc::new(SummaryLedger::new(usize::MAX)),
            topic: String::new(),
        }
    }
}

/// What a researcher is shown of a page longer than `SearchOptions::verbatim_chars`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongPages {
    /// The summarisation model's summary (ODR), the engine's snippet when there is none.
    Summary,
    /// The page's stretches that share most with the query (`excerpts`): no model call.
    Excerpts,
}

/// One run's page summaries: each location is summarised once (a page two researchers find,
/// or a page a continued thread found before, is not paid for again), and at most `budget`
/// summaries are started.
#[derive(Debug)]
pub struct SummaryLedger {
    done: std::sync::Mutex<std::collections::HashMap<String, PageSummary>>,
    started: AtomicUsize,
    budget: AtomicUsize,
    reused: AtomicUsize,
}

impl Default for SummaryLedger {
    fn default() -> Self {
        Self::new(usize::MAX)
    }
}

impl SummaryLedger {
    pub fn new(budget: usize) -> Self {
        Self {
            done: std::sync::Mutex::default(),
            started: 0.into(),
            budget: budget.into(),
            reused: 0.into(),
        }
    }

    /// The run's budget (its setting), set before its first search.
    pub fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Relaxed);
    }

    /// A summary made earlier (in this run or a previous run on the thread).
    pub fn remember(&self, url: &str, summary: PageSummary) {
        if let Ok(mut done) = self.done.lock() {
            done.insert(url.to_owned(), summary);
        }
    }

    fn recall(&self, url: &str) -> Option<PageSummary> {
        let found = self.done.lock().ok()?.get(url).cloned();
        if found.is_some() {
            self.reused.fetch_add(1, Relaxed);
        }
        found
    }

    /// Takes one summary from the budget; false once it is spent.
    fn take(&self) -> bool {
        let budget = self.budget.load(Relaxed);
        self.started
            .fetch_update(Relaxed, Relaxed, |n| (n < budget).then_some(n + 1))
            .is_ok()
    }

    /// (summaries started, summaries reused).
    pub fn counts(&self) -> (usize, usize) {
        (self.started.load(Relaxed), self.reused.load(Relaxed))
    }
}

/// A page the researcher was shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub url: String,
    pub title: String,
    /// The page's text as retrieved (cut at `max_content_length`), or the engine's snippet when
    /// it returned no page: what the citation check reads a cited sentence against.
    pub text: String,
    /// The summary the researcher was shown, when the page was summarised.
    pub summary: Option<PageSummary>,
    /// The engine's snippet or the page's excerpts, when that is all the researcher was shown of
    /// a page it had (not summarised, and too long to show whole): what the research could use
    /// is this, not `text`.
    pub snippet: Option<String>,
}

/// The tool result text plus the sources it cites, in `SOURCE n` order.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOutput {
    pub text: String,
    pub sources: Vec<Source>,
    /// What each query returned, in query order: its locations and the engine's scores.
    pub found: Vec<QueryFound>,
}

/// Where a run's queries go: a web search engine, or one of the operator's corpora.
#[derive(Clone, Debug)]
pub enum Searcher {
    Web(WebSearch),
    Corpus(Arc<super::corpus::Corpus>),
}

impl From<WebSearch> for Searcher {
    fn from(web: WebSearch) -> Self {
        Self::Web(web)
    }
}

impl Searcher {
    async fn search(
        &self,
        query: &str,
        topic: &str,
        opts: &QueryOptions,
    ) -> Result<Vec<SearchHit>, SearchError> {
        match self {
            Self::Web(web) => web.search(query, opts).await,
            Self::Corpus(corpus) => corpus
                .search(query, topic, opts.max_results as usize)
                .await
                .map_err(|e| match e {
                    super::corpus::CorpusError::Stopped(_) => SearchError::Transient(e.to_string()),
                    other => SearchError::InvalidResponse(other.to_string()),
                }),
        }
    }
}

/// The model-visible schema of the tool, under `name` (the run's search backend names it).
pub fn tool_spec(name: &str) -> Value {
    json!({
        "name": name,
        "description": "A search engine built for comprehensive, accurate and trusted results. \
            Useful when you need answers about current events.",
        "parameters": {
            "type": "object",
            "properties": {
                "queries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "List of search queries"
                }
            },
            "required": ["queries"]
        }
    })
}

/// Runs the tool. A failing query fails the whole call; `cancel` aborts it promptly.
pub async fn web_search(
    search: &Searcher,
    queries: &[String],
    summarizer: Option<&dyn PageSummarizer>,
    opts: &SearchOptions,
    cancel: &CancellationToken,
) -> Result<SearchOutput, SearchError> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(SearchError::Cancelled),
        output = run_search(search, queries, summarizer, opts) => output,
    }
}

async fn run_search(
    search: &Searcher,
    queries: &[String],
    summarizer: Option<&dyn PageSummarizer>,
    opts: &SearchOptions,
) -> Result<SearchOutput, SearchError> {
    let responses = try_join_all(
        queries
            .iter()
            .map(|q| search.search(q, &opts.topic, &opts.query)),
    )
    .await?;
    let found: Vec<QueryFound> = queries
        .iter()
        .zip(&responses)
        .map(|(query, hits)| QueryFound {
            query: query.clone(),
            results: hits
                .iter()
                .map(|h| Found {
                    url: h.url.clone(),
                    score: h.score,
                })
                .collect(),
        })
        .collect();
    let (asked, mut hits): (Vec<usize>, Vec<SearchHit>) = dedupe(responses).into_iter().unzip();
    if hits.is_empty() {
        return Ok(SearchOutput {
            text: NO_RESULTS.to_owned(),
            sources: Vec::new(),
            found,
        });
    }
    // The output shows summaries, not raw pages: each page goes to its summary and no further.
    let started = std::time::Instant::now();
    let pages: Vec<Option<String>> = hits.iter_mut().map(|h| h.raw_content.take()).collect();
    let shown = join_all(hits.iter().zip(pages).zip(asked).map(|((hit, page), q)| {
        let query = queries.get(q).map_or("", String::as_str);
        display_content(hit, page, query, summarizer, opts, started)
    }))
    .await;
    Ok(SearchOutput {
        found,
        ..format_output(&hits, shown)
    })
}

/// First occurrence wins, in query order then rank order; each hit with the index of the
/// query that found it.
fn dedupe(responses: Vec<Vec<SearchHit>>) -> Vec<(usize, SearchHit)> {
    let mut seen = HashSet::new();
    responses
        .into_iter()
        .enumerate()
        .flat_map(|(q, hits)| hits.into_iter().map(move |hit| (q, hit)))
        .filter(|(_, hit)| seen.insert(hit.url.clone()))
        .collect()
}

/// What the researcher is shown of one hit, and the page text kept for the citation check.
struct Shown {
    content: String,
    page: String,
    kind: ShownAs,
}

/// What the content shown of a hit is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ShownAs {
    /// The page itself.
    Page,
    Summary(PageSummary),
    /// The engine's snippet (all it returned, or a page not summarised).
    Snippet,
    Excerpts,
}

impl ShownAs {
    /// The label over the content in the tool's output: ODR's `SUMMARY` for summaries and
    /// snippets alike; a page shown whole, or its excerpts, say so.
    fn label(&self) -> &'static str {
        match self {
            Self::Page => "CONTENT",
            Self::Summary(_) | Self::Snippet => "SUMMARY",
            Self::Excerpts => "EXCERPTS",
        }
    }
}

async fn display_content(
    hit: &SearchHit,
    raw: Option<String>,
    query: &str,
    summarizer: Option<&dyn PageSummarizer>,
    opts: &SearchOptions,
    started: std::time::Instant,
) -> Shown {
    let raw = raw.filter(|raw| !raw.trim().is_empty());
    let Some(mut raw) = raw else {
        return Shown {
            content: hit.content.clone(),
            page: hit.content.clone(),
            kind: ShownAs::Snippet,
        };
    };
    raw.truncate(truncate_chars(&raw, opts.query.max_content_length).len());
    if raw.chars().count() <= opts.verbatim_chars {
        return Shown {
            content: raw.clone(),
            page: raw,
            kind: ShownAs::Page,
        };
    }
    if opts.long_pages == LongPages::Excerpts {
        return Shown {
            content: super::excerpts::excerpts(&raw, query, opts.verbatim_chars),
            page: raw,
            kind: ShownAs::Excerpts,
        };
    }
    let snippet = |page: String| Shown {
        content: hit.content.clone(),
        page,
        kind: ShownAs::Snippet,
    };
    if let Some(summary) = opts.ledger.recall(&hit.url) {
        return Shown {
            content: summary.render(),
            page: raw,
            kind: ShownAs::Summary(summary),
        };
    }
    let Some(summarizer) = summarizer else {
        return snippet(raw);
    };
    match summarize_page(summarizer, raw.clone(), opts, started).await {
        Ok(summary) => {
            opts.ledger.remember(&hit.url, summary.clone());
            Shown {
                content: summary.render(),
                page: raw,
                kind: ShownAs::Summary(summary),
            }
        }
        Err(err) => {
            tracing::info!(url = %hit.url, %err, "page not summarised; showing the engine's snippet");
            snippet(raw)
        }
    }
}

/// A summary is started only while it can still be of use: within the run's budget, and when
/// its slot came before the call had already waited a whole `summary_timeout` (by then the
/// researcher is better served by the snippets than by a later answer).
async fn summarize_page(
    summarizer: &dyn PageSummarizer,
    page: String,
    opts: &SearchOptions,
    started: std::time::Instant,
) -> Result<PageSummary, String> {
    let _slot = opts
        .summary_slots
        .acquire()
        .await
        .map_err(|_| "summary slots closed".to_owned())?;
    if started.elapsed() >= opts.summary_timeout {
        return Err("not started: the search already waited a whole summary timeout".into());
    }
    if !opts.ledger.take() {
        return Err("not started: the run's summary budget is spent".into());
    }
    tokio::time::timeout(opts.summary_timeout, summarizer.summarize(page))
        .await
        .unwrap_or_else(|_| Err(format!("timed out after {:?}", opts.summary_timeout)))
}

fn format_output(hits: &[SearchHit], shown: Vec<Shown>) -> SearchOutput {
    let mut text = String::from("Search results: \n\n");
    for (i, (hit, shown)) in hits.iter().zip(&shown).enumerate() {
        // ODR's label; a page shown whole says so.
        let label = shown.kind.label();
        text.push_str(&format!(
            "\n\n--- SOURCE {n}: {title} ---\nURL: {url}\n\n{label}:\n{content}\n\n\n\n{rule}\n",
            n = i + 1,
            title = hit.title,
            url = hit.url,
            content = shown.content,
            rule = "-".repeat(80),
        ));
    }
    let sources = hits
        .iter()
        .zip(shown)
        .map(|(hit, mut shown)| {
            let partial = matches!(shown.kind, ShownAs::Snippet | ShownAs::Excerpts);
            let snippet = (partial && shown.content != shown.page).then(|| shown.content.clone());
            shown
                .page
                .truncate(truncate_chars(&shown.page, SOURCE_TEXT_CHARS).len());
            Source {
                url: hit.url.clone(),
                title: hit.title.clone(),
                text: shown.page,
                summary: match shown.kind {
                    ShownAs::Summary(summary) => Some(summary),
                    _ => None,
                },
                snippet,
            }
        })
        .collect();
    SearchOutput {
        text,
        sources,
        found: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert_eq!(truncate_chars("", 3), "");
    }

    #[test]
    fn debug_redacts_key() {
        let config = SearchConfig {
            api_key: Some("tvly-secret".into()),
            ..SearchConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("tvly-secret"));
        assert!(shown.contains("REDACTED"));
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(parse_retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(parse_retry_after(&headers), Some(Duration::ZERO));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(parse_retry_after(&headers), None);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_millis(500);
        assert_eq!(backoff(base, 1), base);
        assert_eq!(backoff(base, 2), Duration::from_secs(1));
        assert_eq!(backoff(base, 30), MAX_BACKOFF);
    }

    #[test]
    fn error_detail_prefers_tavily_message() {
        let body = br#"{"detail":{"error":"Unauthorized: missing or invalid API key."}}"#;
        assert_eq!(
            error_detail(body),
            "Unauthorized: missing or invalid API key."
        );
        assert_eq!(error_detail(b"  plain  "), "plain");
    }
}
