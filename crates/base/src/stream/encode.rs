//! Turns graph events into named SSE payloads for the modes a run asked for, following the
//! reference server's naming (`mode|ns` for subgraphs) and message-streaming rules.

use super::events::{EventKind, GraphEvent};
use super::modes::{StreamMode, StreamModes};
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// Per-run encoder: remembers which legacy message ids already had their metadata sent and the
/// text accumulated so far for `messages/partial`.
pub struct Encoder {
    modes: StreamModes,
    subgraphs: bool,
    /// Stateless runs have no persistent checkpoints, so no `checkpoints` events.
    stateless: bool,
    legacy_meta_sent: HashSet<String>,
    partial: HashMap<String, Value>,
}

impl Encoder {
    pub fn new(modes: StreamModes, subgraphs: bool, stateless: bool) -> Self {
        Self {
            modes,
            subgraphs,
            stateless,
            legacy_meta_sent: HashSet::new(),
            partial: HashMap::new(),
        }
    }

    /// Whether an event of `kind` from `ns` would produce any frame.
    pub fn wants(&self, ns: &str, kind: EventKind) -> bool {
        if !ns.is_empty() && !self.subgraphs {
            return false;
        }
        let on = |m| self.modes.contains(m);
        match kind {
            EventKind::Values => on(StreamMode::Values),
            EventKind::Updates => on(StreamMode::Updates),
            EventKind::Messages => on(StreamMode::MessagesTuple) || on(StreamMode::Messages),
            EventKind::Custom => on(StreamMode::Custom),
            EventKind::Tasks => on(StreamMode::Tasks) || on(StreamMode::Debug),
            EventKind::Checkpoints => {
                (on(StreamMode::Checkpoints) && !self.stateless) || on(StreamMode::Debug)
            }
        }
    }

    /// The `(event name, JSON data)` frames for one graph event, possibly none. Takes the event
    /// by value: a `values` event carries the whole state, and moving it saves a copy.
    pub fn encode(&mut self, event: GraphEvent) -> Vec<(String, String)> {
        self.encode_values(event)
            .into_iter()
            .map(|(name, data)| match data {
                Data::Value(v) => (name, v.to_string()),
                Data::Json(text) => (name, text),
            })
            .collect()
    }

    fn encode_values(&mut self, event: GraphEvent) -> Vec<(String, Data)> {
        let ns = event.ns().to_owned();
        if !ns.is_empty() && !self.subgraphs {
            return Vec::new();
        }
        let name = |mode: &str| {
            if ns.is_empty() {
                mode.to_owned()
            } else {
                format!("{mode}|{ns}")
            }
        };
        let mut out: Vec<(String, Data)> = Vec::new();
        let on = |m| self.modes.contains(m);
        match event {
            GraphEvent::Values { values, .. } if on(StreamMode::Values) => {
                out.push((name("values"), Data::Json(values)));
            }
            GraphEvent::Updates { node, update, .. } if on(StreamMode::Updates) => {
                out.push((name("updates"), json!({ node.as_str(): update }).into()));
            }
            GraphEvent::Message { message, meta, .. } => {
                let (tuple, legacy) = (on(StreamMode::MessagesTuple), on(StreamMode::Messages));
                let mut legacy_frames = Vec::new();
                if legacy {
                    self.legacy_metadata(&message, &meta.value, &mut legacy_frames);
                    legacy_frames.push(("messages/complete".into(), json!([&message]).into()));
                }
                if tuple {
                    out.push((name("messages"), tuple_json(&message, &meta.json)));
                }
                out.extend(legacy_frames);
            }
            GraphEvent::MessageChunk { chunk, meta, .. } => {
                let (tuple, legacy) = (on(StreamMode::MessagesTuple), on(StreamMode::Messages));
                let mut legacy_frames = Vec::new();
                if legacy {
                    self.legacy_metadata(&chunk, &meta.value, &mut legacy_frames);
                    let partial = self.accumulate(&chunk);
                    legacy_frames.push(("messages/partial".into(), json!([partial]).into()));
                }
                if tuple {
                    out.push((name("messages"), tuple_json(&chunk, &meta.json)));
                }
                out.extend(legacy_frames);
            }
            GraphEvent::Custom { data, .. } if on(StreamMode::Custom) => {
                out.push((name("custom"), data.into()));
            }
            GraphEvent::TaskStart { task, step, .. }
            | GraphEvent::TaskResult { task, step, .. } => {
                if on(StreamMode::Tasks) {
                    out.push((name("tasks"), task.clone().into()));
                }
                if on(StreamMode::Debug) {
                    let kind = if task.get("result").is_some() || task.get("error").is_some() {
                        "task_result"
                    } else {
                        "task"
                    };
                    out.push((name("debug"), debug(step, kind, task.clone()).into()));
                }
            }
            GraphEvent::Checkpoint { payload, step, .. } => {
                if on(StreamMode::Checkpoints) && !self.stateless {
                    out.push((name("checkpoints"), payload.clone().into()));
                }
                if on(StreamMode::Debug) {
                    out.push((
                        name("debug"),
                        debug(step, "checkpoint", debug_checkpoint(&payload)).into(),
                    ));
                }
            }
            _ => {}
        }
        out
    }

    fn legacy_metadata(&mut self, message: &Value, meta: &Value, out: &mut Vec<(String, Data)>) {
        let Some(id) = message.get("id").and_then(Value::as_str) else {
            return;
        };
        if self.legacy_meta_sent.insert(id.to_owned()) {
            out.push((
                "messages/metadata".into(),
                json!({ id: { "metadata": meta } }).into(),
            ));
        }
    }

    /// Adds a chunk to the message accumulated under its id and returns the accumulation as a
    /// plain `ai` message.
    fn accumulate(&mut self, chunk: &Value) -> Value {
        let id = chunk
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let delta = chunk
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let entry = self.partial.entry(id).or_insert_with(|| {
            let mut first = chunk.clone();
            if let Some(map) = first.as_object_mut() {
                map.insert("type".into(), json!("ai"));
                map.insert("content".into(), json!(""));
                map.remove("tool_call_chunks");
                map.remove("chunk_position");
            }
            first
        });
        if let Some(map) = entry.as_object_mut() {
            let text = map
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let joined = format!("{text}{delta}");
            map.insert("content".into(), json!(joined));
        }
        entry.clone()
    }
}

/// A frame's data before it is text: most are values, token frames are put together as text.
enum Data {
    Value(Value),
    Json(String),
}

impl From<Value> for Data {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

/// `[message, metadata]` with the metadata's JSON made once per node, not once per token.
fn tuple_json(message: &Value, meta_json: &str) -> Data {
    let message = message.to_string();
    let mut out = String::with_capacity(message.len() + meta_json.len() + 3);
    out.push('[');
    out.push_str(&message);
    out.push(',');
    out.push_str(meta_json);
    out.push(']');
    Data::Json(out)
}

fn debug(step: i64, kind: &str, payload: Value) -> Value {
    json!({"step": step, "timestamp": Timestamp::now(), "type": kind, "payload": payload})
}

fn debug_checkpoint(payload: &Value) -> Value {
    let mut p = payload.clone();
    let reference = |config: &Value| {
        let c = &config["configurable"];
        if c.is_null() {
            return Value::Null;
        }
        json!({"checkpoint_id": c["checkpoint_id"], "thread_id": c["thread_id"],
               "checkpoint_ns": c["checkpoint_ns"]})
    };
    let checkpoint = reference(&payload["config"]);
    let parent = reference(&payload["parent_config"]);
    if let Some(map) = p.as_object_mut() {
        map.insert("checkpoint".into(), checkpoint);
        map.insert("parent_checkpoint".into(), parent);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::events::MessageMeta;

    fn enc(modes: Value, subgraphs: bool) -> Encoder {
        Encoder::new(
            serde_json::from_value::<StreamModes>(modes).unwrap(),
            subgraphs,
            false,
        )
    }

    #[test]
    fn subgraph_events_are_suffixed_or_dropped() {
        let ev = GraphEvent::Values {
            ns: "child:1".into(),
            values: "{}".into(),
        };
        assert!(enc(json!("values"), false).encode(ev.clone()).is_empty());
        assert_eq!(
            enc(json!("values"), true).encode(ev.clone())[0].0,
            "values|child:1"
        );
    }

    fn parsed(frame: &(String, String)) -> Value {
        serde_json::from_str(&frame.1).unwrap()
    }

    #[test]
    fn legacy_messages_send_metadata_once_and_accumulate() {
        let mut e = enc(json!("messages"), false);
        let chunk = |t: &str| GraphEvent::MessageChunk {
            ns: String::new(),
            chunk: json!({"id": "m1", "type": "AIMessageChunk", "content": t}),
            meta: MessageMeta::new(json!({"langgraph_node": "agent"})),
        };
        let first = e.encode(chunk("Hel"));
        assert_eq!(first[0].0, "messages/metadata");
        assert_eq!(
            parsed(&first[0]),
            json!({"m1": {"metadata": {"langgraph_node": "agent"}}})
        );
        assert_eq!(parsed(&first[1])[0]["content"], "Hel");
        assert_eq!(parsed(&first[1])[0]["type"], "ai");
        let second = e.encode(chunk("lo"));
        assert_eq!(second.len(), 1);
        assert_eq!(parsed(&second[0])[0]["content"], "Hello");
    }

    #[test]
    fn tuple_frames_put_together_as_text_are_the_same_json() {
        let chunk = json!({"id": "m1", "type": "AIMessageChunk", "content": "a \"quoted\"\n word"});
        let meta = json!({"langgraph_node": "agent", "langgraph_path": ["__pregel_pull", "agent"]});
        let mut e = enc(json!(["messages-tuple", "messages"]), false);
        let frames = e.encode(GraphEvent::MessageChunk {
            ns: String::new(),
            chunk: chunk.clone(),
            meta: MessageMeta::new(meta.clone()),
        });
        assert_eq!(frames[0].0, "messages", "the tuple frame comes first");
        assert_eq!(frames[0].1, json!([chunk, meta]).to_string());
        assert_eq!(frames[1].0, "messages/metadata");
    }
}
