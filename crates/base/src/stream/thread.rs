//! The thread stream (`GET /threads/{id}/stream`): the frames of every run on a thread, one
//! run after another, each followed like a run's own stream (live here, or through the store
//! when another replica runs it), with a `run_done` marker after each. Frame ids are the runs'
//! own (time-ordered, and a thread runs one run at a time), so `Last-Event-ID` resumes after
//! any frame or marker.

use super::{Frame, HEARTBEAT, StreamModes, follow_run};
use crate::ids::{RunId, ThreadId};
use crate::store::{EventId, Run, Store};
use crate::stream::Bus;
use crate::telemetry::metrics::SseSubscriber;
use axum::body::Body;
use bytes::Bytes;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// How often an idle stream looks for runs another replica created on its thread.
const DISCOVERY_POLL: Duration = Duration::from_secs(1);
/// Runs a resuming connection looks back through.
const LOOKBACK: i64 = 20;

/// What a thread stream carries (`stream_mode` of `threads.join_stream`).
#[derive(Clone, Debug, PartialEq)]
pub enum ThreadModes {
    /// Every frame of the runs (optionally only some run stream modes), plus `run_done`.
    Runs(Option<StreamModes>),
    /// Only each run's opening `metadata` and its `run_done`.
    Lifecycle,
}

impl ThreadModes {
    /// Reads the `stream_mode` values: `run_modes` (the default), `lifecycle`, or run stream
    /// modes (`values`, `updates`, …) to narrow `run_modes`.
    pub fn parse(names: &[String]) -> Result<Self, String> {
        let names: Vec<&str> = names
            .iter()
            .flat_map(|n| n.split(','))
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if names.contains(&"state_update") {
            return Err(
                "stream_mode: 'state_update' is not served; use 'run_modes' (and \
                        the thread's /state) or 'lifecycle'"
                    .into(),
            );
        }
        if names.contains(&"lifecycle") {
            return match names.iter().all(|n| *n == "lifecycle") {
                true => Ok(Self::Lifecycle),
                false => Err("stream_mode: 'lifecycle' cannot be combined with other modes".into()),
            };
        }
        let run_modes: Vec<String> = names
            .into_iter()
            .filter(|n| *n != "run_modes")
            .map(str::to_owned)
            .collect();
        if run_modes.is_empty() {
            return Ok(Self::Runs(None));
        }
        StreamModes::from_query(&run_modes).map(Self::Runs)
    }

    fn passes(&self, frame: &Frame) -> bool {
        match self {
            Self::Runs(None) => true,
            Self::Runs(Some(modes)) => modes.matches_event(&frame.event),
            Self::Lifecycle => frame.event == "metadata",
        }
    }
}

/// What a thread stream reads from and how.
pub struct ThreadFollow {
    pub store: Arc<dyn Store>,
    pub bus: Bus,
    pub thread_id: ThreadId,
    /// The thread as it was when the stream opened (its owner checked): runs are followed only
    /// while the thread under this id is still that one.
    pub opened: ThreadIdentity,
    pub modes: ThreadModes,
    /// Frames after this one are sent: the client's `Last-Event-ID`, or now for a new
    /// connection (it follows runs from now on).
    pub after: EventId,
    pub heartbeat: Duration,
    pub shutdown: CancellationToken,
}

/// What tells one thread from another created later under the same id.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadIdentity {
    pub owner: crate::store::Owner,
    pub created_at: crate::time::Timestamp,
}

/// The SSE body of a thread stream, until the client goes away or the server stops.
pub fn thread_sse_body(follow: ThreadFollow) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let _open = SseSubscriber::open();
        let beats = AbortOnDropHandle::new(tokio::spawn(heartbeats(tx.clone(), follow.heartbeat)));
        follow.play(&tx).await;
        drop(beats);
    });
    Body::from_stream(ReceiverStream::new(rx))
}

async fn heartbeats(tx: mpsc::Sender<Result<Bytes, std::io::Error>>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        if tx.send(Ok(Bytes::from_static(HEARTBEAT))).await.is_err() {
            return;
        }
    }
}

type Wire = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// Frames of this process's runs seen on the thread's channel, kept until their run is played
/// (a run's first frames are published before a connection can subscribe to the run itself).
type Seen = HashMap<RunId, Vec<Arc<Frame>>>;

/// Frames kept per run that is not being played yet (its opening frames are all that matter).
const SEEN_PER_RUN: usize = 64;

fn keep(seen: &mut Seen, frame: Arc<Frame>, playing: Option<RunId>) {
    if Some(frame.run_id) == playing {
        return;
    }
    let frames = seen.entry(frame.run_id).or_default();
    if frames.len() < SEEN_PER_RUN {
        frames.push(frame);
    }
}

impl ThreadFollow {
    async fn play(&self, tx: &Wire) {
        let mut done: HashSet<RunId> = HashSet::new();
        let mut seen = Seen::new();
        let mut cursor = self.after;
        // Runs created here publish on the thread's channel at once (which also wakes this
        // loop); those created on other replicas are found by reading the store now and then.
        let mut thread = self.bus.subscribe_thread(self.thread_id);
        loop {
            drain(&mut thread, &mut seen);
            let runs = match self
                .store
                .list_runs(self.thread_id, None, LOOKBACK, 0)
                .await
            {
                Ok(runs) => runs,
                Err(error) => {
                    tracing::warn!(%error, thread_id = %self.thread_id, "could not list the thread's runs");
                    Vec::new()
                }
            };
            let fresh: Vec<Run> = runs
                .into_iter()
                .rev()
                .filter(|run| done.insert(run.run_id))
                .collect();
            // The owner was checked when the stream opened; a thread deleted and created again
            // under this id (by anyone) is another thread, whose runs this stream must not show.
            if !fresh.is_empty() && !self.still_the_same_thread().await {
                return;
            }
            for run in fresh {
                // A run that ended before the cursor has nothing left to send.
                if !run.status.is_inflight() && run.updated_at.millis() < cursor.ms {
                    continue;
                }
                let early = seen.remove(&run.run_id).unwrap_or_default();
                match self
                    .play_run(&run, cursor, early, &mut thread, &mut seen, tx)
                    .await
                {
                    Some(last) => cursor = cursor.max(last),
                    None => return,
                }
            }
            seen.retain(|id, _| !done.contains(id));
            tokio::select! {
                received = thread.recv() => {
                    if let Ok(frame) = received {
                        keep(&mut seen, frame, None);
                    }
                }
                () = tokio::time::sleep(DISCOVERY_POLL) => {}
                () = tx.closed() => return,
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Whether the thread under this id is the one the stream was opened on (a store error
    /// counts as no: the client reconnects and is checked again).
    async fn still_the_same_thread(&self) -> bool {
        match self.store.get_thread(self.thread_id).await {
            Ok(Some(thread)) => {
                self.opened
                    == ThreadIdentity {
                        owner: thread.owner,
                        created_at: thread.created_at,
                    }
            }
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(%error, thread_id = %self.thread_id, "could not re-check the thread");
                false
            }
        }
    }

    /// Sends the run's frames after `after` (those seen early first), then its `run_done`;
    /// returns the newest id sent or skipped, `None` when the client went away or the server
    /// stops.
    async fn play_run(
        &self,
        run: &Run,
        after: EventId,
        early: Vec<Arc<Frame>>,
        thread: &mut broadcast::Receiver<Arc<Frame>>,
        seen: &mut Seen,
        tx: &Wire,
    ) -> Option<EventId> {
        let (frames_tx, mut frames) = mpsc::channel::<Frame>(256);
        let follow = AbortOnDropHandle::new(tokio::spawn(follow_run(
            self.store.clone(),
            self.bus.clone(),
            run.run_id,
            self.shutdown.clone(),
            frames_tx,
        )));
        // The newest frame of the run received (sent or not): the marker goes after it.
        let mut newest = EventId { ms: -1, seq: -1 };
        for frame in early {
            if !self.pass(&frame, after, &mut newest, tx).await {
                return None;
            }
        }
        loop {
            tokio::select! {
                frame = frames.recv() => match frame {
                    Some(frame) => {
                        if !self.pass(&frame, after, &mut newest, tx).await {
                            return None;
                        }
                    }
                    None => break,
                },
                // Keep the opening frames of runs queued behind this one.
                received = thread.recv() => {
                    if let Ok(frame) = received {
                        keep(seen, frame, Some(run.run_id));
                    }
                }
            }
        }
        drop(follow);
        if self.shutdown.is_cancelled() {
            return None;
        }
        // After the run's last frame and not before its end, the same on every connection, so
        // a client resuming from it skips the whole run.
        let ended = self
            .store
            .get_run(run.run_id)
            .await
            .ok()
            .flatten()
            .map_or(newest.ms, |r| r.updated_at.millis());
        let marker = if ended > newest.ms {
            EventId { ms: ended, seq: 0 }
        } else {
            EventId {
                ms: newest.ms,
                seq: newest.seq + 1,
            }
        };
        if marker <= after {
            return Some(after);
        }
        let data = json!({"status": "run_done", "run_id": run.run_id}).to_string();
        let frame = Frame::new(marker, run.run_id, "metadata".into(), data.into());
        if tx.send(Ok(frame.wire(true))).await.is_err() {
            return None;
        }
        Some(marker)
    }

    /// Sends a frame the client has not seen and wants; false when the client went away.
    async fn pass(&self, frame: &Frame, after: EventId, newest: &mut EventId, tx: &Wire) -> bool {
        if frame.id <= *newest {
            return true;
        }
        *newest = frame.id;
        if frame.id <= after || !self.modes.passes(frame) {
            return true;
        }
        tx.send(Ok(frame.wire(true))).await.is_ok()
    }
}

/// Keeps what the thread's channel holds now.
fn drain(thread: &mut broadcast::Receiver<Arc<Frame>>, seen: &mut Seen) {
    loop {
        match thread.try_recv() {
            Ok(frame) => keep(seen, frame, None),
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn thread_stream_modes() {
        assert_eq!(ThreadModes::parse(&[]).unwrap(), ThreadModes::Runs(None));
        assert_eq!(
            ThreadModes::parse(&names(&["run_modes"])).unwrap(),
            ThreadModes::Runs(None)
        );
        assert_eq!(
            ThreadModes::parse(&names(&["lifecycle"])).unwrap(),
            ThreadModes::Lifecycle
        );
        assert!(matches!(
            ThreadModes::parse(&names(&["values"])).unwrap(),
            ThreadModes::Runs(Some(_))
        ));
        assert!(ThreadModes::parse(&names(&["state_update"])).is_err());
        assert!(ThreadModes::parse(&names(&["lifecycle", "values"])).is_err());
        assert!(ThreadModes::parse(&names(&["nonsense"])).is_err());
    }
}
