//! Exa, Brave Search and SearXNG behind the web search tool, over real HTTP against fakes that
//! speak each engine's wire format (errors and retries included), and chosen per run through
//! the research graph.

use crate::support;

use deep_research::tools::{
    Engine, QueryOptions, SearchConfig, SearchError, SearchOptions, WebSearch, web_search,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::fake_engines::{BRAVE_KEY, EXA_KEY, FakeEngines, Fault};
use support::fake_llm::FakeReply;
use support::new_thread;
use support::research::{self as r, Role, Script, role, scripted};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

fn client(fake: &FakeEngines, engine: Engine, key: Option<&str>) -> WebSearch {
    let config = SearchConfig {
        engine,
        base_url: fake.base_url().to_owned(),
        api_key: key.map(Into::into),
        api_key_env: "THE_KEY_ENV".into(),
        timeout: Duration::from_secs(5),
        base_delay: Duration::from_millis(10),
        ..SearchConfig::default()
    };
    let http = deep_research::outbound::client_builder().build().unwrap();
    WebSearch::new(config, http, Arc::new(Semaphore::new(4)))
}

fn options(query: QueryOptions) -> SearchOptions {
    SearchOptions {
        query,
        ..SearchOptions::new(Arc::new(Semaphore::new(4)))
    }
}

async fn search(
    c: &WebSearch,
    qs: &[&str],
    query: QueryOptions,
) -> Result<deep_research::tools::SearchOutput, SearchError> {
    let qs: Vec<String> = qs.iter().map(|q| (*q).to_owned()).collect();
    web_search(
        &c.clone().into(),
        &qs,
        None,
        &options(query),
        &CancellationToken::new(),
    )
    .await
}

#[tokio::test]
async fn exa_is_asked_in_its_format_and_its_pages_are_read() {
    let fake = FakeEngines::start().await;
    let exa = client(&fake, Engine::Exa, Some(EXA_KEY));
    let out = search(
        &exa,
        &["cobalt supply"],
        QueryOptions {
            max_results: 2,
            include_domains: vec!["example.com".into()],
            exclude_domains: vec!["spam.example".into()],
            max_content_length: 4000,
            ..QueryOptions::default()
        },
    )
    .await
    .unwrap();
    let seen = &fake.seen()[0];
    assert_eq!(seen.headers["x-api-key"], EXA_KEY);
    assert_eq!(seen.body["query"], "cobalt supply");
    assert_eq!(seen.body["numResults"], 2);
    assert_eq!(seen.body["includeDomains"], json!(["example.com"]));
    assert_eq!(seen.body["excludeDomains"], json!(["spam.example"]));
    assert_eq!(seen.body["contents"]["text"]["maxCharacters"], 4000);
    assert_eq!(out.sources.len(), 2);
    // No summariser here: the snippet (the page's opening) is shown.
    assert!(
        out.text.contains("Full page text 0 about cobalt supply."),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn brave_is_asked_in_its_format_and_domains_are_applied_to_its_hits() {
    let fake = FakeEngines::start().await;
    let brave = client(&fake, Engine::Brave, Some(BRAVE_KEY));
    let out = search(
        &brave,
        &["grid storage"],
        QueryOptions {
            max_results: 3,
            exclude_domains: vec!["other.example.org".into()],
            ..QueryOptions::default()
        },
    )
    .await
    .unwrap();
    let seen = &fake.seen()[0];
    assert_eq!(seen.headers["x-subscription-token"], BRAVE_KEY);
    assert_eq!(seen.headers["accept"], "application/json");
    assert_eq!(seen.query["q"], "grid storage");
    assert_eq!(seen.query["count"], "3");
    let urls: Vec<&str> = out.sources.iter().map(|s| s.url.as_str()).collect();
    assert_eq!(urls.len(), 2, "{urls:?}");
    assert!(urls.iter().all(|u| !u.contains("other.example.org")));
    assert!(
        out.text.contains("A snippet 0 & more"),
        "tags stripped: {}",
        out.text
    );

    // Included domains become `site:` operators for an engine that has no such filter.
    search(
        &brave,
        &["q"],
        QueryOptions {
            include_domains: vec!["docs.example.com".into()],
            ..QueryOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(fake.seen()[1].query["q"], "q site:docs.example.com");
}

#[tokio::test]
async fn searxng_needs_no_key_and_asks_for_json() {
    let fake = FakeEngines::start().await;
    let searx = client(&fake, Engine::Searxng, None);
    let out = search(
        &searx,
        &["battery recycling"],
        QueryOptions {
            max_results: 2,
            ..QueryOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(fake.seen()[0].query["format"], "json");
    assert!(fake.seen()[0].headers.get("authorization").is_none());
    assert_eq!(
        out.sources.len(),
        2,
        "max_results applied to SearXNG's hits"
    );
}

#[tokio::test]
async fn engine_errors_are_read_retried_and_never_show_the_key() {
    let fake = FakeEngines::start().await;
    // A wrong key: each engine's own message, not retried, without the key.
    let err = search(
        &client(&fake, Engine::Brave, Some("wrong-key-123")),
        &["q"],
        QueryOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SearchError::Auth(_)), "{err:?}");
    assert!(
        err.to_string().contains("subscription token is invalid"),
        "{err}"
    );
    assert!(!err.to_string().contains("wrong-key-123"));
    let err = search(
        &client(&fake, Engine::Exa, Some("wrong-key-456")),
        &["q"],
        QueryOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("Invalid API key"), "{err}");
    // A missing key names the variable to set.
    let err = search(
        &client(&fake, Engine::Exa, None),
        &["q"],
        QueryOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err, SearchError::MissingKey("THE_KEY_ENV".into()));

    // 429 with Retry-After and a 502 are retried; the search then succeeds.
    fake.fail_next("brave", Fault::RateLimited { retry_after: "0" });
    fake.fail_next("exa", Fault::ServerError);
    let before = fake.seen().len();
    search(
        &client(&fake, Engine::Brave, Some(BRAVE_KEY)),
        &["q"],
        QueryOptions::default(),
    )
    .await
    .unwrap();
    search(
        &client(&fake, Engine::Exa, Some(EXA_KEY)),
        &["q"],
        QueryOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(fake.seen().len() - before, 4, "one retry each");
}

/// The scripted workload, whose researcher searches with whichever search tool it is offered.
fn workload() -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static {
    scripted(Script {
        topics: 1,
        ..Script::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_chooses_its_engine_and_its_search_settings() {
    let fake = FakeEngines::start().await;
    let config = format!(
        r#"
[search.brave]
base_url = "{url}"
api_key = "{BRAVE_KEY}"

[search.searxng]
base_url = "{url}"
"#,
        url = fake.base_url()
    );
    let ra = r::start(workload(), &config).await;
    let tid = new_thread(&ra.app).await;
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&json!({"assistant_id": "deep_research",
            "input": {"messages": [{"role": "user", "content": "Research cobalt supply in detail"}]},
            "config": {"configurable": {"search_api": "brave", "search_max_results": 2,
                                        "search_exclude_domains": ["other.example.org"]}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let values: Value = resp.json().await.unwrap();
    assert!(values["final_report"].is_string(), "{values}");
    let researcher = ra
        .llm
        .requests()
        .into_iter()
        .find(|q| role(q) == Role::Researcher)
        .unwrap();
    let tools: Vec<&str> = researcher["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"brave_search") && !tools.contains(&"tavily_search"),
        "{tools:?}"
    );
    let brave: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|s| s.engine == "brave")
        .collect();
    assert!(!brave.is_empty());
    assert!(brave.iter().all(|s| s.query["count"] == "2"));
    assert_eq!(ra.tavily.calls(), 0, "Tavily was not asked");
    let sources = values["sources"].as_array().unwrap();
    assert!(!sources.is_empty());
    assert!(
        sources
            .iter()
            .all(|s| !s["url"].as_str().unwrap().contains("other.example.org"))
    );

    // Bad choices are refused before the run.
    for (configurable, expect) in [
        (json!({"search_api": "bing"}), "search_api"),
        (json!({"tavily_search_depth": "deep"}), "basic, advanced"),
        (
            json!({"search_include_domains": "not a domain!"}),
            "is not a domain",
        ),
        (json!({"search_max_results": 50}), "between 1 and 20"),
        (json!({"search_api": "exa"}), "set EXA_API_KEY"),
    ] {
        let resp = ra
            .app
            .client
            .post(ra.app.url(&format!("/threads/{tid}/runs")))
            .json(
                &json!({"assistant_id": "deep_research", "input": {"messages": []},
                          "config": {"configurable": configurable}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422, "{configurable}");
        let detail = resp.json::<Value>().await.unwrap()["detail"].to_string();
        assert!(detail.contains(expect), "{configurable}: {detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searxng_without_an_address_is_refused_before_the_run() {
    let ra = r::start(workload(), "").await;
    let tid = new_thread(&ra.app).await;
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs")))
        .json(
            &json!({"assistant_id": "deep_research", "input": {"messages": []},
                      "config": {"configurable": {"search_api": "searxng"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let detail = resp.json::<Value>().await.unwrap()["detail"].to_string();
    assert!(detail.contains("SEARXNG_URL"), "{detail}");
}
