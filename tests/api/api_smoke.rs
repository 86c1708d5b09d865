use crate::support;

use serde_json::{Value, json};
use support::spawn_app;

#[tokio::test]
async fn a_streamed_run_produces_metadata_values_and_a_reply() {
    let app = spawn_app().await;
    let thread: Value = app
        .client
        .post(app.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap();
    let resp = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/stream")))
        .json(&json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": "hi"}]},
                      "stream_mode": ["values", "updates", "messages-tuple"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    println!("{text}");
    assert!(text.starts_with("event: metadata\r\n"), "{text}");
    assert!(text.contains("event: updates\r\n"));
    let state: Value = app
        .client
        .get(app.url(&format!("/threads/{tid}/state")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        state["values"]["messages"][1]["content"],
        support::graphs::REPLY,
        "{state}"
    );
}
