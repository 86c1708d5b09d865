//! The checkpoint writer: the checkpoints of one invocation, their task lists and the
//! `values`, `checkpoints` and interrupt events that report them; and `update_state`, which
//! writes one as if a node had returned the given values.

use crate::graph::channels::writes_to_json;
use crate::graph::events::{EventKind, GraphEvent};
use crate::graph::interrupts::{Breakpoints, Pause, ResumeCommand, check_resume};
use crate::graph::{END, Graph, START};
use crate::store::retry::patiently;
use crate::store::{Checkpoint, JsonMap};
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::sync::Arc;

use super::{
    Invocation, Outcome, RunError, RunScope, Start, answered_tasks, fresh_tasks, load, tasks_of,
    without_writes,
};

/// Writes the checkpoints of one invocation and reports them.
pub(super) struct CheckpointWriter<'a> {
    scope: &'a Arc<RunScope>,
    ns: String,
    parents: JsonMap,
    graph: &'a Graph,
    head: Option<Checkpoint>,
}

impl<'a> CheckpointWriter<'a> {
    pub(super) fn new(
        scope: &'a Arc<RunScope>,
        inv: &Invocation<'a>,
        head: Option<Checkpoint>,
    ) -> Self {
        Self {
            scope,
            ns: inv.ns.clone(),
            parents: inv.parents.clone(),
            graph: inv.graph,
            head,
        }
    }

    pub(super) fn head(&self) -> Option<&Checkpoint> {
        self.head.as_ref()
    }

    pub(super) fn step(&self) -> i64 {
        self.head.as_ref().map_or(-2, |h| h.step)
    }

    pub(super) fn outcome(self, values: JsonMap, pause: Option<Pause>) -> Outcome {
        Outcome {
            values,
            checkpoint: self.head,
            pause,
        }
    }

    /// Applies the input or the command (or forks / continues) and returns the nodes to run,
    /// or `None` when there is nothing to do.
    pub(super) async fn begin(
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
                self.graph
                    .check_writes(state, &writes)
                    .map_err(RunError::Input)?;
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
    pub(super) async fn apply_command(
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
        self.graph
            .check_writes(state, &writes)
            .map_err(RunError::Input)?;
        self.graph.channels.apply(state, &writes);
        let (next, tasks) = if command.goto.is_empty() {
            let tasks = answered_tasks(&head_tasks, command.resume.as_ref());
            (head_next, tasks)
        } else {
            let next: Vec<String> = command.goto.iter().filter(|n| *n != END).cloned().collect();
            let tasks = fresh_tasks(self.scope, &next, None);
            (next, tasks)
        };
        self.write_tasks("input", &writes, &next, tasks, state, None)
            .await?;
        Ok(next)
    }

    pub(super) async fn write(
        &mut self,
        source: &str,
        writes: &[(String, Value)],
        next: &[String],
        state: &JsonMap,
        start_input: Option<Value>,
    ) -> Result<(), RunError> {
        let tasks = fresh_tasks(self.scope, next, start_input.as_ref());
        self.write_tasks(source, writes, next, tasks, state, None)
            .await
    }

    /// Stores a checkpoint with the given tasks and reports it; a pause's interrupts go into
    /// the `values` event that follows (`__interrupt__`), as LangGraph sends them.
    pub(super) async fn write_tasks(
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
        if let Some(run_id) = self.scope.run_id {
            metadata.insert("run_id".into(), json!(run_id));
        }
        metadata.insert("thread_id".into(), json!(self.scope.thread_id));
        let cp = Checkpoint {
            thread_id: self.scope.thread_id,
            checkpoint_ns: self.ns.clone(),
            checkpoint_id: crate::ids::CheckpointId::next(),
            parent_checkpoint_id: self.head.as_ref().map(|h| h.checkpoint_id),
            run_id: self.scope.run_id,
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
            .then(|| checkpoint_payload(&cp, self.head.as_ref(), self.graph, state));
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

    pub(super) fn report_values(&self, state: &JsonMap, pause: Option<&Pause>) {
        if !self.scope.sink.wants(&self.ns, EventKind::Values) {
            return;
        }
        /// The state with the pause's interrupts after its channels, serialized as it is.
        #[derive(serde::Serialize)]
        struct Frame<'a> {
            #[serde(flatten)]
            state: crate::graph::channels::ForClients<'a>,
            #[serde(rename = "__interrupt__", skip_serializing_if = "Option::is_none")]
            interrupt: Option<Value>,
        }
        let interrupt = match pause {
            Some(pause @ Pause::Interrupts(_)) => Some(pause.wire()),
            _ => None,
        };
        let state = self.graph.channels.for_clients(state);
        match serde_json::to_string(&Frame { state, interrupt }) {
            Ok(values) => self.scope.sink.emit(GraphEvent::Values {
                ns: self.ns.clone(),
                values,
            }),
            Err(error) => tracing::error!(%error, "a values event could not be written"),
        }
    }

    /// `updates` carries a pause as `{"__interrupt__": [...]}` (empty for a breakpoint).
    pub(super) fn report_interrupts(&self, pause: &Pause) {
        if self.scope.sink.wants(&self.ns, EventKind::Updates) {
            self.scope.sink.emit(GraphEvent::Updates {
                ns: self.ns.clone(),
                node: "__interrupt__".into(),
                update: pause.wire(),
            });
        }
    }

    pub(super) fn report_breakpoint(&self) {
        self.report_interrupts(&Pause::Breakpoint);
    }
}

/// Where `begin` left an invocation.
pub(super) struct Begun {
    pub(super) next: Vec<String>,
    /// Going on from a checkpoint (not from new input): its breakpoint was already reached.
    pub(super) continuing: bool,
}

/// The `checkpoints` stream payload for a checkpoint.
fn checkpoint_payload(
    cp: &Checkpoint,
    parent: Option<&Checkpoint>,
    graph: &Graph,
    state: &JsonMap,
) -> Value {
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
        "values": graph.channels.for_clients(state),
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
    graph
        .check_writes(&state, &writes)
        .map_err(RunError::Input)?;
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
