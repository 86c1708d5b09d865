//! From a run's frames (the runs API's stream: `values`, `updates`, `messages` tuples,
//! `custom`, `tasks`, `checkpoints`, `error`, with `|ns` suffixes) to the thread-centric
//! protocol's events: content-block messages, `lifecycle` (root `running` and one terminal per
//! run, subgraphs `started` / `completed`), interrupts as `input.requested`. Deterministic: the
//! same frames give the same events and event ids, so every connection of a thread agrees on
//! them (clients deduplicate by id across their connections).

use crate::ids::RunId;
use crate::store::RunStatus;
use crate::stream::Frame;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};

/// One protocol event, before its connection gives it a `seq`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtocolEvent {
    pub event_id: String,
    /// The channel name, except `input.requested` for the `input` channel.
    pub method: &'static str,
    pub namespace: Vec<String>,
    pub node: Option<String>,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    pub data: Value,
}

impl ProtocolEvent {
    /// The channel a subscription names to receive it.
    pub fn channel(&self) -> &'static str {
        match self.method {
            "input.requested" => "input",
            other => other,
        }
    }

    /// The envelope the SSE `data:` line carries.
    pub fn envelope(&self, seq: u64) -> Value {
        let mut params = json!({"namespace": self.namespace, "timestamp": self.timestamp,
                                "data": self.data});
        if let (Some(node), Some(map)) = (&self.node, params.as_object_mut()) {
            map.insert("node".into(), json!(node));
        }
        json!({"type": "event", "event_id": self.event_id, "seq": seq, "method": self.method,
               "params": params})
    }
}

/// A message whose tokens are streaming.
struct OpenMessage {
    namespace: Vec<String>,
    node: Option<String>,
    id: String,
    text: String,
    /// Tool-call chunks by their index: (id, name, arguments so far).
    tool_chunks: BTreeMap<i64, (String, String, String)>,
}

/// Translates the frames of one run.
pub struct RunTranslator {
    run_id: RunId,
    graph_name: String,
    open: Vec<OpenMessage>,
    /// Subgraph namespaces that have started and not completed, in the order they started.
    subgraphs: Vec<Vec<String>>,
    lifecycle_sent: HashSet<(String, &'static str)>,
    interrupts_sent: HashSet<String>,
    /// A `values` event (with the interrupts it announces) held back one frame: a
    /// `checkpoints` event for the same step goes before it, as the protocol's clients pair
    /// each values event with the checkpoint before it.
    held: Vec<ProtocolEvent>,
    failure: Option<String>,
    /// Events made from the current frame (they share its id, suffixed `.1`, `.2`, …).
    base_id: String,
    parts: usize,
    timestamp: i64,
}

impl RunTranslator {
    pub fn new(run_id: RunId, graph_name: impl Into<String>) -> Self {
        Self {
            run_id,
            graph_name: graph_name.into(),
            open: Vec::new(),
            subgraphs: Vec::new(),
            lifecycle_sent: HashSet::new(),
            interrupts_sent: HashSet::new(),
            held: Vec::new(),
            failure: None,
            base_id: String::new(),
            parts: 0,
            timestamp: 0,
        }
    }

    /// The run began: the root `running` event.
    pub fn start(&mut self, timestamp: i64) -> Vec<ProtocolEvent> {
        self.timestamp = timestamp;
        let mut out = Vec::new();
        self.lifecycle(&[], "running", None, &mut out);
        out
    }

    /// The events one frame of the run makes.
    pub fn frame(&mut self, frame: &Frame) -> Vec<ProtocolEvent> {
        self.base_id = format!("{}:{}-{}", self.run_id, frame.id.ms, frame.id.seq);
        self.parts = 0;
        self.timestamp = frame.id.ms;
        let (mode, namespace) = split_event(&frame.event);
        let Ok(data) = serde_json::from_str::<Value>(&frame.data) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if mode == "checkpoints" {
            self.checkpoint(&namespace, &data, &mut out);
            return out;
        }
        self.release_values(&mut out);
        if !namespace.is_empty() && mode != "metadata" {
            self.subgraph_seen(&namespace, &mut out);
        }
        match mode {
            "values" => self.values(namespace, data),
            "updates" => self.updates(namespace, data, &mut out),
            "messages" => self.message(namespace, &data, &mut out),
            "custom" => {
                // A payload's `type` names it, so `custom:<type>` subscriptions select it.
                let mut custom = json!({ "payload": data });
                if let (Some(name), Some(map)) = (data["type"].as_str(), custom.as_object_mut()) {
                    map.insert("name".into(), json!(name));
                }
                let ev = self.event("custom", namespace, None, custom);
                out.push(ev);
            }
            "tasks" => out.push(self.event("tasks", namespace, None, data)),
            "error" => {
                let message = data["message"].as_str().unwrap_or("the run failed");
                self.failure = Some(message.to_owned());
            }
            _ => {}
        }
        out
    }

    /// The run ended (its status and when; `None` when it is gone, rolled back): what is
    /// still open is closed, then the root terminal.
    pub fn finish(&mut self, ended: Option<(RunStatus, i64)>) -> Vec<ProtocolEvent> {
        self.base_id = format!("{}:end", self.run_id);
        self.parts = 0;
        let status = ended.map(|(status, at)| {
            self.timestamp = self.timestamp.max(at);
            status
        });
        let mut out = Vec::new();
        self.release_values(&mut out);
        for open in std::mem::take(&mut self.open) {
            self.finish_message(open, None, &mut out);
        }
        let mut open = std::mem::take(&mut self.subgraphs);
        open.sort_by_key(|ns| std::cmp::Reverse(ns.len()));
        for ns in open {
            self.lifecycle(&ns, "completed", None, &mut out);
        }
        let (event, error) = match status {
            Some(RunStatus::Success) => ("completed", None),
            Some(RunStatus::Error | RunStatus::Timeout) => (
                "failed",
                Some(
                    self.failure
                        .clone()
                        .unwrap_or_else(|| "the run failed".into()),
                ),
            ),
            // Cancelled, paused, or rolled back (the run is gone).
            _ => ("interrupted", None),
        };
        self.lifecycle(&[], event, error, &mut out);
        out
    }

    fn event(
        &mut self,
        method: &'static str,
        namespace: Vec<String>,
        node: Option<String>,
        data: Value,
    ) -> ProtocolEvent {
        let event_id = match self.parts {
            0 => self.base_id.clone(),
            n => format!("{}.{n}", self.base_id),
        };
        self.parts += 1;
        ProtocolEvent {
            event_id,
            method,
            namespace,
            node,
            timestamp: self.timestamp,
            data,
        }
    }

    /// A lifecycle event, once per namespace and status in a run; its id says what it is.
    fn lifecycle(
        &mut self,
        namespace: &[String],
        event: &'static str,
        error: Option<String>,
        out: &mut Vec<ProtocolEvent>,
    ) {
        let key = namespace.join("\u{0}");
        if !self.lifecycle_sent.insert((key.clone(), event)) {
            return;
        }
        let graph_name = match namespace.last() {
            Some(segment) => node_of(segment).to_owned(),
            None => self.graph_name.clone(),
        };
        let mut data = json!({"event": event, "graph_name": graph_name});
        if let (Some(error), Some(map)) = (error, data.as_object_mut()) {
            map.insert("error".into(), json!(error));
        }
        out.push(ProtocolEvent {
            event_id: format!("synth:{}:lc|{key}|{event}", self.run_id),
            method: "lifecycle",
            namespace: namespace.to_vec(),
            node: None,
            timestamp: self.timestamp,
            data,
        });
    }

    fn subgraph_seen(&mut self, namespace: &[String], out: &mut Vec<ProtocolEvent>) {
        // Parents first: a researcher's first event also shows its supervisor started.
        for depth in 1..=namespace.len() {
            let prefix = &namespace[..depth];
            if !self.subgraphs.iter().any(|ns| ns == prefix) {
                self.subgraphs.push(prefix.to_vec());
                self.lifecycle(prefix, "started", None, out);
            }
        }
    }

    fn release_values(&mut self, out: &mut Vec<ProtocolEvent>) {
        out.append(&mut self.held);
    }

    fn checkpoint(&mut self, namespace: &[String], data: &Value, out: &mut Vec<ProtocolEvent>) {
        if self
            .held
            .first()
            .is_some_and(|held| held.namespace != namespace)
        {
            self.release_values(out);
        }
        let id = &data["config"]["configurable"]["checkpoint_id"];
        let mut envelope = json!({"id": id, "step": data["metadata"]["step"],
                                  "source": data["metadata"]["source"]});
        let parent = &data["parent_config"]["configurable"]["checkpoint_id"];
        if let (Some(parent), Some(map)) = (parent.as_str(), envelope.as_object_mut()) {
            map.insert("parent_id".into(), json!(parent));
        }
        let ev = self.event("checkpoints", namespace.to_vec(), None, envelope);
        out.push(ev);
        self.release_values(out);
    }

    /// Holds the values event (see `held`); the frame before released what was held.
    fn values(&mut self, namespace: Vec<String>, data: Value) {
        let Value::Object(mut state) = data else {
            return;
        };
        let interrupts = state.remove("__interrupt__");
        let values = self.event("values", namespace.clone(), None, Value::Object(state));
        let mut group = vec![values];
        if let Some(Value::Array(list)) = interrupts {
            for interrupt in list {
                self.input_requested(&namespace, &interrupt, &mut group);
            }
            if group.len() > 1 {
                self.lifecycle(&[], "interrupted", None, &mut group);
            }
        }
        self.held = group;
    }

    fn input_requested(
        &mut self,
        namespace: &[String],
        interrupt: &Value,
        out: &mut Vec<ProtocolEvent>,
    ) {
        let Some(id) = interrupt["id"].as_str() else {
            return;
        };
        if !self.interrupts_sent.insert(id.to_owned()) {
            return;
        }
        let mut data = json!({"interrupt_id": id});
        if let (Some(value), Some(map)) = (interrupt.get("value"), data.as_object_mut()) {
            map.insert("payload".into(), value.clone());
        }
        out.push(ProtocolEvent {
            event_id: format!(
                "synth:{}:input|{}|{id}",
                self.run_id,
                namespace.join("\u{0}")
            ),
            method: "input.requested",
            namespace: namespace.to_vec(),
            node: None,
            timestamp: self.timestamp,
            data,
        });
    }

    fn updates(&mut self, namespace: Vec<String>, data: Value, out: &mut Vec<ProtocolEvent>) {
        let Value::Object(map) = data else {
            return;
        };
        for (node, values) in map {
            // Interrupts reach clients through `values` as `input.requested`.
            if node == "__interrupt__" {
                continue;
            }
            // The node is done: its messages are complete, and so are the subgraphs it ran.
            let (done, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.open)
                .into_iter()
                .partition(|m| m.namespace == namespace && m.node.as_deref() == Some(&*node));
            self.open = open;
            for message in done {
                self.finish_message(message, None, out);
            }
            let children: Vec<Vec<String>> = self
                .subgraphs
                .iter()
                .filter(|ns| {
                    ns.len() == namespace.len() + 1
                        && ns.starts_with(&namespace)
                        && ns.last().is_some_and(|s| node_of(s) == node)
                })
                .cloned()
                .collect();
            for child in children {
                // Everything the node's subgraph opened ends with it, innermost first: the
                // researchers a supervisor's tools node ran complete before the node does
                // (dropped silently, they were never completed at all).
                let mut closing: Vec<Vec<String>> = self
                    .subgraphs
                    .iter()
                    .filter(|ns| ns.starts_with(&child))
                    .cloned()
                    .collect();
                self.subgraphs.retain(|ns| !ns.starts_with(&child));
                closing.sort_by_key(|ns| std::cmp::Reverse(ns.len()));
                for ns in closing {
                    self.lifecycle(&ns, "completed", None, out);
                }
            }
            let data = json!({"node": node, "values": values});
            let ev = self.event("updates", namespace.clone(), Some(node), data);
            out.push(ev);
        }
    }

    fn message(&mut self, namespace: Vec<String>, data: &Value, out: &mut Vec<ProtocolEvent>) {
        let (message, meta) = (&data[0], &data[1]);
        let node = meta["langgraph_node"].as_str().map(str::to_owned);
        let Some(id) = message["id"].as_str().map(str::to_owned) else {
            return;
        };
        let chunk = message["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("Chunk"));
        let position = self
            .open
            .iter()
            .position(|m| m.id == id && m.namespace == namespace);
        if !chunk {
            match position {
                Some(i) => {
                    let open = self.open.remove(i);
                    self.finish_message(open, Some(message), out);
                }
                None => self.whole_message(namespace, node, &id, message, out),
            }
            return;
        }
        let i = match position {
            Some(i) => i,
            None => {
                let start = json!({"event": "message-start", "role": "ai", "id": id,
                                   "metadata": metadata_of(message)});
                let ev = self.event("messages", namespace.clone(), node.clone(), start);
                out.push(ev);
                let block = json!({"event": "content-block-start", "index": 0,
                                   "content": {"type": "text", "text": ""}});
                let ev = self.event("messages", namespace.clone(), node.clone(), block);
                out.push(ev);
                self.open.push(OpenMessage {
                    namespace: namespace.clone(),
                    node: node.clone(),
                    id: id.clone(),
                    text: String::new(),
                    tool_chunks: BTreeMap::new(),
                });
                self.open.len() - 1
            }
        };
        let piece = text_of(message);
        if !piece.is_empty() {
            self.open[i].text.push_str(&piece);
            let delta = json!({"event": "content-block-delta", "index": 0,
                               "delta": {"type": "text-delta", "text": piece}});
            let ev = self.event("messages", namespace, node, delta);
            out.push(ev);
        }
        for part in message["tool_call_chunks"].as_array().into_iter().flatten() {
            let index = part["index"].as_i64().unwrap_or(0);
            let entry = self.open[i].tool_chunks.entry(index).or_default();
            if let Some(id) = part["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(name) = part["name"].as_str() {
                entry.1 = name.to_owned();
            }
            entry.2.push_str(part["args"].as_str().unwrap_or_default());
        }
        if message["chunk_position"] == "last" {
            let open = self.open.remove(i);
            self.finish_message(open, None, out);
        }
    }

    /// Closes a streamed message: its text block, its tool calls (start and finish only: the
    /// 1.11 client cannot read tool-call deltas), and `message-finish`.
    fn finish_message(
        &mut self,
        open: OpenMessage,
        last: Option<&Value>,
        out: &mut Vec<ProtocolEvent>,
    ) {
        let OpenMessage {
            namespace,
            node,
            text,
            tool_chunks,
            ..
        } = open;
        let text = last.map_or(text, text_of);
        let finish = json!({"event": "content-block-finish", "index": 0,
                            "content": {"type": "text", "text": text}});
        let ev = self.event("messages", namespace.clone(), node.clone(), finish);
        out.push(ev);
        let calls: Vec<(String, String, Value)> = match last {
            Some(message) => tool_calls_of(message),
            None => tool_chunks
                .into_values()
                .map(|(id, name, args)| {
                    let args = serde_json::from_str(&args).unwrap_or_else(|_| json!({}));
                    (id, name, args)
                })
                .collect(),
        };
        self.tool_call_blocks(&namespace, &node, calls, out);
        let done = message_finish(last.unwrap_or(&Value::Null));
        let ev = self.event("messages", namespace, node, done);
        out.push(ev);
    }

    /// A message that was not streamed (a tool result, a whole model answer), in one go.
    fn whole_message(
        &mut self,
        namespace: Vec<String>,
        node: Option<String>,
        id: &str,
        message: &Value,
        out: &mut Vec<ProtocolEvent>,
    ) {
        let role = match message["type"].as_str().unwrap_or("ai") {
            "human" | "user" => "human",
            "tool" => "tool",
            "system" => "system",
            _ => "ai",
        };
        let mut start = json!({"event": "message-start", "role": role, "id": id,
                               "metadata": metadata_of(message)});
        if let (Some(call), Some(map)) = (message["tool_call_id"].as_str(), start.as_object_mut()) {
            map.insert("tool_call_id".into(), json!(call));
        }
        let text = text_of(message);
        let mut events = vec![
            start,
            json!({"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}}),
        ];
        if !text.is_empty() {
            events.push(json!({"event": "content-block-delta", "index": 0,
                               "delta": {"type": "text-delta", "text": text}}));
        }
        events.push(json!({"event": "content-block-finish", "index": 0,
                           "content": {"type": "text", "text": text}}));
        for data in events {
            let ev = self.event("messages", namespace.clone(), node.clone(), data);
            out.push(ev);
        }
        self.tool_call_blocks(&namespace, &node, tool_calls_of(message), out);
        let ev = self.event("messages", namespace, node, message_finish(message));
        out.push(ev);
    }

    fn tool_call_blocks(
        &mut self,
        namespace: &[String],
        node: &Option<String>,
        calls: Vec<(String, String, Value)>,
        out: &mut Vec<ProtocolEvent>,
    ) {
        for (i, (id, name, args)) in calls.into_iter().enumerate() {
            let index = i + 1;
            let start = json!({"event": "content-block-start", "index": index,
                "content": {"type": "tool_call_chunk", "id": id, "name": name, "args": "", "index": index}});
            let finish = json!({"event": "content-block-finish", "index": index,
                "content": {"type": "tool_call", "id": id, "name": name, "args": args}});
            for data in [start, finish] {
                let ev = self.event("messages", namespace.to_vec(), node.clone(), data);
                out.push(ev);
            }
        }
    }
}

/// `values|a:1|b:2` → (`values`, [`a:1`, `b:2`]).
fn split_event(event: &str) -> (&str, Vec<String>) {
    let mut parts = event.split('|');
    let mode = parts.next().unwrap_or_default();
    (mode, parts.map(str::to_owned).collect())
}

/// The node name of a namespace segment (`researcher:<uuid>` → `researcher`).
pub fn node_of(segment: &str) -> &str {
    segment.split(':').next().unwrap_or(segment)
}

/// A message's text: a string `content`, or its text blocks joined.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn tool_calls_of(message: &Value) -> Vec<(String, String, Value)> {
    message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_owned(),
                c["name"].as_str().unwrap_or_default().to_owned(),
                c.get("args").cloned().unwrap_or_else(|| json!({})),
            )
        })
        .collect()
}

fn metadata_of(message: &Value) -> Value {
    let meta = &message["response_metadata"];
    let mut out = Map::new();
    for (key, from) in [("model", "model_name"), ("provider", "model_provider")] {
        if let Some(v) = meta[from].as_str() {
            out.insert(key.into(), json!(v));
        }
    }
    Value::Object(out)
}

fn message_finish(message: &Value) -> Value {
    let mut finish = json!({"event": "message-finish"});
    let usage = &message["usage_metadata"];
    if let (Some(map), true) = (finish.as_object_mut(), usage.is_object()) {
        map.insert(
            "usage".into(),
            json!({"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"],
                   "total_tokens": usage["total_tokens"]}),
        );
    }
    if let (Some(map), Some(meta)) = (
        finish.as_object_mut(),
        message["response_metadata"].as_object(),
    ) {
        map.insert("metadata".into(), Value::Object(meta.clone()));
    }
    finish
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventId;
    use uuid::Uuid;

    fn frame(seq: i64, event: &str, data: Value) -> Frame {
        Frame::new(
            EventId { ms: 1000, seq },
            Uuid::nil().into(),
            event.into(),
            data.to_string().into(),
        )
    }

    fn chunk(id: &str, text: &str, last: bool) -> Value {
        json!([{"type": "AIMessageChunk", "id": id, "content": text, "tool_call_chunks": [],
                "chunk_position": if last { json!("last") } else { Value::Null }},
               {"langgraph_node": "agent"}])
    }

    fn kinds(events: &[ProtocolEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e.data["event"].as_str() {
                Some(sub) => format!("{}:{sub}", e.method),
                None => e.method.to_owned(),
            })
            .collect()
    }

    #[test]
    fn streamed_tokens_become_content_blocks_with_the_message_id() {
        let mut t = RunTranslator::new(Uuid::nil().into(), "agent");
        let mut events = t.start(1);
        events.extend(t.frame(&frame(1, "messages", chunk("m1", "Hel", false))));
        events.extend(t.frame(&frame(2, "messages", chunk("m1", "lo", true))));
        events.extend(t.finish(Some((RunStatus::Success, 2))));
        assert_eq!(
            kinds(&events),
            [
                "lifecycle:running",
                "messages:message-start",
                "messages:content-block-start",
                "messages:content-block-delta",
                "messages:content-block-delta",
                "messages:content-block-finish",
                "messages:message-finish",
                "lifecycle:completed"
            ]
        );
        assert_eq!(events[1].data["id"], "m1");
        assert_eq!(events[5].data["content"]["text"], "Hello");
        assert_eq!(events[1].node.as_deref(), Some("agent"));
        let ids: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids.len(), events.len(), "event ids are unique");
    }

    #[test]
    fn a_checkpoint_goes_before_the_values_of_its_step() {
        let mut t = RunTranslator::new(Uuid::nil().into(), "agent");
        let mut events = t.frame(&frame(1, "values", json!({"messages": []})));
        let cp = json!({"config": {"configurable": {"checkpoint_id": "c2"}},
                        "parent_config": {"configurable": {"checkpoint_id": "c1"}},
                        "metadata": {"step": 1, "source": "loop"}});
        events.extend(t.frame(&frame(2, "checkpoints", cp)));
        assert_eq!(kinds(&events), ["checkpoints", "values"]);
        assert_eq!(
            events[0].data,
            json!({"id": "c2", "parent_id": "c1", "step": 1, "source": "loop"})
        );
    }

    #[test]
    fn an_interrupt_is_requested_then_the_run_is_interrupted_once() {
        let mut t = RunTranslator::new(Uuid::nil().into(), "hitl");
        let values = json!({"messages": [], "__interrupt__": [{"id": "i1", "value": {"q": 1}}]});
        let mut events = t.frame(&frame(1, "values", values));
        let cp = json!({"config": {"configurable": {"checkpoint_id": "c2"}},
                        "metadata": {"step": 1, "source": "loop"}});
        events.extend(t.frame(&frame(2, "checkpoints", cp)));
        events.extend(t.finish(Some((RunStatus::Interrupted, 2))));
        assert_eq!(
            kinds(&events),
            [
                "checkpoints",
                "values",
                "input.requested",
                "lifecycle:interrupted"
            ]
        );
        assert_eq!(
            events[2].data,
            json!({"interrupt_id": "i1", "payload": {"q": 1}})
        );
        assert!(events[1].data.get("__interrupt__").is_none());
        assert_eq!(events[2].channel(), "input");
    }

    #[test]
    fn subgraphs_start_and_complete_and_a_failure_is_reported() {
        let mut t = RunTranslator::new(Uuid::nil().into(), "parent");
        let mut events = t.frame(&frame(1, "values|child:1", json!({})));
        events.extend(t.frame(&frame(2, "updates", json!({"child": {"messages": []}}))));
        events.extend(t.frame(&frame(
            3,
            "error",
            json!({"error": "ValueError", "message": "kaboom"}),
        )));
        events.extend(t.finish(Some((RunStatus::Error, 4))));
        assert_eq!(
            kinds(&events),
            [
                "lifecycle:started",
                "values",
                "lifecycle:completed",
                "updates",
                "lifecycle:failed"
            ]
        );
        assert_eq!(events[0].namespace, ["child:1"]);
        assert_eq!(events[0].data["graph_name"], "child");
        assert_eq!(
            events[3].data,
            json!({"node": "child", "values": {"messages": []}})
        );
        assert_eq!(events[4].data["error"], "kaboom");
    }

    #[test]
    fn subgraphs_run_inside_a_node_complete_with_it_innermost_first() {
        // The research graph's shape: researchers run by the supervisor's tools node.
        let mut t = RunTranslator::new(Uuid::nil().into(), "deep_research");
        let tools = "research_supervisor:1|supervisor_tools:2";
        let mut events = Vec::new();
        for (seq, id) in [(1, "a"), (2, "b")] {
            let update = json!({"researcher": {"researcher_messages": []}});
            events.extend(t.frame(&frame(
                seq,
                &format!("updates|{tools}|researcher:{id}"),
                update,
            )));
        }
        let update = json!({"supervisor_tools": {"supervisor_messages": []}});
        events.extend(t.frame(&frame(3, "updates|research_supervisor:1", update)));
        let before_report = events.len();
        let update = json!({"research_supervisor": {"notes": []}});
        events.extend(t.frame(&frame(4, "updates", update)));
        events.extend(t.finish(Some((RunStatus::Success, 5))));
        let lifecycle: Vec<(String, String)> = events
            .iter()
            .filter(|e| e.method == "lifecycle")
            .map(|e| {
                (
                    e.namespace.join("|"),
                    e.data["event"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let completed = |ns: &str| {
            lifecycle
                .iter()
                .position(|(n, e)| n == ns && e == "completed")
        };
        let researcher_a = format!("{tools}|researcher:a");
        let researcher_b = format!("{tools}|researcher:b");
        for ns in [
            &researcher_a,
            &researcher_b,
            &tools.to_owned(),
            &"research_supervisor:1".to_owned(),
        ] {
            let started = lifecycle
                .iter()
                .filter(|(n, e)| n == ns && e == "started")
                .count();
            assert_eq!(started, 1, "{ns} started once: {lifecycle:?}");
            assert!(
                completed(ns).is_some(),
                "{ns} never completed: {lifecycle:?}"
            );
        }
        assert!(completed(&researcher_a) < completed(tools), "{lifecycle:?}");
        assert!(completed(&researcher_b) < completed(tools), "{lifecycle:?}");
        // Every researcher is over when its node is, not only when the run ends.
        let early: Vec<&ProtocolEvent> = events[..before_report]
            .iter()
            .filter(|e| e.method == "lifecycle" && e.data["event"] == "completed")
            .collect();
        assert_eq!(early.len(), 3, "{lifecycle:?}");
    }
}
