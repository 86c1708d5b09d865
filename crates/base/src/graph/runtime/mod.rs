//! The superstep loop: load the namespace's head, apply input, run the scheduled nodes
//! concurrently, merge their updates, write a checkpoint, repeat until nothing is scheduled.
//! Its parts: `scope` (what a run shares, where an invocation starts, how it ends), `node` (what
//! a node can use while it runs) and `writer` (checkpoints, their tasks and their events).

use super::channels::writes_from_json;
use super::events::{EventKind, GraphEvent};
use super::interrupts::{Interrupt, Pause, Resume};
use super::messages::{is_message, message_id};
use super::{Command, END, Graph, NodeError, START};
use crate::store::retry::patiently;
use crate::store::{Checkpoint, JsonMap};
use crate::telemetry::metrics;
use futures::future::join_all;
use serde_json::{Value, json};
use std::sync::Arc;
use tracing::Instrument;
use uuid::Uuid;

mod calls;
mod node;
mod scope;
mod writer;

pub use node::NodeContext;
use node::message_meta;
pub use scope::{Invocation, Outcome, RunError, RunScope, Spent, Start};
use writer::CheckpointWriter;
pub use writer::update_state;

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
    if inv.ns.is_empty()
        && let Some(prepare) = &inv.graph.prepare
    {
        prepare(scope).map_err(RunError::Prepare)?;
    }
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
fn fresh_tasks(scope: &RunScope, next: &[String], start_input: Option<&Value>) -> Vec<Value> {
    next.iter()
        .map(|name| {
            let id = Uuid::new_v4();
            scope.calls.created(id);
            let mut task = task_entry(id, name, &[], &[]);
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
    let Outcomes {
        writes,
        next,
        paused,
    } = outcomes(scope, inv, step, &tasks, results)?;
    if let Some(unknown) = next.iter().find(|n| inv.graph.node(n).is_none()) {
        return Err(RunError::Input(format!("goto to unknown node '{unknown}'")));
    }
    inv.graph.channels.apply(state, &writes);
    let ran = tasks.iter().map(|t| t.name.clone()).collect();
    let finished: Vec<Uuid> = tasks
        .iter()
        .filter(|t| !paused.iter().any(|(p, _)| p.id == t.id))
        .map(|t| t.id)
        .collect();
    if paused.is_empty() {
        writer.write("loop", &writes, &next, state, None).await?;
        calls::forget_finished(scope, &finished);
        return Ok(StepEnd {
            ran,
            next,
            pause: None,
        });
    }
    let (scheduled, pause) = write_paused(scope, writer, &writes, next, paused, state).await?;
    calls::forget_finished(scope, &finished);
    Ok(StepEnd {
        ran,
        next: scheduled,
        pause: Some(pause),
    })
}

/// What a step's tasks came to: their writes, the nodes they lead to, and the tasks that
/// paused at an interrupt.
struct Outcomes<'t> {
    writes: Vec<(String, Value)>,
    next: Vec<String>,
    paused: Vec<(&'t TaskSpec, Interrupt)>,
}

/// Each task's result read in task order: an update is reported and kept, an interrupt
/// pauses the task, any other failure ends the step.
fn outcomes<'t>(
    scope: &RunScope,
    inv: &Invocation<'_>,
    step: i64,
    tasks: &'t [TaskSpec],
    results: Vec<Result<Command, RunError>>,
) -> Result<Outcomes<'t>, RunError> {
    let mut out = Outcomes {
        writes: Vec::new(),
        next: Vec::new(),
        paused: Vec::new(),
    };
    for (task, result) in tasks.iter().zip(results) {
        let command = match result {
            Ok(command) => command,
            Err(RunError::Node {
                error: NodeError::Interrupted(interrupt),
                ..
            }) => {
                out.paused.push((task, interrupt));
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
            if target != END && !out.next.contains(&target) {
                out.next.push(target);
            }
        }
        out.writes.extend(prepared);
    }
    Ok(out)
}

/// The checkpoint of a step some of whose tasks paused. The interrupted tasks stay scheduled,
/// with their ids (so the interrupt ids hold) and the answers they had; the finished tasks'
/// writes are kept and their successors scheduled. Returns what is scheduled and the pause.
async fn write_paused(
    scope: &RunScope,
    writer: &mut CheckpointWriter<'_>,
    writes: &[(String, Value)],
    next: Vec<String>,
    paused: Vec<(&TaskSpec, Interrupt)>,
    state: &JsonMap,
) -> Result<(Vec<String>, Pause), RunError> {
    let mut tasks: Vec<Value> = paused
        .iter()
        .map(|(task, i)| task_entry(task.id, &task.name, std::slice::from_ref(i), &task.resume))
        .collect();
    let mut scheduled: Vec<String> = paused.iter().map(|(t, _)| t.name.clone()).collect();
    for name in next {
        if !scheduled.contains(&name) {
            tasks.extend(fresh_tasks(scope, std::slice::from_ref(&name), None));
            scheduled.push(name);
        }
    }
    let pause = Pause::Interrupts(paused.into_iter().map(|(_, i)| i).collect());
    writer.report_interrupts(&pause);
    writer
        .write_tasks("loop", writes, &scheduled, tasks, state, Some(&pause))
        .await?;
    Ok((scheduled, pause))
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
            task: json!({"id": task.id, "name": task.name,
                         "input": inv.graph.channels.for_clients(&state),
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
        calls: Arc::new(calls::TaskCalls::new(!scope.calls.is_new(task.id))),
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
            let Some(id) = message_id(message) else {
                continue;
            };
            // The first sighting goes out; so does a streamed message whose final text is
            // not what was streamed (a report after the citation check), whole, under its id.
            if scope.first_sighting(id) || scope.streamed_differs(id, message) {
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
    let mut update: JsonMap = writes.iter().cloned().collect();
    inv.graph.channels.hide_in(&mut update);
    let update = Value::Object(update);
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
