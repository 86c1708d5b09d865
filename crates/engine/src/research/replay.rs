//! Research calls a redone step replays instead of paying for again (the records are kept by
//! `graph::runtime::calls`): the keys model and tool calls are found under, and the event that
//! tells clients a call was replayed. A model call is keyed by what shapes its answer (model,
//! messages, tools, output schema, limit), an MCP tool call by its id in the model's turn. A
//! search engine query is not recorded: its pages would make the records larger than the
//! run's whole state, and a query costs little next to the summaries of its pages, which are
//! recorded (keyed by the page's content, so they replay when the engine returns it again).

use super::events::ResearchEvent;
use crate::graph::NodeContext;
use crate::llm::ChatRequest;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::hash::{DefaultHasher, Hasher};

/// Feeds serialized JSON straight into a hasher (no copy of the request is built).
struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A hash of everything that shapes a model's answer to `req` (not message ids). `DefaultHasher`
/// is the same in every process of one build; after an upgrade a record is just not found.
fn digest(req: &ChatRequest) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(req.model.to_string().as_bytes());
    let mut out = HashWriter(&mut hasher);
    // Serializing strings and JSON cannot fail. A model's messages carry no ids (a prompt
    // built afresh would get new ones), so the same prompt has the same key.
    for message in &req.messages {
        let _ = serde_json::to_writer(&mut out, message);
        let _ = std::io::Write::write(&mut out, b"\n");
    }
    let _ = serde_json::to_writer(&mut out, &req.tools);
    if let Some(schema) = &req.response_schema {
        let _ = serde_json::to_writer(&mut out, &schema.schema);
    }
    let shape = format!(
        "{:?}|{:?}|{}|{}",
        req.native_tools, req.tool_choice, req.parallel_tool_calls, req.max_tokens
    );
    hasher.write(shape.as_bytes());
    hasher.finish()
}

/// The key of the node's next model call `req`.
pub fn model_call_key(ctx: &NodeContext, req: &ChatRequest) -> String {
    ctx.call_key(&format!("model:{:016x}", digest(req)))
}

/// The key of the node's tool call `call_id`.
pub fn tool_call_key(ctx: &NodeContext, call_id: &str) -> String {
    ctx.call_key(&format!("tool:{call_id}"))
}

/// The recorded result of call `key`, when this step had finished it before being cut off;
/// clients are told it was replayed (`kind`: "model" or "tool", `name`: which).
pub async fn recall<T: DeserializeOwned>(
    ctx: &NodeContext,
    key: &str,
    kind: &str,
    name: &str,
) -> Option<T> {
    let recorded = ctx.recall(key).await?;
    let value = serde_json::from_value(recorded).ok()?;
    ResearchEvent::Replayed {
        node: ctx.node.clone(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
    .send(ctx);
    Some(value)
}

/// Records a finished call for a redo of this step.
pub fn record<T: Serialize + ?Sized>(ctx: &NodeContext, key: &str, result: &T) {
    ctx.record_call(key, result);
}
