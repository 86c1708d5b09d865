//! Pausing a graph for a person: interrupts a node raises, breakpoints before or after nodes,
//! and the command that continues a paused thread. Everything a pause needs to be answered is
//! in the checkpoint's task list (the interrupts, and the answers given so far), so a paused
//! thread survives restarts and is resumed by any replica.

use super::{END, Graph, START};
use crate::store::JsonMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A question a node asked: the value it interrupted with and an id to answer it by.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// 32 hex digits, derived from the task and the interrupt's place in it, so it stays the
    /// same however often the task is re-run.
    pub id: String,
    pub value: Value,
}

impl Interrupt {
    pub fn new(task_id: Uuid, index: usize, value: Value) -> Self {
        let id = Uuid::new_v5(&task_id, format!("interrupt:{index}").as_bytes());
        Self {
            id: id.simple().to_string(),
            value,
        }
    }

    /// The shape streams and `/wait` carry (`response_schema` is part of it since LangGraph 1.0).
    pub fn wire(&self) -> Value {
        json!({"value": self.value, "id": self.id, "response_schema": null})
    }
}

/// Why an invocation stopped before its end.
#[derive(Clone, Debug, PartialEq)]
pub enum Pause {
    /// Nodes interrupted and wait for answers.
    Interrupts(Vec<Interrupt>),
    /// A breakpoint (`interrupt_before` / `interrupt_after`) was reached.
    Breakpoint,
}

impl Pause {
    /// The `__interrupt__` list clients see.
    pub fn wire(&self) -> Value {
        match self {
            Self::Interrupts(list) => Value::Array(list.iter().map(Interrupt::wire).collect()),
            Self::Breakpoint => json!([]),
        }
    }
}

/// Nodes named by `interrupt_before` / `interrupt_after`: `"*"` or a list.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeSet {
    All,
    Nodes(Vec<String>),
}

impl NodeSet {
    /// Parses `"*"` or a list of the graph's node names; `null` is no set. The error names
    /// the field and the bad value.
    pub fn parse(value: &Value, graph: &Graph, field: &str) -> Result<Option<Self>, String> {
        let names = match value {
            Value::Null => return Ok(None),
            Value::String(s) if s == "*" => return Ok(Some(Self::All)),
            Value::Array(items) => items,
            other => {
                return Err(format!(
                    "{field} must be \"*\" or a list of node names, got {other}"
                ));
            }
        };
        let mut nodes = Vec::with_capacity(names.len());
        for name in names {
            let Some(name) = name.as_str() else {
                return Err(format!("{field} must list node names, got {name}"));
            };
            if graph.node(name).is_none() {
                return Err(unknown_node(field, name, graph));
            }
            nodes.push(name.to_owned());
        }
        Ok(Some(Self::Nodes(nodes)))
    }

    fn contains(&self, node: &str) -> bool {
        match self {
            Self::All => node != START,
            Self::Nodes(nodes) => nodes.iter().any(|n| n == node),
        }
    }
}

impl NodeSet {
    /// The set's nodes must be the graph's (a request's, or a stored run's after the graph
    /// changed).
    fn check(&self, graph: &Graph, field: &str) -> Result<(), String> {
        match self {
            Self::All => Ok(()),
            Self::Nodes(nodes) => match nodes.iter().find(|n| graph.node(n).is_none()) {
                Some(name) => Err(unknown_node(field, name, graph)),
                None => Ok(()),
            },
        }
    }
}

// Stored with the run as the API took it: `"*"` or the list of names.
impl serde::Serialize for NodeSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::All => s.serialize_str("*"),
            Self::Nodes(nodes) => nodes.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for NodeSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeSetVisitor)
    }
}

/// `"*"` or a list of names; anything else is refused naming what was sent.
struct NodeSetVisitor;

impl<'de> serde::de::Visitor<'de> for NodeSetVisitor {
    type Value = NodeSet;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("\"*\" or a list of node names")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<NodeSet, E> {
        match text {
            "*" => Ok(NodeSet::All),
            other => Err(E::custom(format!(
                "expected \"*\" or a list of node names, got '{other}'"
            ))),
        }
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NodeSet, A::Error> {
        let mut nodes = Vec::new();
        while let Some(name) = seq.next_element::<String>()? {
            nodes.push(name);
        }
        Ok(NodeSet::Nodes(nodes))
    }
}

fn unknown_node(field: &str, name: &str, graph: &Graph) -> String {
    let known: Vec<&str> = graph.node_names().collect();
    format!(
        "{field}: unknown node '{name}' (graph '{}' has {})",
        graph.id,
        known.join(", ")
    )
}

/// Static breakpoints of a run (root graph only, as in LangGraph).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Breakpoints {
    pub before: Option<NodeSet>,
    pub after: Option<NodeSet>,
}

impl Breakpoints {
    pub fn parse(before: &Value, after: &Value, graph: &Graph) -> Result<Self, String> {
        Ok(Self {
            before: NodeSet::parse(before, graph, "interrupt_before")?,
            after: NodeSet::parse(after, graph, "interrupt_after")?,
        })
    }

    /// Breakpoints of a request, or read back from a stored run: their nodes must be the
    /// graph's.
    pub fn check(&self, graph: &Graph) -> Result<(), String> {
        for (set, field) in [
            (&self.before, "interrupt_before"),
            (&self.after, "interrupt_after"),
        ] {
            if let Some(set) = set {
                set.check(graph, field)?;
            }
        }
        Ok(())
    }

    pub(super) fn stops_before(&self, next: &[String]) -> bool {
        self.before
            .as_ref()
            .is_some_and(|set| next.iter().any(|n| set.contains(n)))
    }

    pub(super) fn stops_after(&self, ran: &[String]) -> bool {
        self.after
            .as_ref()
            .is_some_and(|set| ran.iter().any(|n| set.contains(n)))
    }
}

/// The answer a `command` gives to pending interrupts.
#[derive(Clone, Debug, PartialEq)]
pub enum Resume {
    /// One value for the one pending interrupt (or for pending nodes without interrupts).
    Value(Value),
    /// Values by interrupt id.
    ById(BTreeMap<String, Value>),
}

/// A run's `command`: answers, a state update and where to go, applied before the graph goes on.
/// Read from a request as `{resume?, update?, goto?}` (the shape is checked then); the nodes
/// `goto` names are checked against the graph with `check`. Stored with the run in the same
/// shape.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "CommandFields", into = "CommandFields")]
pub struct ResumeCommand {
    pub resume: Option<Resume>,
    pub update: Option<JsonMap>,
    /// Nodes to run next instead of the pending ones; `["__end__"]` ends the thread.
    pub goto: Vec<String>,
}

/// A command as the wire carries it.
#[derive(Deserialize, Serialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an object with resume, update or goto"
)]
struct CommandFields {
    #[serde(default, skip_serializing_if = "Value::is_null")]
    resume: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    update: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    goto: Value,
}

impl TryFrom<CommandFields> for ResumeCommand {
    type Error = String;

    fn try_from(fields: CommandFields) -> Result<Self, String> {
        let command = Self {
            resume: (!fields.resume.is_null()).then(|| parse_resume(&fields.resume)),
            update: match &fields.update {
                Value::Null => None,
                update => Some(parse_update(update)?),
            },
            goto: match &fields.goto {
                Value::Null => Vec::new(),
                goto => parse_goto(goto)?,
            },
        };
        if command == Self::default() {
            return Err("command must set resume, update or goto".into());
        }
        Ok(command)
    }
}

impl From<ResumeCommand> for CommandFields {
    fn from(command: ResumeCommand) -> Self {
        let resume = match command.resume {
            None => Value::Null,
            Some(Resume::Value(value)) => value,
            Some(Resume::ById(map)) => json!(map),
        };
        Self {
            resume,
            update: command.update.map_or(Value::Null, Value::Object),
            goto: match command.goto.is_empty() {
                true => Value::Null,
                false => json!(command.goto),
            },
        }
    }
}

impl ResumeCommand {
    /// The nodes `goto` names must be the graph's (or `__end__`).
    pub fn check(&self, graph: &Graph) -> Result<(), String> {
        match self
            .goto
            .iter()
            .find(|name| *name != END && graph.node(name).is_none())
        {
            Some(name) => Err(unknown_node("command.goto", name, graph)),
            None => Ok(()),
        }
    }
}

/// LangGraph's rule: an object whose keys are all interrupt ids answers those interrupts.
fn parse_resume(value: &Value) -> Resume {
    match value {
        Value::Object(map) if !map.is_empty() && map.keys().all(|k| is_interrupt_id(k)) => {
            Resume::ById(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        other => Resume::Value(other.clone()),
    }
}

fn is_interrupt_id(key: &str) -> bool {
    key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_update(value: &Value) -> Result<JsonMap, String> {
    match value {
        Value::Object(map) => Ok(map.clone()),
        // `[[key, value], …]`, as the SDKs may send it.
        Value::Array(pairs) => pairs
            .iter()
            .map(|pair| match pair.as_array().map(Vec::as_slice) {
                Some([Value::String(k), v]) => Ok((k.clone(), v.clone())),
                _ => Err(format!(
                    "command.update: expected an object or [key, value] pairs, got {pair}"
                )),
            })
            .collect(),
        other => Err(format!(
            "command.update: expected an object or [key, value] pairs, got {other}"
        )),
    }
}

fn parse_goto(value: &Value) -> Result<Vec<String>, String> {
    let targets = match value {
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    targets
        .into_iter()
        .map(|target| match target {
            Value::String(name) => Ok(name.clone()),
            Value::Object(send) if send.contains_key("node") => Err(
                "command.goto: sending input to a node ({node, input}) is not supported; \
                 name the node, and put state changes in command.update"
                    .into(),
            ),
            other => Err(format!("command.goto: expected a node name, got {other}")),
        })
        .collect()
}

/// The interrupts waiting in a checkpoint's task list, by task id.
pub fn pending(tasks: &Value) -> Vec<(String, Vec<Interrupt>)> {
    tasks
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|task| {
            let id = task.get("id")?.as_str()?.to_owned();
            let list: Vec<Interrupt> =
                serde_json::from_value(task.get("interrupts")?.clone()).ok()?;
            (!list.is_empty()).then_some((id, list))
        })
        .collect()
}

/// Every pending interrupt of a checkpoint, in task order.
pub fn pending_list(tasks: &Value) -> Vec<Interrupt> {
    pending(tasks).into_iter().flat_map(|(_, l)| l).collect()
}

/// The thread's `interrupts` field: `{task_id: [{id, value}]}`.
pub fn by_task(tasks: &Value) -> Value {
    let map: JsonMap = pending(tasks)
        .into_iter()
        .map(|(task, list)| (task, json!(list)))
        .collect();
    Value::Object(map)
}

/// Why a `resume` answers nothing.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResumeError {
    #[error("the thread is not interrupted: there is nothing to resume")]
    NotInterrupted,
    #[error(
        "{} interrupts are pending: answer them by id ({{\"<interrupt id>\": value}}); ids: {}",
        .0.len(), .0.join(", ")
    )]
    Ambiguous(Vec<String>),
    #[error("no pending interrupt has id '{0}'")]
    UnknownId(String),
}

/// Whether `resume` answers something in a checkpoint with these `next` nodes and tasks: a
/// pending interrupt, or (a plain value) the pending nodes a cancelled run left.
pub fn check_resume(resume: &Resume, next: &[String], tasks: &Value) -> Result<(), ResumeError> {
    let waiting = pending_list(tasks);
    match resume {
        Resume::Value(_) if waiting.len() > 1 => Err(ResumeError::Ambiguous(
            waiting.into_iter().map(|i| i.id).collect(),
        )),
        Resume::Value(_) if waiting.is_empty() && next.is_empty() => {
            Err(ResumeError::NotInterrupted)
        }
        Resume::Value(_) => Ok(()),
        Resume::ById(_) if waiting.is_empty() => Err(ResumeError::NotInterrupted),
        Resume::ById(answers) => {
            match answers
                .keys()
                .find(|id| !waiting.iter().any(|i| &i.id == *id))
            {
                Some(id) => Err(ResumeError::UnknownId(id.clone())),
                None => Ok(()),
            }
        }
    }
}
