//! Retries for model calls: only errors a retry can fix (rate limits, transient failures), with
//! exponential backoff and jitter, honouring `Retry-After`.

use super::{ChatModel, ChatRequest, ChatResponse, LlmError, OnDelta};
use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How many attempts and how long to wait between them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Calls `model` until it succeeds, fails for good, or `cancel` fires. Cancellation also ends
/// a call in progress (dropping it closes the connection). A streamed attempt that fails
/// midway is retried from the start, so `on_delta` may see the beginning of an answer twice.
pub async fn chat_with_retry(
    model: &dyn ChatModel,
    req: &ChatRequest,
    on_delta: Option<OnDelta<'_>>,
    policy: RetryPolicy,
    cancel: &CancellationToken,
) -> Result<ChatResponse, LlmError> {
    let attempts = policy.max_attempts.max(1);
    let mut backoff = ExponentialBuilder::new()
        .with_min_delay(policy.base_delay)
        .with_max_delay(policy.max_delay)
        .with_jitter()
        .without_max_times()
        .build();
    for attempt in 1..=attempts {
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            result = model.chat(req, on_delta) => result,
        };
        let error = match result {
            Ok(answer) => return Ok(answer),
            Err(e) if !e.is_retryable() || attempt == attempts => return Err(e),
            Err(e) => e,
        };
        let wait = delay(&error, backoff.next(), policy.max_delay);
        tracing::warn!(
            provider = %req.model.provider,
            model = %req.model.model,
            attempt,
            max_attempts = attempts,
            error = error.kind(),
            message = %error,
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "model call failed; retrying"
        );
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            () = tokio::time::sleep(wait) => {}
        }
    }
    // The loop returns on its last attempt; this only guards against a zero-attempt policy.
    Err(LlmError::Config("retry policy allows no attempts".into()))
}

/// The provider's `Retry-After` when it gave one, else the next backoff step; never more
/// than `max_delay` (backon's jitter can add up to one more step).
fn delay(error: &LlmError, backoff: Option<Duration>, max_delay: Duration) -> Duration {
    let wanted = match error {
        LlmError::RateLimited {
            retry_after: Some(wait),
            ..
        } => *wait,
        _ => backoff.unwrap_or(max_delay),
    };
    wanted.min(max_delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_wins_but_is_capped() {
        let limited = |secs| LlmError::RateLimited {
            provider: "p".into(),
            retry_after: Some(Duration::from_secs(secs)),
            message: String::new(),
        };
        let cap = Duration::from_secs(10);
        let step = Some(Duration::from_millis(5));
        assert_eq!(delay(&limited(2), step, cap), Duration::from_secs(2));
        assert_eq!(delay(&limited(60), step, cap), cap);
        let transient = LlmError::Transient {
            provider: "p".into(),
            message: String::new(),
        };
        assert_eq!(delay(&transient, step, cap), Duration::from_millis(5));
        assert_eq!(delay(&transient, Some(Duration::from_secs(99)), cap), cap);
    }
}
