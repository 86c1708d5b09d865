//! Thread state as the API shows it (`/state`, `/history`): values rebuilt from checkpoint
//! writes, plus next nodes, tasks and checkpoint links. What a channel hides from clients
//! (`Channel::hidden_keys`: the research graph's page texts) is left out unless the caller
//! asks for it (`View::Everything`): a thread's history would otherwise carry every page's text
//! once per checkpoint.

use super::Graph;
use super::channels::writes_from_json;
use crate::ids::{CheckpointId, ThreadId};
use crate::store::{Checkpoint, CheckpointQuery, CheckpointStore, JsonMap, StoreResult};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The state of a thread that has no checkpoint yet.
pub fn empty_state() -> Value {
    json!({"values": {}, "next": [], "tasks": [], "metadata": null, "created_at": null,
           "checkpoint": null, "parent_checkpoint": null, "interrupts": [],
           "checkpoint_id": null, "parent_checkpoint_id": null})
}

/// Which keys a rendered state holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// What clients are sent: the channels' hidden keys left out.
    Clients,
    /// Everything the checkpoints hold (`?include_hidden=true`, the report export).
    Everything,
}

/// Rebuilds values of many checkpoints of one thread, sharing work along common lineages.
pub struct StateBuilder<'a> {
    store: &'a dyn CheckpointStore,
    graph: &'a Graph,
    thread_id: ThreadId,
    cache: HashMap<CheckpointId, JsonMap>,
    view: View,
}

impl<'a> StateBuilder<'a> {
    pub fn new(store: &'a dyn CheckpointStore, graph: &'a Graph, thread_id: ThreadId) -> Self {
        Self {
            store,
            graph,
            thread_id,
            cache: HashMap::new(),
            view: View::Clients,
        }
    }

    /// How `thread_state` renders values (by default as clients see them).
    pub fn view(mut self, view: View) -> Self {
        self.view = view;
        self
    }

    /// The values at `cp`. Only the states asked for are cached (each later one replays from
    /// its newest cached ancestor): caching every step of the lineage kept a whole copy of the
    /// state per checkpoint, hundreds of megabytes for a long thread with a large report.
    pub async fn values(&mut self, cp: &Checkpoint) -> StoreResult<JsonMap> {
        if let Some(v) = self.cache.get(&cp.checkpoint_id) {
            return Ok(v.clone());
        }
        let lineage = self
            .store
            .checkpoint_lineage(self.thread_id, &cp.checkpoint_ns, cp.checkpoint_id)
            .await?;
        let start = lineage
            .iter()
            .rposition(|c| self.cache.contains_key(&c.checkpoint_id));
        let mut state = match start {
            Some(i) => self.cache[&lineage[i].checkpoint_id].clone(),
            None => self.graph.channels.initial_state(),
        };
        for c in &lineage[start.map_or(0, |i| i + 1)..] {
            self.graph
                .channels
                .apply(&mut state, &writes_from_json(&c.writes));
        }
        drop(lineage);
        self.cache.insert(cp.checkpoint_id, state.clone());
        Ok(state)
    }

    /// The full ThreadState document for `cp`, in the builder's `View`.
    pub async fn thread_state(&mut self, cp: &Checkpoint) -> StoreResult<Value> {
        let mut values = self.values(cp).await?;
        if self.view == View::Clients {
            self.graph.channels.hide_in(&mut values);
        }
        Ok(render(cp, values))
    }

    /// `/history`: newest first.
    pub async fn history(&mut self, q: &CheckpointQuery) -> StoreResult<Vec<Value>> {
        let cps = self.store.list_checkpoints(self.thread_id, q).await?;
        // Rebuild oldest first so later checkpoints reuse their ancestors' cached states.
        let mut out = Vec::with_capacity(cps.len());
        for cp in cps.iter().rev() {
            out.push(self.thread_state(cp).await?);
        }
        out.reverse();
        Ok(out)
    }
}

fn cp_ref(thread_id: ThreadId, ns: &str, id: CheckpointId) -> Value {
    json!({"checkpoint_id": id, "thread_id": thread_id, "checkpoint_ns": ns})
}

/// Task entries as clients see them (the pending input of `__start__` and the answers a
/// re-run task reads stay internal).
fn public_tasks(tasks: &Value) -> Value {
    let mut tasks = tasks.clone();
    for task in tasks.as_array_mut().into_iter().flatten() {
        if let Some(map) = task.as_object_mut() {
            map.remove("input");
            map.remove("resume");
        }
    }
    tasks
}

fn render(cp: &Checkpoint, values: JsonMap) -> Value {
    let parent = cp
        .parent_checkpoint_id
        .map(|p| cp_ref(cp.thread_id, &cp.checkpoint_ns, p));
    json!({
        "values": values,
        "next": cp.next,
        "tasks": public_tasks(&cp.tasks),
        "metadata": cp.metadata,
        "created_at": cp.created_at,
        "checkpoint": cp_ref(cp.thread_id, &cp.checkpoint_ns, cp.checkpoint_id),
        "parent_checkpoint": parent,
        "interrupts": super::interrupts::pending_list(&cp.tasks),
        "checkpoint_id": cp.checkpoint_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
    })
}
