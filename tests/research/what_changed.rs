//! A thread's question researched again — by a cron on the thread or by "run it again" — is
//! researched afresh, every page read again, and its report ends with what changed since the
//! last one: new and dropped sources, claims the pages no longer support, figures that moved,
//! computed from the two reports and the pages rather than written by the model. Over real
//! HTTP on the fakes; the cron fires for real.

use super::research::{last_values, stream};
use crate::support;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::fake_llm::FakeReply;
use support::fake_tavily::FakeHit;
use support::new_thread;
use support::research::{self as r, Role};

const QUESTION: &str = "How does VACUUM work?";

fn hit(slug: &str, title: &str, text: &str) -> FakeHit {
    FakeHit {
        title: title.into(),
        url: format!("https://docs.example/{slug}"),
        content: text.into(),
        raw_content: Some(text.into()),
        score: 0.9,
    }
}

fn autovacuum(seconds: u32) -> FakeHit {
    hit(
        "autovacuum",
        "The Autovacuum Daemon",
        &format!(
            "The autovacuum launcher starts a worker every {seconds} seconds by default, in \
             each database in turn."
        ),
    )
}

fn basics() -> FakeHit {
    hit(
        "vacuum",
        "Routine Vacuuming",
        "VACUUM reclaims storage occupied by dead tuples, so the space can be reused.",
    )
}

fn full() -> FakeHit {
    hit(
        "full",
        "VACUUM FULL",
        "VACUUM FULL rewrites the whole table into a new disk file and returns the space.",
    )
}

/// One researcher, one search; the writer reports what its pages say, as a model that reads
/// them would (the numbers are the order the search returned the pages in).
fn responder(req: &Value) -> FakeReply {
    let text = support::workload::all_text(req);
    match support::workload::role(req) {
        Role::Brief => FakeReply::Json(json!({"research_brief": QUESTION})),
        Role::Supervisor => match support::workload::turns(req) {
            0 => FakeReply::ToolCalls(vec![(
                "ConductResearch".into(),
                json!({"research_topic": "How VACUUM and autovacuum work"}),
            )]),
            _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
        },
        Role::Researcher => match support::workload::turns(req) {
            0 => FakeReply::ToolCalls(vec![(
                "tavily_search".into(),
                json!({"queries": ["vacuum"]}),
            )]),
            _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
        },
        Role::Report if text.contains("every 120 seconds") => FakeReply::Text(
            "# Vacuum\n\nThe autovacuum launcher starts a worker every 120 seconds by default \
             [1]. VACUUM FULL rewrites the whole table into a new disk file [2]."
                .into(),
        ),
        Role::Report => FakeReply::Text(
            "# Vacuum\n\nThe autovacuum launcher starts a worker every 60 seconds by default \
             [1]. VACUUM reclaims storage occupied by dead tuples [2]."
                .into(),
        ),
        _ => FakeReply::Text("ok".into()),
    }
}

async fn start() -> r::ResearchApp {
    let ra = r::start(
        responder,
        "[research]\nallow_clarification = false\ncompress_research = false\n\
         summarize_pages = false\n",
    )
    .await;
    ra.tavily.set_hits("vacuum", vec![autovacuum(60), basics()]);
    ra
}

fn custom_follow_ups(frames: &[support::SseFrame]) -> Vec<&Value> {
    frames
        .iter()
        .filter(|f| f.event == "custom" && f.data["type"] == "follow_up")
        .map(|f| &f.data)
        .collect()
}

fn urls(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["url"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_question_asked_again_is_researched_afresh_and_says_what_changed() {
    let ra = start().await;
    let tid = new_thread(&ra.app).await;
    let first = last_values(&stream(&ra, &tid, QUESTION, json!({})).await);
    assert!(first["reported_at"].as_str().is_some(), "{first}");
    assert!(
        first["what_changed"].is_null(),
        "a first report compares nothing"
    );
    assert!(
        !first["final_report"]
            .as_str()
            .unwrap()
            .contains("What changed")
    );

    // A week later the manual says 120 seconds, and a page about VACUUM FULL is found in
    // place of the basics.
    ra.tavily.set_hits("vacuum", vec![autovacuum(120), full()]);
    let frames = stream(&ra, &tid, QUESTION, json!({})).await;
    assert!(frames.iter().all(|f| f.event != "error"), "{frames:?}");
    let values = last_values(&frames);
    assert_eq!(
        values["follow_up"]["mode"], "rerun",
        "{}",
        values["follow_up"]
    );
    assert_eq!(custom_follow_ups(&frames)[0]["mode"], "rerun");
    assert_eq!(
        ra.tavily.calls(),
        2,
        "researched again, not answered from the sources"
    );
    let changed = &values["what_changed"];
    assert_eq!(changed["since"], first["reported_at"], "{changed}");
    assert_eq!(urls(&changed["new_sources"]), ["https://docs.example/full"]);
    assert_eq!(
        urls(&changed["dropped_sources"]),
        ["https://docs.example/vacuum"]
    );
    let moved = changed["moved"].as_array().unwrap();
    assert_eq!(moved.len(), 1, "{changed}");
    assert!(moved[0]["before"].as_str().unwrap().contains("60 seconds"));
    assert!(moved[0]["after"].as_str().unwrap().contains("120 seconds"));
    assert_eq!(
        changed["not_reread"], 1,
        "the basics page was not read again"
    );
    let report = values["final_report"].as_str().unwrap();
    let section = report.find("## What changed since ").expect(report);
    assert!(section < report.find("### Sources").unwrap(), "{report}");
    assert!(
        report.contains("[VACUUM FULL](https://docs.example/full)"),
        "{report}"
    );
    assert!(report.contains("is now “The autovacuum launcher starts a worker every 120"));
    // The thread's sources are this run's pages, read again (not last week's texts).
    let state = ra
        .app
        .get_json(&format!("/threads/{tid}/state?include_hidden=true"))
        .await;
    let sources = &state["values"]["sources"];
    assert_eq!(
        urls(sources),
        [
            "https://docs.example/autovacuum",
            "https://docs.example/full"
        ]
    );
    assert!(sources[0]["text"].as_str().unwrap().contains("120 seconds"));

    // "Run it again" on unchanged pages: nothing changed, and the section says so.
    let again = last_values(&stream(&ra, &tid, "Please run it again.", json!({})).await);
    assert_eq!(again["follow_up"]["mode"], "rerun");
    let changed = &again["what_changed"];
    assert_eq!(changed["new_sources"], json!([]), "{changed}");
    assert_eq!(changed["unsupported"], json!([]));
    assert_eq!(changed["moved"], json!([]));
    assert!(
        again["final_report"]
            .as_str()
            .unwrap()
            .contains("Nothing changed")
    );
}

/// A re-run whose searches all fail writes no report and keeps the last one's sources, so
/// questions on the report are still answered from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_that_finds_nothing_keeps_the_last_report_and_its_sources() {
    let ra = start().await;
    let tid = new_thread(&ra.app).await;
    let first = last_values(&stream(&ra, &tid, QUESTION, json!({})).await);
    ra.tavily
        .fail_always(support::fake_tavily::Fault::Unauthorized);
    let frames = stream(&ra, &tid, QUESTION, json!({})).await;
    let error = frames
        .iter()
        .find(|f| f.event == "error")
        .expect("the re-run fails");
    assert!(
        error.data["message"]
            .as_str()
            .unwrap_or_default()
            .contains("gathered no sources"),
        "{}",
        error.data
    );
    let state = ra.app.get_json(&format!("/threads/{tid}/state")).await;
    let values = &state["values"];
    assert_eq!(values["final_report"], first["final_report"]);
    assert_eq!(
        urls(&values["sources"]),
        [
            "https://docs.example/autovacuum",
            "https://docs.example/vacuum"
        ]
    );
}

/// Under `follow_up = "answer"` nothing is researched again, the same question included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_answer_the_question_asked_again_is_not_researched() {
    let ra = start().await;
    let tid = new_thread(&ra.app).await;
    stream(&ra, &tid, QUESTION, json!({})).await;
    let answer_only = json!({"config": {"configurable": {"follow_up": "answer"}}});
    let values = last_values(&stream(&ra, &tid, QUESTION, answer_only).await);
    assert_eq!(ra.tavily.calls(), 1);
    assert_ne!(
        values["follow_up"]["mode"], "rerun",
        "{}",
        values["follow_up"]
    );
}

/// A cron on the thread sends the question every tick: its run compares with the report before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_on_the_thread_reports_what_changed_since_the_last_run() {
    let ra = start().await;
    let tid = new_thread(&ra.app).await;
    stream(&ra, &tid, QUESTION, json!({})).await;
    ra.tavily.set_hits("vacuum", vec![autovacuum(120), full()]);
    let cron: Value = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs/crons")))
        .json(
            &json!({"assistant_id": "deep_research", "schedule": "* * * * *",
                      "input": {"messages": [{"role": "user", "content": QUESTION}]}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cron_id = cron["cron_id"].as_str().expect("a cron").to_owned();
    // Up to a minute to the tick, then the run.
    let deadline = Instant::now() + Duration::from_secs(90);
    let run = loop {
        let runs = ra.app.get_json(&format!("/threads/{tid}/runs")).await;
        let fired = runs
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["metadata"]["cron_id"] == cron_id.as_str())
            .cloned();
        if let Some(run) = fired.filter(|r| r["status"] != "pending" && r["status"] != "running") {
            break run;
        }
        assert!(Instant::now() < deadline, "the cron never ran: {runs}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let deleted = ra
        .app
        .client
        .delete(ra.app.url(&format!("/runs/crons/{cron_id}")))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success());
    assert_eq!(run["status"], "success", "{run}");
    let state = ra.app.get_json(&format!("/threads/{tid}/state")).await;
    let values = &state["values"];
    assert_eq!(values["follow_up"]["mode"], "rerun");
    assert_eq!(
        urls(&values["what_changed"]["new_sources"]),
        ["https://docs.example/full"]
    );
    assert!(
        values["final_report"]
            .as_str()
            .unwrap()
            .contains("## What changed since ")
    );
}
