//! The `tavily_search` tool over real HTTP against a local fake Tavily.

use crate::support::fake_tavily;

use async_trait::async_trait;
use deep_research::tools::web_search::{
    NO_RESULTS, PageSummarizer, PageSummary, QueryOptions, SearchConfig, SearchError,
    SearchOptions, SearchOutput, Source, WebSearch, tool_spec, web_search,
};
use fake_tavily::{API_KEY, FakeHit, FakeTavily, Fault, raw_text};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

fn config(fake: &FakeTavily) -> SearchConfig {
    SearchConfig {
        base_url: fake.base_url().to_owned(),
        api_key: Some(API_KEY.into()),
        timeout: Duration::from_secs(5),
        base_delay: Duration::from_millis(10),
        ..SearchConfig::default()
    }
}

fn client(config: SearchConfig, in_flight: usize) -> WebSearch {
    let http = deep_research::outbound::client_builder()
        .no_proxy()
        .build()
        .expect("http client");
    WebSearch::new(config, http, Arc::new(Semaphore::new(in_flight)))
}

fn tavily(fake: &FakeTavily) -> WebSearch {
    client(config(fake), 16)
}

fn options() -> SearchOptions {
    SearchOptions::new(Arc::new(Semaphore::new(16)))
}

fn queries(qs: &[&str]) -> Vec<String> {
    qs.iter().map(|q| (*q).to_owned()).collect()
}

async fn run(
    tavily: &WebSearch,
    qs: &[&str],
    summarizer: Option<&dyn PageSummarizer>,
    opts: &SearchOptions,
) -> Result<SearchOutput, SearchError> {
    web_search(
        &tavily.clone().into(),
        &queries(qs),
        summarizer,
        opts,
        &CancellationToken::new(),
    )
    .await
}

enum Mode {
    Succeed,
    Fail,
}

/// Records what it was given and how many summaries overlapped.
struct FakeSummarizer {
    mode: Mode,
    delay: Duration,
    received: Mutex<Vec<String>>,
    current: AtomicUsize,
    max: AtomicUsize,
}

impl FakeSummarizer {
    fn new(mode: Mode, delay: Duration) -> Self {
        Self {
            mode,
            delay,
            received: Mutex::new(Vec::new()),
            current: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
        }
    }

    fn received(&self) -> Vec<String> {
        self.received.lock().expect("received").clone()
    }
}

#[async_trait]
impl PageSummarizer for FakeSummarizer {
    async fn summarize(&self, content: String) -> Result<PageSummary, String> {
        self.received
            .lock()
            .expect("received")
            .push(content.clone());
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.current.fetch_sub(1, Ordering::SeqCst);
        match self.mode {
            Mode::Succeed => Ok(PageSummary {
                summary: format!("Digest of {} chars", content.chars().count()),
                key_excerpts: "\"a quote\"".to_owned(),
            }),
            Mode::Fail => Err("model refused".to_owned()),
        }
    }
}

fn hit(title: &str, url: &str, content: &str, raw: Option<&str>) -> FakeHit {
    FakeHit {
        title: title.to_owned(),
        url: url.to_owned(),
        content: content.to_owned(),
        raw_content: raw.map(str::to_owned),
        score: 0.5,
    }
}

#[tokio::test]
async fn output_format_is_byte_exact() {
    let fake = FakeTavily::start().await;
    fake.set_hits(
        "rust async",
        vec![
            hit(
                "Async Rust",
                "https://a.test/1",
                "snippet one",
                Some("page"),
            ),
            hit("Tokio", "https://b.test/2", "snippet two", None),
        ],
    );
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let out = run(
        &tavily(&fake),
        &["rust async"],
        Some(&summarizer),
        &options(),
    )
    .await
    .expect("search");

    let expected = "Search results: \n\n\
\n\n--- SOURCE 1: Async Rust ---\nURL: https://a.test/1\n\nSUMMARY:\n\
<summary>\nDigest of 4 chars\n</summary>\n\n<key_excerpts>\n\"a quote\"\n</key_excerpts>\
\n\n\n\n--------------------------------------------------------------------------------\n\
\n\n--- SOURCE 2: Tokio ---\nURL: https://b.test/2\n\nSUMMARY:\nsnippet two\
\n\n\n\n--------------------------------------------------------------------------------\n";
    assert_eq!(out.text, expected);
    assert_eq!(
        out.sources,
        vec![
            Source {
                url: "https://a.test/1".into(),
                title: "Async Rust".into(),
                // The page as retrieved, for the citation check; the summary shown.
                text: "page".into(),
                summary: Some(PageSummary {
                    summary: "Digest of 4 chars".into(),
                    key_excerpts: "\"a quote\"".into(),
                }),
                snippet: None,
            },
            Source {
                url: "https://b.test/2".into(),
                title: "Tokio".into(),
                // No page: the snippet is what there is to check against.
                text: "snippet two".into(),
                summary: None,
                snippet: None,
            },
        ]
    );
    assert_eq!(summarizer.received(), vec!["page".to_owned()]);
}

#[tokio::test]
async fn sends_query_options_and_bearer_key() {
    let fake = FakeTavily::start().await;
    run(&tavily(&fake), &["solar power"], None, &options())
        .await
        .expect("search");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].body,
        serde_json::json!({
            "query": "solar power",
            "max_results": 5,
            "include_raw_content": true,
            "topic": "general",
            "search_depth": "basic",
        })
    );
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
}

#[tokio::test]
async fn without_summarizer_shows_snippets() {
    let fake = FakeTavily::start().await;
    let out = run(&tavily(&fake), &["wind"], None, &options())
        .await
        .expect("search");
    assert_eq!(out.sources.len(), 5);
    assert!(out.text.contains("SUMMARY:\nSnippet 3 about wind.\n\n\n\n"));
    assert!(!out.text.contains("Paragraph 1 of a page"));
}

#[tokio::test]
async fn dedupe_keeps_first_occurrence_in_query_then_rank_order() {
    let fake = FakeTavily::start().await;
    fake.share_urls(2);
    let out = run(&tavily(&fake), &["alpha", "beta"], None, &options())
        .await
        .expect("search");
    let urls: Vec<&str> = out.sources.iter().map(|s| s.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "https://example.com/shared/1",
            "https://example.com/shared/2",
            "https://example.com/alpha/3",
            "https://example.com/alpha/4",
            "https://example.com/alpha/5",
            "https://example.com/beta/3",
            "https://example.com/beta/4",
            "https://example.com/beta/5",
        ]
    );
    // The shared pages keep the first query's titles.
    assert_eq!(out.sources[0].title, "alpha result 1");
    assert!(out.text.contains("--- SOURCE 8: beta result 5 ---"));
    assert!(!out.text.contains("SOURCE 9"));
}

#[tokio::test]
async fn summaries_replace_pages_when_the_summarizer_succeeds() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let out = run(&tavily(&fake), &["tides"], Some(&summarizer), &options())
        .await
        .expect("search");
    assert_eq!(
        out.text
            .matches("<summary>\nDigest of 4096 chars\n")
            .count(),
        5
    );
    assert!(!out.text.contains("Snippet 1 about tides."));
    assert!(!out.text.contains(&raw_text("tides", 4096)));
}

#[tokio::test]
async fn failed_summary_falls_back_to_snippet_not_raw_page() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Fail, Duration::ZERO);
    let out = run(&tavily(&fake), &["glaciers"], Some(&summarizer), &options())
        .await
        .expect("search");
    assert_eq!(summarizer.received().len(), 5);
    assert!(out.text.contains("SUMMARY:\nSnippet 1 about glaciers.\n"));
    // ODR would paste up to 50,000 characters of raw page here.
    assert!(!out.text.contains("Paragraph 1 of a page about glaciers"));
    assert!(!out.text.contains("<summary>"));
}

#[tokio::test]
async fn timed_out_summary_falls_back_to_snippet_not_raw_page() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::from_secs(5));
    let opts = SearchOptions {
        summary_timeout: Duration::from_millis(200),
        ..options()
    };
    let started = Instant::now();
    let out = run(&tavily(&fake), &["volcanoes"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "summaries ran in parallel and timed out"
    );
    assert!(out.text.contains("SUMMARY:\nSnippet 2 about volcanoes.\n"));
    assert!(!out.text.contains("Paragraph 1 of a page about volcanoes"));
    assert!(!out.text.contains("<summary>"));
    // The source keeps the page for the citation check and says the snippet is what was read
    // (the eval counts what the researchers were shown from it).
    let second = &out.sources[1];
    assert_eq!(
        second.snippet.as_deref(),
        Some("Snippet 2 about volcanoes.")
    );
    assert!(
        second
            .text
            .contains("Paragraph 1 of a page about volcanoes")
    );
    assert!(second.summary.is_none());
}

#[tokio::test]
async fn raw_content_is_cut_to_max_content_length_characters() {
    let fake = FakeTavily::start().await;
    let multibyte = "éèê€😀".repeat(10);
    fake.set_hits(
        "accents",
        vec![hit("Accents", "https://c.test/1", "snip", Some(&multibyte))],
    );
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let opts = SearchOptions {
        query: QueryOptions {
            max_content_length: 7,
            ..QueryOptions::default()
        },
        ..options()
    };
    run(&tavily(&fake), &["accents"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert_eq!(summarizer.received(), vec!["éèê€😀éè".to_owned()]);

    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let opts = SearchOptions {
        query: QueryOptions {
            max_content_length: 1000,
            ..QueryOptions::default()
        },
        ..options()
    };
    run(&tavily(&fake), &["long pages"], Some(&summarizer), &opts)
        .await
        .expect("search");
    let received = summarizer.received();
    assert_eq!(received.len(), 5);
    assert!(received.iter().all(|r| *r == raw_text("long pages", 1000)));
}

#[tokio::test]
async fn summary_slots_bound_concurrent_summaries() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::from_millis(40));
    let opts = SearchOptions::new(Arc::new(Semaphore::new(2)));
    let out = run(&tavily(&fake), &["moon", "mars"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert_eq!(summarizer.received().len(), 10);
    assert_eq!(summarizer.max.load(Ordering::SeqCst), 2);
    assert_eq!(out.text.matches("<summary>").count(), 10);
}

#[tokio::test]
async fn in_flight_semaphore_bounds_tavily_calls() {
    let fake = FakeTavily::start().await;
    fake.set_latency(Duration::from_millis(100));
    let tavily = client(config(&fake), 2);
    let qs = ["q1", "q2", "q3", "q4", "q5", "q6"];
    let out = run(&tavily, &qs, None, &options()).await.expect("search");
    assert_eq!(out.sources.len(), 30);
    assert_eq!(fake.calls(), 6);
    assert_eq!(fake.max_in_flight(), 2);
}

#[tokio::test]
async fn rate_limit_is_retried_after_retry_after() {
    let fake = FakeTavily::start().await;
    fake.fail_call(
        1,
        Fault::RateLimited {
            retry_after: Some("1".into()),
        },
    );
    let started = Instant::now();
    let out = run(&tavily(&fake), &["storms"], None, &options())
        .await
        .expect("search succeeds on the second attempt");
    // base_delay is 10 ms, so only Retry-After explains a one-second wait.
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(fake.calls(), 2);
    assert_eq!(out.sources.len(), 5);
}

#[tokio::test]
async fn persistent_rate_limit_gives_up_after_three_attempts() {
    let fake = FakeTavily::start().await;
    fake.fail_always(Fault::RateLimited {
        retry_after: Some("0".into()),
    });
    let err = run(&tavily(&fake), &["storms"], None, &options())
        .await
        .expect_err("rate limited");
    assert_eq!(
        err,
        SearchError::RateLimited {
            retry_after: Some(Duration::ZERO)
        }
    );
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn server_error_is_retried() {
    let fake = FakeTavily::start().await;
    fake.fail_call(1, Fault::ServerError);
    let out = run(&tavily(&fake), &["rivers"], None, &options())
        .await
        .expect("search");
    assert_eq!(fake.calls(), 2);
    assert_eq!(out.sources.len(), 5);
}

#[tokio::test]
async fn hanging_server_times_out_as_transient() {
    let fake = FakeTavily::start().await;
    fake.fail_always(Fault::Hang);
    let tavily = client(
        SearchConfig {
            timeout: Duration::from_millis(200),
            ..config(&fake)
        },
        16,
    );
    let err = run(&tavily, &["fog"], None, &options())
        .await
        .expect_err("times out");
    assert!(matches!(err, SearchError::Transient(_)), "{err:?}");
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn wrong_key_is_auth_error_without_retry() {
    let fake = FakeTavily::start().await;
    let tavily = client(
        SearchConfig {
            api_key: Some("tvly-wrong".into()),
            ..config(&fake)
        },
        16,
    );
    let err = run(&tavily, &["a", "b"], None, &options())
        .await
        .expect_err("unauthorized");
    assert!(matches!(err, SearchError::Auth(_)), "{err:?}");
    assert!(err.to_string().contains("missing or invalid API key"));
    assert!(!err.to_string().contains("tvly-wrong"));
    assert!(fake.calls() <= 2, "one call per query, none retried");
}

#[tokio::test]
async fn missing_key_fails_before_any_request() {
    let fake = FakeTavily::start().await;
    for key in [None, Some(String::new()), Some("  ".to_owned())] {
        let tavily = client(
            SearchConfig {
                api_key: key.map(Into::into),
                ..config(&fake)
            },
            16,
        );
        let err = run(&tavily, &["x"], None, &options())
            .await
            .expect_err("no key");
        assert_eq!(err, SearchError::MissingKey("TAVILY_API_KEY".into()));
        assert!(err.to_string().contains("TAVILY_API_KEY"));
    }
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn no_results_gives_the_exact_message() {
    let fake = FakeTavily::start().await;
    fake.set_result_count(0);
    let out = run(&tavily(&fake), &["nothing", "at all"], None, &options())
        .await
        .expect("search");
    assert_eq!(
        out.text,
        "No valid search results found. Please try different search queries or use a different search API."
    );
    assert_eq!(out.text, NO_RESULTS);
    assert!(out.sources.is_empty());
}

#[tokio::test]
async fn cancellation_returns_promptly() {
    let fake = FakeTavily::start().await;
    fake.set_latency(Duration::from_secs(10));
    let tavily = tavily(&fake);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = web_search(
        &tavily.into(),
        &queries(&["slow"]),
        None,
        &options(),
        &cancel,
    )
    .await;
    assert_eq!(result, Err(SearchError::Cancelled));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn cancellation_also_stops_summaries() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::from_secs(10));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = web_search(
        &tavily(&fake).into(),
        &queries(&["deep"]),
        Some(&summarizer),
        &options(),
        &cancel,
    )
    .await;
    assert_eq!(result, Err(SearchError::Cancelled));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(summarizer.received().len(), 5);
}

#[test]
fn tool_spec_exposes_only_queries() {
    let spec = tool_spec("tavily_search");
    assert_eq!(spec["name"], "tavily_search");
    assert!(
        spec["description"]
            .as_str()
            .is_some_and(|d| d.contains("current events"))
    );
    assert_eq!(
        spec["parameters"],
        serde_json::json!({
            "type": "object",
            "properties": {
                "queries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "List of search queries"
                }
            },
            "required": ["queries"]
        })
    );
}

/// A run summarises each page once (a page found again, by another researcher or a later turn,
/// reuses its summary), starts at most its budget of summaries (the rest show snippets), and
/// shows short pages as they are.
#[tokio::test]
async fn summaries_are_reused_budgeted_and_skipped_for_short_pages() {
    let fake = FakeTavily::start().await;
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let opts = SearchOptions {
        ledger: Arc::new(deep_research::tools::SummaryLedger::new(3)),
        ..options()
    };
    run(&tavily(&fake), &["glaciers"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert_eq!(summarizer.received().len(), 3, "the budget of three");
    let again = run(&tavily(&fake), &["glaciers"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert_eq!(summarizer.received().len(), 3, "nothing new is summarised");
    assert_eq!(
        again.text.matches("<summary>").count(),
        3,
        "the three summaries reused"
    );
    assert_eq!(opts.ledger.counts(), (3, 3));
    // Pages of at most `verbatim_chars` are shown whole.
    let fake = FakeTavily::start().await;
    fake.set_raw_content_len(500);
    let summarizer = FakeSummarizer::new(Mode::Succeed, Duration::ZERO);
    let opts = SearchOptions {
        verbatim_chars: 500,
        ..options()
    };
    let out = run(&tavily(&fake), &["fjords"], Some(&summarizer), &opts)
        .await
        .expect("search");
    assert!(summarizer.received().is_empty());
    assert!(
        out.text
            .contains(&format!("CONTENT:\n{}", raw_text("fjords", 500)))
    );
    assert_eq!(out.sources[0].text, raw_text("fjords", 500));
}
