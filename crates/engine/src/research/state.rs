//! The research graphs' state, one struct per graph, and the updates their nodes write. Each
//! field is a channel: its name is the state key clients see, its `x-reducer` how writes
//! combine (overwrite when absent), its default the channel's. Changing a field here changes
//! the channel, the published schema and every reader at once (the compiler finds them).

use super::cost::RunUsage;
use super::messages::Message;
use crate::graph::{Write, WriteOnly};
use crate::tools::PageSummary;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// A `null` where a list or a count is expected reads as empty (a client may have written it
/// through `update_state`).
fn or_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// What a retrieved source is, when it is not a web page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A section of the operator's documents (`search_api: "local"`).
    Document,
    /// A tool call or resource of an MCP server.
    Mcp,
}

/// A source a search (or a tool) returned: what a report may cite.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Source {
    pub url: String,
    #[serde(default, deserialize_with = "or_default")]
    pub title: String,
    /// The text the citation check reads a cited sentence against (empty: not checkable).
    #[serde(default, deserialize_with = "or_default")]
    pub text: String,
    /// The summary the researcher was shown (so a later run on the thread need not pay for
    /// it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<PageSummary>,
    /// The search engine's snippet, or the page's excerpts, when that is all the researcher was
    /// shown of a page too long to show whole that was not summarised (its summary timed out,
    /// the run's summary budget was spent, or `summarize_pages` is off): what the research
    /// could have used is this, not `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    /// Absent for a web page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<SourceKind>,
    /// The MCP server and tool, for an MCP source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

impl From<crate::tools::mcp::McpSource> for Source {
    fn from(found: crate::tools::mcp::McpSource) -> Self {
        Self {
            url: found.url,
            title: found.title,
            kind: Some(SourceKind::Mcp),
            server: Some(found.server),
            tool: Some(found.tool),
            ..Self::default()
        }
    }
}

impl Source {
    /// The source without its page text and summary (what a citation check of links reads).
    pub fn without_text(self) -> Self {
        Self {
            text: String::new(),
            summary: None,
            snippet: None,
            ..self
        }
    }
}

/// Why a run stopped before finishing its research (its spend cap), and what it had spent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoppedEarly {
    pub reason: String,
    pub usage: RunUsage,
}

/// What the check found in the report as the model wrote it, and what it changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SupportCounts {
    /// Body paragraphs (and list items) that make at least one claim.
    pub paragraphs: usize,
    /// Of those, the ones citing a source after the repair.
    pub cited_paragraphs: usize,
    /// Citations as written.
    pub citations: usize,
    /// Citations as written that their source supports.
    pub supported: usize,
    /// Citations as written to sources without text to check (kept).
    pub unchecked: usize,
    /// Unsupported citations moved to a source that supports the sentence.
    pub moved: usize,
    /// Citations removed: to numbers not on the list, or unsupported by any source.
    pub removed: usize,
    /// Citations added to claims that had none, where a source supports them.
    pub attached: usize,
    /// Claims left without a citation because no retrieved text supports them (the writer's
    /// memory): removed from the report, which says how many.
    pub uncited_unsupported: usize,
    /// Distinct sources the final report cites (its Sources section).
    pub sources_cited: usize,
}

/// How the latest question asked after the report was met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FollowUpMode {
    /// Answered from the sources the report was written from, in one short call.
    Answered,
    /// Researched again (a new brief), the sources gathered kept.
    Researched,
    /// The thread's earlier question asked again (a cron on the thread, "run it again"):
    /// researched afresh, every page read again, the report ending with what changed.
    Rerun,
}

/// What the latest question asked on a thread whose report is written did, and why: the
/// answer is the thread's last message; a research's report is `final_report`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FollowUpTurn {
    pub mode: FollowUpMode,
    /// Why it was answered or researched, in a phrase.
    pub reason: String,
    /// What the citation check found in the answer (an answer only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations: Option<SupportCounts>,
}

/// A source named by what changed since the last report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangedSource {
    pub url: String,
    pub title: String,
}

/// A claim of the last report that the sources it cited, read again, no longer support.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnsupportedClaim {
    /// The sentence as the last report stated it, without its citations.
    pub claim: String,
    /// The sources it cited that this run read again.
    pub sources: Vec<ChangedSource>,
}

/// A sentence of the last report and the sentence of this one that says the same with other
/// figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MovedFigure {
    pub before: String,
    pub after: String,
}

/// What changed since the last report of a re-run question, computed from the two reports'
/// cited sentences and the pages read again (not written by the model).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct WhatChanged {
    /// When the last report was written (RFC 3339), when the thread recorded it.
    pub since: Option<String>,
    /// Sources this report cites that the last one did not.
    pub new_sources: Vec<ChangedSource>,
    /// Sources the last report cited that this one does not.
    pub dropped_sources: Vec<ChangedSource>,
    /// Claims of the last report its sources, read again, no longer support.
    pub unsupported: Vec<UnsupportedClaim>,
    /// Figures of the last report that this one states otherwise.
    pub moved: Vec<MovedFigure>,
    /// Cited claims of the last report whose sources this run did not read again (not
    /// rechecked).
    pub not_reread: usize,
}

/// The main graph's state.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(title = "AgentState")]
pub struct AgentState {
    /// The conversation with the user.
    #[schemars(extend("x-reducer" = "messages"))]
    #[serde(deserialize_with = "or_default")]
    pub messages: Vec<Message>,
    #[schemars(extend("x-reducer" = "append_or_override"))]
    #[serde(deserialize_with = "or_default")]
    pub supervisor_messages: Vec<Message>,
    pub research_brief: Option<String>,
    /// The planned research topics (plan review only).
    pub research_plan: Option<Vec<String>>,
    /// What the user said when they rejected a plan (plan review only).
    pub plan_feedback: Option<String>,
    #[schemars(extend("x-reducer" = "append_or_override"))]
    #[serde(deserialize_with = "or_default")]
    pub raw_notes: Vec<String>,
    /// The researchers' findings the report is written from.
    #[schemars(extend("x-reducer" = "append_or_override"))]
    #[serde(deserialize_with = "or_default")]
    pub notes: Vec<String>,
    pub final_report: Option<String>,
    /// When the final report was written (RFC 3339).
    pub reported_at: Option<String>,
    /// What changed since the last report, on a run that re-ran the thread's question.
    pub what_changed: Option<WhatChanged>,
    /// Everything the run's searches and tools returned. Clients see where and what ; the page
    /// texts and summaries the graph reads are in checkpoints and the state API, not in
    /// streamed events, the thread's values or a run's result).
    #[schemars(extend("x-reducer" = "append_or_override", "x-hidden-keys" = ["text", "summary"]))]
    #[serde(deserialize_with = "or_default")]
    pub sources: Vec<Source>,
    /// Tokens and estimated cost so far.
    pub usage: Option<RunUsage>,
    /// How often the run had to work around its model (`fallbacks.rs`), by fallback.
    pub fallbacks: Option<BTreeMap<String, u64>>,
    /// Set when the run stopped early; its report is then partial.
    pub stopped_early: Option<StoppedEarly>,
    /// What the citation check found in the report and changed.
    pub citations: Option<SupportCounts>,
    /// What the latest question asked after the report did (`follow_up`).
    pub follow_up: Option<FollowUpTurn>,
}

/// A write to the main graph's state: the fields left `None` are not written.
#[derive(Debug, Default, Serialize)]
pub struct AgentUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supervisor_messages: Option<Write<Vec<Message>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub research_brief: Option<String>,
    /// `Some(None)` clears the plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub research_plan: Option<Option<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_feedback: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_notes: Option<Write<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<Write<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_report: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<String>,
    /// `Some(None)` clears it (a report that re-ran nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_changed: Option<Option<WhatChanged>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Write<Vec<Source>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<StoppedEarly>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citations: Option<SupportCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<FollowUpTurn>,
}

/// The supervisor subgraph's state.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SupervisorState {
    #[schemars(extend("x-reducer" = "append_or_override"))]
    #[serde(deserialize_with = "or_default")]
    pub supervisor_messages: Vec<Message>,
    pub research_brief: Option<String>,
    #[schemars(extend("x-reducer" = "append_or_override"))]
    #[serde(deserialize_with = "or_default")]
    pub notes: Vec<String>,
    /// Supervisor rounds so far.
    #[serde(deserialize_with = "or_default")]
    pub research_iterations: u32,
    #[schemars(extend("x-reducer" = "append_or_override"))]
    pub raw_notes: WriteOnly<Vec<String>>,
    #[schemars(extend("x-reducer" = "append_or_override", "x-hidden-keys" = ["text", "summary"]))]
    pub sources: WriteOnly<Vec<Source>>,
}

/// What the main graph reads from the supervisor's final state.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SupervisorOutput {
    #[serde(deserialize_with = "or_default")]
    pub supervisor_messages: Vec<Message>,
    #[serde(deserialize_with = "or_default")]
    pub notes: Vec<String>,
    #[serde(deserialize_with = "or_default")]
    pub raw_notes: Vec<String>,
    #[serde(deserialize_with = "or_default")]
    pub sources: Vec<Source>,
}

/// What the main graph hands the supervisor.
#[derive(Debug, Serialize)]
pub struct SupervisorInput {
    pub supervisor_messages: Vec<Message>,
    pub research_brief: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct SupervisorUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supervisor_messages: Option<Write<Vec<Message>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<Write<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub research_iterations: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_notes: Option<Write<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Write<Vec<Source>>>,
}

/// One researcher subgraph's state.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ResearcherState {
    #[schemars(extend("x-reducer" = "append"))]
    #[serde(deserialize_with = "or_default")]
    pub researcher_messages: Vec<Message>,
    /// Model turns so far.
    #[serde(deserialize_with = "or_default")]
    pub tool_call_iterations: u32,
    pub research_topic: Option<String>,
    /// The findings, cleaned up for the supervisor.
    pub compressed_research: Option<String>,
    #[schemars(extend("x-reducer" = "append_or_override"))]
    pub raw_notes: WriteOnly<Vec<String>>,
    #[schemars(extend("x-reducer" = "append_or_override", "x-hidden-keys" = ["text", "summary"]))]
    pub sources: WriteOnly<Vec<Source>>,
}

/// What the supervisor reads from a researcher's final state.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResearcherOutput {
    pub compressed_research: Option<String>,
    #[serde(deserialize_with = "or_default")]
    pub raw_notes: Vec<String>,
    #[serde(deserialize_with = "or_default")]
    pub sources: Vec<Source>,
}

/// What the researcher's tools step reads: the last turn only (the history, with every search
/// result so far, is not copied for it).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct LastTurn {
    #[serde(deserialize_with = "last_only")]
    pub researcher_messages: Option<Message>,
    #[serde(deserialize_with = "or_default")]
    pub tool_call_iterations: u32,
    /// What the researcher was asked to research: a corpus ranks its searches by it.
    #[serde(default)]
    pub research_topic: Option<String>,
}

/// The last element of a list; the others are skipped without being copied.
fn last_only<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct Last<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Last<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut last = None;
            loop {
                // A JSON array knows how many items are left: read only the last one.
                if seq.size_hint() == Some(1) {
                    last = seq.next_element::<T>()?;
                } else if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                    return Ok(last);
                }
            }
        }
    }
    d.deserialize_any(Last(std::marker::PhantomData))
}

/// What the supervisor hands a researcher.
#[derive(Debug, Serialize)]
pub struct ResearcherInput {
    pub researcher_messages: Vec<Message>,
    pub research_topic: String,
}

#[derive(Debug, Default, Serialize)]
pub struct ResearcherUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub researcher_messages: Option<Vec<Message>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_iterations: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compressed_research: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_notes: Option<Write<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Write<Vec<Source>>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Reducer;
    use serde_json::json;

    /// The channels a state declares are its fields, with the reducers ODR gives them.
    #[test]
    fn the_channels_are_the_fields() {
        let reducers = |channels: Vec<crate::graph::Channel>| -> Vec<(String, Reducer)> {
            channels.into_iter().map(|c| (c.name, c.reducer)).collect()
        };
        let main = reducers(crate::graph::channels_of::<AgentState>());
        assert_eq!(main.len(), 16);
        assert!(main.contains(&("messages".into(), Reducer::Messages)));
        assert!(main.contains(&("sources".into(), Reducer::AppendOrOverride)));
        assert!(main.contains(&("stopped_early".into(), Reducer::Override)));
        let researcher = reducers(crate::graph::channels_of::<ResearcherState>());
        assert_eq!(
            researcher[0],
            ("researcher_messages".into(), Reducer::Append)
        );
    }

    /// Every key an update writes is a channel of its graph.
    #[test]
    fn updates_write_only_channels() {
        let full = AgentUpdate {
            messages: Some(vec![]),
            supervisor_messages: Some(Write::Add(vec![])),
            research_brief: Some(String::new()),
            research_plan: Some(None),
            plan_feedback: Some(None),
            raw_notes: Some(Write::Add(vec![])),
            notes: Some(Write::Add(vec![])),
            final_report: Some(String::new()),
            reported_at: Some(String::new()),
            what_changed: Some(None),
            sources: Some(Write::Add(vec![])),
            usage: Some(RunUsage::default()),
            fallbacks: Some(BTreeMap::new()),
            stopped_early: Some(StoppedEarly::default()),
            citations: Some(SupportCounts::default()),
            follow_up: Some(FollowUpTurn {
                mode: FollowUpMode::Answered,
                reason: String::new(),
                citations: None,
            }),
        };
        let written: Vec<String> = json!(full).as_object().unwrap().keys().cloned().collect();
        let channels: Vec<String> = crate::graph::channels_of::<AgentState>()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(written, channels);
        let supervisor = json!(SupervisorUpdate {
            supervisor_messages: Some(Write::Add(vec![])),
            notes: Some(Write::Add(vec![])),
            research_iterations: Some(1),
            raw_notes: Some(Write::Add(vec![])),
            sources: Some(Write::Add(vec![])),
        });
        for key in supervisor.as_object().unwrap().keys() {
            assert!(
                crate::graph::channels_of::<SupervisorState>()
                    .iter()
                    .any(|c| &c.name == key),
                "{key}"
            );
        }
    }

    #[test]
    fn the_tools_step_reads_only_the_last_turn() {
        let turn: LastTurn = serde_json::from_value(json!({"researcher_messages": [
            {"type": "human", "content": "topic"}, {"type": "ai", "content": "last"}],
            "tool_call_iterations": 2}))
        .unwrap();
        assert_eq!(turn.researcher_messages.unwrap().text(), "last");
        assert_eq!(turn.tool_call_iterations, 2);
        for empty in [
            json!({"researcher_messages": []}),
            json!({"researcher_messages": null}),
            json!({}),
        ] {
            let turn: LastTurn = serde_json::from_value(empty).unwrap();
            assert!(turn.researcher_messages.is_none());
        }
    }

    /// A state a client wrote nulls into still reads; one of the wrong shape is refused.
    #[test]
    fn lenient_about_nulls_strict_about_shapes() {
        let state: AgentState =
            serde_json::from_value(json!({"notes": null, "sources": [{"url": "https://a"}]}))
                .unwrap();
        assert!(state.notes.is_empty());
        assert_eq!(state.sources[0].url, "https://a");
        assert!(serde_json::from_value::<AgentState>(json!({"notes": 5})).is_err());
    }
}
