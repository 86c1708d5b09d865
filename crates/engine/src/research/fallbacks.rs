//! What a run had to do to research on a model that does not follow the API well: fallbacks
//! of the model client (calls read from text, prompted tools, repaired JSON, a runaway stopped)
//! and of the agents (a corrective turn, the brief researched as one topic, a search run for a
//! researcher that only wrote its plan). Each is a `custom` event when it happens and a count
//! in the final state's `fallbacks`, next to `usage`, so a run never hides how it got its
//! answer.

use crate::graph::NodeContext;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The stage of the research a node belongs to, as errors and fallback events name it.
pub fn stage(node: &str) -> &'static str {
    match node {
        "clarify_with_user" => "clarify",
        "write_research_brief" => "brief",
        "supervisor" | "supervisor_tools" | "research_supervisor" => "supervisor",
        "researcher" | "researcher_tools" => "researcher",
        "compress_research" => "compress",
        "final_report_generation" => "report",
        _ => "research",
    }
}

/// Agent-level fallbacks (the model client's own are `crate::llm::Fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentFallback {
    /// The model answered in prose where it had to call a tool, and was asked once more.
    CorrectiveTurn,
    /// The supervisor never delegated: the brief was researched as one topic.
    BriefAsOneTopic,
    /// A researcher wrote its search plan instead of searching: its listed queries (or its
    /// topic) were searched for it.
    PlannedSearch,
    /// The model's clean-up of a researcher's findings was unusable (a tool call, nothing, or
    /// text that names none of the sources it was shown): the results went on as its findings.
    ResultsAsFindings,
    /// A search call cut off mid-list (a small model listing queries until its output limit):
    /// the queries written in full before the cut were searched.
    QueriesSalvaged,
    /// The report writer copied its instructions back instead of writing: it was asked once
    /// more, told so.
    ReportAskedAgain,
    /// The writer copied its instructions back twice: the report is the findings as gathered,
    /// under a note saying so.
    FindingsAsReport,
    /// Restating one source's findings failed, or kept no sentence the source supports
    /// (`report_form: "by_source"`): its section quotes the findings' stretches nearest the
    /// question instead.
    SourceKeptAsFound,
    /// The report's outline could not be read from the model's answer (`report_form:
    /// "by_topic"`): the topics the supervisor delegated became its sections.
    OutlineFromTopics,
}

impl AgentFallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CorrectiveTurn => "corrective_turn",
            Self::BriefAsOneTopic => "brief_as_one_topic",
            Self::PlannedSearch => "planned_search",
            Self::ResultsAsFindings => "results_as_findings",
            Self::QueriesSalvaged => "queries_salvaged",
            Self::ReportAskedAgain => "report_asked_again",
            Self::FindingsAsReport => "findings_as_report",
            Self::SourceKeptAsFound => "source_kept_as_found",
            Self::OutlineFromTopics => "outline_from_topics",
        }
    }
}

/// The run's fallback counts (one per run, shared by all its nodes through `RunScope::local`).
#[derive(Debug, Default)]
pub struct FallbackMeter(Mutex<BTreeMap<&'static str, u64>>);

impl FallbackMeter {
    fn add(&self, name: &'static str) {
        let mut counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts.entry(name).or_default() += 1;
    }

    /// `{fallback: count}`, empty when the model followed the API throughout.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }
}

/// Counts one fallback and tells the run's clients about it.
pub fn record(ctx: &NodeContext, name: &'static str, detail: &str) {
    ctx.scope.local::<FallbackMeter>().add(name);
    let stage = stage(&ctx.node);
    tracing::info!(stage, fallback = name, detail, "research fallback");
    super::events::ResearchEvent::Fallback {
        stage: stage.to_owned(),
        node: ctx.node.to_string(),
        fallback: name.to_owned(),
        detail: detail.to_owned(),
    }
    .send(ctx);
}

/// The queries written in full at the start of a search call whose arguments were cut off
/// mid-list (a small model listing variations of its topic until its output limit ends the
/// JSON inside a string): at most `max`, as for a written plan; none when no list was begun.
pub(super) fn salvaged_queries(raw: &str, max: usize) -> Vec<String> {
    let Some(open) = raw.find('[') else {
        return Vec::new();
    };
    let mut rest = &raw[open + 1..];
    let mut queries: Vec<String> = Vec::new();
    while queries.len() < max {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if !rest.starts_with('"') {
            break;
        }
        let mut strings = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        // The string the cut fell in has no closing quote: the list ends there.
        let Some(Ok(query)) = strings.next() else {
            break;
        };
        rest = &rest[strings.byte_offset()..];
        let query = query.trim().to_owned();
        if !query.is_empty() && !queries.contains(&query) {
            queries.push(query);
        }
    }
    queries
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_queries_before_a_cut_are_salvaged() {
        let cut = "{\"queries\": [\"WAL archiving\", \"PITR setup\",\n \"WAL archiving\", \"recovery_target_ti";
        assert_eq!(salvaged_queries(cut, 5), ["WAL archiving", "PITR setup"]);
        let long: Vec<String> = (0..40).map(|i| format!("\"query {i}\"")).collect();
        let runaway = format!("{{\"queries\": [{}, \"que", long.join(", "));
        assert_eq!(salvaged_queries(&runaway, 5).len(), 5);
        assert!(salvaged_queries("{\"queries\": [\"unterminated", 5).is_empty());
        assert!(salvaged_queries("{\"queries\": \"one query, cut", 5).is_empty());
        assert_eq!(
            salvaged_queries(r#"{"queries": ["say \"hi\"", "x"#, 5),
            ["say \"hi\""]
        );
    }

    #[test]
    fn counts_are_kept_by_name() {
        let meter = FallbackMeter::default();
        assert!(meter.snapshot().is_empty());
        meter.add("prompted_tools");
        meter.add("prompted_tools");
        meter.add(AgentFallback::CorrectiveTurn.as_str());
        assert_eq!(
            json!(meter.snapshot()),
            json!({"corrective_turn": 1, "prompted_tools": 2})
        );
        assert_eq!(stage("researcher_tools"), "researcher");
        assert_eq!(stage("final_report_generation"), "report");
    }
}
