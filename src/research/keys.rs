//! The research graphs' state keys (main graph, supervisor and researcher subgraphs), one
//! constant each: a misspelt key is a compile error, and one search finds every reader and
//! writer of a key. Prompt names, prompt placeholders and tool arguments are other namespaces
//! and stay literals.

pub const MESSAGES: &str = "messages";
pub const SUPERVISOR_MESSAGES: &str = "supervisor_messages";
pub const RESEARCH_BRIEF: &str = "research_brief";
/// The planned research topics (plan review only).
pub const RESEARCH_PLAN: &str = "research_plan";
/// What the user said when they rejected a plan (plan review only).
pub const PLAN_FEEDBACK: &str = "plan_feedback";
pub const RAW_NOTES: &str = "raw_notes";
pub const NOTES: &str = "notes";
pub const FINAL_REPORT: &str = "final_report";
pub const SOURCES: &str = "sources";
pub const USAGE: &str = "usage";
pub const FALLBACKS: &str = "fallbacks";
/// Set when the run stopped before finishing its research (its spend cap): why, and what it
/// had spent. The report is then partial.
pub const STOPPED_EARLY: &str = "stopped_early";
/// What the citation check found in the report and changed (`support::SupportCounts`).
pub const CITATIONS: &str = "citations";
pub const RESEARCHER_MESSAGES: &str = "researcher_messages";
pub const RESEARCH_TOPIC: &str = "research_topic";
pub const COMPRESSED_RESEARCH: &str = "compressed_research";
pub const RESEARCH_ITERATIONS: &str = "research_iterations";
pub const TOOL_CALL_ITERATIONS: &str = "tool_call_iterations";
