//! The committed `openapi/openapi.json` is what the code generates, and the server serves it
//! with Swagger UI.

use crate::support;

#[test]
fn committed_document_matches_the_code() {
    let committed = include_str!("../../openapi/openapi.json");
    // The graphs `serve` registers: the research graph under its own id and ODR's.
    let generated = deep_research::api::openapi::document(&[
        deep_research::research::GRAPH_ID,
        deep_research::research::ODR_GRAPH_ID,
    ]);
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json is stale: run `cargo run -- openapi > openapi/openapi.json`"
    );
}

#[tokio::test]
async fn document_and_docs_are_served() {
    let app = support::spawn_app().await;
    let doc: serde_json::Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/threads",
        "/threads/{thread_id}/runs/stream",
        "/assistants/search",
        "/runs/wait",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    let docs = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(
        docs.text().await.unwrap().contains("swagger"),
        "Swagger UI page"
    );
}
