//! Finding what a request names: a thread by its path id, the checkpoint id in a body.

use super::AppState;
use super::auth::Principal;
use super::error::{ApiResult, AppError};
use super::params::parse_id;
use crate::ids::{CheckpointId, ThreadId};
use crate::store::{Owner, Thread};
use serde_json::Value;

/// The caller's thread with this id, or the reference's 404 (also for another owner's: whether
/// it exists is not theirs to learn).
pub(super) async fn thread(state: &AppState, id: ThreadId, who: &Principal) -> ApiResult<Thread> {
    state
        .store
        .get_thread(id)
        .await?
        .filter(|t| t.owner == who.owner)
        .ok_or_else(|| AppError::NotFound(format!("Thread with ID {id} not found")))
}

/// Refuses a thread id that is another owner's (as a 404, like a missing one). A thread that
/// does not exist yet is fine: runs and the protocol create threads on first use.
pub(super) async fn not_anothers(state: &AppState, id: ThreadId, owner: &Owner) -> ApiResult<()> {
    own_or_none(state, id, owner).await.map(drop)
}

/// The caller's thread, `None` when there is none with this id, and a 404 for another owner's,
/// before anything about it is read: what it holds or waits on is not theirs to learn.
pub(super) async fn own_or_none(
    state: &AppState,
    id: ThreadId,
    owner: &Owner,
) -> ApiResult<Option<Thread>> {
    match state.store.get_thread(id).await? {
        Some(thread) if thread.owner != *owner => {
            Err(AppError::NotFound(format!("Thread with ID {id} not found")))
        }
        thread => Ok(thread),
    }
}

/// Reads `checkpoint_id` from any of the shapes clients send: a string, `{checkpoint_id}` or
/// `{configurable: {checkpoint_id}}`.
pub(super) fn checkpoint_id_of(value: Option<&Value>) -> ApiResult<Option<CheckpointId>> {
    let raw = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) if !v.is_object() => {
            return Err(AppError::Invalid(
                "checkpoint must be an object ({\"checkpoint_id\": ...}) or a checkpoint id".into(),
            ));
        }
        Some(v) => v
            .get("checkpoint_id")
            .or_else(|| v.get("configurable").and_then(|c| c.get("checkpoint_id")))
            .and_then(Value::as_str),
    };
    raw.map(parse_id::<CheckpointId>).transpose()
}
