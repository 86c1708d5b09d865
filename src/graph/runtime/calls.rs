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

use super::RunScope;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tokio::sync::OnceCell;
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

    /// Records a finished call's result until the task's step is checkpointed.
    pub(super) async fn record(&self, scope: &RunScope, task_id: Uuid, key: &str, result: &Value) {
        record_for(scope, task_id, key, result).await;
    }
}

/// Records `result` under `task_id` until that task's step is checkpointed.
pub(super) async fn record_for(scope: &RunScope, task_id: Uuid, key: &str, result: &Value) {
    scope.calls.called(task_id);
    if let Err(error) = scope
        .store
        .put_task_call(scope.thread_id, task_id, key, result)
        .await
    {
        tracing::warn!(%error, "could not record a finished call; a redo would repeat it");
    }
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
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl CallLedger {
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
pub(super) async fn forget_finished(scope: &RunScope, finished: &[Uuid]) {
    let done = scope.calls.take_recorded(finished);
    if done.is_empty() {
        return;
    }
    if let Err(error) = scope.store.forget_task_calls(scope.thread_id, &done).await {
        tracing::warn!(%error, "could not delete a finished step's call records");
    }
}
