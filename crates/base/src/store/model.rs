//! The rows the service persists: assistants, threads, runs, checkpoints and run events.
//! Shapes follow the LangGraph Server API so handlers can serialise them as they are.

pub use crate::ids::{AssistantId, CheckpointId, CronId, RunId, ThreadId};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;

/// A JSON object.
pub type JsonMap = Map<String, Value>;

/// An enum stored and sent as text: its variants, their spellings, `Display` and `FromStr`.
#[doc(hidden)]
#[macro_export]
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            /// The wire and storage spelling.
            pub fn as_str(&self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok(Self::$variant),)+
                    other => Err(format!(
                        "invalid {}: '{}' (expected one of: {})",
                        stringify!($name), other, [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}
pub use crate::text_enum;

text_enum!(
    /// What assistants are listed by (each a column).
    AssistantSort {
        AssistantId => "assistant_id",
        GraphId => "graph_id",
        Name => "name",
        CreatedAt => "created_at",
        UpdatedAt => "updated_at",
    }
);

text_enum!(
    /// What threads are listed by (each a column).
    ThreadSort {
        ThreadId => "thread_id",
        Status => "status",
        CreatedAt => "created_at",
        UpdatedAt => "updated_at",
        StateUpdatedAt => "state_updated_at",
    }
);

text_enum!(
    /// What crons are listed by (each a column).
    CronSort {
        CronId => "cron_id",
        AssistantId => "assistant_id",
        ThreadId => "thread_id",
        NextRunDate => "next_run_date",
        EndTime => "end_time",
        CreatedAt => "created_at",
        UpdatedAt => "updated_at",
    }
);

text_enum!(
    /// Where a thread stands, recomputed whenever one of its runs starts or ends.
    ThreadStatus { Idle => "idle", Busy => "busy", Interrupted => "interrupted", Error => "error" }
);

text_enum!(
    /// A run's lifecycle: `pending` → `running` → one of the four ends.
    RunStatus {
        Pending => "pending",
        Running => "running",
        Success => "success",
        Error => "error",
        Timeout => "timeout",
        Interrupted => "interrupted",
    }
);

impl RunStatus {
    /// Pending or running: the run still occupies its thread.
    pub fn is_inflight(&self) -> bool {
        matches!(self, Self::Pending | Self::Running)
    }
}

text_enum!(
    /// What a new run does when its thread already has one in flight.
    MultitaskStrategy {
        Reject => "reject",
        Interrupt => "interrupt",
        Rollback => "rollback",
        Enqueue => "enqueue",
    }
);

text_enum!(
    /// How a cancelled run is treated: kept as `interrupted`, or deleted with what it wrote.
    CancelAction { Interrupt => "interrupt", Rollback => "rollback" }
);

text_enum!(
    /// Behaviour of a create call when the id already exists.
    IfExists { Raise => "raise", DoNothing => "do_nothing" }
);

text_enum!(
    /// Sort direction for search endpoints.
    SortOrder { Asc => "asc", Desc => "desc" }
);

/// Who a resource belongs to: the identity its creator authenticated as. Owners never see each
/// other's assistants, threads (with their runs, checkpoints and events), crons or store items.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// The one owner of a server without authentication, or with a single shared key.
    pub fn local() -> Self {
        Self(String::new())
    }

    /// An authenticated identity; empty names are refused (they would be the local owner).
    pub fn named(name: &str) -> Option<Self> {
        let name = name.trim();
        (!name.is_empty()).then(|| Self(name.to_owned()))
    }

    /// As stored (`""` for the local owner).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Rows read back from the database.
    pub(crate) fn from_stored(text: String) -> Self {
        Self(text)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(local)")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// A named configuration preset of a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Assistant {
    #[schema(value_type = String, format = Uuid)]
    pub assistant_id: AssistantId,
    pub graph_id: String,
    #[schema(value_type = Object)]
    pub config: Value,
    #[schema(value_type = Object)]
    pub context: Value,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    pub name: String,
    pub description: Option<String>,
    pub version: i64,
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    /// `None`: a system assistant (one per graph), readable by every owner and changed by none.
    /// Not part of the wire object.
    #[serde(skip)]
    pub owner: Option<Owner>,
}

impl Assistant {
    /// Whether `who` may read it: their own, or a system assistant.
    pub fn visible_to(&self, who: &Owner) -> bool {
        self.owner.as_ref().is_none_or(|o| o == who)
    }
}

/// One version of an assistant as it was saved (an assistant without `updated_at`: a version
/// never changes once written).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AssistantVersion {
    #[schema(value_type = String, format = Uuid)]
    pub assistant_id: AssistantId,
    pub version: i64,
    pub graph_id: String,
    #[schema(value_type = Object)]
    pub config: Value,
    #[schema(value_type = Object)]
    pub context: Value,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    pub name: String,
    pub description: Option<String>,
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

/// Fields a PATCH may change; `None` leaves the field alone. Metadata is merged.
#[derive(Clone, Debug, Default)]
pub struct AssistantPatch {
    pub graph_id: Option<String>,
    pub config: Option<Value>,
    pub context: Option<Value>,
    pub metadata: Option<JsonMap>,
    pub name: Option<String>,
    pub description: Option<String>,
}

/// Filters for assistant search. Metadata uses JSON containment on top-level keys.
#[derive(Clone, Debug, Default)]
pub struct AssistantQuery {
    /// Whose assistants (system assistants are everyone's).
    pub owner: Owner,
    pub metadata: JsonMap,
    pub graph_id: Option<String>,
    /// Case-insensitive substring of the name.
    pub name: Option<String>,
    pub limit: i64,
    pub offset: i64,
    pub sort_by: Option<AssistantSort>,
    pub sort_order: Option<SortOrder>,
}

/// A conversation: the container of runs and checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Thread {
    #[schema(value_type = String, format = Uuid)]
    pub thread_id: ThreadId,
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    #[schema(value_type = String)]
    pub state_updated_at: Timestamp,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    pub status: ThreadStatus,
    #[schema(value_type = Object)]
    pub config: Value,
    /// The latest root checkpoint's state; `null` before the first checkpoint.
    #[schema(value_type = Option<Object>)]
    pub values: Option<Value>,
    /// `{"error": <type>, "message": <text>}` after a failed run.
    #[schema(value_type = Option<Object>)]
    pub error: Option<RunFailure>,
    #[schema(value_type = Object)]
    pub interrupts: Value,
    /// Deleted this many minutes after its last update (`ttl` on create or patch); a sweeper
    /// does it. Not part of the wire object.
    #[serde(skip)]
    pub ttl_minutes: Option<f64>,
    /// Not part of the wire object.
    #[serde(skip)]
    pub owner: Owner,
}

/// Filters for thread search and count.
#[derive(Clone, Debug, Default)]
pub struct ThreadQuery {
    pub owner: Owner,
    pub metadata: JsonMap,
    pub values: JsonMap,
    pub ids: Vec<ThreadId>,
    pub status: Option<ThreadStatus>,
    pub limit: i64,
    pub offset: i64,
    pub sort_by: Option<ThreadSort>,
    pub sort_order: Option<SortOrder>,
}

/// What a thread shows after a run ends (or after a state update).
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSummary {
    pub status: ThreadStatus,
    pub values: Option<Value>,
    pub error: Option<RunFailure>,
    /// `{task_id: [interrupt, ...]}`: what the thread waits on.
    pub interrupts: Value,
}

/// Why a run failed: the thread's `error`, the stream's `error` event and `/join`'s
/// `__error__` all carry it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// The error's type, as LangGraph names it (`GraphRecursionError`, `WorkerLost`, ...).
    pub error: String,
    pub message: String,
}

/// One execution of a graph on a thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Run {
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    #[schema(value_type = String, format = Uuid)]
    pub thread_id: ThreadId,
    #[schema(value_type = String, format = Uuid)]
    pub assistant_id: AssistantId,
    /// When the run may start (creation time plus `after_seconds`).
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    pub status: RunStatus,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    pub multitask_strategy: MultitaskStrategy,
    /// The run's parameters as the reference stores them (input, config, stream_mode, …).
    #[schema(value_type = Object)]
    pub kwargs: Value,
}

/// How a run ended, as the executor reports it to the store.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEnd {
    /// Keep the run with this final status.
    Finished(RunStatus),
    /// Delete the run together with the checkpoints and events it wrote.
    RolledBack,
}

/// A claimed run plus the lease that keeps it ours.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub run: Run,
    /// Names this claim in every write made for the run.
    pub fence: Fence,
    /// By the database's clock.
    pub expires_at: Timestamp,
}

/// Why a run that kept losing its worker was given up: the thread's `error`, the run's last
/// stream event and its `/join` result all carry it.
pub fn worker_lost(attempts: i64) -> RunFailure {
    RunFailure {
        error: "WorkerLost".into(),
        message: format!(
            "the run was given up after {attempts} attempts: each time, the worker running it \
             stopped before it finished (max_attempts)"
        ),
    }
}

/// One claim of a run: the worker that holds it and which attempt it is. Writes made for a run
/// carry it, and the store refuses them once the run was claimed again (the worker stalled past
/// its lease, or lost it), so an old worker can never overwrite a newer one's work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub run_id: RunId,
    pub worker: String,
    /// 1 for the first claim; a lease handed back on shutdown does not count.
    pub attempt: i64,
}

/// One stored step of a graph: what changed, and what runs next.
///
/// Checkpoints store the *writes* a step applied, never the whole state, so storage grows with
/// what the conversation adds; the graph runtime rebuilds values by replaying the lineage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub thread_id: ThreadId,
    /// `""` for the root graph, `node:task_id[|node:task_id…]` for subgraphs.
    pub checkpoint_ns: String,
    /// Time-ordered (UUIDv7), so ids sort in creation order.
    pub checkpoint_id: CheckpointId,
    pub parent_checkpoint_id: Option<CheckpointId>,
    pub run_id: Option<RunId>,
    pub step: i64,
    /// input | loop | update | fork
    pub source: String,
    pub metadata: JsonMap,
    /// `[[channel, value], …]` applied through the channels' reducers, in order.
    pub writes: Value,
    /// Nodes that run next; empty when the graph has finished.
    pub next: Vec<String>,
    /// Per-task details for the state API (ids, errors, interrupts), as JSON.
    pub tasks: Value,
    pub created_at: Timestamp,
}

/// Filters for listing checkpoints, newest first.
#[derive(Clone, Debug, Default)]
pub struct CheckpointQuery {
    pub checkpoint_ns: String,
    /// Only checkpoints strictly older than this id.
    pub before: Option<CheckpointId>,
    pub limit: i64,
    /// Containment filter on checkpoint metadata (top-level keys).
    pub metadata: JsonMap,
}

/// A stream event id: milliseconds plus a sequence within the same millisecond, compared
/// numerically; written `<ms>-<seq>` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    pub ms: i64,
    pub seq: i64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl FromStr for EventId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid event id '{s}'");
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        Ok(Self {
            ms: ms.trim().parse().map_err(|_| bad())?,
            seq: seq.trim().parse().map_err(|_| bad())?,
        })
    }
}

/// One event of a run as it went out on the wire, kept for replay.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub id: EventId,
    /// The SSE event name, e.g. `values` or `updates|researcher:<id>`.
    pub event: String,
    /// Compact JSON on one line, shared with the frame it was published as.
    pub data: std::sync::Arc<str>,
}

/// A page of search results plus the total number of matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
}

/// Where a Store API item lives: one or more labels, none empty or containing `.` (the
/// separator the query string and the database use).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(Vec<String>);

impl Namespace {
    /// Checks the labels; the message says what is wrong.
    pub fn new(labels: Vec<String>) -> Result<Self, String> {
        if labels.is_empty() {
            return Err("namespace must have at least one label".into());
        }
        if labels.len() > Self::MAX_DEPTH {
            return Err(format!(
                "namespace has {} labels; at most {} are allowed",
                labels.len(),
                Self::MAX_DEPTH
            ));
        }
        Self::check_labels(&labels)?;
        Ok(Self(labels))
    }

    /// A prefix for search: like a namespace, but may be empty (everything).
    pub fn prefix(labels: Vec<String>) -> Result<Self, String> {
        if labels.len() > Self::MAX_DEPTH {
            return Err(format!("at most {} labels are allowed", Self::MAX_DEPTH));
        }
        Self::check_labels(&labels)?;
        Ok(Self(labels))
    }

    fn check_labels(labels: &[String]) -> Result<(), String> {
        for label in labels {
            if label.is_empty() {
                return Err("namespace labels must not be empty".into());
            }
            if label.contains('.') {
                return Err(format!("namespace label '{label}' must not contain '.'"));
            }
            if label.chars().count() > 256 {
                return Err("namespace labels are at most 256 characters".into());
            }
        }
        Ok(())
    }

    /// Parses the dot-joined form (`users.u1`).
    pub fn from_dotted(text: &str) -> Result<Self, String> {
        Self::new(text.split('.').map(str::to_owned).collect())
    }

    pub const MAX_DEPTH: usize = 32;

    pub fn labels(&self) -> &[String] {
        &self.0
    }

    pub fn dotted(&self) -> String {
        self.0.join(".")
    }
}

impl Serialize for Namespace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// A Store API document.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Item {
    #[schema(value_type = Vec<String>)]
    pub namespace: Namespace,
    pub key: String,
    #[schema(value_type = Object)]
    pub value: JsonMap,
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
}

/// How one value field is compared in an item search (`filter`).
#[derive(Clone, Debug, PartialEq)]
pub enum FieldMatch {
    /// Contains this value, as metadata filters do (equal, for scalars).
    Contains(Value),
    /// Does not contain it (a missing field matches).
    NotContains(Value),
    /// Ordered against a number or a string of the same type.
    Compare(Comparison, Value),
}

/// `$gt`, `$gte`, `$lt`, `$lte`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// An item search: the namespace prefix, value filters (all must hold), paging.
#[derive(Clone, Debug)]
pub struct ItemQuery {
    pub owner: Owner,
    pub prefix: Namespace,
    pub filter: Vec<(String, FieldMatch)>,
    pub limit: i64,
    pub offset: i64,
    /// Extend the time-to-live of the items returned.
    pub refresh_ttl: bool,
}

/// A namespace listing: those under `prefix` that end with `suffix`, cut to `max_depth`
/// labels (then deduplicated), sorted, paged.
#[derive(Clone, Debug)]
pub struct NamespaceQuery {
    pub owner: Owner,
    pub prefix: Namespace,
    pub suffix: Vec<String>,
    pub max_depth: Option<usize>,
    pub limit: usize,
    pub offset: usize,
}

/// A schedule that creates runs: on a thread, or stateless (a new thread each time).
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Cron {
    #[schema(value_type = String, format = Uuid)]
    pub cron_id: CronId,
    #[schema(value_type = String, format = Uuid)]
    pub assistant_id: AssistantId,
    #[schema(value_type = Option<String>, format = Uuid)]
    pub thread_id: Option<ThreadId>,
    /// The owner's identity (`None` for the local owner).
    pub user_id: Option<String>,
    /// Five-field cron expression.
    pub schedule: String,
    /// IANA time zone the schedule is read in; `None` is UTC.
    pub timezone: Option<String>,
    /// The run request each tick creates.
    #[schema(value_type = Object)]
    pub payload: JsonMap,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    /// Stateless crons: `delete` (the default) or `keep` the thread after the run.
    pub on_run_completed: Option<String>,
    pub enabled: bool,
    #[schema(value_type = Option<String>)]
    pub end_time: Option<Timestamp>,
    /// When the next tick is due (`None` once the schedule has no tick before `end_time`).
    #[schema(value_type = Option<String>)]
    pub next_run_date: Option<Timestamp>,
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    #[serde(skip)]
    pub owner: Owner,
}

/// Filters for cron search and count.
#[derive(Clone, Debug, Default)]
pub struct CronQuery {
    pub owner: Owner,
    pub assistant_id: Option<AssistantId>,
    pub thread_id: Option<ThreadId>,
    pub enabled: Option<bool>,
    pub metadata: JsonMap,
    pub limit: i64,
    pub offset: i64,
    pub sort_by: Option<CronSort>,
    pub sort_order: Option<SortOrder>,
}

/// A cron tick claimed by the run it starts: the run is inserted only if the cron's
/// `next_run_date` is still `due`, and that insert moves it to `next`.
#[derive(Clone, Debug, PartialEq)]
pub struct CronTick {
    pub cron_id: CronId,
    pub due: Timestamp,
    pub next: Option<Timestamp>,
}

/// A call a task finished in a step not yet checkpointed (`CheckpointStore::put_task_calls`).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskCall {
    pub task_id: uuid::Uuid,
    pub key: String,
    /// The call's result as JSON text (serialized once, where it was made).
    pub result: String,
}
