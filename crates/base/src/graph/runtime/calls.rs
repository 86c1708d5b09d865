//! Calls a task finished inside a step that has not been checkpointed yet (LangGraph's pending
//! writes, kept per call). A step is checkpointed only once all its tasks are done, so a worker
//! that dies mid-step loses every call the step had finished; the next worker redoes the step.
//! With these records a redone task replays what it had finished (page summaries, searches,
//! model turns) and pays only for the calls that were still in flight.
//!
//! A call is found again by its key: what the call was (the caller hashes its request), and
//! how many calls before it in the task were the same, so repeated identical calls replay in
//! order. Only tasks this execution did not create can have records; the lookup is skipped for
//! the others. A step's records are deleted once its checkpoint is written.
//!
//! Records reach the store in batches: one writer task per run writes what is waiting as one
//! insert (and one delete), in order, so a step's deletion never overtakes its records; what
//! arrives meanwhile is the next batch. Nothing waits for the store, and a crash loses only the
//! records of the write in progress: those calls are made again, as before.

use super::RunScope;
use crate::ids::ThreadId;
use crate::store::{CheckpointStore, TaskCall};
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::OnceCell;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use uuid::Uuid;

/// The finished calls of one task.
pub(super) struct TaskCalls {
    /// The task was scheduled by an earlier execution (a step cut off, or a paused task run
    /// again), so calls of it may be on record.
    may_have_run: bool,
    earlier: OnceCell<HashMap<String, Value>>,
    /// Calls seen so far in this execution, by what they were.
    seen: Mutex<HashMap<String, usize>>,
}

impl TaskCalls {
    pub(super) fn new(may_have_run: bool) -> Self {
        Self {
            may_have_run,
            earlier: OnceCell::new(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The key of the next call described by `what`.
    pub(super) fn key(&self, what: &str) -> String {
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        let n = seen.entry(what.to_owned()).or_insert(0);
        *n += 1;
        format!("{what}#{n}")
    }

    /// The recorded result of call `key`, if an earlier execution of the task finished it.
    pub(super) async fn recall(&self, scope: &RunScope, task_id: Uuid, key: &str) -> Option<Value> {
        if !self.may_have_run {
            return None;
        }
        let earlier = self
            .earlier
            .get_or_init(|| async {
                match scope.store.task_calls(scope.thread_id, task_id).await {
                    Ok(calls) => {
                        if !calls.is_empty() {
                            scope.calls.called(task_id);
                        }
                        calls.into_iter().collect()
                    }
                    Err(error) => {
                        // Without the records the calls are made again: slower, not wrong.
                        tracing::warn!(%error, "could not read the task's finished calls");
                        HashMap::new()
                    }
                }
            })
            .await;
        earlier.get(key).cloned()
    }
}

/// Records `result` under `task_id` until that task's step is checkpointed.
pub(super) fn record_for<T: Serialize + ?Sized>(
    scope: &RunScope,
    task_id: Uuid,
    key: &str,
    result: &T,
) {
    let result = match serde_json::to_string(result) {
        Ok(text) => text,
        Err(error) => {
            tracing::warn!(%error, "a finished call could not be recorded");
            return;
        }
    };
    scope.calls.called(task_id);
    scope.calls.send(
        scope,
        Pending::Put(TaskCall {
            task_id,
            key: key.to_owned(),
            result,
        }),
    );
}

/// What the writer has to do, in the order it was asked.
enum Pending {
    Put(TaskCall),
    Forget(Vec<Uuid>),
}

/// Starts a run's record writer; it ends once the run's scope is gone and all is written.
fn spawn_writer(store: Arc<dyn CheckpointStore>, thread_id: ThreadId) -> UnboundedSender<Pending> {
    let (tx, mut rx) = unbounded_channel::<Pending>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut puts = Vec::new();
            let mut forgets = Vec::new();
            let mut next = Some(first);
            while let Some(op) = next {
                match op {
                    Pending::Put(call) => puts.push(call),
                    Pending::Forget(ids) => forgets.extend(ids),
                }
                next = rx.try_recv().ok();
            }
            // A step's records were queued before its deletion, so puts go first.
            if let Err(error) = store.put_task_calls(thread_id, &puts).await {
                tracing::warn!(%error, "could not record finished calls; a redo would repeat them");
            }
            if let Err(error) = store.forget_task_calls(thread_id, &forgets).await {
                tracing::warn!(%error, "could not delete a finished step's call records");
            }
        }
    });
    tx
}

/// The `spend:` records of a top-level task an earlier execution scheduled, once per execution.
pub(super) async fn spent_before(scope: &RunScope, task_id: Uuid) -> Vec<Value> {
    if scope.calls.is_new(task_id) || !locked(&scope.calls.restored).insert(task_id) {
        return Vec::new();
    }
    match scope.store.task_calls(scope.thread_id, task_id).await {
        Ok(calls) => {
            let spent: Vec<Value> = calls
                .into_iter()
                .filter(|(key, _)| key.starts_with("spend:"))
                .map(|(_, value)| value)
                .collect();
            if !spent.is_empty() {
                scope.calls.called(task_id);
            }
            spent
        }
        Err(error) => {
            tracing::warn!(%error, "could not read what the step spent before it was cut off");
            Vec::new()
        }
    }
}

/// What a run knows about its tasks' records.
#[derive(Default)]
pub(super) struct CallLedger {
    /// Tasks this execution scheduled: nothing of theirs can be on record from before.
    created: Mutex<HashSet<Uuid>>,
    /// Tasks with records, to delete once their step is checkpointed.
    with_records: Mutex<HashSet<Uuid>>,
    /// Top-level tasks whose earlier spend this execution has read back.
    restored: Mutex<HashSet<Uuid>>,
    /// The run's record writer, started with its first record.
    writer: OnceLock<UnboundedSender<Pending>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl CallLedger {
    fn send(&self, scope: &RunScope, op: Pending) {
        let writer = self
            .writer
            .get_or_init(|| spawn_writer(scope.store.clone(), scope.thread_id));
        // The writer lives as long as this ledger; a send fails only if it panicked.
        let _ = writer.send(op);
    }

    pub(super) fn created(&self, task_id: Uuid) {
        locked(&self.created).insert(task_id);
    }

    pub(super) fn is_new(&self, task_id: Uuid) -> bool {
        locked(&self.created).contains(&task_id)
    }

    fn called(&self, task_id: Uuid) {
        locked(&self.with_records).insert(task_id);
    }

    /// Of `finished`, the tasks with records (no longer tracked once returned).
    fn take_recorded(&self, finished: &[Uuid]) -> Vec<Uuid> {
        let mut with_records = locked(&self.with_records);
        finished
            .iter()
            .filter(|id| with_records.remove(id))
            .copied()
            .collect()
    }
}

/// Deletes the records of `finished` tasks (their step is checkpointed). A failure leaves rows
/// behind, which go with the thread; it is logged, not fatal.
pub(super) fn forget_finished(scope: &RunScope, finished: &[Uuid]) {
    let done = scope.calls.take_recorded(finished);
    if !done.is_empty() {
        scope.calls.send(scope, Pending::Forget(done));
    }
}
