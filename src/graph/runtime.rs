//! The superstep loop: load the namespace's head, apply input, run the scheduled nodes
//! concurrently, merge their updates, write a checkpoint, repeat until nothing is scheduled.

use super::channels::{ChannelError, writes_from_json, writes_to_json};
use super::events::{EventKind, GraphEvent, MessageMeta, Sink};
use super::interrupts::{Breakpoints, Interrupt, Pause, Resume, ResumeCommand, check_resume};
use super::messages::{is_message, message_id};
use super::{Command, END, Graph, NodeError, START};
use crate::store::retry::patiently;
use crate::store::{Checkpoint, Fence, JsonMap, Store, StoreError, StoredChunks};
use crate::telemetry::metrics;
use crate::time::Timestamp;
use futures::future::join_all;
use serde_json::{Value, json};
use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

/// Everything one run shares across its graphs and subgraphs.
pub struct RunScope {
    pub store: Arc<dyn Store>,
    pub thread_id: Uuid,
    pub run_id: Uuid,
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
    /// Chunks of large strings this run's checkpoints have stored, so they are sent once.
    stored_chunks: StoredChunks,
    /// Per-run values shared by every node of every (sub)graph, one per type.
    locals: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl RunScope {
    pub fn new(
        store: Arc<dyn Store>,
        thread_id: Uuid,
        run_id: Uuid,
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
            stored_chunks: StoredChunks::new(thread_id),
            locals: Mutex::new(HashMap::new()),
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

    /// Records a message id; true the first time it is seen in this run.
    fn first_sighting(&self, id: &str) -> bool {
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
    From(Uuid),
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
    #[error("checkpoint {0} not found")]
    CheckpointNotFound(Uuid),
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
    meta: Arc<std::sync::OnceLock<Arc<MessageMeta>>>,
    /// Answers to this task's interrupts, in the order it asked.
    resume: Arc<Vec<Value>>,
    /// How many times the task has asked so far in this execution.
    asked: Arc<AtomicUsize>,
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
        // A streamed message is not sent again whole when the node returns it.
        if let Some(id) = message_id(&chunk) {
            self.scope.first_sighting(id);
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

fn message_meta(
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

fn join_ns(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}|{child}")
    }
}

/// Rebuilds a state by replaying the writes of a lineage (root first).
pub fn replay(graph: &Graph, lineage: &[Checkpoint]) -> JsonMap {
    let mut state = graph.channels.initial_state();
    for cp in lineage {
        graph
            .channels
            .apply(&mut state, &writes_from_json(&cp.writes));
    }
    state
}

async fn load(
    scope: &RunScope,
    inv: &Invocation<'_>,
) -> Result<(JsonMap, Option<Checkpoint>), RunError> {
    let store = &scope.store;
    let (patience, stop) = (scope.store_patience, &scope.cancel);
    let head = match inv.start {
        Start::Head | Start::Resume => {
            patiently(patience, stop, "load the head", || {
                store.latest_checkpoint(scope.thread_id, &inv.ns)
            })
            .await?
        }
        Start::From(id) => Some(
            patiently(patience, stop, "load a checkpoint", || {
                store.get_checkpoint(scope.thread_id, &inv.ns, id)
            })
            .await?
            .ok_or(RunError::CheckpointNotFound(id))?,
        ),
    };
    let Some(head) = head else {
        return Ok((inv.graph.channels.initial_state(), None));
    };
    let lineage = patiently(patience, stop, "load the lineage", || {
        store.checkpoint_lineage(scope.thread_id, &inv.ns, head.checkpoint_id)
    })
    .await?;
    Ok((replay(inv.graph, &lineage), Some(without_writes(head))))
}

/// The head a running graph keeps: its ids, step, next nodes and tasks. Its writes are in the
/// store and in the state already; holding them would keep a copy of each graph's last step
/// (page summaries, findings, the report) in memory for as long as the graph runs.
fn without_writes(mut cp: Checkpoint) -> Checkpoint {
    cp.writes = Value::Null;
    cp
}

/// Runs one graph invocation to its end, to a pause (an interrupt or a breakpoint), or to an
/// error / cancellation.
pub async fn invoke(scope: &Arc<RunScope>, inv: Invocation<'_>) -> Result<Outcome, RunError> {
    let (mut state, head) = load(scope, &inv).await?;
    let mut writer = CheckpointWriter::new(scope, &inv, head);
    let Some(begun) = writer.begin(&mut state, &inv).await? else {
        return Ok(writer.outcome(state, None));
    };
    let mut next = begun.next;
    // A run that goes on from a pause does not stop again at the breakpoint it paused at.
    let mut continuing = begun.continuing;
    for _ in 0..=scope.recursion_limit {
        if next.is_empty() {
            return Ok(writer.outcome(state, None));
        }
        if scope.cancel.is_cancelled() {
            return Err(RunError::Cancelled);
        }
        if scope.drain.is_cancelled() {
            return Err(RunError::Drained);
        }
        if !std::mem::take(&mut continuing) && inv.breakpoints.stops_before(&next) {
            writer.report_breakpoint();
            return Ok(writer.outcome(state, Some(Pause::Breakpoint)));
        }
        let step = run_step(scope, &inv, &mut writer, &mut state).await?;
        if let Some(pause) = step.pause {
            return Ok(writer.outcome(state, Some(pause)));
        }
        if !step.next.is_empty() && inv.breakpoints.stops_after(&step.ran) {
            writer.report_breakpoint();
            return Ok(writer.outcome(state, Some(Pause::Breakpoint)));
        }
        next = step.next;
    }
    Err(RunError::Recursion(scope.recursion_limit))
}

/// A scheduled node as a checkpoint records it.
struct TaskSpec {
    id: Uuid,
    name: String,
    /// For the `__start__` task: the prepared input writes it applies.
    input: Option<Value>,
    /// Answers to the task's interrupts so far.
    resume: Vec<Value>,
}

fn tasks_of(cp: &Checkpoint) -> Vec<TaskSpec> {
    cp.tasks
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(TaskSpec {
                id: t.get("id")?.as_str()?.parse().ok()?,
                name: t.get("name")?.as_str()?.to_owned(),
                input: t.get("input").cloned(),
                resume: t
                    .get("resume")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// A task entry of a checkpoint (the shape `/state` shows, plus the internal `input` of
/// `__start__` and `resume`, the answers a re-run task reads).
fn task_entry(id: Uuid, name: &str, interrupts: &[Interrupt], resume: &[Value]) -> Value {
    let mut task = json!({"id": id, "name": name, "path": ["__pregel_pull", name],
        "error": null, "interrupts": interrupts, "checkpoint": null, "state": null, "result": null});
    if !resume.is_empty()
        && let Some(map) = task.as_object_mut()
    {
        map.insert("resume".into(), json!(resume));
    }
    task
}

/// Fresh tasks for `next`; `__start__` carries the prepared input.
fn fresh_tasks(next: &[String], start_input: Option<&Value>) -> Vec<Value> {
    next.iter()
        .map(|name| {
            let mut task = task_entry(Uuid::new_v4(), name, &[], &[]);
            if name == START
                && let (Some(input), Some(map)) = (start_input, task.as_object_mut())
            {
                map.insert("input".into(), input.clone());
            }
            task
        })
        .collect()
}

/// The paused head's tasks with `resume`'s answers recorded: an answered interrupt leaves the
/// task's `interrupts` and joins its `resume` list (the task's next interrupt has the next index).
fn answered_tasks(tasks: &Value, resume: Option<&Resume>) -> Vec<Value> {
    let mut out = Vec::new();
    for task in tasks.as_array().into_iter().flatten() {
        let mut task = task.clone();
        let interrupts: Vec<Interrupt> = task
            .get("interrupts")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        let mut answers: Vec<Value> = task
            .get("resume")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut waiting = Vec::new();
        for interrupt in interrupts {
            let answer = match resume {
                Some(Resume::Value(v)) => Some(v.clone()),
                Some(Resume::ById(map)) => map.get(&interrupt.id).cloned(),
                None => None,
            };
            match answer {
                Some(answer) => answers.push(answer),
                None => waiting.push(interrupt),
            }
        }
        if let Some(map) = task.as_object_mut() {
            map.insert("interrupts".into(), json!(waiting));
            if !answers.is_empty() {
                map.insert("resume".into(), json!(answers));
            }
        }
        out.push(task);
    }
    out
}

/// How a step ended: the nodes it ran, what runs next, and whether it paused.
struct StepEnd {
    ran: Vec<String>,
    next: Vec<String>,
    pause: Option<Pause>,
}

async fn run_step(
    scope: &Arc<RunScope>,
    inv: &Invocation<'_>,
    writer: &mut CheckpointWriter<'_>,
    state: &mut JsonMap,
) -> Result<StepEnd, RunError> {
    let step = writer.step() + 1;
    let tasks = writer.head().map(tasks_of).unwrap_or_default();
    if let [task] = &tasks[..]
        && task.name == START
    {
        let next = apply_input(inv, writer, state, task).await?;
        return Ok(StepEnd {
            ran: vec![START.to_owned()],
            next,
            pause: None,
        });
    }
    // The tasks read one shared snapshot; once they are done it is the only owner again, so
    // taking it back costs nothing.
    let shared = Arc::new(std::mem::take(state));
    let runs = tasks
        .iter()
        .map(|task| run_task(scope, inv, task, step, shared.clone()));
    let results = tokio::select! {
        results = join_all(runs) => Some(results),
        () = scope.cancel.cancelled() => None,
    };
    *state = Arc::try_unwrap(shared).unwrap_or_else(|still_shared| (*still_shared).clone());
    let Some(results) = results else {
        return Err(RunError::Cancelled);
    };
    let mut writes = Vec::new();
    let mut next = Vec::new();
    let mut paused = Vec::new();
    for (task, result) in tasks.iter().zip(results) {
        let command = match result {
            Ok(command) => command,
            Err(RunError::Node {
                error: NodeError::Interrupted(interrupt),
                ..
            }) => {
                paused.push((task, interrupt));
                continue;
            }
            Err(error) => return Err(error),
        };
        let prepared = inv.graph.channels.prepare_update(command.update)?;
        report_update(scope, inv, task, step, &prepared);
        let targets = if command.goto.is_empty() {
            inv.graph.successors(&task.name)
        } else {
            command.goto
        };
        for target in targets {
            if target != END && !next.contains(&target) {
                next.push(target);
            }
        }
        writes.extend(prepared);
    }
    if let Some(unknown) = next.iter().find(|n| inv.graph.node(n).is_none()) {
        return Err(RunError::Input(format!("goto to unknown node '{unknown}'")));
    }
    inv.graph.channels.apply(state, &writes);
    let ran = tasks.iter().map(|t| t.name.clone()).collect();
    if paused.is_empty() {
        writer.write("loop", &writes, &next, state, None).await?;
        return Ok(StepEnd {
            ran,
            next,
            pause: None,
        });
    }
    // The interrupted tasks stay scheduled, with their ids (so the interrupt ids hold) and the
    // answers they had; the finished tasks' writes are kept and their successors scheduled.
    let mut tasks: Vec<Value> = paused
        .iter()
        .map(|(task, i)| task_entry(task.id, &task.name, std::slice::from_ref(i), &task.resume))
        .collect();
    let mut scheduled: Vec<String> = paused.iter().map(|(t, _)| t.name.clone()).collect();
    for name in next {
        if !scheduled.contains(&name) {
            tasks.extend(fresh_tasks(std::slice::from_ref(&name), None));
            scheduled.push(name);
        }
    }
    let pause = Pause::Interrupts(paused.into_iter().map(|(_, i)| i).collect());
    writer.report_interrupts(&pause);
    writer
        .write_tasks("loop", &writes, &scheduled, tasks, state, Some(&pause))
        .await?;
    Ok(StepEnd {
        ran,
        next: scheduled,
        pause: Some(pause),
    })
}

/// The `__start__` step: the input written at the `input` checkpoint reaches the state, and
/// the entry nodes are scheduled (as LangGraph does, so checkpoint steps line up with it).
async fn apply_input(
    inv: &Invocation<'_>,
    writer: &mut CheckpointWriter<'_>,
    state: &mut JsonMap,
    task: &TaskSpec,
) -> Result<Vec<String>, RunError> {
    let writes = task
        .input
        .as_ref()
        .map(writes_from_json)
        .unwrap_or_default();
    inv.graph.channels.apply(state, &writes);
    let next = inv.graph.entry().to_vec();
    writer.write("loop", &writes, &next, state, None).await?;
    Ok(next)
}

async fn run_task(
    scope: &Arc<RunScope>,
    inv: &Invocation<'_>,
    task: &TaskSpec,
    step: i64,
    state: Arc<JsonMap>,
) -> Result<Command, RunError> {
    let node = inv.graph.node(&task.name).ok_or_else(|| RunError::Node {
        node: task.name.clone(),
        error: NodeError::new("KeyError", format!("unknown node '{}'", task.name)),
    })?;
    if scope.sink.wants(&inv.ns, EventKind::Tasks) {
        scope.sink.emit(GraphEvent::TaskStart {
            ns: inv.ns.clone(),
            step,
            task: json!({"id": task.id, "name": task.name, "input": *state,
                         "triggers": [format!("branch:to:{}", task.name)]}),
        });
    }
    let ctx = NodeContext {
        scope: scope.clone(),
        graph_ns: inv.ns.clone(),
        node: task.name.clone(),
        task_id: task.id,
        step,
        meta: Arc::default(),
        resume: Arc::new(task.resume.clone()),
        asked: Arc::default(),
    };
    // One span per node: in a trace, the researcher subgraph's nodes nest under the supervisor
    // node that started them.
    let span = tracing::info_span!("node", otel.name = %task.name, graph_id = %inv.graph.id,
        langgraph.node = %task.name, langgraph.checkpoint_ns = %inv.ns, langgraph.step = step);
    let started = std::time::Instant::now();
    let result = node(state, ctx).instrument(span).await;
    metrics::node_finished(&inv.graph.id, &task.name, started.elapsed());
    if let Err(error) = &result
        && scope.sink.wants(&inv.ns, EventKind::Tasks)
    {
        let (error, interrupts) = match error {
            NodeError::Interrupted(i) => (Value::Null, json!([i.wire()])),
            other => (json!(other.to_string()), json!([])),
        };
        scope.sink.emit(GraphEvent::TaskResult {
            ns: inv.ns.clone(),
            step,
            task: json!({"id": task.id, "name": task.name, "error": error,
                         "result": null, "interrupts": interrupts}),
        });
    }
    result.map_err(|error| match error {
        NodeError::Cancelled => RunError::Cancelled,
        error => RunError::Node {
            node: task.name.clone(),
            error,
        },
    })
}

fn report_update(
    scope: &RunScope,
    inv: &Invocation<'_>,
    task: &TaskSpec,
    step: i64,
    writes: &[(String, Value)],
) {
    let sink = &scope.sink;
    if sink.wants(&inv.ns, EventKind::Messages) {
        let meta = message_meta(scope, &inv.ns, &task.name, task.id, step);
        for message in writes.iter().flat_map(|(_, v)| messages_in(v)) {
            if message_id(message).is_some_and(|id| scope.first_sighting(id)) {
                sink.emit(GraphEvent::Message {
                    ns: inv.ns.clone(),
                    message: message.clone(),
                    meta: meta.clone(),
                });
            }
        }
    }
    let wants_updates = sink.wants(&inv.ns, EventKind::Updates);
    let wants_tasks = sink.wants(&inv.ns, EventKind::Tasks);
    if !wants_updates && !wants_tasks {
        return;
    }
    let update = Value::Object(writes.iter().cloned().collect());
    if wants_updates {
        sink.emit(GraphEvent::Updates {
            ns: inv.ns.clone(),
            node: task.name.clone(),
            update: update.clone(),
        });
    }
    if wants_tasks {
        sink.emit(GraphEvent::TaskResult {
            ns: inv.ns.clone(),
            step,
            task: json!({"id": task.id, "name": task.name, "error": null, "result": update, "interrupts": []}),
        });
    }
}

/// Messages anywhere at the top of a written value (a message, or a list of them).
fn messages_in(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) => items.iter().filter(|v| is_message(v)).collect(),
        v if is_message(v) => vec![v],
        _ => Vec::new(),
    }
}

/// Writes the checkpoints of one invocation and reports them.
struct CheckpointWriter<'a> {
    scope: &'a Arc<RunScope>,
    ns: String,
    parents: JsonMap,
    graph: &'a Graph,
    head: Option<Checkpoint>,
}

impl<'a> CheckpointWriter<'a> {
    fn new(scope: &'a Arc<RunScope>, inv: &Invocation<'a>, head: Option<Checkpoint>) -> Self {
        Self {
            scope,
            ns: inv.ns.clone(),
            parents: inv.parents.clone(),
            graph: inv.graph,
            head,
        }
    }

    fn head(&self) -> Option<&Checkpoint> {
        self.head.as_ref()
    }

    fn step(&self) -> i64 {
        self.head.as_ref().map_or(-2, |h| h.step)
    }

    fn outcome(self, values: JsonMap, pause: Option<Pause>) -> Outcome {
        Outcome {
            values,
            checkpoint: self.head,
            pause,
        }
    }

    /// Applies the input or the command (or forks / continues) and returns the nodes to run,
    /// or `None` when there is nothing to do.
    async fn begin(
        &mut self,
        state: &mut JsonMap,
        inv: &Invocation<'_>,
    ) -> Result<Option<Begun>, RunError> {
        let (input, start) = (inv.input.clone(), inv.start);
        let resuming = start == Start::Resume && self.head.is_some();
        let continued = |next: Vec<String>| {
            Some(Begun {
                next,
                continuing: true,
            })
        };
        let begun = match (input, start) {
            // Going on where an earlier attempt (or a parent's earlier run) stopped: it had not
            // paused there, so a breakpoint at that point still applies.
            (_, Start::Resume) if resuming => match &self.head {
                Some(head) if !head.next.is_empty() => {
                    self.report_values(state, None);
                    Some(Begun {
                        next: head.next.clone(),
                        continuing: false,
                    })
                }
                _ => None,
            },
            // A command replaces the input (LangGraph ignores `input` next to a `command`).
            _ if inv.command.is_some() => {
                let Some(command) = &inv.command else {
                    return Ok(None);
                };
                continued(self.apply_command(state, command).await?)
            }
            (Some(input), _) => {
                let Value::Object(update) = input else {
                    return Err(RunError::Input(format!("expected an object, got {input}")));
                };
                let writes = self.graph.channels.prepare_update(update)?;
                let next = vec![START.to_owned()];
                let input = writes_to_json(&writes);
                self.write("input", &[], &next, state, Some(input)).await?;
                Some(Begun {
                    next,
                    continuing: false,
                })
            }
            // A replay: the pending nodes get new task ids, so their subgraphs (whose
            // namespaces derive from the task id) run afresh instead of resuming the old ones.
            (None, Start::From(_)) => {
                let head = self.head.as_ref();
                let next = head.map(|h| h.next.clone()).unwrap_or_default();
                let pending_input =
                    head.and_then(|h| tasks_of(h).into_iter().find_map(|t| t.input));
                self.write("fork", &[], &next, state, pending_input).await?;
                continued(next)
            }
            (None, Start::Head | Start::Resume) => match &self.head {
                Some(head) if !head.next.is_empty() => {
                    self.report_values(state, None);
                    continued(head.next.clone())
                }
                _ => None,
            },
        };
        Ok(begun)
    }

    /// Writes a checkpoint that records a command: its update applied, its answers attached to
    /// the interrupted tasks, and its `goto` (or the pending nodes) scheduled.
    async fn apply_command(
        &mut self,
        state: &mut JsonMap,
        command: &ResumeCommand,
    ) -> Result<Vec<String>, RunError> {
        let (head_next, head_tasks) = self
            .head
            .as_ref()
            .map(|h| (h.next.clone(), h.tasks.clone()))
            .unwrap_or_default();
        if let Some(resume) = &command.resume {
            check_resume(resume, &head_next, &head_tasks)
                .map_err(|e| RunError::Input(e.to_string()))?;
        }
        let writes = match &command.update {
            Some(update) => self.graph.channels.prepare_update(update.clone())?,
            None => Vec::new(),
        };
        self.graph.channels.apply(state, &writes);
        let (next, tasks) = if command.goto.is_empty() {
            let tasks = answered_tasks(&head_tasks, command.resume.as_ref());
            (head_next, tasks)
        } else {
            let next: Vec<String> = command.goto.iter().filter(|n| *n != END).cloned().collect();
            let tasks = fresh_tasks(&next, None);
            (next, tasks)
        };
        self.write_tasks("input", &writes, &next, tasks, state, None)
            .await?;
        Ok(next)
    }

    async fn write(
        &mut self,
        source: &str,
        writes: &[(String, Value)],
        next: &[String],
        state: &JsonMap,
        start_input: Option<Value>,
    ) -> Result<(), RunError> {
        let tasks = fresh_tasks(next, start_input.as_ref());
        self.write_tasks(source, writes, next, tasks, state, None)
            .await
    }

    /// Stores a checkpoint with the given tasks and reports it; a pause's interrupts go into
    /// the `values` event that follows (`__interrupt__`), as LangGraph sends them.
    async fn write_tasks(
        &mut self,
        source: &str,
        writes: &[(String, Value)],
        next: &[String],
        tasks: Vec<Value>,
        state: &JsonMap,
        pause: Option<&Pause>,
    ) -> Result<(), RunError> {
        let step = if source == "input" && self.head.is_none() {
            -1
        } else {
            self.step() + 1
        };
        let mut metadata = self.scope.metadata.clone();
        metadata.insert("source".into(), json!(source));
        metadata.insert("step".into(), json!(step));
        metadata.insert("parents".into(), Value::Object(self.parents.clone()));
        metadata.insert("run_id".into(), json!(self.scope.run_id));
        metadata.insert("thread_id".into(), json!(self.scope.thread_id));
        let cp = Checkpoint {
            thread_id: self.scope.thread_id,
            checkpoint_ns: self.ns.clone(),
            checkpoint_id: crate::ids::checkpoint_id(),
            parent_checkpoint_id: self.head.as_ref().map(|h| h.checkpoint_id),
            run_id: Some(self.scope.run_id),
            step,
            source: source.to_owned(),
            metadata,
            writes: writes_to_json(writes),
            next: next.to_vec(),
            tasks: Value::Array(tasks),
            created_at: Timestamp::now(),
        };
        let scope = self.scope;
        patiently(
            scope.store_patience,
            &scope.cancel,
            "write a checkpoint",
            || {
                scope
                    .store
                    .put_checkpoint(&cp, Some(&scope.stored_chunks), scope.fence.as_ref())
            },
        )
        .await?;
        let sink = &self.scope.sink;
        let payload = sink
            .wants(&self.ns, EventKind::Checkpoints)
            .then(|| checkpoint_payload(&cp, self.head.as_ref(), state));
        self.head = Some(without_writes(cp));
        // A run's input checkpoint still holds the previous state; clients first see values
        // once the input is applied. A command's update is applied at once.
        if source != "input" || !writes.is_empty() {
            self.report_values(state, pause);
        }
        if let Some(payload) = payload {
            sink.emit(GraphEvent::Checkpoint {
                ns: self.ns.clone(),
                step,
                payload,
            });
        }
        Ok(())
    }

    fn report_values(&self, state: &JsonMap, pause: Option<&Pause>) {
        if !self.scope.sink.wants(&self.ns, EventKind::Values) {
            return;
        }
        let mut values = state.clone();
        if let Some(pause @ Pause::Interrupts(_)) = pause {
            values.insert("__interrupt__".into(), pause.wire());
        }
        self.scope.sink.emit(GraphEvent::Values {
            ns: self.ns.clone(),
            values: Value::Object(values),
        });
    }

    /// `updates` carries a pause as `{"__interrupt__": [...]}` (empty for a breakpoint).
    fn report_interrupts(&self, pause: &Pause) {
        if self.scope.sink.wants(&self.ns, EventKind::Updates) {
            self.scope.sink.emit(GraphEvent::Updates {
                ns: self.ns.clone(),
                node: "__interrupt__".into(),
                update: pause.wire(),
            });
        }
    }

    fn report_breakpoint(&self) {
        self.report_interrupts(&Pause::Breakpoint);
    }
}

/// Where `begin` left an invocation.
struct Begun {
    next: Vec<String>,
    /// Going on from a checkpoint (not from new input): its breakpoint was already reached.
    continuing: bool,
}

/// The `checkpoints` stream payload for a checkpoint.
fn checkpoint_payload(cp: &Checkpoint, parent: Option<&Checkpoint>, state: &JsonMap) -> Value {
    let config = |c: &Checkpoint| {
        json!({"configurable": {"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns,
                                "checkpoint_id": c.checkpoint_id}})
    };
    let tasks: Vec<Value> = cp
        .tasks
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let interrupts = t.get("interrupts").cloned().unwrap_or_else(|| json!([]));
            json!({"id": t["id"], "name": t["name"], "interrupts": interrupts, "state": null})
        })
        .collect();
    json!({
        "config": config(cp),
        "parent_config": parent.map(config),
        "values": state,
        "metadata": cp.metadata,
        "next": cp.next,
        "tasks": tasks,
    })
}

/// Writes a checkpoint as if `as_node` had returned `values` (`POST /threads/{id}/state`).
/// Returns the new checkpoint, without its writes.
pub async fn update_state(
    scope: &Arc<RunScope>,
    graph: &Graph,
    start: Start,
    values: Value,
    as_node: Option<&str>,
) -> Result<Checkpoint, RunError> {
    let inv = Invocation {
        graph,
        ns: String::new(),
        input: None,
        start,
        parents: JsonMap::new(),
        command: None,
        breakpoints: Breakpoints::default(),
    };
    let (mut state, head) = load(scope, &inv).await?;
    let Value::Object(update) = values else {
        return Err(RunError::Input(format!("expected an object, got {values}")));
    };
    let writes = graph.channels.prepare_update(update)?;
    graph.channels.apply(&mut state, &writes);
    let next = match as_node {
        Some(node) if node != START => graph.successors(node),
        _ => head.as_ref().map(|h| h.next.clone()).unwrap_or_default(),
    };
    let next: Vec<String> = next.into_iter().filter(|n| n != END).collect();
    let mut writer = CheckpointWriter::new(scope, &inv, head);
    writer.write("update", &writes, &next, &state, None).await?;
    writer
        .head
        .ok_or(RunError::Input("no checkpoint was written".into()))
}
