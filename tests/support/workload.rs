//! The scripted ODR workload: a "model" that plays every Open Deep Research role, recognised
//! from the request as a real model would be prompted. Shared by the integration tests (small
//! payloads, fast) and the load benchmark (`benches/load.rs`, the payload sizes of the benchmark
//! issue). Depends only on `FakeReply` and serde_json so the benchmark can include it on its own.

#![allow(dead_code)]

use super::fake_llm::FakeReply;
use serde_json::{Value, json};
use std::sync::Mutex;

/// Which ODR role a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Clarify,
    Brief,
    /// Plan review's topic list.
    Plan,
    Summary,
    Supervisor,
    Researcher,
    Compress,
    Report,
    /// One source's findings restated (`report_form: "by_source"`).
    Restate,
    /// The paragraph answering the question from the restated sources.
    Overview,
    /// The report's outline (`report_form: "by_topic"`).
    Outline,
    /// One section written from its sources (its sentences and values, as JSON).
    Section,
    /// The answer above the sections, from what they kept.
    Answer,
    /// A question on a written report, answered from the sources shown.
    FollowUp,
    Other,
}

pub fn role(req: &Value) -> Role {
    match req["response_format"]["json_schema"]["name"].as_str() {
        Some("ClarifyWithUser") => return Role::Clarify,
        Some("ResearchQuestion") => return Role::Brief,
        Some("ResearchPlan") => return Role::Plan,
        Some("Summary") => return Role::Summary,
        Some("ReportOutline") => return Role::Outline,
        Some("ReportSection") => return Role::Section,
        _ => {}
    }
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    let text = all_text(req);
    // With prompted tools the request has no `tools`: the system prompt lists them instead.
    let offered = |name: &str| tools.contains(&name) || text.contains(&format!("- {name}: "));
    if offered("ConductResearch") {
        return Role::Supervisor;
    }
    if offered("think_tool") {
        return Role::Researcher;
    }
    if text.contains("<FollowUp>") {
        Role::FollowUp
    } else if text.contains("<Sections>") {
        Role::Answer
    } else if text.contains("This section is \"") {
        Role::Section
    } else if text.contains("<Findings>") {
        Role::Report
    } else if text.contains("<Passage>") {
        Role::Restate
    } else if text.contains("<Notes>") {
        Role::Overview
    } else if text.contains("cleaning up the findings") {
        Role::Compress
    } else {
        Role::Other
    }
}

pub fn all_text(req: &Value) -> String {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Assistant turns already in the request: where a looping role is in its script.
pub fn turns(req: &Value) -> usize {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// URLs shown to the model in the request (`URL: …` lines of search results and sources).
pub fn urls_in(req: &Value) -> Vec<String> {
    let mut urls = Vec::new();
    for line in all_text(req).lines() {
        for word in line.split_whitespace() {
            let w =
                word.trim_matches(|c: char| matches!(c, '(' | ')' | '[' | ']' | ',' | '"' | '\\'));
            if w.starts_with("https://") && !urls.contains(&w.to_owned()) {
                urls.push(w.to_owned());
            }
        }
    }
    urls
}

/// The first human message of a request (a researcher's topic).
pub fn topic(req: &Value) -> String {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("topic")
        .chars()
        .take(40)
        .collect()
}

/// A URL no search returns: the report cites it and the check must remove it.
pub const INVENTED_URL: &str = "https://invented.example/made-up-source";

/// Knobs of the scripted model. The payload sizes are approximate byte counts; `0` keeps the
/// small payloads the tests use.
#[derive(Clone, Debug)]
pub struct Script {
    /// ConductResearch calls the supervisor makes in its delegation turn.
    pub topics: usize,
    /// Answer every supervisor turn in prose, with no tool call (a weak model).
    pub supervisor_prose: bool,
    /// Size of each page summary's JSON (`{"summary", "key_excerpts"}`).
    pub summary_bytes: usize,
    /// Size of each researcher's compressed findings (text plus its numbered source list).
    pub findings_bytes: usize,
    /// Size of the final report. When non-zero the report cites every retrieved URL it was
    /// shown, numbered, and no invented one; when zero it is the short test report that also
    /// cites `INVENTED_URL`.
    pub report_bytes: usize,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            topics: 3,
            supervisor_prose: false,
            summary_bytes: 0,
            findings_bytes: 0,
            report_bytes: 0,
        }
    }
}

impl Script {
    /// The benchmark issue's workload: 3 topics, summaries ≈1.1 KB of JSON, compressed
    /// findings ≈6 KB, final report ≈13 KB with numbered citations of retrieved URLs.
    pub fn benchmark() -> Self {
        Self {
            summary_bytes: 1100,
            findings_bytes: 6000,
            report_bytes: 13_000,
            ..Self::default()
        }
    }
}

/// The default ODR workload of the benchmark issue: clarification not needed; supervisor:
/// think → N × ConductResearch → think → ResearchComplete; researcher: search (2 queries) →
/// think → search (1 query) → ResearchComplete.
pub fn scripted(script: Script) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static {
    move |req: &Value| match role(req) {
        Role::Clarify => clarify(req),
        Role::Brief => FakeReply::Json(json!({"research_brief": format!(
            "I want to know everything about the topic ({:x}), with sources.",
            digest(&all_text(req))
        )})),
        Role::Plan => plan(req, script.topics),
        Role::Summary => summary(req, script.summary_bytes),
        Role::Supervisor if script.supervisor_prose => {
            FakeReply::Text("I think the answer is obvious.".into())
        }
        Role::Supervisor => supervisor(req, script.topics),
        Role::Researcher => researcher(req),
        Role::Compress => compress(req, script.findings_bytes),
        Role::Report if script.report_bytes > 0 => long_report(req, script.report_bytes),
        Role::Report => report(req),
        Role::Restate
        | Role::Overview
        | Role::Outline
        | Role::Section
        | Role::Answer
        | Role::FollowUp
        | Role::Other => FakeReply::Text("ok".into()),
    }
}

/// A follow-up answered as a model that reads its sources would: the first sentence of the
/// first source shown, cited to it.
pub fn follow_up_answer(req: &Value) -> FakeReply {
    let text = all_text(req);
    let listing = text
        .split("each under its number:")
        .nth(1)
        .unwrap_or_default();
    let mut lines = listing.lines().skip_while(|l| !l.starts_with('['));
    let head = lines.next().unwrap_or_default();
    let n = head
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap_or("1");
    let excerpt = lines.next().unwrap_or_default();
    let first = excerpt.split(". ").next().unwrap_or_default();
    FakeReply::Text(format!("{} [{n}].", first.trim_end_matches('.')))
}

const WORDS: [&str; 64] = [
    "recent",
    "studies",
    "report",
    "costs",
    "have",
    "fallen",
    "while",
    "reliability",
    "improved",
    "experts",
    "disagree",
    "on",
    "how",
    "quickly",
    "adoption",
    "will",
    "grow",
    "several",
    "datasets",
    "cover",
    "regions",
    "and",
    "years",
    "the",
    "main",
    "open",
    "question",
    "is",
    "long-term",
    "performance",
    "field",
    "measurements",
    "broadly",
    "match",
    "laboratory",
    "figures",
    "of",
    "in",
    "with",
    "new",
    "data",
    "from",
    "surveys",
    "suggests",
    "that",
    "demand",
    "rose",
    "sharply",
    "after",
    "policy",
    "changes",
    "although",
    "prices",
    "vary",
    "across",
    "markets",
    "analysts",
    "expect",
    "further",
    "gains",
    "but",
    "warn",
    "about",
    "supply",
];

/// FNV-1a of `text`: a seed that differs for every request the fakes answer.
pub fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `i`-th filler sentence about `subject`: words drawn by a generator seeded with both, so
/// no two sentences or subjects share text. (Repeating a few fixed sentences, as the first
/// version did, let the content-addressed checkpoint store find repeats that real model output
/// does not have.)
fn sentence(subject: &str, i: usize) -> String {
    let mut x = digest(subject) ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let count = 9 + (next() % 8) as usize;
    let mut words: Vec<&str> = (0..count)
        .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
        .collect();
    let at = (next() % count as u64) as usize;
    words.insert(at, subject);
    let mut text = words.join(" ");
    if let Some(first) = text.get(..1) {
        text.replace_range(..1, &first.to_uppercase());
    }
    text.push('.');
    text
}

/// Deterministic English-like filler of exactly `len` bytes (ASCII), for payload sizes.
pub fn prose(subject: &str, len: usize) -> String {
    let mut out = String::with_capacity(len + 128);
    let mut i = 0;
    while out.len() < len {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&sentence(subject, i));
        i += 1;
    }
    out.truncate(len);
    out
}

fn summary(req: &Value, bytes: usize) -> FakeReply {
    if bytes == 0 {
        return FakeReply::Json(json!({"summary": "The page explains the topic in detail.",
                                      "key_excerpts": "\"a key quote\""}));
    }
    // `{"summary":"…","key_excerpts":"…"}` is 35 bytes of framing; three quarters summary.
    let body = bytes.saturating_sub(35);
    let excerpts = body / 4;
    let page = digest(&all_text(req));
    FakeReply::Json(json!({
        "summary": prose(&format!("page {page:x}"), body - excerpts),
        "key_excerpts": prose(&format!("quote {page:x}"), excerpts),
    }))
}

fn clarify(req: &Value) -> FakeReply {
    let text = all_text(req);
    let asked_before = text.contains("Which aspect do you mean?");
    if text.contains("vague") && !asked_before {
        FakeReply::Json(
            json!({"need_clarification": true, "question": "Which aspect do you mean?", "verification": ""}),
        )
    } else {
        FakeReply::Json(json!({"need_clarification": false, "question": "",
                               "verification": "I have what I need and am starting the research now."}))
    }
}

/// `topics` planned topics; "revised" ones once the user's feedback is in the prompt.
fn plan(req: &Value, topics: usize) -> FakeReply {
    let revised = !all_text(req).contains("<Feedback>\nnone\n</Feedback>");
    let prefix = if revised { "revised " } else { "" };
    let list: Vec<String> = (0..topics)
        .map(|i| format!("{prefix}planned topic {i}"))
        .collect();
    FakeReply::Json(json!({ "topics": list }))
}

fn supervisor(req: &Value, topics: usize) -> FakeReply {
    // After an approved plan the first round is done already: the model reflects next.
    let planned = all_text(req).contains("reviewed and approved this plan");
    match turns(req) + usize::from(planned) {
        0 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Plan: split in parts."}),
        )]),
        1 => FakeReply::ToolCalls(
            (0..topics)
                .map(|i| {
                    (
                        "ConductResearch".into(),
                        json!({"research_topic": format!(
                            "subtopic number {i} in full detail ({:x})",
                            digest(&all_text(req)) >> 40
                        )}),
                    )
                })
                .collect(),
        ),
        2 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Enough found."}),
        )]),
        _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
    }
}

/// The search tool a researcher request offers (`tavily_search`, `brave_search`, …).
fn search_tool(req: &Value) -> String {
    req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .find(|n| n.ends_with("_search"))
        .unwrap_or("tavily_search")
        .to_owned()
}

fn researcher(req: &Value) -> FakeReply {
    let t = topic(req);
    let search = search_tool(req);
    match turns(req) {
        0 => FakeReply::ToolCalls(vec![(
            search.clone(),
            json!({"queries": [format!("{t} overview"), format!("{t} details")]}),
        )]),
        1 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Need one more search."}),
        )]),
        2 => FakeReply::ToolCalls(vec![(search, json!({"queries": [format!("{t} latest")]}))]),
        _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
    }
}

fn compress(req: &Value, bytes: usize) -> FakeReply {
    let urls = urls_in(req);
    let sources: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| format!("[{}] Source {}: {u}", i + 1, i + 1))
        .collect();
    let sources = sources.join("\n");
    if bytes == 0 {
        return FakeReply::Text(format!(
            "**Findings**\nThe topic has several facts [1].\n\n### Sources\n{sources}"
        ));
    }
    let head = "**Findings**\n";
    let tail = format!("\n\n### Sources\n{sources}");
    let room = bytes.saturating_sub(head.len() + tail.len());
    FakeReply::Text(format!(
        "{head}{}{tail}",
        cited_paragraphs(&format!("findings on {}", topic(req)), room, urls.len())
    ))
}

/// Paragraphs of about `len` bytes, each sentence citing `[1]`…`[n]` in turn.
fn cited_paragraphs(subject: &str, len: usize, n: usize) -> String {
    let mut out = String::with_capacity(len + 128);
    let mut i = 0;
    loop {
        let mut next = sentence(subject, i);
        if n > 0 {
            next.pop(); // the full stop goes after the citation
            next.push_str(&format!(" [{}].", i % n + 1));
        }
        next.push_str(if i % 4 == 3 { "\n\n" } else { " " });
        if out.len() + next.len() > len {
            break;
        }
        out.push_str(&next);
        i += 1;
    }
    out.truncate(out.trim_end().len());
    out
}

fn report(req: &Value) -> FakeReply {
    let urls = urls_in(req);
    let cited: Vec<&String> = urls
        .iter()
        .filter(|u| u.contains("example.com"))
        .take(3)
        .collect();
    let mut lines = vec![
        "# Report\n\n## Findings\n\nA verified fact [1]. An invented claim [4].\n\n### Sources"
            .to_owned(),
    ];
    for (i, u) in cited.iter().enumerate() {
        lines.push(format!("[{}] Source: {u}", i + 1));
    }
    lines.push(format!("[4] Invented: {INVENTED_URL}"));
    FakeReply::Text(lines.join("\n"))
}

/// A report of about `bytes` bytes: sections of cited prose and the numbered list of every
/// retrieved URL the model was shown.
fn long_report(req: &Value, bytes: usize) -> FakeReply {
    let urls: Vec<String> = urls_in(req)
        .into_iter()
        .filter(|u| u.contains("example.com"))
        .collect();
    let sources: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| format!("[{}] Source {}: {u}", i + 1, i + 1))
        .collect();
    let tail = format!("\n\n### Sources\n{}", sources.join("\n"));
    let sections = ["Overview", "Findings", "Comparison", "Outlook"];
    let head = "# Report\n";
    let room = bytes.saturating_sub(head.len() + tail.len());
    let per_section = room / sections.len();
    let mut text = String::with_capacity(bytes + 256);
    text.push_str(head);
    for name in sections {
        let heading = format!("\n## {name}\n\n");
        text.push_str(&heading);
        text.push_str(&cited_paragraphs(
            &format!("{name} {:x}", digest(&all_text(req)) >> 40),
            per_section.saturating_sub(heading.len()),
            urls.len(),
        ));
    }
    text.push_str(&tail);
    FakeReply::Text(text)
}

/// Wraps a responder to change the reply of the `n`-th request (1-based) of a role.
pub fn on_nth<F>(
    inner: F,
    target: Role,
    n: usize,
    reply: FakeReply,
) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    let seen = Mutex::new(0usize);
    move |req: &Value| {
        if role(req) == target {
            let mut count = seen.lock().unwrap_or_else(|e| e.into_inner());
            *count += 1;
            if *count == n {
                return reply.clone();
            }
        }
        inner(req)
    }
}

/// A small local model, as the 1.5B model of the real-model tier behaves (measured, see
/// `shared/reference/local-llm.md`): agents answer their first turn in prose (a researcher even
/// after a corrective turn, until it has seen a search result), tool calls come back as text
/// (bare JSON, a ```json fence or `<tool_call>` tags, never the API's field), trying several
/// calls natively makes the server's parser fail with an HTTP 500, JSON answers come wrapped
/// or fenced, and the report ends in a loop. Every fallback of the service is exercised.
pub fn small_model(script: Script) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static {
    let inner = scripted(script);
    move |req: &Value| {
        let text = all_text(req);
        let must = req["tool_choice"] == "required" || text.contains("you must call a tool");
        let native = req["tools"].is_array();
        match role(req) {
            Role::Supervisor if turns(req) == 0 && !must => FakeReply::text(
                "I will delegate research on three topics: 1. the history, 2. the costs, 3. the outlook.",
            ),
            Role::Researcher if !saw_a_search(req) => FakeReply::Text(format!(
                "I will use the following queries:\n1. \"{t} overview\"\n2. \"{t} costs\"",
                t = topic(req)
            )),
            Role::Brief => match inner(req) {
                FakeReply::Json(v) => FakeReply::Text(json!({"ResearchQuestion": v}).to_string()),
                other => other,
            },
            Role::Summary => match inner(req) {
                FakeReply::Json(v) => FakeReply::Text(format!("```json\n{v}\n```")),
                other => other,
            },
            Role::Report => match inner(req) {
                FakeReply::Text(report) => FakeReply::Runaway {
                    text: report,
                    piece: "The findings above are complete. ".into(),
                },
                other => other,
            },
            _ => match inner(req) {
                FakeReply::ToolCalls(calls) if native && calls.len() > 1 => {
                    FakeReply::llama_parse_error()
                }
                FakeReply::ToolCalls(calls) => FakeReply::Text(calls_as_text(&calls, &text)),
                other => other,
            },
        }
    }
}

fn saw_a_search(req: &Value) -> bool {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m["role"] == "tool")
        || all_text(req).contains("Result of your `tavily_search` call")
}

/// Calls written the ways small models write them, varied by the request.
fn calls_as_text(calls: &[(String, Value)], seed: &str) -> String {
    let written: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({"name": name, "arguments": args}))
        .collect();
    let body = match written.as_slice() {
        [one] => one.to_string(),
        many => Value::Array(many.to_vec()).to_string(),
    };
    match digest(seed) % 3 {
        0 => body,
        1 => format!("Here is the call:\n```json\n{body}\n```"),
        _ => format!("<tool_call>\n{body}\n</tool_call>"),
    }
}
