//! What the graph runtime reports while a graph runs. They live here, below the runtime, because
//! the stream layer turns them into SSE frames for the modes a client asked for; the runtime
//! itself does not know about modes or wire names.

use serde_json::Value;
use std::sync::Arc;

/// The metadata of a node's streamed messages, with its JSON text made once: it goes on every
/// token frame of the node.
#[derive(Debug)]
pub struct MessageMeta {
    pub value: Value,
    pub json: String,
}

impl MessageMeta {
    pub fn new(value: Value) -> Arc<Self> {
        let json = value.to_string();
        Arc::new(Self { value, json })
    }
}

/// One observation from a running graph. `ns` is the checkpoint namespace of the graph that
/// produced it (`""` for the root graph).
#[derive(Clone, Debug)]
pub enum GraphEvent {
    /// The full state after the input was applied or after a step, as JSON text: written
    /// straight from the state, which is never copied for it.
    Values { ns: String, values: String },
    /// One node's update after it finished.
    Updates {
        ns: String,
        node: String,
        update: Value,
    },
    /// A whole message found in a node's update (not seen before in this run).
    Message {
        ns: String,
        message: Value,
        meta: Arc<MessageMeta>,
    },
    /// One streamed token chunk of a model call (`type: AIMessageChunk`).
    MessageChunk {
        ns: String,
        chunk: Value,
        meta: Arc<MessageMeta>,
    },
    /// Anything a node wrote with its stream writer.
    Custom { ns: String, data: Value },
    /// A node started.
    TaskStart { ns: String, step: i64, task: Value },
    /// A node finished (successfully or not).
    TaskResult { ns: String, step: i64, task: Value },
    /// A checkpoint was written (payload in the `checkpoints` stream shape).
    Checkpoint {
        ns: String,
        step: i64,
        payload: Value,
    },
}

impl GraphEvent {
    /// The namespace of the graph that produced the event.
    pub fn ns(&self) -> &str {
        match self {
            Self::Values { ns, .. }
            | Self::Updates { ns, .. }
            | Self::Message { ns, .. }
            | Self::MessageChunk { ns, .. }
            | Self::Custom { ns, .. }
            | Self::TaskStart { ns, .. }
            | Self::TaskResult { ns, .. }
            | Self::Checkpoint { ns, .. } => ns,
        }
    }
}

/// The kinds of event a sink may or may not want.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Values,
    Updates,
    Messages,
    Custom,
    Tasks,
    Checkpoints,
}

/// Receives events in the order they happen. Implementations must be cheap and must not block:
/// they are called from inside the graph's steps.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: GraphEvent);

    /// Whether events of `kind` from namespace `ns` would be used. The runtime skips building
    /// unwanted ones: several of them carry a copy of the whole state.
    fn wants(&self, _ns: &str, _kind: EventKind) -> bool {
        true
    }
}

/// A sink that drops everything (stateless state updates, tests).
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: GraphEvent) {}

    fn wants(&self, _ns: &str, _kind: EventKind) -> bool {
        false
    }
}

/// Shared handle to a sink.
pub type Sink = Arc<dyn EventSink>;
