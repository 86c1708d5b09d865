//! The `custom` stream events a research run sends besides the graph's own updates: what it
//! spends, what went wrong on the way, how it got around its model, and what the citation check
//! changed. One type, so what the nodes send and what readers (`progress.rs`, the CLI, the
//! agent protocols) read cannot drift apart. On the wire each is an object tagged by `type`.

use super::cost::RunUsage;
use super::support::SupportCounts;
use crate::graph::NodeContext;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResearchEvent {
    /// One model call's tokens, and the run's totals after it.
    Usage {
        #[serde(default)]
        node: String,
        #[serde(default)]
        model: String,
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
        run: RunUsage,
    },
    /// The run reached its spend cap: it finishes with what it has.
    SpendCap { reason: String, run: RunUsage },
    /// The run worked around its model (`fallbacks.rs`).
    Fallback {
        stage: String,
        #[serde(default)]
        node: String,
        fallback: String,
        #[serde(default)]
        detail: String,
    },
    /// A researcher failed; the supervisor goes on without its topic.
    ResearcherError {
        #[serde(default)]
        topic: String,
        error: String,
    },
    /// A search call's queries and what each returned (locations and scores, best first), so
    /// a reader can tell a query that found nothing useful from a report that ignored it.
    Searched {
        engine: String,
        queries: Vec<crate::tools::QueryFound>,
    },
    /// A search failed; the researcher was told and goes on.
    SearchError {
        engine: String,
        #[serde(default)]
        queries: Vec<String>,
        error: String,
    },
    /// An MCP server could not be used, or one of its tools failed.
    McpError {
        server: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        error: String,
    },
    /// A call the step had finished before its worker stopped, replayed from its record
    /// instead of being made (and paid for) again.
    Replayed {
        node: String,
        /// `model` or `tool`.
        kind: String,
        /// The model, or the tool's name.
        name: String,
    },
    /// The settings profile the run runs with (`research_profile`, `auto` resolved) and the
    /// settings it changed from what the run and the operator gave.
    Settings {
        profile: super::config::ResearchProfile,
        #[serde(default)]
        changed: Vec<String>,
    },
    /// What the citation check found in the report and changed.
    Citations {
        /// Distinct cited URLs a search returned.
        verified: usize,
        /// Cited URLs no search returned (removed).
        removed: Vec<String>,
        /// Distinct MCP sources the report names.
        mcp_cited: usize,
        support: SupportCounts,
    },
    /// A question asked after the report: answered from the report's sources or researched
    /// again, and why (`follow_up`).
    FollowUp {
        mode: super::state::FollowUpMode,
        reason: String,
    },
}

impl ResearchEvent {
    /// A search call's event; each query is also logged with the locations it found.
    pub fn searched(engine: &str, found: Vec<crate::tools::QueryFound>) -> Self {
        for q in &found {
            let results: Vec<String> = q
                .results
                .iter()
                .map(|f| match f.score {
                    Some(score) => format!("{} ({score:.4})", f.url),
                    None => f.url.clone(),
                })
                .collect();
            tracing::info!(engine, query = %q.query, found = q.results.len(),
                results = %results.join(", "), "searched");
        }
        Self::Searched {
            engine: engine.to_owned(),
            queries: found,
        }
    }

    /// Sends the event at the root of the run's stream (clients see it without subgraphs).
    pub fn send(&self, ctx: &NodeContext) {
        if let Ok(data) = serde_json::to_value(self) {
            ctx.emit_run_custom(data);
        }
    }

    /// Sends the event in the sending node's own graph.
    pub fn send_here(&self, ctx: &NodeContext) {
        if let Ok(data) = serde_json::to_value(self) {
            ctx.emit_custom(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The wire shape: `type` first, then the fields in order, as the events always were.
    #[test]
    fn events_keep_their_wire_shape() {
        let event = ResearchEvent::McpError {
            server: "docs".into(),
            tool: None,
            error: "down".into(),
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"type":"mcp_error","server":"docs","error":"down"}"#
        );
        let read: ResearchEvent = serde_json::from_value(json!({"type": "fallback",
            "stage": "researcher", "fallback": "planned_search"}))
        .unwrap();
        assert!(
            matches!(read, ResearchEvent::Fallback { ref fallback, .. } if fallback == "planned_search")
        );
        assert!(serde_json::from_value::<ResearchEvent>(json!({"type": "other"})).is_err());
    }
}
