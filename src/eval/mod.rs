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
mod tables;

pub use tables::{compare, markdown, merge};

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
    let http = crate::outbound::client_builder()
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
        // Streamed values leave out the sources' texts; the state API gives them when asked
        // (the check of the citations reads them).
        values = final_state(http, base_url, &thread_id).await?;
    }
    if !notes.is_null() && values["notes"].as_array().is_none_or(Vec::is_empty) {
        values["notes"] = notes;
    }
    let mut result = score(q, &values, status, error, wall, &opts.corpus_prefix);
    result.researcher_steps = steps;
    Ok(result)
}

/// The thread's values with the texts of its sources (`/state?include_hidden=true`).
async fn final_state(
    http: &reqwest::Client,
    base_url: &str,
    thread_id: &str,
) -> anyhow::Result<Value> {
    let state: Value = http
        .get(format!(
            "{base_url}/threads/{thread_id}/state?include_hidden=true"
        ))
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
    let shown = shown_texts(&state_sources);
    let facts_shown = facts_in(q, &shown.iter().map(String::as_str).collect::<Vec<_>>());
    let notes: Vec<String> = values["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    let facts_in_notes = facts_in(q, &notes.iter().map(String::as_str).collect::<Vec<_>>());
    let usage = &values["usage"];
    let searched = !sources.is_empty();
    let written = !report.trim().is_empty();
    let checked = audit.citations.saturating_sub(audit.unchecked);
    let numbered_texts = numbered_texts(&sources, &state_sources);
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
        calls_by_model: calls_by_model(usage),
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

/// What the researchers read of each source: the summary, else the snippet shown in place of
/// a page not summarised, else the page itself (shown whole, or all the engine returned).
fn shown_texts(sources: &[crate::research::state::Source]) -> Vec<String> {
    sources
        .iter()
        .map(|s| match (&s.summary, &s.snippet) {
            (Some(summary), _) => summary.render(),
            (None, Some(snippet)) => snippet.clone(),
            (None, None) => s.text.clone(),
        })
        .collect()
}

/// Each numbered source's text (the state may hold a page twice; `Sources` numbers it once).
fn numbered_texts<'a>(
    sources: &Sources,
    state_sources: &'a [crate::research::state::Source],
) -> Vec<&'a str> {
    sources
        .list
        .iter()
        .map(|s| {
            let key = support::source_key(&s.url);
            state_sources
                .iter()
                .find(|x| support::source_key(&x.url) == key)
                .map_or("", |x| x.text.as_str())
        })
        .collect()
}

/// Model calls a run made, by `provider:model`, from its `usage`.
fn calls_by_model(usage: &Value) -> BTreeMap<String, u64> {
    usage["models"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v["calls"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
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

#[cfg(test)]
mod tests;
