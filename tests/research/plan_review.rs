//! Plan review in the research graph (`review_plan`): the run pauses after the brief with the
//! planned topics, nothing is researched until the user answers, a rejection plans again with
//! the feedback, an edit is what gets researched.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::new_thread;
use support::research::{self as r, ResearchApp, Role, Script, scripted};

/// The research graph on the fakes; the scripted model plans two topics.
async fn app() -> ResearchApp {
    let script = Script {
        topics: 2,
        ..Script::default()
    };
    r::start(scripted(script), "").await
}

async fn wait(ra: &ResearchApp, tid: &str, body: Value) -> Value {
    let mut full = json!({"assistant_id": "deep_research",
                          "config": {"configurable": {"review_plan": true}}});
    if let (Some(f), Some(b)) = (full.as_object_mut(), body.as_object()) {
        f.extend(b.clone());
    }
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&full)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

fn question(values: &Value) -> &Value {
    let pending = values["__interrupt__"].as_array().expect("the run paused");
    assert_eq!(pending.len(), 1, "{pending:?}");
    &pending[0]["value"]
}

fn requests_of(ra: &ResearchApp, role: Role) -> Vec<Value> {
    ra.llm
        .requests()
        .into_iter()
        .filter(|q| r::role(q) == role)
        .collect()
}

/// The topic line each researcher was given (the brief follows it, for context).
fn researched_topics(ra: &ResearchApp) -> BTreeSet<String> {
    requests_of(ra, Role::Researcher)
        .iter()
        .filter_map(|q| {
            let first = q["messages"]
                .as_array()?
                .iter()
                .find(|m| m["role"] == "user")?;
            let text = first["content"].as_str()?;
            assert!(text.contains("larger research question"), "{text}");
            Some(text.lines().next()?.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_reviewed_before_any_researcher_is_paid_for() {
    let ra = app().await;
    let tid = new_thread(&ra.app).await;
    let input = json!({"messages": [{"role": "user", "content": "Compare two things"}]});
    let paused = wait(&ra, &tid, json!({"input": input})).await;
    let asked = question(&paused);
    assert_eq!(asked["type"], "plan_review");
    assert_eq!(
        asked["topics"],
        json!(["planned topic 0", "planned topic 1"])
    );
    assert!(
        asked["research_brief"]
            .as_str()
            .unwrap()
            .contains("everything about")
    );
    // LangChain's HITL shape too, so agent-chat-ui shows approve / edit / reject
    assert_eq!(
        asked["review_configs"][0]["allowed_decisions"],
        json!(["approve", "edit", "reject"])
    );
    assert!(requests_of(&ra, Role::Supervisor).is_empty());
    assert!(requests_of(&ra, Role::Researcher).is_empty());
    assert_eq!(ra.tavily.calls(), 0);
    let thread = ra.app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted");
    let state = ra.app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(state["next"], json!(["review_plan"]));

    // an answer that cannot be read is asked again, saying why; nothing else happens
    let again = wait(&ra, &tid, json!({"command": {"resume": "sounds fine"}})).await;
    assert!(
        question(&again)["error"]
            .as_str()
            .unwrap()
            .contains("approve")
    );
    assert_ne!(
        again["__interrupt__"][0]["id"],
        paused["__interrupt__"][0]["id"]
    );
    assert_eq!(requests_of(&ra, Role::Plan).len(), 1, "no new plan");

    // rejected with feedback: planned again, with the feedback in the prompt
    let replanned = wait(
        &ra,
        &tid,
        json!({"command": {"resume": {"action": "reject", "feedback": "focus on costs only"}}}),
    )
    .await;
    assert_eq!(
        question(&replanned)["topics"],
        json!(["revised planned topic 0", "revised planned topic 1"])
    );
    let plans = requests_of(&ra, Role::Plan);
    assert_eq!(plans.len(), 2);
    assert!(r::all_text(&plans[1]).contains("focus on costs only"));
    assert!(requests_of(&ra, Role::Researcher).is_empty());

    // edited and approved: exactly the edited topic is researched, then the report is written
    let done = wait(
        &ra,
        &tid,
        json!({"command": {"resume": {"action": "edit", "topics": ["the costs of the first thing"]}}}),
    )
    .await;
    assert!(done.get("__interrupt__").is_none(), "{done}");
    assert!(!done["final_report"].as_str().unwrap_or_default().is_empty());
    assert_eq!(
        done["research_plan"],
        json!(["the costs of the first thing"])
    );
    assert_eq!(
        researched_topics(&ra),
        BTreeSet::from(["the costs of the first thing".to_owned()])
    );
    // the supervisor's first round was the plan: its first model call already sees the results
    let first_supervisor_call = &requests_of(&ra, Role::Supervisor)[0];
    assert!(r::all_text(first_supervisor_call).contains("reviewed and approved this plan"));
    let thread = ra.app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "idle");
    assert_eq!(thread["interrupts"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_plan_runs_as_planned_and_without_review_nothing_pauses() {
    let ra = app().await;
    let tid = new_thread(&ra.app).await;
    let input = json!({"messages": [{"role": "user", "content": "Compare two things"}]});
    wait(&ra, &tid, json!({"input": input})).await;
    let done = wait(
        &ra,
        &tid,
        json!({"command": {"resume": {"decisions": [{"type": "approve"}]}}}),
    )
    .await;
    assert!(!done["final_report"].as_str().unwrap_or_default().is_empty());
    // The run that resumed after the review counts what the first run spent too.
    assert_eq!(
        done["usage"]["calls"],
        json!(ra.llm.requests().len()),
        "{}",
        done["usage"]
    );
    assert_eq!(
        researched_topics(&ra),
        BTreeSet::from(["planned topic 0".to_owned(), "planned topic 1".to_owned()])
    );

    // the setting is off by default: the same question runs straight through
    let tid = new_thread(&ra.app).await;
    let plans_before = requests_of(&ra, Role::Plan).len();
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&json!({"assistant_id": "deep_research", "input": input}))
        .send()
        .await
        .unwrap();
    let values: Value = resp.json().await.unwrap();
    assert!(values.get("__interrupt__").is_none());
    assert!(
        !values["final_report"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(requests_of(&ra, Role::Plan).len(), plans_before);
}
