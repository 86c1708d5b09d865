//! Crons (`/runs/crons`, `/threads/{id}/runs/crons`): schedules that create runs, on a thread
//! or stateless. The body is a run request plus the schedule's own fields; the request is
//! checked like a run's when the cron is saved, so a tick does not fail on what could be known
//! then.

mod schedule;
mod scheduler;

pub(crate) use scheduler::run as run_scheduler;

use super::assistants::resolve;
use super::auth::Principal;
use super::error::{ApiResult, AppError, Body};
use super::lookups;
use super::params::{Ids, parse_id};
use super::runs::{RunRequest, Target, check_run_request};
use super::{AppState, SearchParams, paged, project};
use crate::ids::{AssistantId, CronId, ThreadId};
use crate::store::{Cron, CronQuery, JsonMap};
use crate::store::{CronSort, SortOrder};
use crate::time::Timestamp;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use schedule::Schedule;
use serde::Deserialize;
use serde_json::{Value, json};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/runs/crons", post(create_stateless))
        .route("/threads/{thread_id}/runs/crons", post(create_for_thread))
        .route("/runs/crons/search", post(search))
        .route("/runs/crons/count", post(count))
        .route(
            "/runs/crons/{cron_id}",
            get(fetch).patch(update).delete(remove),
        )
}

/// Fields of the run request a cron may carry (the rest of a run body makes no sense on a
/// schedule: `command`, checkpoints, `after_seconds`, …).
const RUN_FIELDS: [&str; 14] = [
    "assistant_id",
    "input",
    "config",
    "context",
    "metadata",
    "interrupt_before",
    "interrupt_after",
    "webhook",
    "multitask_strategy",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "durability",
    "checkpoint_during",
];

/// The schedule's own fields.
const CRON_FIELDS: [&str; 5] = [
    "schedule",
    "timezone",
    "end_time",
    "enabled",
    "on_run_completed",
];

/// A cron body split into the schedule's fields and the run request.
struct CronBody {
    schedule: Option<String>,
    timezone: Option<Option<String>>,
    end_time: Option<Option<Timestamp>>,
    enabled: Option<bool>,
    on_run_completed: Option<String>,
    run: JsonMap,
}

impl CronBody {
    fn parse(mut body: JsonMap, stateless: bool) -> ApiResult<Self> {
        if let Some(unknown) = body
            .keys()
            .find(|k| !RUN_FIELDS.contains(&k.as_str()) && !CRON_FIELDS.contains(&k.as_str()))
        {
            return Err(AppError::Invalid(format!(
                "unknown field '{unknown}' (a cron takes {} and the run fields {})",
                CRON_FIELDS.join(", "),
                RUN_FIELDS.join(", ")
            )));
        }
        let text = |v: Value, field: &str| match v {
            Value::String(s) => Ok(s),
            other => Err(AppError::Invalid(format!(
                "{field} must be a string, got {other}"
            ))),
        };
        let schedule = body
            .remove("schedule")
            .map(|v| text(v, "schedule"))
            .transpose()?;
        let timezone = match body.remove("timezone") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(v) => Some(Some(text(v, "timezone")?)),
        };
        let end_time = match body.remove("end_time") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(v) => Some(Some(parse_time(&text(v, "end_time")?)?)),
        };
        let enabled = match body.remove("enabled") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(b),
            Some(other) => {
                return Err(AppError::Invalid(format!(
                    "enabled must be a boolean, got {other}"
                )));
            }
        };
        let on_run_completed = match body.remove("on_run_completed") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let choice = text(v, "on_run_completed")?;
                if !stateless {
                    return Err(AppError::Invalid(
                        "on_run_completed applies to stateless crons only (a thread's cron \
                         keeps its thread)"
                            .into(),
                    ));
                }
                if !["delete", "keep"].contains(&choice.as_str()) {
                    return Err(AppError::Invalid(format!(
                        "on_run_completed: invalid value '{choice}' (expected delete or keep)"
                    )));
                }
                Some(choice)
            }
        };
        Ok(Self {
            schedule,
            timezone,
            end_time,
            enabled,
            on_run_completed,
            run: body,
        })
    }
}

/// An ISO 8601 instant; one without an offset (what Python's `isoformat()` gives for a naive
/// datetime) is taken as UTC.
fn parse_time(text: &str) -> ApiResult<Timestamp> {
    if let Some(t) = Timestamp::parse(text) {
        return Ok(t);
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S%.f",
    ]
    .iter()
    .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
    .map(|t| Timestamp::from_utc(t.and_utc()))
    .ok_or_else(|| AppError::Invalid(format!("end_time: '{text}' is not an ISO 8601 date-time")))
}

fn schedule_of(cron: &Cron) -> ApiResult<Schedule> {
    Schedule::parse(&cron.schedule, cron.timezone.as_deref()).map_err(AppError::Invalid)
}

fn target_of(cron: &Cron) -> Target {
    cron.thread_id.map_or(Target::Stateless, Target::Thread)
}

/// A cron request as the spec describes it. (The handlers read the body as a map, to tell
/// the schedule's fields from the run request's and refuse unknown ones by name.)
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(super) struct NewCron {
    /// Five-field cron expression (minute hour day-of-month month day-of-week).
    schedule: String,
    /// An assistant's id or a graph id.
    assistant_id: String,
    /// IANA time zone; UTC when absent.
    timezone: Option<String>,
    /// No tick after this instant (ISO 8601).
    end_time: Option<String>,
    enabled: Option<bool>,
    /// `delete` (default) or `keep` the thread a tick's run made.
    on_run_completed: Option<String>,
    #[schema(value_type = Option<Object>)]
    input: Option<Value>,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    #[schema(value_type = Option<Object>)]
    context: Option<Value>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    #[schema(value_type = Option<Object>)]
    interrupt_before: Option<Value>,
    #[schema(value_type = Option<Object>)]
    interrupt_after: Option<Value>,
    webhook: Option<String>,
    multitask_strategy: Option<String>,
    #[schema(value_type = Option<Object>)]
    stream_mode: Option<Value>,
    stream_subgraphs: Option<bool>,
    stream_resumable: Option<bool>,
    durability: Option<String>,
    checkpoint_during: Option<bool>,
}

/// A stateless cron: each tick runs on a new thread.
#[utoipa::path(post, path = "/runs/crons", tag = "crons", request_body = NewCron,
    responses((status = 200, body = Cron), (status = 404), (status = 422)))]
pub(super) async fn create_stateless(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<JsonMap>,
) -> ApiResult<Json<Cron>> {
    create(&state, &who, None, body).await
}

/// A cron on a thread: each tick runs on it (queued behind its runs by default).
#[utoipa::path(post, path = "/threads/{thread_id}/runs/crons", tag = "crons", request_body = NewCron,
    params(("thread_id" = Uuid, Path)),
    responses((status = 200, body = Cron), (status = 404), (status = 422)))]
pub(super) async fn create_for_thread(
    State(state): State<AppState>,
    who: Principal,
    Ids(tid): Ids<ThreadId>,
    Body(body): Body<JsonMap>,
) -> ApiResult<Json<Cron>> {
    let thread_id = lookups::thread(&state, tid, &who).await?.thread_id;
    create(&state, &who, Some(thread_id), body).await
}

async fn create(
    state: &AppState,
    who: &Principal,
    thread_id: Option<ThreadId>,
    body: JsonMap,
) -> ApiResult<Json<Cron>> {
    let body = CronBody::parse(body, thread_id.is_none())?;
    state.admission.check_cron_count(state, &who.owner).await?;
    let Some(schedule) = body.schedule else {
        return Err(AppError::Invalid("schedule is required".into()));
    };
    if !body.run.contains_key("assistant_id") {
        return Err(AppError::Invalid("assistant_id is required".into()));
    }
    let target = thread_id.map_or(Target::Stateless, Target::Thread);
    let request = RunRequest::from_json(Value::Object(body.run.clone()))?;
    let assistant = check_run_request(state, &who.owner, target, &request).await?;
    let now = Timestamp::now();
    let mut cron = Cron {
        cron_id: CronId::new(),
        assistant_id: assistant.assistant_id,
        thread_id,
        user_id: Some(who.owner.as_str().to_owned()).filter(|o| !o.is_empty()),
        schedule,
        timezone: body.timezone.flatten(),
        metadata: run_metadata(&body.run)?,
        payload: body.run,
        on_run_completed: body.on_run_completed,
        enabled: body.enabled.unwrap_or(true),
        end_time: body.end_time.flatten(),
        next_run_date: None,
        created_at: now,
        updated_at: now,
        owner: who.owner.clone(),
    };
    cron.next_run_date = schedule_of(&cron)?.next_after(now, cron.end_time);
    state.store.create_cron(&cron).await?;
    Ok(Json(cron))
}

fn run_metadata(run: &JsonMap) -> ApiResult<JsonMap> {
    match run.get("metadata") {
        None | Some(Value::Null) => Ok(JsonMap::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(AppError::Invalid("metadata must be an object".into())),
    }
}

async fn load(state: &AppState, id: CronId, who: &Principal) -> ApiResult<Cron> {
    state
        .store
        .get_cron(id)
        .await?
        .filter(|c| c.owner == who.owner)
        .ok_or_else(|| AppError::NotFound(format!("Cron with ID {id} not found")))
}

/// One cron.
#[utoipa::path(get, path = "/runs/crons/{cron_id}", tag = "crons",
    params(("cron_id" = Uuid, Path)), responses((status = 200, body = Cron), (status = 404), (status = 422)))]
pub(super) async fn fetch(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<CronId>,
) -> ApiResult<Json<Cron>> {
    Ok(Json(load(&state, id, &who).await?))
}

/// Changes a cron. Run fields replace the payload's; metadata is merged. A new schedule, time
/// zone, end time or `enabled` counts the next tick from now.
#[utoipa::path(patch, path = "/runs/crons/{cron_id}", tag = "crons", request_body = Object,
    params(("cron_id" = Uuid, Path)), responses((status = 200, body = Cron), (status = 404), (status = 422)))]
pub(super) async fn update(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<CronId>,
    Body(body): Body<JsonMap>,
) -> ApiResult<Json<Cron>> {
    let mut cron = load(&state, id, &who).await?;
    let patch = CronBody::parse(body, cron.thread_id.is_none())?;
    let reschedule = patch.schedule.is_some()
        || patch.timezone.is_some()
        || patch.end_time.is_some()
        || patch.enabled.is_some();
    if let Some(s) = patch.schedule {
        cron.schedule = s;
    }
    if let Some(tz) = patch.timezone {
        cron.timezone = tz;
    }
    if let Some(end) = patch.end_time {
        cron.end_time = end;
    }
    if let Some(enabled) = patch.enabled {
        cron.enabled = enabled;
    }
    if patch.on_run_completed.is_some() {
        cron.on_run_completed = patch.on_run_completed;
    }
    for (key, value) in patch.run {
        if key == "metadata" {
            let extra = run_metadata(&JsonMap::from_iter([(key.clone(), value)]))?;
            cron.metadata.extend(extra);
            cron.payload
                .insert(key, Value::Object(cron.metadata.clone()));
        } else {
            cron.payload.insert(key, value);
        }
    }
    let request = RunRequest::from_json(Value::Object(cron.payload.clone()))?;
    let assistant = check_run_request(&state, &who.owner, target_of(&cron), &request).await?;
    cron.assistant_id = assistant.assistant_id;
    let now = Timestamp::now();
    if reschedule {
        cron.next_run_date = schedule_of(&cron)?.next_after(now, cron.end_time);
    }
    cron.updated_at = now;
    if !state.store.update_cron(&cron).await? {
        return Err(AppError::NotFound(format!("Cron with ID {id} not found")));
    }
    Ok(Json(cron))
}

/// Deletes a cron (its runs stay).
#[utoipa::path(delete, path = "/runs/crons/{cron_id}", tag = "crons",
    params(("cron_id" = Uuid, Path)), responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn remove(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<CronId>,
) -> ApiResult<StatusCode> {
    let cron = load(&state, id, &who).await?;
    state.store.delete_cron(cron.cron_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CronSearch {
    assistant_id: Option<String>,
    thread_id: Option<String>,
    enabled: Option<bool>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    #[serde(default, deserialize_with = "crate::api::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "crate::api::numbers::opt_whole")]
    offset: Option<i64>,
    sort_by: Option<CronSort>,
    sort_order: Option<SortOrder>,
    #[serde(default)]
    select: Vec<String>,
}

async fn cron_query(
    state: &AppState,
    who: &Principal,
    body: CronSearch,
) -> ApiResult<(CronQuery, Vec<String>)> {
    let p = SearchParams::check(body.limit, body.offset)?;
    let assistant_id = match body.assistant_id.as_deref() {
        None => None,
        Some(raw) => Some(match raw.parse::<AssistantId>() {
            Ok(id) => id,
            Err(_) => resolve(state, raw, &who.owner).await?.assistant_id,
        }),
    };
    let thread_id = body
        .thread_id
        .as_deref()
        .map(parse_id::<ThreadId>)
        .transpose()?;
    super::check_select(&body.select, &super::CRON_FIELDS)?;
    let q = CronQuery {
        owner: who.owner.clone(),
        assistant_id,
        thread_id,
        enabled: body.enabled,
        metadata: {
            let metadata = body.metadata.unwrap_or_default();
            super::check_filter("metadata", &metadata)?;
            metadata
        },
        limit: p.limit,
        offset: p.offset,
        sort_by: body.sort_by,
        sort_order: body.sort_order,
    };
    Ok((q, body.select))
}

/// Lists crons, newest first by default.
#[utoipa::path(post, path = "/runs/crons/search", tag = "crons", request_body = CronSearch,
    responses((status = 200, body = Vec<Cron>), (status = 404, description = "The assistant filter names none"), (status = 422)))]
pub(super) async fn search(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<CronSearch>,
) -> ApiResult<Response> {
    let (q, select) = cron_query(&state, &who, body).await?;
    let page = state.store.search_crons(&q).await?;
    let items = page
        .items
        .into_iter()
        .map(|c| project(json!(c), &select))
        .collect();
    Ok(paged(items, page.total, q.offset, q.limit))
}

/// Counts crons matching the filters.
#[utoipa::path(post, path = "/runs/crons/count", tag = "crons", request_body = CronSearch,
    responses((status = 200, body = i64), (status = 404, description = "The assistant filter names none"), (status = 422)))]
pub(super) async fn count(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<CronSearch>,
) -> ApiResult<Json<i64>> {
    // Counting ignores paging, but paging fields sent must still be valid.
    super::check_paging(body.limit.unwrap_or(10), body.offset.unwrap_or(0))?;
    let (mut q, _) = cron_query(
        &state,
        &who,
        CronSearch {
            limit: Some(1),
            offset: Some(0),
            ..body
        },
    )
    .await?;
    q.limit = 1;
    Ok(Json(state.store.search_crons(&q).await?.total))
}
