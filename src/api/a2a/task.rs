//! A2A's tasks, messages and stream events in the two dialects clients speak: v1.0 (ProtoJSON:
//! enum names such as `TASK_STATE_COMPLETED`, parts as `{"text"}`, results wrapped as
//! `{"task"}`, no `kind`) and v0.3 (`kind` on every object, states such as `completed`, the
//! last status update marked `final`). One task is one run; its context is the run's thread.

use crate::ids::{RunId, ThreadId};
use crate::time::Timestamp;
use serde_json::{Map, Value, json};

/// Which protocol version a request speaks (by its method's name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    V1,
    V03,
}

/// Where a task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

const STATES: [(TaskState, &str, &str); 6] = [
    (TaskState::Submitted, "TASK_STATE_SUBMITTED", "submitted"),
    (TaskState::Working, "TASK_STATE_WORKING", "working"),
    (
        TaskState::InputRequired,
        "TASK_STATE_INPUT_REQUIRED",
        "input-required",
    ),
    (TaskState::Completed, "TASK_STATE_COMPLETED", "completed"),
    (TaskState::Failed, "TASK_STATE_FAILED", "failed"),
    (TaskState::Canceled, "TASK_STATE_CANCELED", "canceled"),
];

impl TaskState {
    fn wire(self, dialect: Dialect) -> &'static str {
        let (_, v1, v03) = STATES
            .iter()
            .find(|(s, _, _)| *s == self)
            .copied()
            .unwrap_or(STATES[0]);
        match dialect {
            Dialect::V1 => v1,
            Dialect::V03 => v03,
        }
    }

    /// From either dialect's name (a `ListTasks` filter).
    pub(super) fn parse(raw: &str) -> Option<Self> {
        STATES
            .iter()
            .find(|(_, v1, v03)| *v1 == raw || *v03 == raw)
            .map(|(s, _, _)| *s)
    }
}

/// One task as this server sees it.
#[derive(Clone, Debug)]
pub(super) struct Task {
    pub(super) id: RunId,
    pub(super) context_id: ThreadId,
    pub(super) state: TaskState,
    /// The agent's words that come with the state: a clarifying question, a plan to review,
    /// progress, or why it failed.
    pub(super) message: Option<String>,
    /// The report, once written.
    pub(super) report: Option<String>,
    pub(super) timestamp: Timestamp,
    /// The context's conversation (user: true), oldest first.
    pub(super) history: Vec<(bool, String)>,
}

/// ISO 8601 in UTC with a `Z`, as both dialects' clients parse it.
fn zulu(t: &Timestamp) -> String {
    t.as_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn text_part(dialect: Dialect, text: &str) -> Value {
    match dialect {
        Dialect::V1 => json!({"text": text}),
        Dialect::V03 => json!({"kind": "text", "text": text}),
    }
}

/// A message of the conversation.
pub(super) fn message(
    dialect: Dialect,
    from_user: bool,
    text: &str,
    context_id: ThreadId,
    task_id: RunId,
) -> Value {
    let role = match (dialect, from_user) {
        (Dialect::V1, true) => "ROLE_USER",
        (Dialect::V1, false) => "ROLE_AGENT",
        (Dialect::V03, true) => "user",
        (Dialect::V03, false) => "agent",
    };
    let mut m = json!({
        "messageId": uuid::Uuid::now_v7().to_string(),
        "role": role,
        "parts": [text_part(dialect, text)],
        "contextId": context_id.to_string(),
        "taskId": task_id.to_string(),
    });
    if dialect == Dialect::V03 {
        insert(&mut m, "kind", json!("message"));
    }
    m
}

fn insert(target: &mut Value, key: &str, value: Value) {
    if let Some(map) = target.as_object_mut() {
        map.insert(key.into(), value);
    }
}

/// A task's status, with the agent's message when there is one.
pub(super) fn status(dialect: Dialect, task: &Task, text: Option<&str>) -> Value {
    let mut s = json!({"state": task.state.wire(dialect), "timestamp": zulu(&task.timestamp)});
    if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
        insert(
            &mut s,
            "message",
            message(dialect, false, text, task.context_id, task.id),
        );
    }
    s
}

/// The report as the task's one artifact.
fn artifact(dialect: Dialect, report: &str) -> Value {
    json!({"artifactId": "report", "name": "report",
           "description": "The research report (Markdown), with its sources",
           "parts": [text_part(dialect, report)]})
}

/// What to include with a task.
#[derive(Clone, Copy, Debug)]
pub(super) struct Detail {
    pub(super) artifacts: bool,
    /// At most this many of the newest history messages (`None`: none).
    pub(super) history: Option<usize>,
}

pub(super) fn task_json(dialect: Dialect, task: &Task, detail: Detail) -> Value {
    let mut t = Map::new();
    if dialect == Dialect::V03 {
        t.insert("kind".into(), json!("task"));
    }
    t.insert("id".into(), json!(task.id.to_string()));
    t.insert("contextId".into(), json!(task.context_id.to_string()));
    t.insert(
        "status".into(),
        status(dialect, task, task.message.as_deref()),
    );
    if detail.artifacts
        && let Some(report) = &task.report
    {
        t.insert("artifacts".into(), json!([artifact(dialect, report)]));
    }
    if let Some(n) = detail.history.filter(|n| *n > 0) {
        let skip = task.history.len().saturating_sub(n);
        let history: Vec<Value> = task.history[skip..]
            .iter()
            .map(|(user, text)| message(dialect, *user, text, task.context_id, task.id))
            .collect();
        t.insert("history".into(), Value::Array(history));
    }
    Value::Object(t)
}

/// `SendMessage`'s result (v1.0 wraps it) and a stream's first item.
pub(super) fn task_result(dialect: Dialect, task: &Task, detail: Detail) -> Value {
    let t = task_json(dialect, task, detail);
    match dialect {
        Dialect::V1 => json!({ "task": t }),
        Dialect::V03 => t,
    }
}

/// A status change on a stream; `last` marks the end (v0.3's `final`; v1.0 ends the stream).
pub(super) fn status_update(
    dialect: Dialect,
    task: &Task,
    text: Option<&str>,
    last: bool,
) -> Value {
    let mut u = json!({"taskId": task.id.to_string(), "contextId": task.context_id.to_string(),
                       "status": status(dialect, task, text)});
    match dialect {
        Dialect::V1 => json!({ "statusUpdate": u }),
        Dialect::V03 => {
            insert(&mut u, "kind", json!("status-update"));
            insert(&mut u, "final", json!(last));
            u
        }
    }
}

/// The report on a stream, whole.
pub(super) fn artifact_update(dialect: Dialect, task: &Task, report: &str) -> Value {
    let mut u = json!({"taskId": task.id.to_string(), "contextId": task.context_id.to_string(),
                       "artifact": artifact(dialect, report), "lastChunk": true});
    match dialect {
        Dialect::V1 => json!({ "artifactUpdate": u }),
        Dialect::V03 => {
            insert(&mut u, "kind", json!("artifact-update"));
            u
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn task(state: TaskState) -> Task {
        Task {
            id: RunId::from_uuid(Uuid::nil()),
            context_id: ThreadId::from_uuid(Uuid::max()),
            state,
            message: Some("Which aspect?".into()),
            report: Some("# Report".into()),
            timestamp: Timestamp::parse("2026-11-27T05:00:00.123+00:00")
                .unwrap_or_else(Timestamp::now),
            history: vec![(true, "q".into()), (false, "a".into())],
        }
    }

    #[test]
    fn both_dialects_have_their_own_shapes() {
        let t = task(TaskState::InputRequired);
        let all = Detail {
            artifacts: true,
            history: Some(1),
        };
        let v1 = task_result(Dialect::V1, &t, all);
        assert_eq!(v1["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(
            v1["task"]["status"]["timestamp"],
            "2026-11-27T05:00:00.123Z"
        );
        assert_eq!(v1["task"]["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(
            v1["task"]["status"]["message"]["parts"],
            json!([{"text": "Which aspect?"}])
        );
        assert!(v1["task"].get("kind").is_none());
        assert_eq!(v1["task"]["history"].as_array().map(Vec::len), Some(1));
        let v03 = task_result(Dialect::V03, &t, all);
        assert_eq!(v03["kind"], "task");
        assert_eq!(v03["status"]["state"], "input-required");
        assert_eq!(v03["status"]["message"]["kind"], "message");
        assert_eq!(v03["artifacts"][0]["parts"][0]["kind"], "text");
        let last = status_update(Dialect::V03, &t, None, true);
        assert_eq!(
            (last["kind"].as_str(), last["final"].as_bool()),
            (Some("status-update"), Some(true))
        );
        let v1u = status_update(Dialect::V1, &t, None, true);
        assert!(v1u["statusUpdate"].get("final").is_none());
        assert_eq!(TaskState::parse("completed"), Some(TaskState::Completed));
        assert_eq!(
            TaskState::parse("TASK_STATE_FAILED"),
            Some(TaskState::Failed)
        );
    }
}
