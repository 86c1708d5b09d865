//! Run event streaming: encoding graph events per stream mode, the per-run bus, and SSE bodies
//! that replay stored frames and then follow live ones.

pub mod bus;
pub mod encode;
pub mod events;
pub mod modes;
mod thread;
pub mod thread_protocol;

pub use bus::{Bus, Frame, RunChannel};
pub use encode::Encoder;
pub use modes::{StreamMode, StreamModes};
pub use thread::{ThreadFollow, ThreadIdentity, ThreadModes, thread_sse_body};

use crate::ids::RunId;
use crate::store::{EventId, Store};
use crate::telemetry::metrics::SseSubscriber;
use axum::body::Body;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// The comment line sent when nothing else was sent for a while.
const HEARTBEAT: &[u8] = b": heartbeat\r\n\r\n";

/// How often a stream or a waiter reads the store for a run that no worker of this process
/// executes (another replica runs it, or it is not running anywhere yet).
pub const STORE_POLL: Duration = Duration::from_millis(250);

/// What an SSE response carries.
pub struct SseSource {
    pub store: Arc<dyn Store>,
    pub bus: Bus,
    pub run_id: RunId,
    /// `None`: live frames only. `Some`: replay stored frames after this id first
    /// (`ms = -1` replays everything).
    pub after: Option<EventId>,
    /// Only frames of these modes (join streams); `None` passes all.
    pub filter: Option<StreamModes>,
    pub with_ids: bool,
    pub heartbeat: Duration,
    pub shutdown: CancellationToken,
    /// Taken before the run was created, so its first frames cannot be missed.
    pub subscription: Option<bus::Subscription>,
    /// Called once if the client goes away before the run's stream ended.
    pub on_disconnect: Option<Box<dyn FnOnce() + Send + Sync>>,
}

/// Starts the task that feeds an SSE response and returns the response body.
pub fn sse_body(source: SseSource) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let _open = SseSubscriber::open();
        let mut source = source;
        let mut out = Out {
            tx: Sink::Wire(tx),
            filter: source.filter.take(),
            with_ids: source.with_ids,
            cursor: source.after,
            sent_metadata: false,
        };
        let finished = pump(&mut source, &mut out).await;
        if !finished && let Some(cb) = source.on_disconnect.take() {
            cb();
        }
    });
    Body::from_stream(ReceiverStream::new(rx))
}

/// Follows one run from its first frame — stored, then live here or through the store when
/// another replica runs it — sending every frame to `tx` until the run's stream ends. Returns
/// false when `tx` was closed first.
pub async fn follow_run(
    store: Arc<dyn Store>,
    bus: Bus,
    run_id: RunId,
    shutdown: CancellationToken,
    tx: mpsc::Sender<Frame>,
) -> bool {
    let mut source = SseSource {
        store,
        bus,
        run_id,
        after: Some(EventId { ms: -1, seq: -1 }),
        filter: None,
        with_ids: true,
        // The consumer keeps its own connection alive.
        heartbeat: Duration::from_secs(3600),
        shutdown,
        subscription: None,
        on_disconnect: None,
    };
    let mut out = Out {
        tx: Sink::Frames(tx),
        filter: None,
        with_ids: true,
        cursor: source.after,
        sent_metadata: false,
    };
    pump(&mut source, &mut out).await
}

/// Where a followed run's frames go: an SSE body, or a consumer that reads the frames
/// themselves (the thread-centric protocol translates them).
enum Sink {
    Wire(mpsc::Sender<Result<Bytes, std::io::Error>>),
    Frames(mpsc::Sender<Frame>),
}

impl Sink {
    async fn closed(&self) {
        match self {
            Self::Wire(tx) => tx.closed().await,
            Self::Frames(tx) => tx.closed().await,
        }
    }
}

struct Out {
    tx: Sink,
    filter: Option<StreamModes>,
    with_ids: bool,
    cursor: Option<EventId>,
    sent_metadata: bool,
}

impl Out {
    /// Sends a frame unless it was already sent or filtered out; false when the client is gone.
    async fn frame(&mut self, frame: &Frame) -> bool {
        if self.cursor.is_some_and(|c| frame.id <= c) {
            return true;
        }
        self.cursor = Some(frame.id);
        if self
            .filter
            .as_ref()
            .is_some_and(|f| !f.matches_event(&frame.event))
        {
            return true;
        }
        // A run's stream opens with one `metadata` event. A run created here and executed by
        // another replica is announced by both; a stream that switched to the store would
        // otherwise repeat it.
        if frame.event == "metadata" {
            if self.sent_metadata {
                return true;
            }
            self.sent_metadata = true;
        }
        match &self.tx {
            Sink::Wire(tx) => tx.send(Ok(frame.wire(self.with_ids))).await.is_ok(),
            Sink::Frames(tx) => tx.send(frame.clone()).await.is_ok(),
        }
    }

    async fn heartbeat(&self) -> bool {
        match &self.tx {
            Sink::Wire(tx) => tx.send(Ok(Bytes::from_static(HEARTBEAT))).await.is_ok(),
            Sink::Frames(tx) => !tx.is_closed(),
        }
    }
}

/// Sends stored, then unflushed, then live frames. Returns true when the run's stream ended
/// (or the server is shutting down), false when the client went away.
async fn pump(src: &mut SseSource, out: &mut Out) -> bool {
    // The stream of the request that created the run: it wants every frame of the run.
    let creating = src.subscription.is_some();
    let sub = match src.subscription.take() {
        Some(sub) => sub,
        None => match src.bus.get(src.run_id) {
            Some(channel) => channel.subscribe(),
            None => return follow_stored(src, out).await,
        },
    };
    if out.cursor.is_some() && !replay(src, out, Some(&sub.unflushed)).await {
        return false;
    }
    let channel = sub.channel;
    if !creating && out.cursor.is_none() && !channel.is_executing_here() {
        // A live join of a run only announced here so far: should the run go to another
        // replica, this stream goes on from the store, starting after what is stored now.
        out.cursor = Some(newest_stored(src).await);
    }
    let Some(mut live) = sub.live else {
        return channel.is_executing_here() || switch_to_store(src, out, creating).await;
    };
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + src.heartbeat, src.heartbeat);
    loop {
        tokio::select! {
            received = live.recv() => match received {
                Ok(frame) => {
                    if !out.frame(&frame).await {
                        return false;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if !replay(src, out, Some(&channel.unflushed())).await {
                        return false;
                    }
                }
                // A run executed here ended. A channel that only announced the run was let go
                // (`runs::Runner::release_foreign_channels`): the run is another replica's, or
                // ended without starting; the store has the rest.
                Err(broadcast::error::RecvError::Closed) => {
                    return channel.is_executing_here()
                        || switch_to_store(src, out, creating).await;
                }
            },
            _ = tick.tick() => {
                if !out.heartbeat().await {
                    return false;
                }
            }
            () = src.shutdown.cancelled() => return true,
            () = out.tx.closed() => return false,
        }
    }
}

/// The id of the run's newest stored frame (`-1` when none): where a live join starts.
async fn newest_stored(src: &SseSource) -> EventId {
    match src.store.last_event_id(src.run_id).await {
        Ok(newest) => newest.unwrap_or(EventId { ms: -1, seq: -1 }),
        Err(error) => {
            tracing::warn!(%error, run_id = %src.run_id, "could not read stored events");
            EventId { ms: -1, seq: -1 }
        }
    }
}

/// Goes on from the store with a run this process only announced. The announcement (`metadata`)
/// is all this process ever published for it, so the creating request's stream replays the
/// run's stored frames from the first: ids are stamped by the executing replica's clock, and
/// one running behind this one's would otherwise put them before the announcement's id.
/// (Its repeated `metadata` is dropped by `Out::frame`.)
async fn switch_to_store(src: &SseSource, out: &mut Out, creating: bool) -> bool {
    if creating {
        out.cursor = Some(EventId { ms: -1, seq: -1 });
    }
    follow_stored(src, out).await
}

/// Follows a run that is not live in this process — another replica runs it, it waits to be
/// claimed, or it has ended — through the frames stored for it, until it ends. A live join
/// (no `Last-Event-ID`) starts after what is stored when it connects. Frames of runs that are
/// not resumable are not stored: such a stream only ends when the run does.
async fn follow_stored(src: &SseSource, out: &mut Out) -> bool {
    if out.cursor.is_none() {
        out.cursor = Some(newest_stored(src).await);
    }
    let mut poll = tokio::time::interval(STORE_POLL);
    let mut beat =
        tokio::time::interval_at(tokio::time::Instant::now() + src.heartbeat, src.heartbeat);
    loop {
        tokio::select! {
            _ = poll.tick() => {
                // The status first: a run's frames are all stored before it is marked ended.
                let ended = match src.store.get_run(src.run_id).await {
                    Ok(run) => run.is_none_or(|r| !r.status.is_inflight()),
                    Err(error) => {
                        tracing::warn!(%error, run_id = %src.run_id, "could not read the run");
                        false
                    }
                };
                if !replay(src, out, None).await {
                    return false;
                }
                if ended {
                    return true;
                }
            }
            _ = beat.tick() => {
                if !out.heartbeat().await {
                    return false;
                }
            }
            () = src.shutdown.cancelled() => return true,
            () = out.tx.closed() => return false,
        }
    }
}

async fn replay(src: &SseSource, out: &mut Out, unflushed: Option<&[Arc<Frame>]>) -> bool {
    let after = out.cursor.filter(|c| c.ms >= 0);
    let stored = match src.store.run_events_after(src.run_id, after).await {
        Ok(events) => events,
        Err(error) => {
            tracing::warn!(%error, run_id = %src.run_id, "could not read stored events for replay");
            Vec::new()
        }
    };
    for event in stored {
        if !out.frame(&Frame::from(event)).await {
            return false;
        }
    }
    for frame in unflushed.unwrap_or_default() {
        if !out.frame(frame).await {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn frames_are_crlf_with_event_data_id_order() {
        let frame = Frame::new(
            EventId { ms: 17, seq: 2 },
            Uuid::nil().into(),
            "values".into(),
            "{\"a\":1}".into(),
        );
        assert_eq!(
            &frame.wire(true)[..],
            b"event: values\r\ndata: {\"a\":1}\r\nid: 17-2\r\n\r\n"
        );
        assert_eq!(
            &frame.wire(false)[..],
            b"event: values\r\ndata: {\"a\":1}\r\n\r\n"
        );
    }
}
