//! Whether a new run may be queued: the service's bound on waiting runs, and, when callers are
//! told apart, each owner's runs in flight and runs per minute. Also each owner's responses
//! held open (streams, waits) and crons.

use super::super::AppState;
use super::super::error::{ApiResult, AppError};
use crate::config::RunLimits;
use crate::store::{Owner, RunStatus};
use crate::time::Timestamp;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

/// The limits, with the per-owner rate kept in this process (each replica counts its own).
pub struct Admission {
    limits: RunLimits,
    per_owner: bool,
    per_minute: Option<DefaultKeyedRateLimiter<Owner>>,
    /// Responses each owner holds open in this process.
    open: Arc<Mutex<HashMap<Owner, u64>>>,
    /// Each owner's stored bytes, as last counted, and when.
    usage: Mutex<HashMap<Owner, (u64, std::time::Instant)>>,
}

/// How long a count of an owner's stored bytes is used before it is counted again.
const USAGE_FRESH: std::time::Duration = std::time::Duration::from_secs(2);

impl Admission {
    /// `per_owner`: the service tells callers apart (one local or shared owner is not limited
    /// against itself).
    pub fn new(limits: &RunLimits, per_owner: bool) -> Self {
        let rate = u32::try_from(limits.owner_runs_per_minute).unwrap_or(u32::MAX);
        Self {
            limits: limits.clone(),
            per_owner,
            per_minute: NonZeroU32::new(rate)
                .filter(|_| per_owner)
                .map(|n| RateLimiter::keyed(Quota::per_minute(n))),
            open: Arc::default(),
            usage: Mutex::default(),
        }
    }

    /// Refuses (413) a request that would store more for an owner at its storage quota.
    async fn within_storage(&self, state: &AppState, owner: &Owner) -> ApiResult<()> {
        let quota = self.limits.owner_storage_bytes;
        if !self.per_owner || quota == 0 {
            return Ok(());
        }
        let cached = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(owner)
            .filter(|(_, at)| at.elapsed() < USAGE_FRESH)
            .map(|(bytes, _)| *bytes);
        let used = match cached {
            Some(bytes) => bytes,
            None => {
                let bytes = state.store.owner_storage_bytes(owner).await?;
                let mut usage = self
                    .usage
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if usage.len() > 10_000 {
                    usage.retain(|_, (_, at)| at.elapsed() < USAGE_FRESH);
                }
                usage.insert(owner.clone(), (bytes, std::time::Instant::now()));
                bytes
            }
        };
        if used >= quota {
            return Err(AppError::TooLarge(format!(
                "Storage quota reached: you keep {used} bytes stored, the most allowed is \
                 {quota}; delete threads, assistants or store items to store more"
            )));
        }
        Ok(())
    }

    /// Takes one of the owner's open-response slots for a handler that holds its response (or
    /// its call) open until a run ends, whatever the protocol: a 429 at the limit. The slot is
    /// given back when the returned guard is dropped; `with_slot` ties it to a response body.
    pub(in crate::api) fn hold_open(&self, owner: &Owner) -> ApiResult<Option<HeldOpen>> {
        if !self.per_owner {
            return Ok(None);
        }
        self.hold(owner)
            .map(Some)
            .ok_or_else(|| self.too_many_open())
    }

    fn too_many_open(&self) -> AppError {
        AppError::TooMany {
            detail: format!(
                "You have {} streams or waits open, the most allowed at once; close one first",
                self.limits.owner_max_streams
            ),
            retry_after: 5,
        }
    }

    /// Takes one of the owner's open-response slots; `None` at the limit.
    fn hold(&self, owner: &Owner) -> Option<HeldOpen> {
        let most = self.limits.owner_max_streams;
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(owner.clone()).or_default();
        if most > 0 && *count >= most {
            return None;
        }
        *count += 1;
        Some(HeldOpen {
            open: self.open.clone(),
            owner: owner.clone(),
        })
    }

    /// Refuses a new cron past the owner's limit.
    pub(in crate::api) async fn check_cron_count(
        &self,
        state: &AppState,
        owner: &Owner,
    ) -> ApiResult<()> {
        let most = self.limits.owner_max_crons;
        if !self.per_owner || most == 0 {
            return Ok(());
        }
        let query = crate::store::CronQuery {
            owner: owner.clone(),
            limit: 1,
            ..Default::default()
        };
        let have = state.store.search_crons(&query).await?.total;
        if u64::try_from(have).unwrap_or(0) >= most {
            return Err(AppError::TooMany {
                detail: format!("You have {have} crons, the most allowed; delete one first"),
                retry_after: 60,
            });
        }
        Ok(())
    }
}

/// One response an owner holds open; the slot is given back when it is dropped (with the
/// response body, when the client goes or the stream ends).
pub(in crate::api) struct HeldOpen {
    open: Arc<Mutex<HashMap<Owner, u64>>>,
    owner: Owner,
}

impl Drop for HeldOpen {
    fn drop(&mut self) {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.owner);
            }
        }
    }
}

/// Whether a LangGraph route answers with a response held open until a run ends or the client
/// goes: SSE streams, `/wait` and `/join`. (Routes that hold open only for some calls, A2A's
/// streaming and blocking methods, MCP's tool calls and AG-UI, take a slot in their handler:
/// `hold_open`.)
fn holds_open(route: &str) -> bool {
    route.ends_with("/stream")
        || route.ends_with("/stream/events")
        || route.ends_with("/wait")
        || route.ends_with("/join")
}

/// Whether a request may store more for its owner: a `POST`, `PUT` or `PATCH` other than the
/// ones that only read (searches, counts, history, cancellations, event subscriptions).
fn may_store(method: &axum::http::Method, route: &str) -> bool {
    use axum::http::Method;
    let writes = *method == Method::POST || *method == Method::PUT || *method == Method::PATCH;
    let reads_only = ["/search", "/count", "/history", "/cancel", "/stream/events"]
        .iter()
        .any(|end| route.ends_with(end));
    writes && !reads_only
}

/// Middleware: a request that may store more is refused (413) for an owner at its storage
/// quota, before its handler runs. Deletes and reads always pass.
pub(in crate::api) async fn limit_storage(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let owner = req.extensions().get::<crate::api::auth::Principal>();
    if let (Some(route), Some(who)) = (route, owner)
        && may_store(req.method(), route)
        && let Err(refused) = state.admission.within_storage(&state, &who.owner).await
    {
        return refused.into_response();
    }
    next.run(req).await
}

/// Middleware: an owner past `owner_max_streams` responses held open gets a 429 before the
/// handler runs (so no run is created for a stream that is refused). Each one polls the store
/// and holds a task, so one owner's many tabs or scripts cannot take the service's share.
pub(in crate::api) async fn limit_open_responses(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let owner = req
        .extensions()
        .get::<crate::api::auth::Principal>()
        .map(|p| p.owner.clone());
    let admission = &state.admission;
    let (Some(route), Some(owner)) = (route, owner) else {
        return next.run(req).await;
    };
    // A WebSocket holds its slot for as long as it is open, not for its upgrade's response.
    if !admission.per_owner || !holds_open(&route) || crate::api::guard::is_websocket(&req) {
        return next.run(req).await;
    }
    let Some(held) = admission.hold(&owner) else {
        return admission.too_many_open().into_response();
    };
    with_slot(next.run(req).await, Some(held))
}

/// The response with the owner's slot held until its body is done (the client went or the
/// stream ended).
pub(in crate::api) fn with_slot(response: Response, held: Option<HeldOpen>) -> Response {
    match held {
        Some(held) => response.map(|body| axum::body::Body::new(HeldBody { body, _held: held })),
        None => response,
    }
}

/// A response body that holds its owner's slot until it is done.
struct HeldBody {
    body: axum::body::Body,
    _held: HeldOpen,
}

impl http_body::Body for HeldBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Refuses the run with 503 when the service's queue is full, 429 when the owner is at a limit.
pub(super) async fn admit(state: &AppState, owner: &Owner) -> ApiResult<()> {
    let admission = &state.admission;
    let limits = &admission.limits;
    if limits.max_pending_runs > 0
        && state.store.count_runs(RunStatus::Pending).await? >= limits.max_pending_runs
    {
        return Err(AppError::Unavailable(format!(
            "The run queue is full ({} runs waiting); try again shortly",
            limits.max_pending_runs
        )));
    }
    if !admission.per_owner {
        return Ok(());
    }
    let most = limits.owner_max_inflight_runs;
    if most > 0 && state.store.count_inflight_runs_of(owner).await? >= most {
        return Err(AppError::TooMany {
            detail: format!(
                "You have {most} runs pending or running, the most allowed at once; wait for one \
                 to finish or cancel one"
            ),
            retry_after: 5,
        });
    }
    within_daily_spend(state, owner).await?;
    if let Some(rate) = &admission.per_minute
        && let Err(not_until) = rate.check_key(owner)
    {
        let now = governor::clock::Clock::now(&governor::clock::DefaultClock::default());
        return Err(AppError::TooMany {
            detail: format!(
                "You created {} runs in the last minute, the most allowed",
                limits.owner_runs_per_minute
            ),
            retry_after: not_until.wait_time_from(now).as_secs().max(1),
        });
    }
    Ok(())
}

/// Refuses an owner whose runs spent their daily tokens or estimated USD (rolling 24 hours).
async fn within_daily_spend(state: &AppState, owner: &Owner) -> ApiResult<()> {
    let limits = &state.admission.limits;
    if limits.owner_daily_tokens == 0 && limits.owner_daily_usd <= 0.0 {
        return Ok(());
    }
    let since = Timestamp::now().plus_secs(-DAY_SECS);
    let (tokens, usd) = state.store.owner_spend_since(owner, since).await?;
    let over_tokens = limits.owner_daily_tokens > 0 && tokens >= limits.owner_daily_tokens;
    let over_usd = limits.owner_daily_usd > 0.0 && usd >= limits.owner_daily_usd;
    if over_tokens || over_usd {
        return Err(AppError::TooMany {
            detail: format!(
                "Your runs spent {tokens} tokens (estimated ${usd:.4}) in the last 24 hours, \
                 reaching the daily limit; new runs can start once older spending falls out of \
                 the window"
            ),
            retry_after: 600,
        });
    }
    Ok(())
}

const DAY_SECS: f64 = 24.0 * 3600.0;
