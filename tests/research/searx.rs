//! The `searxng` search backend against a real searx (Debian's `searx` package: the project
//! SearXNG forked from, with the same `/search?format=json` answer), whose one engine is a
//! JSON engine reading a local page this test serves, since this machine has no web. Skips
//! without searx unless `DR_REQUIRE_SEARX` is set (CI), when it fails.

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use deep_research::tools::{
    Engine, QueryOptions, SearchConfig, SearchOptions, WebSearch, web_search,
};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

const EXAMPLE: &str = "/usr/share/doc/searx/examples/settings.yml";

fn python() -> Option<String> {
    let python = std::env::var("DR_SEARX_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let found = Path::new(EXAMPLE).exists()
        && std::process::Command::new(&python)
            // Finding the package, not importing it: importing reads (and checks) settings.
            .args([
                "-c",
                "import importlib.util, sys; sys.exit(importlib.util.find_spec('searx') is None)",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
    if found {
        return Some(python);
    }
    assert!(
        std::env::var_os("DR_REQUIRE_SEARX").is_none(),
        "DR_REQUIRE_SEARX is set but searx is not installed (apt-get install searx)"
    );
    eprintln!("skipping: searx not installed");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// "The web" for searx's engine: three pages per query, one on another site.
async fn serve_pages() -> u16 {
    let app = Router::new().route(
        "/pages.json",
        get(|Query(q): Query<HashMap<String, String>>| async move {
            let q = q.get("q").cloned().unwrap_or_default();
            let slug: String = q.chars().filter(char::is_ascii_alphanumeric).collect();
            axum::Json(json!({"items": [
                {"url": format!("https://docs.example.org/{slug}/1"), "title": format!("About {q}"),
                 "content": format!("What the docs say about {q}.")},
                {"url": format!("https://docs.example.org/{slug}/2"), "title": "More",
                 "content": "Further detail."},
                {"url": format!("https://elsewhere.example.net/{slug}"), "title": "Elsewhere",
                 "content": "Another site."}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// The example settings with this test's port and one JSON engine in place of the web's.
fn settings(port: u16, pages: u16) -> String {
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let start = example.find("\nengines:").expect("an engines section");
    // The engines section runs to the next top-level key, `locales:`.
    let end = example[start..]
        .find("\nlocales:")
        .map_or(example.len(), |i| start + i);
    let engines = format!(
        "
engines:
  - name : local pages
    engine : json_engine
    shortcut : lp
    categories : general
    paging : False
    search_url : http://127.0.0.1:{pages}/pages.json?q={{query}}
    results_query : items
    url_query : url
    title_query : title
    content_query : content
    timeout : 5.0
    enable_http : True
"
    );
    format!("{}{engines}{}", &example[..start], &example[end..])
        .replace("port : 8888", &format!("port : {port}"))
        .replace("ultrasecretkey", "a-test-secret-for-searx")
}

struct Searx(std::process::Child);

impl Drop for Searx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_searxng_backend_reads_a_real_searx() {
    let Some(python) = python() else { return };
    let pages = serve_pages().await;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.yml");
    std::fs::write(&path, settings(port, pages)).unwrap();
    let child = std::process::Command::new(python)
        .args(["-m", "searx.webapp"])
        .env("SEARX_SETTINGS_PATH", &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start searx");
    let _searx = Searx(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "searx did not listen");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let config = SearchConfig {
        engine: Engine::Searxng,
        base_url: format!("http://127.0.0.1:{port}"),
        api_key: None,
        api_key_env: "SEARXNG_API_KEY".into(),
        timeout: Duration::from_secs(20),
        ..SearchConfig::default()
    };
    let http = deep_research::outbound::client_builder().build().unwrap();
    let searx = WebSearch::new(config, http, Arc::new(Semaphore::new(2)));
    let opts = SearchOptions {
        query: QueryOptions {
            max_results: 2,
            exclude_domains: vec!["elsewhere.example.net".into()],
            ..QueryOptions::default()
        },
        ..SearchOptions::new(Arc::new(Semaphore::new(2)))
    };
    let out = web_search(
        &searx.clone().into(),
        &["cobalt reserves".to_owned()],
        None,
        &opts,
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let urls: Vec<&str> = out.sources.iter().map(|s| s.url.as_str()).collect();
    assert_eq!(
        urls,
        [
            "https://docs.example.org/cobaltreserves/1",
            "https://docs.example.org/cobaltreserves/2"
        ]
    );
    assert!(
        out.text
            .contains("What the docs say about cobalt reserves."),
        "{}",
        out.text
    );
}
