//! `final_report_generation`: the report in the form the run asks for (`whole`, ODR's one
//! call; `by_source`; `by_topic`), every form checked against its sources (`support/`), with
//! the fallbacks a small model needs: asked again when it copies its instructions, the
//! findings standing for a report it would not write, a partial report at a spend cap.

mod by_source;
mod by_topic;
pub(super) mod follow_up;
mod what_changed;

use super::ResearchDeps;
use super::citations::{self, normalize};
use super::config::{ReportForm, ResearchConfig, SearchApi};
use super::events::ResearchEvent;
use super::fallbacks::{self, AgentFallback};
use super::messages::{self as msg, Message};
use super::metering::{metered, resume_meter};
use super::model::{Caller, Deps, Role, run_config};
use super::state::{AgentState, AgentUpdate, Source, SourceKind, StoppedEarly};
use super::support::{self, Sources, Uncited};
use crate::graph::{Command, NodeContext, NodeError, Write};
use crate::llm::FinishReason;
use std::collections::HashSet;
use uuid::Uuid;

/// What the research phase did, for the error of a run that found nothing.
fn what_research_did(state: &AgentState) -> String {
    let results = state
        .supervisor_messages
        .iter()
        .filter(|m| m.is_result_of("ConductResearch"));
    let (delegated, failed) =
        results.fold((0, 0), |(d, f), m| (d + 1, f + usize::from(m.failed())));
    if delegated == 0 {
        "the supervisor delegated no research".to_owned()
    } else {
        format!(
            "the supervisor delegated {delegated} topic(s), {failed} of which failed; the \
             researchers' searches found nothing"
        )
    }
}

/// Known context windows (tokens) for trimming findings; first substring match wins.
const CONTEXT_WINDOWS: [(&str, usize); 12] = [
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("o4-mini", 200_000),
    ("o3", 200_000),
    ("o1", 200_000),
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-3-7-sonnet", 200_000),
    ("claude-3-5", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("llama3", 8_192),
    ("mistral", 32_768),
];

/// The character budget for findings after a context overflow: four characters per token of
/// the window (the endpoint's own when known, else the table's), less the output the report
/// may take, but never more than 70% of what just failed (ODR's 4×window rarely cut anything).
fn shrink(
    findings_len: usize,
    model: &str,
    window: Option<usize>,
    max_output: usize,
    previous: Option<usize>,
) -> usize {
    match previous {
        Some(p) => p * 9 / 10,
        None => {
            let window = window.or_else(|| {
                CONTEXT_WINDOWS
                    .iter()
                    .find(|(k, _)| model.contains(k))
                    .map(|(_, w)| *w)
            });
            let by_window = window.map_or(usize::MAX, |w| w.saturating_sub(max_output) * 4);
            by_window.min(findings_len * 7 / 10)
        }
    }
}

fn cut(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(i, _)| &text[..i])
}

/// `final_report_generation`: the report in the run's form, checked, or the partial report of
/// a run its spend cap stopped; a run that found nothing fails instead of writing from memory.
pub(super) async fn node(
    deps: Deps,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
    let cfg = run_config(&ctx)?;
    if let Some(reason) = super::cost::over_cap(&ctx) {
        return partial_report(&ctx, &state, &reason);
    }
    if state.sources.is_empty() && cfg.search_api != SearchApi::None {
        return Err(NodeError::new(
            "NoSourcesError",
            format!(
                "report stage: research gathered no sources: no search returned any result \
                 during this run ({}), so no report was written (a report here could only cite \
                 invented sources). Try again, or use a research model that reliably calls tools.",
                what_research_did(&state)
            ),
        ));
    }
    let numbered = Sources::from_state(&state.sources).with_question(&asked(&state));
    let findings = findings(&state.notes, &numbered);
    let topics = delegated_topics(&state.supervisor_messages);
    // Past this point the pages' texts, the notes and the supervisor's history are not read:
    // they are let go before the long model call (runs writing reports at once held them all).
    let state = AgentState {
        sources: state
            .sources
            .into_iter()
            .map(Source::without_text)
            .collect(),
        notes: Vec::new(),
        raw_notes: Vec::new(),
        supervisor_messages: Vec::new(),
        ..state
    };
    if cfg.report_form == ReportForm::Whole {
        whole_report(&deps, &ctx, &cfg, &state, &findings, &numbered).await
    } else {
        short_calls_report(&deps, &ctx, &cfg, &state, &findings, &numbered, &topics).await
    }
}

/// The report in one call (ODR's form): asked again once when the writer copies its
/// instructions back, the findings standing for it when it does so twice.
async fn whole_report(
    deps: &ResearchDeps,
    ctx: &NodeContext,
    cfg: &ResearchConfig,
    state: &AgentState,
    findings: &str,
    numbered: &Sources,
) -> Result<Command, NodeError> {
    let mut resp = write_report(deps, ctx, cfg, state, findings, numbered, None).await?;
    let instructions = deps.prompts.render("final_report", &[]);
    let written = Message::from_model(resp.message.clone()).text();
    if copies_instructions(&written, &instructions) {
        fallbacks::record(
            ctx,
            AgentFallback::ReportAskedAgain.as_str(),
            &format!(
                "the report repeated its instructions: {}",
                msg::excerpt(&written, 160)
            ),
        );
        resp = write_report(deps, ctx, cfg, state, findings, numbered, Some(&written)).await?;
        let again = Message::from_model(resp.message.clone()).text();
        if copies_instructions(&again, &instructions) {
            let why = "it repeated its instructions twice";
            return findings_as_report(ctx, state, findings, numbered, why);
        }
    }
    let mut message = Message::from_model(resp.message);
    let mut checked = check_citations(
        ctx,
        &message.text(),
        &state.sources,
        numbered,
        Uncited::Remove,
    );
    if resp.finish_reason == FinishReason::Length {
        checked.report.push_str(&format!(
            "\n\n> Note: the report was cut off at the output limit of {} tokens.\n",
            cfg.final_report_model_max_tokens
        ));
    }
    let changed = what_changed::append(state, numbered, &mut checked.report);
    // Keep the streamed message's id so clients merge the tokens they saw with the final text.
    message.set_text(&checked.report);
    Command::write(AgentUpdate {
        final_report: Some(checked.report),
        reported_at: Some(now()),
        what_changed: Some(changed),
        messages: Some(vec![message]),
        notes: Some(Write::Replace(vec![])),
        citations: Some(checked.support),
        ..metered(ctx)
    })
}

/// When a report is written, as the state records it (RFC 3339, UTC).
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The report in one of the short-call forms (`by_source`, `by_topic`): written and checked,
/// or, when no part of it kept a sentence, the findings standing for it.
async fn short_calls_report(
    deps: &ResearchDeps,
    ctx: &NodeContext,
    cfg: &ResearchConfig,
    state: &AgentState,
    findings: &str,
    numbered: &Sources,
    topics: &[String],
) -> Result<Command, NodeError> {
    let (written, why) = if cfg.report_form == ReportForm::BySource {
        let question = msg::buffer_string(&state.messages);
        let title = report_title(state);
        let w = by_source::write(deps, ctx, cfg, &question, &title, findings, numbered).await?;
        let w = w.map(|w| (w.text, w.message, String::new()));
        (w, "restated nothing its sources support")
    } else {
        let question = asked(state);
        let subject = by_topic::Subject {
            question: &question,
            brief: state.research_brief.as_deref().unwrap_or_default(),
            topics,
        };
        let w = by_topic::write(deps, ctx, cfg, &subject, findings, numbered).await?;
        let w = w.map(|w| (w.text, w.message, w.appendix));
        (w, "wrote no section its sources support")
    };
    match written {
        Some((text, message, appendix)) => finished(
            ctx,
            state,
            &text,
            Some(message),
            numbered,
            &appendix,
            Uncited::Remove,
        ),
        None => findings_as_report(ctx, state, findings, numbered, why),
    }
}

/// What the user asked: their messages, in order (the names the support check reads a claim's
/// subject against).
pub(super) fn asked(state: &AgentState) -> String {
    state
        .messages
        .iter()
        .filter(|m| m.kind() == msg::Kind::Human)
        .map(Message::text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The topics the supervisor delegated (`ConductResearch`), in order, each once.
fn delegated_topics(supervisor: &[Message]) -> Vec<String> {
    let mut topics: Vec<String> = Vec::new();
    for call in supervisor.iter().flat_map(Message::tool_calls) {
        let topic = call.text_arg("research_topic").trim();
        if call.name == "ConductResearch" && !topic.is_empty() && !topics.iter().any(|t| t == topic)
        {
            topics.push(topic.to_owned());
        }
    }
    topics
}

/// The researchers' findings, their citations in the run's numbering.
fn findings(notes: &[String], numbered: &Sources) -> String {
    notes
        .iter()
        .map(|note| support::renumber_findings(note, numbered))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Whether a report is the writer's instructions copied back (a small model given a long
/// prompt sometimes repeats its end): most of its lines of four words or more are lines of the
/// instructions. A report quoting a line of them, or words they share with any report
/// ("sections", "sources"), is not one.
pub(super) fn copies_instructions(report: &str, instructions: &str) -> bool {
    let plain = |text: &str| {
        text.split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let source = plain(instructions);
    let (mut copied, mut total) = (0usize, 0usize);
    for line in report.lines() {
        let line = plain(line);
        if line.split(' ').count() < 4 {
            continue;
        }
        total += line.len();
        if source.contains(&line) {
            copied += line.len();
        }
    }
    total > 0 && copied * 2 > total
}

/// The report when the writer would not write one: the findings as the researchers gathered
/// them, under a note that says so, checked like any report.
fn findings_as_report(
    ctx: &NodeContext,
    state: &AgentState,
    findings: &str,
    numbered: &Sources,
    why: &str,
) -> Result<Command, NodeError> {
    fallbacks::record(
        ctx,
        AgentFallback::FindingsAsReport.as_str(),
        &format!("the report model {why}"),
    );
    let text = format!(
        "# Findings: {}\n\n> The report model did not write a report ({why}). What follows are \
         the findings the researchers gathered, as they were given to it.\n\n{findings}\n",
        msg::excerpt(
            state.research_brief.as_deref().unwrap_or("the research"),
            120
        )
    );
    finished(ctx, state, &text, None, numbered, "", Uncited::Keep)
}

/// The title of a report written without a model's heading: the user's first question.
fn report_title(state: &AgentState) -> String {
    let asked = state
        .messages
        .iter()
        .find(|m| m.kind() == msg::Kind::Human)
        .map(Message::text)
        .unwrap_or_default();
    let title = msg::excerpt(&asked, 200);
    if title.is_empty() {
        msg::excerpt(state.research_brief.as_deref().unwrap_or("Report"), 120)
    } else {
        title
    }
}

/// The update of a report written without the writer's one call (by source, or the findings
/// themselves): checked, kept as the final report and as the run's last message (under the id
/// of `streamed`, when its tokens went to clients), `appendix` after it unchecked (a list
/// of what was consulted, which cites nothing).
fn finished(
    ctx: &NodeContext,
    state: &AgentState,
    text: &str,
    streamed: Option<Message>,
    numbered: &Sources,
    appendix: &str,
    uncited: Uncited,
) -> Result<Command, NodeError> {
    let mut checked = check_citations(ctx, text, &state.sources, numbered, uncited);
    checked.report.push_str(appendix);
    let changed = what_changed::append(state, numbered, &mut checked.report);
    let message = match streamed {
        Some(mut m) => {
            m.set_text(&checked.report);
            m
        }
        None => Message::ai(&format!("run-{}", Uuid::new_v4()), &checked.report),
    };
    Command::write(AgentUpdate {
        final_report: Some(checked.report),
        reported_at: Some(now()),
        what_changed: Some(changed),
        messages: Some(vec![message]),
        notes: Some(Write::Replace(vec![])),
        citations: Some(checked.support),
        ..metered(ctx)
    })
}

/// A report after both checks.
pub(super) struct CheckedReport {
    pub(super) report: String,
    pub(super) support: support::SupportCounts,
}

/// Links no search returned are removed, then every claim is read against the sources it cites
/// and the Sources section is written from what remains (`support.rs`). One `citations` event
/// tells what was found and changed.
pub(super) fn check_citations(
    ctx: &NodeContext,
    text: &str,
    sources: &[Source],
    numbered: &Sources,
    uncited: Uncited,
) -> CheckedReport {
    let retrieved: HashSet<String> = sources.iter().map(|s| normalize(&s.url)).collect();
    let checked = citations::check(text, &retrieved);
    let mut repaired = support::repair_with(&checked.report, numbered, uncited);
    if let Some(note) = checked.note() {
        repaired.report.push_str(&note);
    }
    ResearchEvent::Citations {
        verified: checked.verified,
        removed: checked.removed,
        mcp_cited: mcp_cited(&repaired.report, sources),
        support: repaired.counts.clone(),
    }
    .send_here(ctx);
    CheckedReport {
        report: repaired.report,
        support: repaired.counts,
    }
}

/// Distinct MCP sources (tool calls and the resources they returned) the report names. The
/// web check above leaves them alone: they are not web pages, and no search returned them.
fn mcp_cited(report: &str, sources: &[Source]) -> usize {
    let mut named: Vec<&str> = sources
        .iter()
        .filter(|s| s.kind == Some(SourceKind::Mcp) && report.contains(&s.url))
        .map(|s| s.url.as_str())
        .collect();
    named.sort_unstable();
    named.dedup();
    named.len()
}

/// The report of a run stopped by its spend cap, without another model call: the brief and the
/// findings as the researchers wrote them, under a heading and a note that say it is partial.
fn partial_report(
    ctx: &NodeContext,
    state: &AgentState,
    reason: &str,
) -> Result<Command, NodeError> {
    let numbered = Sources::from_state(&state.sources).with_question(&asked(state));
    let body = findings(&state.notes, &numbered);
    let body = if body.trim().is_empty() {
        "No findings were gathered before the run stopped.".to_owned()
    } else {
        body
    };
    let text = format!(
        "# Partial report: the research stopped early\n\n> This run stopped before finishing its \
         research because {reason}. What follows are the findings gathered until then, as the \
         researchers wrote them; they were not edited into a full report.\n\n## Research brief\n\n\
         {}\n\n## Findings\n\n{body}\n",
        state.research_brief.as_deref().unwrap_or_default()
    );
    let checked = check_citations(ctx, &text, &state.sources, &numbered, Uncited::Keep);
    let message = Message::ai(&format!("run-{}", Uuid::new_v4()), &checked.report);
    let upd = metered(ctx);
    let stopped = StoppedEarly {
        reason: reason.to_owned(),
        usage: upd.usage.clone().unwrap_or_default(),
    };
    Command::write(AgentUpdate {
        final_report: Some(checked.report),
        reported_at: Some(now()),
        // A partial report is not compared: what it lacks is not what changed.
        what_changed: Some(None),
        messages: Some(vec![message]),
        notes: Some(Write::Replace(vec![])),
        stopped_early: Some(stopped),
        citations: Some(checked.support),
        ..upd
    })
}

/// Streams the report, trimming the findings after a context overflow (up to four attempts).
/// With `copied`, the writer's previous answer (its instructions copied back) and a request to
/// write the report itself follow the prompt.
async fn write_report(
    deps: &ResearchDeps,
    ctx: &NodeContext,
    cfg: &ResearchConfig,
    state: &AgentState,
    findings: &str,
    numbered: &Sources,
    copied: Option<&str>,
) -> Result<crate::llm::ChatResponse, NodeError> {
    let source_list = numbered.numbered_list();
    let caller = Caller::new(deps, ctx, cfg);
    let brief = state.research_brief.clone().unwrap_or_default();
    let history = msg::buffer_string(&state.messages);
    let date = msg::today();
    let mut budget: Option<usize> = None;
    for _ in 0..4 {
        let shown = budget.map_or(findings, |b| cut(findings, b));
        let prompt = deps.prompts.render(
            "final_report",
            &[
                ("research_brief", &brief),
                ("messages", &history),
                ("findings", shown),
                ("sources", &source_list),
                ("date", &date),
            ],
        );
        let mut messages = vec![Message::human(prompt)];
        if let Some(copied) = copied {
            messages.push(Message::ai_text(copied));
            messages.push(Message::human(deps.prompts.render("report_again", &[])));
        }
        let req = caller.request(Role::FinalReport, messages)?;
        match caller.call(req, true).await {
            Ok(resp) => return Ok(resp),
            Err(NodeError::Failed { kind, .. }) if kind == "ContextOverflowError" => {
                let window = match crate::llm::ModelName::parse(&cfg.final_report_model) {
                    Ok(name) => deps.providers.context_window(&name).await,
                    Err(_) => None,
                };
                budget = Some(shrink(
                    findings.chars().count(),
                    &cfg.final_report_model,
                    window.map(|w| w as usize),
                    cfg.final_report_model_max_tokens as usize,
                    budget,
                ));
                tracing::warn!(
                    budget,
                    "final report overflowed the context; trimming the findings"
                );
            }
            Err(other) => return Err(other),
        }
    }
    Err(NodeError::new(
        "ContextOverflowError",
        "report stage: the findings did not fit the final report model's context window even after trimming them three times",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_made_of_its_instructions_is_told_from_one_that_quotes_them() {
        let instructions =
            crate::research::prompts::Prompts::built_in().render("final_report", &[]);
        // pg-23 of the evaluation set, as the writer answered.
        let copied = "# How to write it\n\n## Start with a \"#\" title, then \"##\" sections \
            (\"###\" subsections where useful).\n\n## Plain language, paragraphs by default, \
            bullet points where they help.\n\n## How to cite:\n\n- Cite only numbers from that \
            list. Never invent a source, an author, a year or a URL.\n- Do not write a list of \
            sources at the end: it is added for you from your citations.";
        assert!(copies_instructions(copied, &instructions));
        let report = "# Vacuum\n\n## What it does\n\nVACUUM reclaims storage occupied by dead \
            tuples [1]. Autovacuum is on by default [2].\n\nPlain language, paragraphs by \
            default, bullet points where they help.\n\nThe launcher starts a worker every \
            minute in each database, up to autovacuum_max_workers at once [2].";
        assert!(!copies_instructions(report, &instructions));
        assert!(!copies_instructions("", &instructions));
        assert!(!copies_instructions("# Title\n\n## Sources", &instructions));
    }

    #[test]
    fn findings_shrink_below_what_failed() {
        assert_eq!(shrink(1000, "openai:gpt-4.1", None, 0, None), 700);
        assert_eq!(shrink(10_000_000, "openai:gpt-4o", None, 0, None), 512_000);
        assert_eq!(
            shrink(10_000_000, "llamacpp:qwen", Some(32_768), 8_768, None),
            96_000,
            "the endpoint's window, less the report's output, wins"
        );
        assert_eq!(shrink(1000, "x", None, 0, Some(700)), 630);
        assert_eq!(cut("héllo", 2), "hé");
    }
}
