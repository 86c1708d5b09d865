//! Questions asked on a thread whose report is written (`follow_up`): answered from the report's
//! sources in one short call, checked, streamed and kept alike, without new research; researched
//! again when no source bears on the question, when the message asks for it, or when the run
//! says `follow_up = "research"` (Open Deep Research's behaviour); under `"answer"` a question
//! the sources cannot answer is told so, not answered from memory. Over real HTTP on the fakes.

use super::research::{docs_corpus, last_values, stream, vacuum_run};
use crate::support;
use serde_json::{Value, json};
use support::fake_llm::FakeReply;
use support::new_thread;
use support::research::{self as r, Role};

/// The number the answer call was shown the WAL section under (`[n] Title` then its excerpt).
fn wal_number(text: &str) -> usize {
    let listing = text
        .split("each under its number:")
        .nth(1)
        .unwrap_or_default();
    let mut number = 0;
    for line in listing.lines() {
        if let Some(n) = line
            .strip_prefix('[')
            .and_then(|l| l.split(']').next())
            .and_then(|n| n.parse().ok())
        {
            number = n;
        }
        if line.contains("WAL segment files are 16 MB") {
            return number;
        }
    }
    0
}

fn is_follow_up_call(req: &Value) -> bool {
    r::role(req) == Role::FollowUp
}

fn count(ra: &r::ResearchApp, role: Role) -> usize {
    ra.llm
        .requests()
        .iter()
        .filter(|q| r::role(q) == role)
        .count()
}

fn follow_up_calls(ra: &r::ResearchApp) -> usize {
    ra.llm
        .requests()
        .iter()
        .filter(|q| is_follow_up_call(q))
        .count()
}

fn custom<'a>(frames: &'a [support::SseFrame], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.event == "custom" && f.data["type"] == kind)
        .map(|f| &f.data)
        .collect()
}

async fn start() -> (r::ResearchApp, (tempfile::TempDir, tempfile::TempDir)) {
    let (docs, index, config) = docs_corpus();
    let run = vacuum_run(
        json!(["vacuum dead tuples", "WAL segment files"]),
        |_| FakeReply::Text("VACUUM reclaims the storage of dead tuples.".into()),
        "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples [1].",
    );
    let ra = r::start(
        move |req: &Value| {
            if !is_follow_up_call(req) {
                return run(req);
            }
            let text = support::workload::all_text(req);
            let asked = text
                .split("<FollowUp>")
                .nth(1)
                .and_then(|t| t.split("</FollowUp>").next())
                .unwrap_or_default();
            if asked.contains("autovacuum launcher start") {
                // A wrong number, as the 1.5B model gives defaults.
                return FakeReply::Text(
                    "The autovacuum launcher starts a worker every 5 seconds by default [1]."
                        .into(),
                );
            }
            let n = wal_number(&text);
            // The sources shown hold the answer: one supported sentence, one invented.
            FakeReply::Text(format!(
                "WAL segment files are 16 MB each [{n}]. The moon is made of green cheese and \
                 orbits Jupiter every week [{n}]."
            ))
        },
        &format!("[research]\nallow_clarification = false\ncompress_research = false\n\n{config}"),
    )
    .await;
    (ra, (docs, index))
}

fn local() -> Value {
    json!({"config": {"configurable": {"search_api": "local", "corpus": "manual"}}})
}

fn with_follow_up(mode: &str) -> Value {
    json!({"config": {"configurable": {"search_api": "local", "corpus": "manual",
                                       "follow_up": mode}}})
}

/// A message's text as a streaming client ends with it (chunks of an id joined, a whole message
/// under that id replacing them).
fn streamed_text(frames: &[support::SseFrame], id: &str) -> String {
    let mut text = String::new();
    for f in frames.iter().filter(|f| f.event == "messages") {
        let m = &f.data[0];
        if m["id"] != id {
            continue;
        }
        let part = m["content"].as_str().unwrap_or_default();
        if m["type"].as_str().is_some_and(|t| t.ends_with("Chunk")) {
            text.push_str(part);
        } else {
            text = part.to_owned();
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_on_the_report_is_answered_from_its_sources_without_new_research() {
    let (ra, _guard) = start().await;
    let tid = new_thread(&ra.app).await;
    let first = stream(&ra, &tid, "How does VACUUM work?", local()).await;
    let report = last_values(&first)["final_report"]
        .as_str()
        .unwrap()
        .to_owned();
    let (briefs, researchers) = (count(&ra, Role::Brief), count(&ra, Role::Researcher));
    assert_eq!(follow_up_calls(&ra), 0, "a first question is researched");

    let frames = stream(&ra, &tid, "How large is a WAL segment file?", local()).await;
    assert!(frames.iter().all(|f| f.event != "error"), "{frames:?}");
    assert_eq!(follow_up_calls(&ra), 1);
    assert_eq!(count(&ra, Role::Brief), briefs, "no new brief");
    assert_eq!(count(&ra, Role::Researcher), researchers, "no new research");
    let values = last_values(&frames);
    assert_eq!(
        values["final_report"],
        report.as_str(),
        "the report is kept"
    );
    assert_eq!(values["follow_up"]["mode"], "answered", "{values}");
    assert_eq!(values["follow_up"]["citations"]["supported"], 1);
    let last = values["messages"].as_array().unwrap().last().unwrap();
    let answer = last["content"].as_str().unwrap();
    assert!(
        answer.starts_with("WAL segment files are 16 MB each [1]."),
        "cited, renumbered by first use: {answer}"
    );
    assert!(!answer.contains("green cheese"), "{answer}");
    assert!(
        answer.contains("Sources") && answer.contains("wal.md"),
        "{answer}"
    );
    assert_eq!(
        streamed_text(&frames, last["id"].as_str().unwrap()),
        answer,
        "a streaming client ends with the checked answer"
    );
    let chosen = custom(&frames, "follow_up");
    assert_eq!(chosen.len(), 1, "{frames:?}");
    assert_eq!(chosen[0]["mode"], "answered");
    assert_eq!(custom(&frames, "citations").len(), 1);
    let updates: Vec<&Value> = frames
        .iter()
        .filter(|f| f.event == "updates")
        .map(|f| &f.data)
        .collect();
    assert!(
        updates.iter().any(|u| u.get("answer_follow_up").is_some()),
        "{updates:?}"
    );
    // An answer its sources do not support is not given: their own words are, quoted.
    let frames = stream(
        &ra,
        &tid,
        "How often does the autovacuum launcher start a worker by default?",
        local(),
    )
    .await;
    let values = last_values(&frames);
    assert_eq!(count(&ra, Role::Brief), briefs, "still no new brief");
    let quoted = values["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        quoted.starts_with(
            "> “The autovacuum launcher starts a worker every 60 seconds by default.” [1]"
        ),
        "{quoted}"
    );
    assert!(!quoted.contains("5 seconds"), "{quoted}");
    assert!(
        values["follow_up"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("quoted"),
        "{values}"
    );
    // The thread reads as the stream ended.
    let answer = quoted;
    let state = ra.app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(
        state["values"]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"],
        answer
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_the_sources_do_not_bear_on_is_researched_again() {
    let (ra, _guard) = start().await;
    let tid = new_thread(&ra.app).await;
    stream(&ra, &tid, "How does VACUUM work?", local()).await;
    let briefs = count(&ra, Role::Brief);

    let frames = stream(&ra, &tid, "What is the capital of France?", local()).await;
    let values = last_values(&frames);
    assert_eq!(
        follow_up_calls(&ra),
        0,
        "no call when no source bears on it"
    );
    assert_eq!(count(&ra, Role::Brief), briefs + 1, "a new brief");
    assert_eq!(values["follow_up"]["mode"], "researched", "{values}");
    assert!(
        values["follow_up"]["reason"]
            .as_str()
            .unwrap()
            .contains("no source"),
        "{values}"
    );
    assert!(values["final_report"].is_string());
    assert_eq!(custom(&frames, "follow_up")[0]["mode"], "researched");

    // Asked for, research it is, whatever the sources hold.
    let frames = stream(
        &ra,
        &tid,
        "Please research this further: how large is a WAL segment file?",
        local(),
    )
    .await;
    assert_eq!(follow_up_calls(&ra), 0);
    assert_eq!(count(&ra, Role::Brief), briefs + 2);
    assert!(
        last_values(&frames)["follow_up"]["reason"]
            .as_str()
            .unwrap()
            .contains("asks for more research")
    );

    // Open Deep Research's behaviour, one setting away: every message researched.
    let frames = stream(
        &ra,
        &tid,
        "How large is a WAL segment file?",
        with_follow_up("research"),
    )
    .await;
    assert_eq!(follow_up_calls(&ra), 0);
    assert_eq!(count(&ra, Role::Brief), briefs + 3);
    assert_eq!(
        last_values(&frames)["follow_up"]["reason"],
        "follow_up = research"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_answer_a_question_the_sources_cannot_answer_is_told_so() {
    let (ra, _guard) = start().await;
    let tid = new_thread(&ra.app).await;
    stream(&ra, &tid, "How does VACUUM work?", local()).await;
    let briefs = count(&ra, Role::Brief);
    let frames = stream(
        &ra,
        &tid,
        "What is the capital of France?",
        with_follow_up("answer"),
    )
    .await;
    let values = last_values(&frames);
    assert_eq!(count(&ra, Role::Brief), briefs, "not researched");
    assert_eq!(values["follow_up"]["mode"], "answered");
    let last = values["messages"].as_array().unwrap().last().unwrap();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("The sources this report was written from do not answer"),
        "{last}"
    );
    // A value it does not take is refused before the run starts.
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs")))
        .json(&json!({"assistant_id": "deep_research",
                      "input": {"messages": [{"role": "user", "content": "and?"}]},
                      "config": {"configurable": {"follow_up": "sometimes"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("follow_up"),
        "{body}"
    );
}

/// On web pages (the scripted research over the Tavily fake, as the research page's test runs
/// it), a follow-up the pages bear on is answered from them, not researched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_on_a_web_report_is_answered_from_its_pages() {
    let script = r::scripted(r::Script::default());
    let ra = r::start(
        move |req: &Value| match r::role(req) {
            Role::FollowUp => support::workload::follow_up_answer(req),
            _ => script(req),
        },
        "",
    )
    .await;
    let tid = new_thread(&ra.app).await;
    stream(&ra, &tid, "What is known about battery costs?", json!({})).await;
    let frames = stream(
        &ra,
        &tid,
        "What is the overview of subtopic number 0?",
        json!({}),
    )
    .await;
    let values = last_values(&frames);
    assert_eq!(
        values["follow_up"]["mode"], "answered",
        "{:#}",
        values["follow_up"]
    );
    let answer = values["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert!(
        answer
            .as_str()
            .unwrap()
            .contains("Paragraph 1 of a page about subtopic number 0"),
        "{answer}"
    );
}
