//! What a node can use while it runs: its config, cancellation, interrupts, custom events,
//! message chunks and subgraphs.

use crate::graph::events::{EventKind, GraphEvent, MessageMeta};
use crate::graph::interrupts::{Breakpoints, Interrupt};
use crate::graph::messages::message_id;
use crate::graph::{Graph, NodeError};
use crate::store::{JsonMap, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Invocation, RunError, RunScope, Start, invoke};

/// What a node can use while it runs.
#[derive(Clone)]
pub struct NodeContext {
    pub scope: Arc<RunScope>,
    /// Namespace of the graph this node belongs to.
    pub graph_ns: String,
    pub node: String,
    pub task_id: Uuid,
    pub step: i64,
    /// Built once per task: every streamed token carries it.
    pub(super) meta: Arc<std::sync::OnceLock<Arc<MessageMeta>>>,
    /// Answers to this task's interrupts, in the order it asked.
    pub(super) resume: Arc<Vec<Value>>,
    /// How many times the task has asked so far in this execution.
    pub(super) asked: Arc<AtomicUsize>,
    /// The task's finished calls (see `calls.rs`).
    pub(super) calls: Arc<super::calls::TaskCalls>,
}

impl NodeContext {
    /// The run's config (`configurable` etc.).
    pub fn config(&self) -> &Value {
        &self.scope.config
    }

    /// Cancelled when the run must stop.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.scope.cancel
    }

    /// This node's own namespace, under which its subgraphs and streamed tokens appear.
    pub fn node_ns(&self) -> String {
        join_ns(&self.graph_ns, &format!("{}:{}", self.node, self.task_id))
    }

    /// Metadata attached to messages this node streams.
    pub fn message_meta(&self) -> Arc<MessageMeta> {
        let build = || {
            message_meta(
                &self.scope,
                &self.graph_ns,
                &self.node,
                self.task_id,
                self.step,
            )
        };
        self.meta.get_or_init(build).clone()
    }

    /// Asks a person. Without an answer the run pauses here (the thread is `interrupted`,
    /// `value` is what clients show); once a run resumes it with an answer, this node runs
    /// again from its start and the same call returns the answer. Answers are matched to calls
    /// by order, so a node must ask its questions in the same order every time.
    pub fn interrupt(&self, value: Value) -> Result<Value, NodeError> {
        if !self.graph_ns.is_empty() {
            return Err(NodeError::new(
                "InvalidUpdateError",
                format!(
                    "node '{}' asked for input from inside a subgraph; only the top-level \
                     graph's nodes may interrupt",
                    self.node
                ),
            ));
        }
        let index = self.asked.fetch_add(1, Ordering::SeqCst);
        match self.resume.get(index) {
            Some(answer) => Ok(answer.clone()),
            None => Err(NodeError::Interrupted(Interrupt::new(
                self.task_id,
                index,
                value,
            ))),
        }
    }

    /// The key of this task's next call described by `what` (what the call is, e.g. a hash of
    /// its request): the n-th identical call of the task gets the n-th key.
    pub fn call_key(&self, what: &str) -> String {
        self.calls.key(what)
    }

    /// What call `key` returned when an earlier execution of this task finished it before its
    /// step was checkpointed (`None`: make the call).
    pub async fn recall(&self, key: &str) -> Option<Value> {
        self.calls.recall(&self.scope, self.task_id, key).await
    }

    /// Keeps a finished call's result until this task's step is checkpointed, so a redo of the
    /// step replays it instead of calling again.
    pub fn record_call<T: serde::Serialize + ?Sized>(&self, key: &str, result: &T) {
        super::calls::record_for(&self.scope, self.task_id, key, result);
    }

    /// The task of the top-level graph this node runs under (its own, in the top-level graph):
    /// a subgraph's steps are checkpointed, but the top-level step that started them is not
    /// until they are all done.
    pub fn root_task(&self) -> Uuid {
        self.graph_ns
            .split('|')
            .next()
            .and_then(|segment| segment.rsplit(':').next())
            .and_then(|id| id.parse().ok())
            .unwrap_or(self.task_id)
    }

    /// Records something spent (a finished model call's tokens) under the top-level task, until
    /// that task's step is checkpointed: a redo of the step reads it back with
    /// `recorded_spend`, since what the step's subgraphs checkpointed is not done again.
    pub fn record_spend<T: serde::Serialize + ?Sized>(&self, entry: &T) {
        let key = format!("spend:{}", Uuid::new_v4());
        super::calls::record_for(&self.scope, self.root_task(), &key, entry);
    }

    /// What earlier executions of this top-level task recorded as spent (`record_spend`), once
    /// per execution; empty for a task this execution created, and from a subgraph's node.
    pub async fn recorded_spend(&self) -> Vec<Value> {
        if !self.graph_ns.is_empty() {
            return Vec::new();
        }
        super::calls::spent_before(&self.scope, self.task_id).await
    }

    /// Sends a `custom` stream event.
    pub fn emit_custom(&self, data: Value) {
        self.scope.sink.emit(GraphEvent::Custom {
            ns: self.graph_ns.clone(),
            data,
        });
    }

    /// Sends a `custom` event at the root of the run's stream, whatever graph this node is in:
    /// run-level progress (cost, failures) that clients see without `stream_subgraphs`.
    pub fn emit_run_custom(&self, data: Value) {
        self.scope.sink.emit(GraphEvent::Custom {
            ns: String::new(),
            data,
        });
    }

    /// Streams one token chunk (`type: AIMessageChunk`, same id on every chunk).
    /// Whether anyone streams this node's token chunks (callers can skip building them).
    pub fn wants_chunks(&self) -> bool {
        self.scope.sink.wants(&self.graph_ns, EventKind::Messages)
    }

    pub fn emit_chunk(&self, chunk: Value) {
        // A streamed message is not sent again whole when the node returns it, unless what
        // the node returns differs from what was streamed.
        if let Some(id) = message_id(&chunk) {
            self.scope.first_sighting(id);
            self.scope.record_streamed(id, &chunk);
        }
        self.scope.sink.emit(GraphEvent::MessageChunk {
            ns: self.graph_ns.clone(),
            chunk,
            meta: self.message_meta(),
        });
    }

    /// Runs `graph` as this node's subgraph (namespace `node:task_id`) and returns its final state.
    pub async fn subgraph(&self, graph: &Graph, input: Value) -> Result<JsonMap, NodeError> {
        self.run_child(graph, self.node_ns(), input).await
    }

    /// Runs `graph` under the namespace `name:<uuid>` below this node's graph, so several
    /// subgraphs can run side by side from one node. The uuid derives from this task and `key`
    /// (which must differ between the node's subgraphs), so a task re-run after its run was
    /// resumed finds each subgraph's checkpoints again.
    pub async fn subgraph_keyed(
        &self,
        name: &str,
        key: &str,
        graph: &Graph,
        input: Value,
    ) -> Result<JsonMap, NodeError> {
        let id = Uuid::new_v5(&self.task_id, key.as_bytes());
        let ns = join_ns(&self.node_ns(), &format!("{name}:{id}"));
        self.run_child(graph, ns, input).await
    }

    async fn run_child(
        &self,
        graph: &Graph,
        ns: String,
        input: Value,
    ) -> Result<JsonMap, NodeError> {
        let inv = Invocation {
            graph,
            ns,
            input: Some(input),
            start: Start::Resume,
            parents: JsonMap::new(),
            command: None,
            breakpoints: Breakpoints::default(),
        };
        match Box::pin(invoke(&self.scope, inv)).await {
            Ok(outcome) => Ok(outcome.values),
            Err(RunError::Node { error, .. }) => Err(error),
            // Stopping is not the subgraph failing: the parent stops too, without recording a
            // failure into its state.
            Err(
                RunError::Cancelled | RunError::Drained | RunError::Store(StoreError::LeaseLost(_)),
            ) => Err(NodeError::Cancelled),
            Err(other) => {
                let (kind, message) = other.describe();
                Err(NodeError::new(kind, message))
            }
        }
    }
}

pub(super) fn message_meta(
    scope: &RunScope,
    graph_ns: &str,
    node: &str,
    task_id: Uuid,
    step: i64,
) -> Arc<MessageMeta> {
    let ns = join_ns(graph_ns, &format!("{node}:{task_id}"));
    let mut meta = scope.metadata.clone();
    for (k, v) in [
        ("thread_id", json!(scope.thread_id)),
        ("run_id", json!(scope.run_id)),
        ("langgraph_step", json!(step)),
        ("langgraph_node", json!(node)),
        ("langgraph_triggers", json!([format!("branch:to:{node}")])),
        ("langgraph_path", json!(["__pregel_pull", node])),
        ("langgraph_checkpoint_ns", json!(ns)),
        ("checkpoint_ns", json!(ns)),
    ] {
        meta.insert(k.to_owned(), v);
    }
    MessageMeta::new(Value::Object(meta))
}

pub(super) fn join_ns(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}|{child}")
    }
}
