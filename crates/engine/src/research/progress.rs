//! What a research run is doing, read from its stream: the steps of the graph (brief →
//! researchers → their searches and pages → report), the counts, and the tokens and cost so
//! far. Each event yields the lines that changed: the terminal view redraws those in place,
//! A2A sends them as status updates.

use super::cost::RunUsage;
use super::events::ResearchEvent;
use super::messages::Message;
use super::state::FollowUpMode;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One line of the run's tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LineId {
    /// A step of the main graph, by node name.
    Step(&'static str),
    /// The n-th researcher (0-based), in the order they started.
    Researcher(usize),
}

/// A line that changed: its text now, and whether its step is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub line: LineId,
    pub text: String,
    pub done: bool,
}

/// The steps of the main graph, in order, with what each shows while it runs and once over.
const STEPS: [(&str, &str); 7] = [
    ("clarify_with_user", "Checking the question"),
    ("write_research_brief", "Writing the research brief"),
    ("plan_research", "Planning the topics"),
    ("review_plan", "Waiting for the plan's review"),
    ("research_supervisor", "Researching"),
    ("final_report_generation", "Writing the report"),
    // A question on a written report, after `clarify_with_user` (never after the report).
    ("answer_follow_up", "Answering from the report's sources"),
];

#[derive(Default)]
struct Researcher {
    namespace: String,
    queries: Vec<String>,
    pages: usize,
    done: bool,
}

/// The run as far as its stream has told.
#[derive(Default)]
pub struct RunProgress {
    researchers: Vec<Researcher>,
    searches: usize,
    pages: usize,
    /// The run's `usage` totals (the latest `usage` custom event).
    usage: Option<RunUsage>,
    stage: &'static str,
    /// The step shown as running (announced when the step before it ended), if any.
    running: Option<&'static str>,
    /// Warnings and other notes, in order (failed searches, fallbacks, the citation check).
    pub notes: Vec<String>,
}

fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// A list written to a channel: appended, or `{"type": "override", "value": [...]}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written<T> {
    List(Vec<T>),
    Override { value: Vec<T> },
}

impl<T> Written<T> {
    fn items(&self) -> &[T] {
        match self {
            Self::List(items) | Self::Override { value: items } => items,
        }
    }
}

/// What one node wrote, as far as progress cares. (A source is counted, not read.)
#[derive(Default, Deserialize)]
#[serde(default)]
struct NodeWrites {
    research_brief: Option<String>,
    follow_up: Option<crate::research::state::FollowUpTurn>,
    research_plan: Option<Written<String>>,
    researcher_messages: Option<Written<Message>>,
    sources: Option<Written<serde::de::IgnoredAny>>,
}

fn count<T>(written: &Option<Written<T>>) -> usize {
    written.as_ref().map_or(0, |w| w.items().len())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl RunProgress {
    pub fn new() -> Self {
        Self {
            stage: "Starting",
            usage: None,
            ..Self::default()
        }
    }

    /// The summary line: stage, researchers, searches, pages, tokens and cost.
    pub fn status(&self) -> String {
        let mut parts = vec![self.stage.to_owned()];
        if !self.researchers.is_empty() {
            parts.push(plural(self.researchers.len(), "researcher", "researchers"));
        }
        parts.push(plural(self.searches, "search", "searches"));
        parts.push(format!("{} read", plural(self.pages, "page", "pages")));
        if let Some(usage) = &self.usage {
            parts.push(format!(
                "{} tokens",
                usage.input_tokens + usage.output_tokens
            ));
            if usage.estimated_usd > 0.0 {
                parts.push(format!("≈ ${:.4}", usage.estimated_usd));
            }
        }
        parts.join(" · ")
    }

    /// The run reached its end: the stage says so. Returns the step that was shown as
    /// running but will not run in this run (the brief, after a clarifying question).
    pub fn finish(&mut self, stage: &'static str) -> Option<LineId> {
        self.stage = stage;
        self.running.take().map(LineId::Step)
    }

    /// One stream event as it went out: its SSE name (`updates|<namespace>`) and its JSON data.
    /// `updates` and `custom` are read straight into their types; other events, and events
    /// this code does not know, change nothing.
    pub fn on_event(&mut self, event: &str, data: &str) -> Vec<Change> {
        let (mode, namespace) = event.split_once('|').unwrap_or((event, ""));
        match mode {
            "updates" => match serde_json::from_str::<BTreeMap<String, Option<NodeWrites>>>(data) {
                Ok(nodes) => self.on_update(namespace, nodes),
                Err(_) => Vec::new(),
            },
            "custom" => {
                if let Ok(event) = serde_json::from_str::<ResearchEvent>(data) {
                    self.on_custom(event);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn on_update(
        &mut self,
        namespace: &str,
        nodes: BTreeMap<String, Option<NodeWrites>>,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for (node, writes) in nodes {
            let writes = writes.unwrap_or_default();
            if namespace.contains("researcher:") {
                changes.extend(self.researcher_update(namespace, &node, &writes));
            } else if namespace.is_empty() {
                changes.extend(self.step_update(&node, &writes));
            } else if node == "supervisor" {
                self.stage = "Researching";
            }
        }
        changes
    }

    /// A main-graph node finished: its line is done, and the next step's line starts.
    fn step_update(&mut self, node: &str, data: &NodeWrites) -> Vec<Change> {
        let Some(index) = STEPS.iter().position(|(n, _)| *n == node) else {
            return Vec::new();
        };
        let (name, _) = STEPS[index];
        if self.running == Some(name) {
            self.running = None;
        }
        let text = match name {
            "clarify_with_user" => "Question checked".to_owned(),
            "write_research_brief" => format!(
                "Brief: {}",
                excerpt(data.research_brief.as_deref().unwrap_or_default(), 160)
            ),
            "plan_research" => format!(
                "Plan: {}",
                plural(count(&data.research_plan), "topic", "topics")
            ),
            "review_plan" => "Plan approved".to_owned(),
            "answer_follow_up" => match &data.follow_up {
                Some(turn) if turn.mode == FollowUpMode::Researched => {
                    format!("Researching it again: {}", turn.reason)
                }
                _ => "Answered from the report's sources".to_owned(),
            },
            "research_supervisor" => format!(
                "Research done: {}, {}, {} read",
                plural(self.researchers.len(), "researcher", "researchers"),
                plural(self.searches, "search", "searches"),
                plural(self.pages, "page", "pages")
            ),
            _ => "Report written".to_owned(),
        };
        let mut changes = vec![Change {
            line: LineId::Step(name),
            text,
            done: true,
        }];
        // Researchers still shown as running are over once the research is.
        if name == "research_supervisor" {
            for i in 0..self.researchers.len() {
                if !self.researchers[i].done {
                    self.researchers[i].done = true;
                    changes.push(self.researcher_line(i));
                }
            }
        }
        // The next step that runs in every research: skip the plan steps unless planning.
        let next = STEPS[index + 1..].iter().find(|(n, _)| {
            !matches!(*n, "plan_research" | "review_plan" | "answer_follow_up")
                || name == "plan_research"
        });
        if let Some((next, label)) = next {
            self.stage = label;
            self.running = Some(next);
            changes.push(Change {
                line: LineId::Step(next),
                text: (*label).to_owned(),
                done: false,
            });
        } else {
            self.stage = "Finishing";
        }
        changes
    }

    fn researcher_index(&mut self, namespace: &str) -> usize {
        // A researcher is its own namespace, up to and including its `researcher:` segment.
        let key = match namespace.rfind("researcher:") {
            Some(at) => namespace[at..]
                .find('|')
                .map_or(namespace, |end| &namespace[..at + end]),
            None => namespace,
        };
        if let Some(i) = self.researchers.iter().position(|r| r.namespace == key) {
            return i;
        }
        self.researchers.push(Researcher {
            namespace: key.to_owned(),
            ..Researcher::default()
        });
        self.researchers.len() - 1
    }

    fn researcher_update(&mut self, namespace: &str, node: &str, data: &NodeWrites) -> Vec<Change> {
        let i = self.researcher_index(namespace);
        self.stage = "Researching";
        match node {
            "researcher" => {
                let written = data.researcher_messages.as_ref();
                let queries = queries(written.map_or(&[], Written::items));
                self.searches += queries.len();
                self.researchers[i].queries.extend(queries);
            }
            "researcher_tools" => {
                let read = count(&data.sources);
                self.pages += read;
                self.researchers[i].pages += read;
            }
            "compress_research" => self.researchers[i].done = true,
            _ => {}
        }
        vec![self.researcher_line(i)]
    }

    fn researcher_line(&self, i: usize) -> Change {
        let r = &self.researchers[i];
        let mut text = format!("Researcher {}", i + 1);
        if let Some(last) = r.queries.last() {
            let verb = if r.done { "searched" } else { "searching" };
            text.push_str(&format!(": {verb} “{}”", excerpt(last, 70)));
            if r.queries.len() > 1 {
                text.push_str(&format!(" and {} more", r.queries.len() - 1));
            }
        }
        text.push_str(&format!(" · {} read", plural(r.pages, "page", "pages")));
        if r.done {
            text.push_str(" · findings summarised");
        }
        Change {
            line: LineId::Researcher(i),
            text,
            done: r.done,
        }
    }

    fn on_custom(&mut self, event: ResearchEvent) {
        match event {
            ResearchEvent::Usage { run, .. } => self.usage = Some(run),
            ResearchEvent::ResearcherError { error, .. } => {
                self.notes.push(format!("! a researcher failed: {error}"));
            }
            ResearchEvent::SearchError { error, .. } => {
                self.notes.push(format!("! a search failed: {error}"));
            }
            ResearchEvent::Fallback {
                stage, fallback, ..
            } => self
                .notes
                .push(format!("! fell back ({stage}): {fallback}")),
            ResearchEvent::Citations {
                removed, support, ..
            } => {
                self.notes.push(format!(
                    "citations checked: {} of {} supported, {} moved, {} removed, {} added; {} \
                     sources cited ({} unretrieved links removed)",
                    support.supported,
                    support.citations,
                    support.moved,
                    support.removed,
                    support.attached,
                    support.sources_cited,
                    removed.len()
                ));
            }
            ResearchEvent::FollowUp { mode, reason } => {
                let did = match mode {
                    FollowUpMode::Answered => "answered from the report's sources",
                    FollowUpMode::Researched => "researched again",
                    FollowUpMode::Rerun => "re-ran the question",
                };
                self.notes.push(format!("follow-up {did}: {reason}"));
            }
            ResearchEvent::SpendCap { .. }
            | ResearchEvent::McpError { .. }
            | ResearchEvent::Replayed { .. }
            | ResearchEvent::Searched { .. }
            | ResearchEvent::Settings { .. } => {}
        }
    }
}

/// The search queries in a turn's tool calls (`queries` lists or one `query`).
fn queries(messages: &[Message]) -> Vec<String> {
    let mut out = Vec::new();
    for call in messages.iter().flat_map(Message::tool_calls) {
        let args = &call.args;
        if let Some(list) = args["queries"].as_array() {
            out.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
        } else if let Some(one) = args["query"].as_str() {
            out.push(one.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds an event as the stream names it: `mode`, or `mode|namespace`.
    fn feed(p: &mut RunProgress, mode: &str, ns: &str, data: &Value) -> Vec<Change> {
        let event = if ns.is_empty() {
            mode.to_owned()
        } else {
            format!("{mode}|{ns}")
        };
        p.on_event(&event, &data.to_string())
    }

    #[test]
    fn a_run_unfolds_as_a_tree_of_steps_and_researchers() {
        let mut p = RunProgress::new();
        let brief = feed(
            &mut p,
            "updates",
            "",
            &json!({"write_research_brief": {"research_brief": "Compare   the two"}}),
        );
        assert_eq!(brief[0].text, "Brief: Compare the two");
        assert_eq!(
            brief[1],
            Change {
                line: LineId::Step("research_supervisor"),
                text: "Researching".into(),
                done: false
            }
        );
        let ns = "research_supervisor:1|supervisor_tools:2|researcher:a";
        let search = json!({"researcher": {"researcher_messages": [{"type": "ai",
            "tool_calls": [{"name": "tavily_search", "args": {"queries": ["one", "two"]}}]}]}});
        let line = feed(&mut p, "updates", ns, &search);
        assert_eq!(line[0].line, LineId::Researcher(0));
        assert_eq!(
            line[0].text,
            "Researcher 1: searching “two” and 1 more · 0 pages read"
        );
        let pages = json!({"researcher_tools": {"sources": [{"url": "u1"}, {"url": "u2"}]}});
        feed(
            &mut p,
            "updates",
            &format!("{ns}|researcher_tools:3"),
            &pages,
        );
        let other = "research_supervisor:1|supervisor_tools:2|researcher:b";
        feed(&mut p, "updates", other, &json!({"compress_research": {}}));
        feed(
            &mut p,
            "custom",
            "",
            &json!({"type": "usage", "run": {"input_tokens": 1200, "output_tokens": 34, "estimated_usd": 0.01}}),
        );
        assert_eq!(
            p.status(),
            "Researching · 2 researchers · 2 searches · 2 pages read · 1234 tokens · ≈ $0.0100"
        );
        let done = feed(&mut p, "updates", "", &json!({"research_supervisor": {}}));
        assert_eq!(
            done[0].text,
            "Research done: 2 researchers, 2 searches, 2 pages read"
        );
        assert!(
            done.iter()
                .any(|c| c.line == LineId::Researcher(0) && c.done),
            "{done:?}"
        );
        assert_eq!(
            done.last().map(|c| &c.text),
            Some(&"Writing the report".into())
        );
    }
}
