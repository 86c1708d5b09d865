//! Checkpoints store what each step wrote, not the whole state, so a thread's stored bytes grow
//! linearly with the conversation (LangGraph re-stores the message list every step).

use crate::support;

use deep_research::store::CheckpointQuery;
use serde_json::json;
use support::{body_text, new_thread, spawn_app};

#[tokio::test]
async fn stored_checkpoint_bytes_grow_linearly_over_ten_turns() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let thread_id = tid.parse().unwrap();
    let mut totals = Vec::new();
    for turn in 0..10 {
        let input =
            json!({"messages": [{"type": "human", "content": format!("question number {turn}")}]});
        body_text(
            app.client
                .post(app.url(&format!("/threads/{tid}/runs/wait")))
                .json(&json!({"assistant_id": "agent", "input": input})),
        )
        .await;
        let all = app
            .store
            .list_checkpoints(
                thread_id,
                &CheckpointQuery {
                    limit: 0,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let bytes: usize = all.iter().map(|c| c.writes.to_string().len()).sum();
        totals.push(bytes);
    }
    let increments: Vec<usize> = totals.windows(2).map(|w| w[1] - w[0]).collect();
    let (first, last) = (increments[0], increments[increments.len() - 1]);
    assert!(
        last <= first + first / 10,
        "turn 10 stored {last} bytes vs {first} for turn 2: {increments:?}"
    );
    let state: serde_json::Value = app
        .client
        .get(app.url(&format!("/threads/{tid}/state")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let final_size = state["values"].to_string().len();
    let stored = totals[totals.len() - 1];
    assert!(
        stored <= final_size * 3 / 2,
        "stored writes {stored} B vs final state {final_size} B"
    );
    assert_eq!(state["values"]["messages"].as_array().unwrap().len(), 20);
}
