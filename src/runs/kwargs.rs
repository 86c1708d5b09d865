//! A run's specification: what the API accepted, parsed once, stored with the run as
//! `run.kwargs` (the reference server's key names) and executed as this type.

use super::options;
use crate::graph::interrupts::{NodeSet, ResumeCommand};
use crate::ids::CheckpointId;
use crate::store::JsonMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's parameters as stored in `run.kwargs` (the reference server's key names).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunKwargs {
    pub input: Value,
    /// Checked against the graph again when the run starts (the graph may have changed).
    pub command: Option<ResumeCommand>,
    /// `configurable` carries run_id, thread_id, graph_id, assistant_id and checkpoint_id.
    pub config: Value,
    pub context: JsonMap,
    pub stream_mode: crate::stream::StreamModes,
    pub interrupt_before: Option<NodeSet>,
    pub interrupt_after: Option<NodeSet>,
    /// Where the run's result is posted when it ends.
    pub webhook: Option<String>,
    /// Always empty: feedback needs LangSmith, which this server does not use.
    pub feedback_keys: Option<Vec<String>>,
    /// Stateless run: its thread is temporary.
    pub temporary: bool,
    /// Stateless only: delete the temporary thread when the run ends.
    pub delete_on_completion: bool,
    pub subgraphs: bool,
    pub resumable: bool,
    pub checkpoint_during: bool,
    pub durability: options::Durability,
    /// The run brought provider keys (`configurable.apiKeys`): they are held in this process's
    /// memory only (`KeyVault`), never stored.
    pub run_keys: bool,
}

impl RunKwargs {
    /// Decodes a stored run's parameters; a row that does not decode is `Corrupt`, never
    /// defaults.
    pub fn decode(kwargs: &Value) -> Result<Self, crate::store::StoreError> {
        serde_json::from_value(kwargs.clone()).map_err(|e| crate::store::StoreError::Corrupt {
            what: "run kwargs",
            detail: e.to_string(),
        })
    }

    fn configurable(&self, key: &str) -> Option<&str> {
        self.config.get("configurable")?.get(key)?.as_str()
    }

    /// The graph this run executes.
    pub fn graph_id(&self) -> Option<&str> {
        self.configurable("graph_id")
    }

    /// The checkpoint to start from, if any.
    pub fn checkpoint_id(&self) -> Option<CheckpointId> {
        self.configurable("checkpoint_id")?.parse().ok()
    }
}
