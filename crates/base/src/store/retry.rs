//! Riding out a database that is briefly away: a run retries a write (or the read it needs to
//! go on) while the error says the database is unreachable or busy, instead of failing.

#[cfg(test)]
use super::StoreError;
use super::StoreResult;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// First pause between attempts; doubled up to `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Calls `op` until it succeeds, fails for another reason than a transient one (see
/// `StoreError::is_transient`), `patience` has passed, or `stop` fires; then returns the last
/// result.
pub async fn patiently<T, F, Fut>(
    patience: Duration,
    stop: &CancellationToken,
    what: &'static str,
    mut op: F,
) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<T>>,
{
    let give_up = Instant::now() + patience;
    let mut pause = FIRST_PAUSE;
    let mut failures = 0u32;
    loop {
        let error = match op().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!(what, failures, "the database answers again");
                }
                return Ok(value);
            }
            Err(error) if error.is_transient() => error,
            Err(error) => return Err(error),
        };
        failures += 1;
        if Instant::now() + pause > give_up || stop.is_cancelled() {
            return Err(error);
        }
        if failures == 1 {
            tracing::warn!(what, %error, "the database is unreachable or busy; retrying");
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return Err(error),
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// A transient error for tests of callers.
#[cfg(test)]
fn unreachable_db() -> StoreError {
    StoreError::Database(sqlx::Error::PoolTimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn retries_transient_errors_until_success() {
        let calls = AtomicU32::new(0);
        let result = patiently(
            Duration::from_secs(5),
            &CancellationToken::new(),
            "t",
            || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move { if n < 3 { Err(unreachable_db()) } else { Ok(n) } }
            },
        )
        .await;
        assert_eq!(result.ok(), Some(3));
    }

    #[tokio::test]
    async fn other_errors_and_lost_patience_end_at_once() {
        let calls = AtomicU32::new(0);
        let result: StoreResult<()> = patiently(
            Duration::from_secs(5),
            &CancellationToken::new(),
            "t",
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(StoreError::NotFound("run")) }
            },
        )
        .await;
        assert!(matches!(result, Err(StoreError::NotFound(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let started = Instant::now();
        let result: StoreResult<()> = patiently(
            Duration::from_millis(300),
            &CancellationToken::new(),
            "t",
            || async { Err(unreachable_db()) },
        )
        .await;
        assert!(result.is_err());
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
