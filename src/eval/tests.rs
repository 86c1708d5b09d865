use super::*;

fn question() -> Question {
    Question {
        id: "q1".into(),
        question: "What does VACUUM do?".into(),
        facts: vec![
            Fact {
                fact: "reclaims storage".into(),
                any: vec!["reclaims storage".into(), "reclaim space".into()],
            },
            Fact {
                fact: "autovacuum".into(),
                any: vec!["autovacuum".into()],
            },
        ],
        pages: vec![],
    }
}

#[test]
fn a_run_is_scored_from_its_final_state() {
    let values = json!({
        "final_report": "# Vacuum\n\nVACUUM   Reclaims Storage held by dead tuples [1].\n\nIt matters a lot for everyone here.\n\n### Sources\n\n[1] Vacuum: file:///docs/v.html#a\n[2] Made up (2024)",
        "sources": [{"url": "file:///docs/v.html#a", "title": "Vacuum",
                     "text": "VACUUM reclaims storage occupied by dead tuples."},
                    {"url": "file:///docs/a.html", "title": "Autovacuum",
                     "text": "The AUTOVACUUM daemon runs it."}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "calls": 3,
                  "models": {"llamacpp:research": {"calls": 2}, "llamacpp:final_report": {"calls": 1}}},
        "citations": {"citations": 1}
    });
    let r = score(
        &question(),
        &values,
        "success",
        None,
        Duration::from_secs(3),
        "file:///docs/",
    );
    assert!(r.researched);
    assert_eq!(r.facts_found, ["reclaims storage"]);
    assert_eq!(r.fact_recall, 0.5);
    assert_eq!(
        r.facts_retrieved.as_deref(),
        Some(&["reclaims storage".to_owned(), "autovacuum".to_owned()][..])
    );
    assert_eq!(r.facts_shown.as_deref().map(<[String]>::len), Some(2));
    assert_eq!(r.facts_in_notes.as_deref(), Some(&[][..]));
    // A page the researcher saw only the snippet of shows what the snippet holds.
    let mut snipped = values.clone();
    snipped["sources"][1]["snippet"] = json!("The daemon runs it.");
    let r2 = score(
        &question(),
        &snipped,
        "success",
        None,
        Duration::from_secs(3),
        "file:///docs/",
    );
    assert_eq!(
        r2.facts_shown.as_deref(),
        Some(&["reclaims storage".to_owned()][..])
    );
    assert_eq!(r2.facts_retrieved.as_deref().map(<[String]>::len), Some(2));
    assert_eq!((r.paragraphs, r.cited_paragraphs), (2, 1));
    assert_eq!((r.citations, r.supported), (1, 1));
    assert_eq!(
        r.invented, 1,
        "a reference without a location was never retrieved"
    );
    assert_eq!(r.calls_by_model["llamacpp:research"], 2);
    let s = summarize(std::slice::from_ref(&r));
    assert_eq!((s.researched, s.researched_without_invention), (1, 0));
    let table = markdown(&EvalReport {
        set: "t".into(),
        results: vec![r],
        summary: s,
        ..EvalReport::default()
    });
    assert!(
        table.contains("| q1 | success | 2 | 1/2 (0 / 2 / 2) | 1/2 | 1/1 | 1 | 3 | 3 |"),
        "{table}"
    );
}

#[test]
fn the_researchers_calls_and_results_are_read_from_their_updates() {
    let frame = json!({"researcher": {"researcher_messages": [
        {"type": "ai", "content": "", "tool_calls": [
            {"name": "document_search", "args": {"queries": ["WAL archiving"]}, "id": "c1"}]}]}});
    let tools = json!({"researcher_tools": {"researcher_messages": [
        {"type": "tool", "name": "document_search", "tool_call_id": "c1",
         "content": format!("No results.{}", "x".repeat(1000))}]}});
    let ns = "updates|research_supervisor:1|supervisor_tools:2|researcher:3";
    let mut steps = researcher_steps(ns, &frame);
    steps.extend(researcher_steps(ns, &tools));
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].tool, "document_search");
    assert_eq!(steps[0].args["queries"][0], "WAL archiving");
    let result = steps[1].result.as_deref().unwrap_or_default();
    assert!(result.starts_with("No results.") && result.chars().count() == STEP_RESULT_CHARS);
    // The supervisor's updates and root frames are not a researcher's.
    assert!(researcher_steps("updates|research_supervisor:1", &frame).is_empty());
    assert!(researcher_steps("updates", &frame).is_empty());
    assert!(researcher_steps("values", &frame).is_empty());
}

#[test]
fn a_kept_result_scores_again_the_same_and_follows_new_facts() {
    let values = json!({
        "final_report": "# Vacuum\n\nVACUUM reclaims storage held by dead tuples [1].\n\n### Sources\n\n[1] Vacuum: file:///docs/v.html#a",
        "sources": [{"url": "file:///docs/v.html#a", "title": "Vacuum",
                     "text": "VACUUM reclaims storage occupied by dead tuples."}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "calls": 3,
                  "models": {"llamacpp:research": {"calls": 3}}},
        "notes": ["The autovacuum daemon runs VACUUM."],
    });
    let first = score(
        &question(),
        &values,
        "success",
        None,
        Duration::from_secs(7),
        "file:///docs/",
    );
    assert_eq!(
        first.facts_in_notes.as_deref(),
        Some(&["autovacuum".to_owned()][..])
    );
    let kept: QuestionResult =
        serde_json::from_str(&serde_json::to_string(&first).unwrap()).unwrap();
    let again = rescore(&question(), &kept, "file:///docs/").unwrap();
    assert_eq!(
        serde_json::to_value(&again).unwrap(),
        serde_json::to_value(&first).unwrap()
    );
    let mut harder = question();
    harder.facts[0].any = vec!["returns space to the operating system".into()];
    let again = rescore(&harder, &kept, "file:///docs/").unwrap();
    assert_eq!((again.fact_recall, again.supported), (0.0, 1));

    let older = QuestionResult {
        retrieved: vec![],
        ..kept
    };
    let refused = rescore(&question(), &older, "file:///docs/").unwrap_err();
    assert!(
        refused.to_string().contains("kept no source texts"),
        "{refused}"
    );
}

#[test]
fn parts_of_one_set_merge_and_mixed_measurements_are_refused() {
    let result = |id: &str, recall: f64| QuestionResult {
        id: id.into(),
        researched: true,
        fact_recall: recall,
        ..QuestionResult::default()
    };
    let part = |results: Vec<QuestionResult>, configurable: Value| EvalReport {
        set: "s".into(),
        corpus: "c".into(),
        configurable,
        summary: summarize(&results),
        results,
        ..EvalReport::default()
    };
    let settings = json!({"search_api": "local"});
    // q1's file predates the retrieved-facts figure: it counts in recall, not in that one.
    let measured = QuestionResult {
        facts: 2,
        facts_retrieved: Some(vec!["a".into(), "b".into()]),
        ..result("q2", 1.0)
    };
    let a = part(vec![measured], settings.clone());
    let b = part(vec![result("q1", 0.5)], Value::Null);
    let merged = merge(vec![("a".into(), a.clone()), ("b".into(), b.clone())]).unwrap();
    let ids: Vec<&str> = merged.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["q1", "q2"]);
    assert_eq!(
        (merged.summary.questions, merged.summary.fact_recall),
        (2, 0.75)
    );
    assert_eq!(merged.summary.retrieved_recall, 1.0);
    assert_eq!(merged.configurable, settings);

    let twice = merge(vec![("a".into(), a.clone()), ("a2".into(), a.clone())]);
    assert!(
        twice
            .unwrap_err()
            .to_string()
            .contains("q2 is in both a and a2")
    );
    let other = part(vec![result("q3", 0.0)], json!({"search_api": "tavily"}));
    let mixed = merge(vec![("a".into(), a.clone()), ("o".into(), other)]);
    assert!(mixed.unwrap_err().to_string().contains("other settings"));
    let elsewhere = EvalReport {
        corpus: "d".into(),
        ..b
    };
    assert!(merge(vec![("a".into(), a), ("e".into(), elsewhere)]).is_err());
    assert!(merge(vec![]).is_err());
}

#[test]
fn a_failed_run_did_not_research_and_counts_in_recall() {
    let r = score(
        &question(),
        &json!({}),
        "error",
        Some("x".into()),
        Duration::ZERO,
        "file:///d/",
    );
    assert!(!r.researched);
    let good = QuestionResult {
        researched: true,
        fact_recall: 1.0,
        supported_share: 0.8,
        ..QuestionResult::default()
    };
    let s = summarize(&[r, good]);
    assert_eq!((s.fact_recall, s.supported_share), (0.5, 0.8));
    let a = EvalReport {
        summary: s.clone(),
        ..EvalReport::default()
    };
    let b = EvalReport {
        summary: Summary {
            fact_recall: 0.75,
            ..s
        },
        ..EvalReport::default()
    };
    assert!(compare(&a, &b).contains("| key-fact recall (whole report) | 0.50 | 0.75 | +0.25 |"));
}
