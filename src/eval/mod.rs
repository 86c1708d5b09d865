//! `deep-research eval`: runs a question set against a corpus and a model, through the same HTTP
//! API clients use, and scores each run: did it research (succeed, search, write a report), how
//! many of the question's key facts the report states, how much of its body cites a source, how
//! many of its citations the cited text supports (checked afresh, `support::audit`), how many
//! cited locations are not in the corpus, and what it cost (wall time, tokens, calls per role,
//! fallbacks). `compare` shows what changed between two result files.

use crate::research::support::{self, Sources};
use futures::StreamExt;
pub use reading::Reading;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub mod reading;
pub mod retrieval;

/// A question set (`eval/*.json`).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct QuestionSet {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The corpus the questions are about (a name the server knows).
    pub corpus: String,
    pub questions: Vec<Question>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Question {
    pub id: String,
    pub question: String,
    pub facts: Vec<Fact>,
    /// The documents that hold the answer (for whoever maintains the set).
    #[serde(default)]
    pub pages: Vec<String>,
}

/// A key fact and the wordings that count as stating it (any one, case-insensitive).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Fact {
    pub fact: String,
    pub any: Vec<String>,
}

impl QuestionSet {
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let set: Self =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for q in &set.questions {
            anyhow::ensure!(
                !q.facts.is_empty() && q.facts.iter().all(|f| !f.any.is_empty()),
                "{}: question {} needs facts, each with at least one wording",
                path.display(),
                q.id
            );
        }
        Ok(set)
    }

    /// The questions named in `only` (all when empty), at most `limit`.
    pub fn select(&self, only: &[String], limit: Option<usize>) -> Vec<Question> {
        self.questions
            .iter()
            .filter(|q| only.is_empty() || only.contains(&q.id))
            .take(limit.unwrap_or(usize::MAX))
            .cloned()
            .collect()
    }
}

/// How to run the set.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// `configurable` for every run (the corpus and search_api are added).
    pub configurable: Value,
    /// Where the corpus's documents are located, to tell its locations from others: its
    /// `base_url`, or `file://` and its directory.
    pub corpus_prefix: String,
    /// A run still going after this is given up on (and scored as not researched).
    pub run_limit: Duration,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
}

/// One question's run and its scores. Result files from older versions lack the newer fields;
/// they read as empty rather than refusing the file (`serde(default)` here and below).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct QuestionResult {
    pub id: String,
    pub status: String,
    pub error: Option<String>,
    pub researched: bool,
    pub searched: bool,
    pub sources: usize,
    pub report_chars: usize,
    pub facts: usize,
    pub facts_found: Vec<String>,
    pub fact_recall: f64,
    /// Key facts stated in the text of a source the run retrieved: what its report could have
    /// said. Recall far below this is lost in writing; this low, the search missed. `None` in
    /// result files written before this figure existed.
    pub facts_retrieved: Option<Vec<String>>,
    /// Key facts in what the researchers were shown of those sources (a page's summary, or the
    /// page itself when it was short enough to go unsummarised).
    pub facts_shown: Option<Vec<String>>,
    /// Key facts in the findings the report writer was given (the researchers' compressed
    /// notes). Read with the two above, where the facts were lost: search, summary, compression
    /// or writing.
    pub facts_in_notes: Option<Vec<String>>,
    pub paragraphs: usize,
    pub cited_paragraphs: usize,
    pub cited_paragraph_share: f64,
    pub citations: usize,
    pub supported: usize,
    pub supported_share: f64,
    /// Cited locations (and references without a location) that are not in the corpus.
    pub invented: usize,
    /// The writer's own citations before the repair (`citations` in the final state).
    pub draft: Value,
    pub wall_secs: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub calls: u64,
    pub calls_by_model: BTreeMap<String, u64>,
    pub fallbacks: Value,
    /// What the run retrieved, and the report itself, for reading the figures against.
    pub source_urls: Vec<String>,
    pub report: String,
    /// The sources with the text the check read and the summary the researcher was shown:
    /// what `rescore` needs to score the report again with another check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retrieved: Vec<crate::research::state::Source>,
    /// The research brief the writer was given with the findings (the research model's own
    /// restatement of the question): a report far from its findings may start here.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub brief: String,
    /// The findings the writer was given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The report read as its reader reads it (`reading.rs`): recall over the body without
    /// the question's own facts, the share pasted, headings that are source titles.
    pub reading: Reading,
    /// The researchers' tool calls and the openings of their results, in order: what was
    /// searched for and what came back (why a run found no source, or missed a fact).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub researcher_steps: Vec<ToolStep>,
}

/// One tool call of a researcher, or one result.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct ToolStep {
    pub tool: String,
    /// A call's arguments (null for a result).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub args: Value,
    /// A result's opening characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// How much of a tool result a step keeps: enough to tell "no results" and which sources.
const STEP_RESULT_CHARS: usize = 400;

/// The researcher steps in one streamed `updates` frame of a researcher subgraph (its event is
/// `updates|…|researcher:<id>`); none for any other frame.
fn researcher_steps(event: &str, data: &Value) -> Vec<ToolStep> {
    if !event.starts_with("updates|") || !event.contains("|researcher:") {
        return vec![];
    }
    let mut steps = Vec::new();
    for node in ["researcher", "researcher_tools"] {
        for m in data[node]["researcher_messages"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                steps.push(ToolStep {
                    tool: call["name"].as_str().unwrap_or_default().to_owned(),
                    args: call["args"].clone(),
                    result: None,
                });
            }
            if m["type"] == "tool" {
                let content = match &m["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                steps.push(ToolStep {
                    tool: m["name"].as_str().unwrap_or_default().to_owned(),
                    args: Value::Null,
                    result: Some(content.chars().take(STEP_RESULT_CHARS).collect()),
                });
            }
        }
    }
    steps
}

/// A whole evaluation.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct EvalReport {
    pub set: String,
    pub corpus: String,
    pub configurable: Value,
    pub started_at: String,
    /// How the corpus's locations begin (`EvalOptions::corpus_prefix`).
    pub corpus_prefix: String,
    pub results: Vec<QuestionResult>,
    pub summary: Summary,
}

/// Figures over the whole set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Summary {
    pub questions: usize,
    pub researched: usize,
    /// Researched, and no cited location outside the corpus.
    pub researched_without_invention: usize,
    pub fact_recall: f64,
    /// These three over the questions whose results have them.
    pub retrieved_recall: f64,
    pub shown_recall: f64,
    pub notes_recall: f64,
    pub cited_paragraph_share: f64,
    pub supported_share: f64,
    pub invented: usize,
    pub median_wall_secs: f64,
    pub total_wall_secs: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Key-fact recall over the reports' bodies, the question's own facts not scored (every
    /// question counts, as `fact_recall`).
    pub body_recall: f64,
    /// Mean share of the body copied in runs of eight words or more.
    pub copied_share: f64,
    /// The same over prose only (marked quotations left out), and the mean share quoted.
    pub copied_prose_share: f64,
    pub quoted_share: f64,
    /// Section headings that are a source's title, over all headings.
    pub source_title_heading_share: f64,
    /// Body claims citing nothing that no retrieved text supports, in all reports.
    pub uncited_unsupported: usize,
    /// Sections whose sources hold no key fact, in all reports.
    pub off_topic_sections: usize,
}

/// The research settings every run of the set gets: the operator's, searching the set's corpus,
/// never asking a clarifying question.
pub fn run_settings(set: &QuestionSet, opts: &EvalOptions) -> Value {
    let mut configurable = opts.configurable.clone();
    configurable["search_api"] = json!("local");
    configurable["corpus"] = json!(set.corpus);
    configurable["allow_clarification"] = json!(false);
    configurable
}

/// Runs every question, one after another, on the server at `base_url`.
pub async fn run(
    base_url: &str,
    set: &QuestionSet,
    questions: &[Question],
    opts: &EvalOptions,
    progress: &mut (dyn FnMut(&QuestionResult) + Send),
) -> anyhow::Result<EvalReport> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = &opts.api_key {
        headers.insert("x-api-key", reqwest::header::HeaderValue::from_str(key)?);
    }
    let http = crate::net::client_builder()
        .default_headers(headers)
        .build()?;
    let configurable = run_settings(set, opts);
    let started_at = chrono::Utc::now().to_rfc3339();
    let mut results = Vec::new();
    for q in questions {
        let result = run_one(&http, base_url, q, &configurable, opts).await?;
        progress(&result);
        results.push(result);
    }
    let summary = summarize(&results);
    Ok(EvalReport {
        set: set.name.clone(),
        corpus: set.corpus.clone(),
        configurable,
        started_at,
        corpus_prefix: opts.corpus_prefix.clone(),
        results,
        summary,
    })
}

async fn run_one(
    http: &reqwest::Client,
    base_url: &str,
    q: &Question,
    configurable: &Value,
    opts: &EvalOptions,
) -> anyhow::Result<QuestionResult> {
    let thread: Value = http
        .post(format!("{base_url}/threads"))
        .json(&json!({"metadata": {"eval_question": q.id}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let thread_id = thread["thread_id"].as_str().unwrap_or_default().to_owned();
    let body = json!({
        "assistant_id": "deep_research",
        "input": {"messages": [{"role": "user", "content": q.question}]},
        // Updates of the researchers' subgraphs carry their tool calls and results.
        "stream_mode": ["values", "updates"],
        "stream_subgraphs": true,
        "config": {"configurable": configurable},
    });
    let started = Instant::now();
    let url = format!("{base_url}/threads/{thread_id}/runs/stream");
    let mut events = crate::cli::stream_run(http, &url, &body).await?;
    let mut values = Value::Null;
    // The report step clears the findings from the state, so they are kept as they stream by.
    let mut notes = Value::Null;
    let mut error: Option<String> = None;
    let mut steps: Vec<ToolStep> = Vec::new();
    let streamed = tokio::time::timeout(opts.run_limit, async {
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            steps.extend(researcher_steps(&event.event, &data));
            match event.event.as_str() {
                "values" => {
                    if data["notes"].as_array().is_some_and(|n| !n.is_empty()) {
                        notes = data["notes"].clone();
                    }
                    values = data;
                }
                "error" => {
                    error = Some(format!("{}: {}", data["error"], data["message"]));
                }
                _ => {}
            }
        }
    })
    .await;
    let wall = started.elapsed();
    let status = match (&streamed, &error) {
        (Err(_), _) => {
            // Given up on: stop it, so the next question has the model to itself.
            let _ = http
                .post(format!("{base_url}/threads/{thread_id}/runs/cancel_all"))
                .send()
                .await;
            error = Some(format!("still running after {:?}", opts.run_limit));
            "timeout"
        }
        (Ok(()), Some(_)) => "error",
        (Ok(()), None) => "success",
    };
    if status == "success" {
        // Streamed values leave out the sources' texts; the state API has them (the check of
        // the citations reads them).
        values = final_state(http, base_url, &thread_id).await?;
    }
    if !notes.is_null() && values["notes"].as_array().is_none_or(Vec::is_empty) {
        values["notes"] = notes;
    }
    let mut result = score(q, &values, status, error, wall, &opts.corpus_prefix);
    result.researcher_steps = steps;
    Ok(result)
}

/// The thread's values as `/state` shows them (with the texts of its sources).
async fn final_state(
    http: &reqwest::Client,
    base_url: &str,
    thread_id: &str,
) -> anyhow::Result<Value> {
    let state: Value = http
        .get(format!("{base_url}/threads/{thread_id}/state"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(state["values"].clone())
}

/// The scores of one finished run, from its final state.
pub fn score(
    q: &Question,
    values: &Value,
    status: &str,
    error: Option<String>,
    wall: Duration,
    corpus_prefix: &str,
) -> QuestionResult {
    let report = values["final_report"].as_str().unwrap_or_default();
    let state_sources: Vec<crate::research::state::Source> = values["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| serde_json::from_value(s.clone()).ok())
        .collect();
    let sources = Sources::from_state(&state_sources).with_question(&q.question);
    let audit = support::audit(report, &sources);
    let facts_found = facts_in(q, &[report]);
    let texts: Vec<&str> = state_sources.iter().map(|s| s.text.as_str()).collect();
    let facts_retrieved = facts_in(q, &texts);
    // What the researchers read: the summary, else the snippet shown in place of a page not
    // summarised, else the page itself (shown whole, or all the engine returned).
    let shown: Vec<String> = state_sources
        .iter()
        .map(|s| match (&s.summary, &s.snippet) {
            (Some(summary), _) => summary.render(),
            (None, Some(snippet)) => snippet.clone(),
            (None, None) => s.text.clone(),
        })
        .collect();
    let facts_shown = facts_in(q, &shown.iter().map(String::as_str).collect::<Vec<_>>());
    let notes: Vec<String> = values["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    let facts_in_notes = facts_in(q, &notes.iter().map(String::as_str).collect::<Vec<_>>());
    let usage = &values["usage"];
    let calls_by_model = usage["models"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v["calls"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let searched = !sources.is_empty();
    let written = !report.trim().is_empty();
    let checked = audit.citations.saturating_sub(audit.unchecked);
    // Each numbered source's text (the state may hold a page twice; `Sources` numbers it once).
    let numbered_texts: Vec<&str> = sources
        .list
        .iter()
        .map(|s| {
            let key = support::source_key(&s.url);
            state_sources
                .iter()
                .find(|x| support::source_key(&x.url) == key)
                .map_or("", |x| x.text.as_str())
        })
        .collect();
    let reading = reading::read(q, report, &sources, &numbered_texts);
    QuestionResult {
        id: q.id.clone(),
        status: status.to_owned(),
        error,
        researched: status == "success" && searched && written,
        searched,
        sources: sources.len(),
        report_chars: report.chars().count(),
        facts: q.facts.len(),
        fact_recall: ratio(facts_found.len(), q.facts.len()),
        facts_found,
        facts_retrieved: Some(facts_retrieved),
        facts_shown: Some(facts_shown),
        facts_in_notes: Some(facts_in_notes),
        paragraphs: audit.paragraphs,
        cited_paragraphs: audit.cited_paragraphs,
        cited_paragraph_share: ratio(audit.cited_paragraphs, audit.paragraphs),
        citations: audit.citations,
        supported: audit.supported,
        supported_share: ratio(audit.supported, checked),
        invented: invented(report, corpus_prefix),
        draft: values["citations"].clone(),
        wall_secs: round2(wall.as_secs_f64()),
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        calls: usage["calls"].as_u64().unwrap_or(0),
        calls_by_model,
        fallbacks: values["fallbacks"].clone(),
        source_urls: sources.list.iter().map(|s| s.url.clone()).collect(),
        report: report.to_owned(),
        retrieved: state_sources,
        brief: values["research_brief"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        notes,
        researcher_steps: Vec::new(),
        reading,
    }
}

/// `r` scored again from what it kept (its report and retrieved sources) with today's checks
/// and the question's facts as they are now; cost and status stay as measured.
pub fn rescore(
    q: &Question,
    r: &QuestionResult,
    corpus_prefix: &str,
) -> anyhow::Result<QuestionResult> {
    anyhow::ensure!(
        !r.retrieved.is_empty() || r.source_urls.is_empty(),
        "{}: the result kept no source texts (measured before results kept them)",
        r.id
    );
    let models: serde_json::Map<String, Value> = r
        .calls_by_model
        .iter()
        .map(|(name, calls)| (name.clone(), json!({ "calls": calls })))
        .collect();
    let values = json!({
        "final_report": r.report,
        "sources": r.retrieved,
        "citations": r.draft,
        "notes": r.notes,
        "research_brief": r.brief,
        "fallbacks": r.fallbacks,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                  "calls": r.calls, "models": models},
    });
    let wall = Duration::from_secs_f64(r.wall_secs.max(0.0));
    let mut again = score(q, &values, &r.status, r.error.clone(), wall, corpus_prefix);
    again.researcher_steps = r.researcher_steps.clone();
    Ok(again)
}

/// Every result of `report` scored again (`rescore`) against `set`'s questions.
pub fn rescore_all(set: &QuestionSet, report: &EvalReport) -> anyhow::Result<EvalReport> {
    anyhow::ensure!(
        report.set == set.name,
        "the results are of set '{}', the questions of '{}'",
        report.set,
        set.name
    );
    let mut results = Vec::new();
    for r in &report.results {
        let q = set
            .questions
            .iter()
            .find(|q| q.id == r.id)
            .ok_or_else(|| anyhow::anyhow!("question {} is not in set '{}'", r.id, set.name))?;
        results.push(rescore(q, r, &report.corpus_prefix)?);
    }
    Ok(EvalReport {
        summary: summarize(&results),
        results,
        ..report.clone()
    })
}

/// The question's key facts that one of `texts` states in an accepted wording.
fn facts_in(q: &Question, texts: &[&str]) -> Vec<String> {
    let flat: Vec<String> = texts.iter().map(|t| normalize_text(t)).collect();
    q.facts
        .iter()
        .filter(|f| {
            f.any
                .iter()
                .any(|w| flat.iter().any(|t| t.contains(&normalize_text(w))))
        })
        .map(|f| f.fact.clone())
        .collect()
}

/// Entries of the report's Sources section that are not in the corpus (a reference without a
/// location counts: it is one nobody retrieved), and links in its body outside the corpus.
fn invented(report: &str, corpus_prefix: &str) -> usize {
    let mut count = 0;
    let mut in_list = false;
    for line in report.lines() {
        let t = line.trim();
        let lower = t.to_ascii_lowercase();
        if t.starts_with('#') {
            in_list = ["sources", "references", "bibliography"]
                .iter()
                .any(|h| lower.trim_start_matches('#').trim().starts_with(h));
            continue;
        }
        let urls: Vec<&str> = t.split_whitespace().filter(|w| w.contains("://")).collect();
        if in_list && t.starts_with('[') {
            if urls.is_empty() || urls.iter().any(|u| !in_corpus(u, corpus_prefix)) {
                count += 1;
            }
        } else if !in_list {
            count += crate::research::citations::find_urls(t)
                .iter()
                .filter(|u| !in_corpus(u, corpus_prefix))
                .count();
        }
    }
    count
}

fn in_corpus(url: &str, prefix: &str) -> bool {
    let url = url.trim_matches(|c: char| matches!(c, '<' | '>' | '(' | ')' | ',' | '.'));
    !prefix.is_empty() && url.starts_with(prefix)
}

/// Lower case, one space between words, for matching a wording.
fn normalize_text(text: &str) -> String {
    text.to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round2(part as f64 / whole as f64)
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The set's figures: shares are means over the questions that researched (a run that did not
/// research has no report to score), counts are totals.
pub fn summarize(results: &[QuestionResult]) -> Summary {
    let researched: Vec<&QuestionResult> = results.iter().filter(|r| r.researched).collect();
    let mean = |f: fn(&QuestionResult) -> f64| {
        if researched.is_empty() {
            0.0
        } else {
            round2(researched.iter().map(|r| f(r)).sum::<f64>() / researched.len() as f64)
        }
    };
    let mean_of_all = |f: fn(&QuestionResult) -> f64| {
        if results.is_empty() {
            0.0
        } else {
            round2(results.iter().map(f).sum::<f64>() / results.len() as f64)
        }
    };
    let mut walls: Vec<f64> = results.iter().map(|r| r.wall_secs).collect();
    walls.sort_by(f64::total_cmp);
    let median = match walls.len() {
        0 => 0.0,
        n if n % 2 == 1 => walls[n / 2],
        n => round2((walls[n / 2 - 1] + walls[n / 2]) / 2.0),
    };
    Summary {
        questions: results.len(),
        researched: researched.len(),
        researched_without_invention: researched.iter().filter(|r| r.invented == 0).count(),
        // Recall counts every question: a run that wrote nothing found no fact.
        fact_recall: mean_of_all(|r| r.fact_recall),
        retrieved_recall: mean_where_known(results, |r| r.facts_retrieved.as_ref()),
        shown_recall: mean_where_known(results, |r| r.facts_shown.as_ref()),
        notes_recall: mean_where_known(results, |r| r.facts_in_notes.as_ref()),
        cited_paragraph_share: mean(|r| r.cited_paragraph_share),
        supported_share: mean(|r| r.supported_share),
        invented: results.iter().map(|r| r.invented).sum(),
        median_wall_secs: median,
        total_wall_secs: round2(results.iter().map(|r| r.wall_secs).sum()),
        input_tokens: results.iter().map(|r| r.input_tokens).sum(),
        output_tokens: results.iter().map(|r| r.output_tokens).sum(),
        body_recall: mean_of_all(|r| r.reading.body_recall),
        copied_share: mean(|r| r.reading.copied_share),
        copied_prose_share: mean(|r| r.reading.copied_prose_share),
        quoted_share: mean(|r| r.reading.quoted_share),
        source_title_heading_share: ratio(
            researched
                .iter()
                .map(|r| r.reading.source_title_headings)
                .sum(),
            researched.iter().map(|r| r.reading.headings).sum(),
        ),
        uncited_unsupported: results.iter().map(|r| r.reading.uncited_unsupported).sum(),
        off_topic_sections: results.iter().map(|r| r.reading.off_topic_sections).sum(),
    }
}

/// The mean share of key facts at one stage, over the results that measured that stage.
fn mean_where_known(
    results: &[QuestionResult],
    stage: fn(&QuestionResult) -> Option<&Vec<String>>,
) -> f64 {
    let known: Vec<f64> = results
        .iter()
        .filter_map(|r| stage(r).map(|found| ratio(found.len(), r.facts)))
        .collect();
    round2(known.iter().sum::<f64>() / known.len().max(1) as f64)
}

/// The results as a Markdown table, the set's figures first.
pub fn markdown(report: &EvalReport) -> String {
    let s = &report.summary;
    let mut out = format!(
        "## {} on corpus '{}' ({})\n\n| figure | value |\n|---|---|\n\
         | questions | {} |\n| researched | {} |\n| researched without inventing a source | {} |\n\
         | key-fact recall, body only, the question's own facts not scored | {:.0}% |\n\
         | copied share of the body (runs of 8+ words) | {:.0}% |\n\
         | copied share of the prose (marked quotations left out) / quoted share | {:.0}% / {:.0}% |\n\
         | section headings that are a source's title | {:.0}% |\n\
         | uncited body sentences no source supports | {} |\n\
         | sections whose sources hold no key fact | {} |\n\
         | key-fact recall, whole report (the old rule) | {:.0}% |\n| key facts in the writer's findings | {:.0}%{} |\n\
         | key facts in what the researchers were shown | {:.0}%{} |\n\
         | key facts in the retrieved texts | {:.0}%{} |\n\
         | body paragraphs citing a source | {:.0}% |\n\
         | citations supported by the cited text | {:.0}% |\n| cited locations not in the corpus | {} |\n\
         | median wall time | {:.0} s |\n| tokens in / out | {} / {} |\n\n",
        report.set,
        report.corpus,
        report.started_at,
        s.questions,
        s.researched,
        s.researched_without_invention,
        s.body_recall * 100.0,
        s.copied_share * 100.0,
        s.copied_prose_share * 100.0,
        s.quoted_share * 100.0,
        s.source_title_heading_share * 100.0,
        s.uncited_unsupported,
        s.off_topic_sections,
        s.fact_recall * 100.0,
        s.notes_recall * 100.0,
        measured_in(&report.results, |r| r.facts_in_notes.is_some()),
        s.shown_recall * 100.0,
        measured_in(&report.results, |r| r.facts_shown.is_some()),
        s.retrieved_recall * 100.0,
        measured_in(&report.results, |r| r.facts_retrieved.is_some()),
        s.cited_paragraph_share * 100.0,
        s.supported_share * 100.0,
        s.invented,
        s.median_wall_secs,
        s.input_tokens,
        s.output_tokens,
    );
    out.push_str(
        "| question | status | sources | facts: report (findings / shown / retrieved) | cited ¶ | supported | invented | wall s | calls |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &report.results {
        out.push_str(&format!(
            "| {} | {} | {} | {}/{} ({} / {} / {}) | {}/{} | {}/{} | {} | {:.0} | {} |\n",
            r.id,
            r.status,
            r.sources,
            r.facts_found.len(),
            r.facts,
            count(&r.facts_in_notes),
            count(&r.facts_shown),
            count(&r.facts_retrieved),
            r.cited_paragraphs,
            r.paragraphs,
            r.supported,
            r.citations,
            r.invented,
            r.wall_secs,
            r.calls,
        ));
    }
    out
}

/// What changed from `a` to `b`: the set's figures side by side, then each question both ran.
pub fn compare(a: &EvalReport, b: &EvalReport) -> String {
    let (x, y) = (&a.summary, &b.summary);
    let rows: [(&str, f64, f64); 17] = [
        ("questions", x.questions as f64, y.questions as f64),
        ("key-fact recall, body only", x.body_recall, y.body_recall),
        ("copied share of the body", x.copied_share, y.copied_share),
        (
            "headings that are a source's title",
            x.source_title_heading_share,
            y.source_title_heading_share,
        ),
        (
            "uncited sentences no source supports",
            x.uncited_unsupported as f64,
            y.uncited_unsupported as f64,
        ),
        (
            "off-topic sections",
            x.off_topic_sections as f64,
            y.off_topic_sections as f64,
        ),
        ("researched", x.researched as f64, y.researched as f64),
        (
            "researched without inventing",
            x.researched_without_invention as f64,
            y.researched_without_invention as f64,
        ),
        (
            "key-fact recall (whole report)",
            x.fact_recall,
            y.fact_recall,
        ),
        (
            "cited paragraph share",
            x.cited_paragraph_share,
            y.cited_paragraph_share,
        ),
        ("key facts in the findings", x.notes_recall, y.notes_recall),
        ("key facts shown", x.shown_recall, y.shown_recall),
        (
            "key facts retrieved",
            x.retrieved_recall,
            y.retrieved_recall,
        ),
        ("supported share", x.supported_share, y.supported_share),
        ("invented", x.invented as f64, y.invented as f64),
        ("median wall s", x.median_wall_secs, y.median_wall_secs),
        (
            "tokens (in + out)",
            (x.input_tokens + x.output_tokens) as f64,
            (y.input_tokens + y.output_tokens) as f64,
        ),
    ];
    let mut out = String::from("| figure | A | B | change |\n|---|---|---|---|\n");
    for (name, va, vb) in rows {
        out.push_str(&format!(
            "| {name} | {} | {} | {:+} |\n",
            fmt_num(va),
            fmt_num(vb),
            round2(vb - va)
        ));
    }
    out.push_str(
        "\n| question | recall A → B | supported A → B | wall s A → B |\n|---|---|---|---|\n",
    );
    for ra in &a.results {
        if let Some(rb) = b.results.iter().find(|r| r.id == ra.id) {
            out.push_str(&format!(
                "| {} | {} → {} | {}/{} → {}/{} | {:.0} → {:.0} |\n",
                ra.id,
                ra.fact_recall,
                rb.fact_recall,
                ra.supported,
                ra.citations,
                rb.supported,
                rb.citations,
                ra.wall_secs,
                rb.wall_secs
            ));
        }
    }
    out
}

/// One report from several that measured parts of the same set with the same settings (a set
/// longer than one sitting is measured in parts). A question measured twice, or parts from
/// another set, corpus or settings, are refused: the figures would mix two measurements.
pub fn merge(parts: Vec<(String, EvalReport)>) -> anyhow::Result<EvalReport> {
    let Some((first_name, first)) = parts.first() else {
        anyhow::bail!("nothing to merge");
    };
    let mut merged = EvalReport {
        set: first.set.clone(),
        corpus: first.corpus.clone(),
        corpus_prefix: first.corpus_prefix.clone(),
        ..EvalReport::default()
    };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, part) in &parts {
        anyhow::ensure!(
            (&part.set, &part.corpus) == (&first.set, &first.corpus),
            "{name} measured set '{}' on corpus '{}', {first_name} set '{}' on corpus '{}'",
            part.set,
            part.corpus,
            first.set,
            first.corpus
        );
        // Parts written while a run was still going carry no settings; the others must agree.
        if !part.configurable.is_null() {
            anyhow::ensure!(
                merged.configurable.is_null() || merged.configurable == part.configurable,
                "{name} was measured with other settings than the parts before it: {} vs {}",
                part.configurable,
                merged.configurable
            );
            merged.configurable = part.configurable.clone();
        }
        if merged.corpus_prefix.is_empty() {
            merged.corpus_prefix = part.corpus_prefix.clone();
        }
        if merged.started_at.is_empty()
            || (!part.started_at.is_empty() && part.started_at < merged.started_at)
        {
            merged.started_at = part.started_at.clone();
        }
        for result in &part.results {
            if let Some(other) = seen.insert(result.id.clone(), name.clone()) {
                anyhow::bail!("question {} is in both {other} and {name}", result.id);
            }
            merged.results.push(result.clone());
        }
    }
    merged.results.sort_by(|a, b| a.id.cmp(&b.id));
    merged.summary = summarize(&merged.results);
    Ok(merged)
}

/// " (k of n questions)" when only some results measured a figure (older result files).
fn measured_in(results: &[QuestionResult], has: fn(&QuestionResult) -> bool) -> String {
    let k = results.iter().filter(|r| has(r)).count();
    if k == results.len() {
        String::new()
    } else {
        format!(" ({k} of {} questions)", results.len())
    }
}

/// How many facts a stage holds, or a dash where it was not measured.
fn count(found: &Option<Vec<String>>) -> String {
    found
        .as_ref()
        .map_or("–".to_owned(), |f| f.len().to_string())
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
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
        assert!(
            compare(&a, &b).contains("| key-fact recall (whole report) | 0.50 | 0.75 | +0.25 |")
        );
    }
}
