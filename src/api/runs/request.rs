//! A run request (`RunCreate` in the reference) as one type: parsed once where it enters (a
//! request body, a cron's stored payload, the thread protocol's params) or built directly (the
//! agent protocols' turns), with every option an enum and its default named here. Only the
//! client's free-form parts stay JSON: `input`, `context`, `metadata` and `configurable`.

use super::super::error::{ApiResult, AppError};
use crate::graph::interrupts::{NodeSet, ResumeCommand};
use crate::ids::CheckpointId;
use crate::runs::options::{Durability, IfNotExists, OnCompletion, OnDisconnect};
use crate::store::{JsonMap, MultitaskStrategy};
use crate::stream::StreamModes;
use serde::Deserialize;
use serde_json::Value;

/// A run request (`RunCreate` in the reference), with every field the SDKs may send.
// An absent option takes the reference's default: see the accessors below.
#[derive(Clone, Debug, Default, Deserialize, utoipa::ToSchema)]
#[schema(as = NewRun)]
pub(crate) struct RunRequest {
    pub(crate) assistant_id: String,
    #[schema(value_type = Option<Object>)]
    pub(crate) input: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub(crate) command: Option<ResumeCommand>,
    #[schema(value_type = Option<Object>)]
    pub(crate) config: Option<RunConfig>,
    #[schema(value_type = Option<Object>)]
    pub(crate) context: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    pub(crate) metadata: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    pub(crate) stream_mode: Option<StreamModes>,
    pub(crate) stream_subgraphs: Option<bool>,
    pub(crate) stream_resumable: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub(crate) interrupt_before: Option<NodeSet>,
    #[schema(value_type = Option<Object>)]
    pub(crate) interrupt_after: Option<NodeSet>,
    pub(crate) multitask_strategy: Option<MultitaskStrategy>,
    pub(crate) if_not_exists: Option<IfNotExists>,
    pub(crate) on_disconnect: Option<OnDisconnect>,
    pub(crate) on_completion: Option<OnCompletion>,
    pub(crate) after_seconds: Option<f64>,
    #[schema(value_type = Option<Object>)]
    pub(crate) checkpoint: Option<CheckpointRef>,
    #[schema(value_type = Option<String>)]
    pub(crate) checkpoint_id: Option<CheckpointId>,
    // Its schema is `sync` or `async` (refine.rs): `exit` parses, and is refused.
    #[schema(value_type = Option<String>)]
    pub(crate) durability: Option<Durability>,
    pub(crate) checkpoint_during: Option<bool>,
    pub(crate) webhook: Option<String>,
    pub(crate) feedback_keys: Option<Vec<String>>,
}

/// A run's `config`: its `configurable` (the graph's settings, free-form here and checked by
/// the graph) and the rest (`recursion_limit`, `tags`, `metadata`, …) as sent.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct RunConfig {
    #[serde(default)]
    pub(crate) configurable: Option<JsonMap>,
    #[serde(flatten)]
    pub(crate) rest: JsonMap,
}

/// `checkpoint`: a checkpoint id, or an object carrying one (`{"checkpoint_id": …}`, or in
/// its `configurable`, as a checkpoint's config reads).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CheckpointRef(pub(crate) Option<CheckpointId>);

impl<'de> Deserialize<'de> for CheckpointRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        super::super::lookups::checkpoint_id_of(Some(&value))
            .map(CheckpointRef)
            .map_err(|e| serde::de::Error::custom(e.detail()))
    }
}

impl RunRequest {
    /// A request that only names its assistant; everything else takes its default.
    pub(crate) fn for_assistant(assistant_id: impl Into<String>) -> Self {
        Self {
            assistant_id: assistant_id.into(),
            ..Self::default()
        }
    }

    /// Reads a request built as JSON (a cron's payload, the thread protocol's params); the
    /// error names the field, as a request body's does.
    pub(crate) fn from_json(value: Value) -> ApiResult<Self> {
        serde_path_to_error::deserialize(value)
            .map_err(|e| AppError::Invalid(format!("Invalid run: {}", super::super::error::at(&e))))
    }

    pub(crate) fn strategy(&self) -> MultitaskStrategy {
        self.multitask_strategy
            .unwrap_or(MultitaskStrategy::Enqueue)
    }

    pub(crate) fn if_not_exists(&self) -> IfNotExists {
        self.if_not_exists.unwrap_or(IfNotExists::Reject)
    }

    pub(crate) fn on_disconnect(&self) -> OnDisconnect {
        self.on_disconnect.unwrap_or(OnDisconnect::Continue)
    }

    pub(crate) fn on_completion(&self) -> OnCompletion {
        self.on_completion.unwrap_or(OnCompletion::Delete)
    }

    pub(crate) fn durability(&self) -> Durability {
        self.durability.unwrap_or(Durability::Async)
    }

    pub(crate) fn modes(&self) -> StreamModes {
        self.stream_mode.clone().unwrap_or_default()
    }

    pub(crate) fn resumable(&self) -> bool {
        self.stream_resumable.unwrap_or(false)
    }

    /// The checkpoint the run starts from: `checkpoint_id`, else the one `checkpoint` names.
    pub(crate) fn start_checkpoint(&self) -> Option<CheckpointId> {
        self.checkpoint_id
            .or_else(|| self.checkpoint.and_then(|c| c.0))
    }

    /// Checks what can be checked without the store or the graph.
    pub(crate) fn validate(&self, stateless: bool) -> ApiResult<()> {
        if stateless && self.command.is_some() {
            return Err(AppError::BadRequest(
                "You must provide a thread_id when resuming.".into(),
            ));
        }
        if self
            .after_seconds
            .is_some_and(|s| !(0.0..=86_400.0 * 365.0).contains(&s))
        {
            return Err(AppError::Invalid(
                "after_seconds must be between 0 and one year".into(),
            ));
        }
        // LangGraph Platform mints LangSmith feedback tokens for these; this server has no
        // LangSmith, so it would return none.
        if self.feedback_keys.as_ref().is_some_and(|k| !k.is_empty()) {
            return Err(AppError::Invalid(
                "feedback_keys needs LangSmith, which this server does not use".into(),
            ));
        }
        // Every step is checkpointed before the next one starts (LangGraph's `sync`, which
        // also gives what `async` promises); that is what lets a run survive a crash, so
        // skipping the steps' checkpoints is refused rather than accepted and not done.
        if self.durability == Some(Durability::Exit) || self.checkpoint_during == Some(false) {
            return Err(AppError::Invalid(
                "durability 'exit' (checkpoint_during: false) is not served: this server \
                 checkpoints every step so that runs survive a crash; use 'sync' or 'async'"
                    .into(),
            ));
        }
        if stateless && (self.checkpoint.is_some() || self.checkpoint_id.is_some()) {
            return Err(AppError::Invalid(
                "checkpoint needs a thread: use /threads/{thread_id}/runs".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<RunRequest, String> {
        RunRequest::from_json(body).map_err(|e| e.detail())
    }

    #[test]
    fn options_are_enums_with_the_reference_defaults() {
        let request = parse(json!({"assistant_id": "agent"})).unwrap();
        assert_eq!(request.strategy(), MultitaskStrategy::Enqueue);
        assert_eq!(request.if_not_exists(), IfNotExists::Reject);
        assert_eq!(request.on_disconnect(), OnDisconnect::Continue);
        assert_eq!(request.on_completion(), OnCompletion::Delete);
        assert_eq!(request.durability(), Durability::Async);
        assert_eq!(request.modes().names(), ["values"]);
        let request = parse(
            json!({"assistant_id": "agent", "multitask_strategy": "rollback",
            "stream_mode": "updates", "interrupt_before": "*", "command": {"goto": "a"}}),
        )
        .unwrap();
        assert_eq!(request.strategy(), MultitaskStrategy::Rollback);
        assert_eq!(request.modes().names(), ["updates"]);
        assert_eq!(request.interrupt_before, Some(NodeSet::All));
        assert_eq!(request.command.map(|c| c.goto), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn a_bad_field_is_named_in_the_error() {
        for (body, words) in [
            (
                json!({"multitask_strategy": "sometimes"}),
                "multitask_strategy",
            ),
            (json!({"stream_mode": ["values", 3]}), "stream_mode"),
            (
                json!({"stream_mode": "bogus"}),
                "Invalid stream_mode 'bogus'",
            ),
            (json!({"interrupt_before": "some"}), "interrupt_before"),
            (json!({"command": {"jump": 1}}), "command"),
            (
                json!({"command": {}}),
                "command must set resume, update or goto",
            ),
            (json!({"command": {"goto": {"node": "a"}}}), "not supported"),
            (json!({"checkpoint_id": "xyz"}), "Invalid checkpoint ID"),
            (json!({"checkpoint": 5}), "checkpoint must be an object"),
            (
                json!({"config": {"configurable": 3}}),
                "config.configurable",
            ),
            (json!({"context": []}), "context"),
        ] {
            let mut body = body;
            body["assistant_id"] = json!("agent");
            let error = parse(body.clone()).unwrap_err();
            assert!(error.contains(words), "{body}: {error}");
        }
    }

    #[test]
    fn checkpoint_is_an_id_or_an_object_naming_one() {
        let id = CheckpointId::new();
        for checkpoint in [
            json!(id),
            json!({"checkpoint_id": id}),
            json!({"configurable": {"checkpoint_id": id}}),
        ] {
            let body = json!({"assistant_id": "a", "checkpoint": checkpoint});
            assert_eq!(parse(body).unwrap().start_checkpoint(), Some(id));
        }
    }
}
