//! Whether a new run may be queued: the service's bound on waiting runs, and, when callers are
//! told apart, each owner's runs in flight and runs per minute.

use super::super::AppState;
use super::super::error::{ApiResult, AppError};
use crate::config::RunLimits;
use crate::store::{Owner, RunStatus};
use crate::time::Timestamp;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;

/// The limits, with the per-owner rate kept in this process (each replica counts its own).
pub struct Admission {
    limits: RunLimits,
    per_owner: bool,
    per_minute: Option<DefaultKeyedRateLimiter<Owner>>,
}

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
        }
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
