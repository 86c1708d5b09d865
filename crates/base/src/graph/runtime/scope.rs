//! What one run shares across its graphs and subgraphs (`RunScope`), where an invocation
//! starts and what it returns, and the errors that end a run.

use crate::graph::channels::ChannelError;
use crate::graph::events::Sink;
use crate::graph::interrupts::{Breakpoints, Pause, ResumeCommand};
use crate::graph::{Graph, NodeError};
use crate::ids::{CheckpointId, RunId, ThreadId};
use crate::store::{Checkpoint, CheckpointStore, Fence, JsonMap, StoreError, StoredChunks};
use serde_json::Value;
use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Everything one run shares across its graphs and subgraphs.
pub struct RunScope {
    pub store: Arc<dyn CheckpointStore>,
    pub thread_id: ThreadId,
    /// `None` for a state update made through the API: no run makes it.
    pub run_id: Option<RunId>,
    /// The run's config (`configurable`, `recursion_limit`, …), passed to every node.
    pub config: Value,
    /// Merged into every checkpoint's metadata (graph_id, assistant_id, user metadata, …).
    pub metadata: JsonMap,
    pub sink: Sink,
    pub cancel: CancellationToken,
    /// Fired when the process shuts down: every graph of the run stops before its next step,
    /// so what is done is checkpointed and another worker resumes the rest.
    pub drain: CancellationToken,
    /// The run's claim; its checkpoints are written only while it holds.
    pub fence: Option<Fence>,
    /// How long store calls are retried while the database is away.
    pub store_patience: Duration,
    /// Supersteps allowed per graph invocation.
    pub recursion_limit: i64,
    seen_messages: Mutex<HashSet<String>>,
    /// The text streamed so far under each message id, to tell whether the message a node
    /// then writes is what clients were streamed.
    streamed: Mutex<HashMap<String, String>>,
    /// Chunks of large strings this run's checkpoints have stored, so they are sent once.
    pub(super) stored_chunks: StoredChunks,
    /// Per-run values shared by every node of every (sub)graph, one per type.
    locals: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Which tasks this execution created, and which have finished calls on record.
    pub(super) calls: super::calls::CallLedger,
}

impl RunScope {
    pub fn new(
        store: Arc<dyn CheckpointStore>,
        thread_id: ThreadId,
        run_id: Option<RunId>,
        config: Value,
        metadata: JsonMap,
        sink: Sink,
        cancel: CancellationToken,
    ) -> Self {
        let recursion_limit = config
            .get("recursion_limit")
            .and_then(Value::as_i64)
            .unwrap_or(25);
        Self {
            store,
            thread_id,
            run_id,
            config,
            metadata,
            sink,
            cancel,
            drain: CancellationToken::new(),
            fence: None,
            store_patience: Duration::ZERO,
            recursion_limit,
            seen_messages: Mutex::new(HashSet::new()),
            streamed: Mutex::new(HashMap::new()),
            stored_chunks: StoredChunks::new(thread_id),
            locals: Mutex::new(HashMap::new()),
            calls: super::calls::CallLedger::default(),
        }
    }

    /// A scope for a claimed run: checkpoints fenced by its lease, a drain signal, and store
    /// calls retried for `store_patience` while the database is away.
    pub fn leased(
        mut self,
        fence: Fence,
        drain: CancellationToken,
        store_patience: Duration,
    ) -> Self {
        self.fence = Some(fence);
        self.drain = drain;
        self.store_patience = store_patience;
        self
    }

    /// The run's shared value of type `T`, created on first use (e.g. a cost meter).
    pub fn local<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut locals = match self.locals.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let entry = locals
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match entry.clone().downcast::<T>() {
            Ok(value) => value,
            // The map is keyed by TypeId, so the downcast cannot fail; stay total anyway.
            Err(_) => Arc::new(T::default()),
        }
    }

    /// Adds a streamed chunk's text to what its message's clients were shown.
    pub(super) fn record_streamed(&self, id: &str, chunk: &Value) {
        let Some(piece) = chunk.get("content").and_then(Value::as_str) else {
            return;
        };
        let mut streamed = match self.streamed.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        match streamed.get_mut(id) {
            Some(text) => text.push_str(piece),
            None => {
                streamed.insert(id.to_owned(), piece.to_owned());
            }
        }
    }

    /// Whether `message` (as a node writes it) was streamed under its id with other text: a
    /// report the citation check changed after its tokens went out. Clients are then sent it
    /// whole, so what they show at the end is what the thread keeps.
    /// Once told, what clients hold is the written text: the same message written again is
    /// not sent again.
    pub(super) fn streamed_differs(&self, id: &str, message: &Value) -> bool {
        let mut streamed = match self.streamed.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let Some(written) = message.get("content").and_then(Value::as_str) else {
            return false;
        };
        match streamed.get_mut(id) {
            Some(text) if text != written => {
                written.clone_into(text);
                true
            }
            _ => false,
        }
    }

    /// Records a message id; true the first time it is seen in this run.
    pub(super) fn first_sighting(&self, id: &str) -> bool {
        let mut seen = match self.seen_messages.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Every token of a streamed message asks: answer repeats without allocating.
        !seen.contains(id) && seen.insert(id.to_owned())
    }
}

/// Where an invocation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The namespace's latest checkpoint (or an empty state).
    Head,
    /// A given checkpoint; with no input this forks it and reruns its pending nodes.
    From(CheckpointId),
    /// Where a resumed run left off: the namespace's head if it has one — a run taken over
    /// after its worker died, or a subgraph whose task is re-run — so go on from there (or
    /// return the final state when it had finished); otherwise the input.
    Resume,
}

/// One call of a graph.
pub struct Invocation<'a> {
    pub graph: &'a Graph,
    pub ns: String,
    /// Written through the input channels; `None` continues from the checkpoint.
    pub input: Option<Value>,
    pub start: Start,
    /// For subgraphs: the parent namespace and its checkpoint, recorded in metadata.
    pub parents: JsonMap,
    /// Answers, an update or a jump applied to the checkpoint before going on (with no input).
    pub command: Option<ResumeCommand>,
    /// Where the invocation pauses for a person (root graph only).
    pub breakpoints: Breakpoints,
}

/// How an invocation ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub values: JsonMap,
    /// The last checkpoint written or loaded (`None` only if nothing ever was), without its
    /// writes (read them from the store).
    pub checkpoint: Option<Checkpoint>,
    /// Set when the graph stopped to wait for a person; its checkpoint's `next` says what
    /// runs when it goes on.
    pub pause: Option<Pause>,
}

/// Why an invocation stopped early.
/// What a run has spent so far (tokens, estimated USD), as its graph reports it into the run's
/// scope (`local::<Spent>()`): the runner records it against the run's owner without knowing
/// which graph counted it or how.
#[derive(Debug, Default)]
pub struct Spent(Mutex<(u64, f64)>);

impl Spent {
    /// The run's totals so far (replacing what was reported before).
    pub fn report(&self, tokens: u64, usd: f64) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (tokens, usd);
    }

    pub fn get(&self) -> (u64, f64) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("node '{node}' failed: {error}")]
    Node { node: String, error: NodeError },
    #[error("run cancelled")]
    Cancelled,
    /// The process is shutting down; the run stopped at a step boundary for another worker.
    #[error("run handed back: the server is shutting down")]
    Drained,
    #[error("Recursion limit of {0} reached without hitting a stop condition")]
    Recursion(i64),
    #[error("invalid input: {0}")]
    Input(String),
    /// The graph could not prepare the run (its settings no longer hold: the operator's
    /// configuration changed since the run was accepted).
    #[error("{0}")]
    Prepare(String),
    #[error("checkpoint {0} not found")]
    CheckpointNotFound(CheckpointId),
    /// The run ran past `[limits] run_deadline_secs`.
    #[error("the run was stopped after {0} seconds, its deadline ([limits] run_deadline_secs)")]
    Deadline(u64),
    /// Provider keys the run brought are held in memory only, and this process has none.
    #[error(
        "the provider keys sent with this run are kept only in the memory of the server that \
         accepted it, and it no longer runs it (it restarted, or another replica took the run \
         over): start the run again"
    )]
    KeysUnavailable,
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RunError {
    /// The `(error type, message)` pair clients see.
    pub fn describe(&self) -> (String, String) {
        match self {
            Self::Node {
                error: NodeError::Failed { kind, message },
                ..
            } => (kind.clone(), message.clone()),
            Self::Recursion(_) => ("GraphRecursionError".into(), self.to_string()),
            Self::Prepare(_) => ("ConfigurationError".into(), self.to_string()),
            Self::Input(_) | Self::Channel(_) => ("InvalidUpdateError".into(), self.to_string()),
            Self::CheckpointNotFound(_) => ("EmptyInputError".into(), self.to_string()),
            Self::Drained => ("CancelledError".into(), self.to_string()),
            Self::Deadline(_) => ("RunDeadlineExceeded".into(), self.to_string()),
            Self::KeysUnavailable => ("RunKeysUnavailable".into(), self.to_string()),
            Self::Cancelled
            | Self::Node {
                error: NodeError::Cancelled,
                ..
            } => ("CancelledError".into(), "run cancelled".into()),
            Self::Store(_) => ("InternalError".into(), "An internal error occurred".into()),
            Self::Node {
                error: NodeError::Interrupted(_),
                node,
            } => (
                "GraphInterrupt".into(),
                format!("node '{node}' is waiting for input"),
            ),
        }
    }
}
