//! Per-run fan-out of SSE frames: live delivery to any number of subscribers, with the frames
//! not yet written to the store kept in memory so a client joining mid-run misses nothing.
//!
//! Replay-then-follow works in three parts: stored frames (up to what was flushed), the
//! in-memory unflushed frames, then live frames; ids are strictly increasing so duplicates
//! across the seams are dropped by comparing ids.

use crate::ids::{RunId, ThreadId};
use crate::store::{EventId, StoredEvent};
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// How many frames a slow subscriber may fall behind before it has to re-read the log (each
/// slot costs memory in every live run; lagging subscribers of resumable runs re-read the log).
const CHANNEL_CAPACITY: usize = 1024;

/// One SSE event as it goes on the wire.
#[derive(Clone, Debug)]
pub struct Frame {
    pub id: EventId,
    pub run_id: RunId,
    pub event: String,
    /// Compact one-line JSON.
    pub data: Arc<str>,
    /// The SSE bytes, without and with the `id:` line, made once for all subscribers.
    wire: [OnceLock<Bytes>; 2],
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.run_id, &self.event, &self.data)
            == (other.id, other.run_id, &other.event, &other.data)
    }
}

impl Frame {
    pub fn new(id: EventId, run_id: RunId, event: String, data: Arc<str>) -> Self {
        Self {
            id,
            run_id,
            event,
            data,
            wire: Default::default(),
        }
    }

    /// The frame exactly as the reference server writes it: `event`, `data`, optional `id`,
    /// CRLF line ends.
    pub fn wire(&self, with_id: bool) -> Bytes {
        self.wire[usize::from(with_id)]
            .get_or_init(|| {
                let mut out = String::with_capacity(self.event.len() + self.data.len() + 48);
                out.push_str("event: ");
                out.push_str(&self.event);
                out.push_str("\r\ndata: ");
                out.push_str(&self.data);
                out.push_str("\r\n");
                if with_id {
                    out.push_str("id: ");
                    out.push_str(&self.id.to_string());
                    out.push_str("\r\n");
                }
                out.push_str("\r\n");
                Bytes::from(out)
            })
            .clone()
    }

    pub fn to_stored(&self, thread_id: ThreadId) -> StoredEvent {
        StoredEvent {
            run_id: self.run_id,
            thread_id,
            id: self.id,
            event: self.event.clone(),
            data: self.data.clone(),
        }
    }
}

impl From<StoredEvent> for Frame {
    fn from(e: StoredEvent) -> Self {
        Self::new(e.id, e.run_id, e.event, e.data)
    }
}

/// The final result of a run, handed to waiters (`/wait`, `/join`).
pub type RunResult = Option<Value>;

struct RunState {
    tx: Option<broadcast::Sender<Arc<Frame>>>,
    /// Frames published but not yet in the store (only kept for resumable runs).
    unflushed: Vec<Arc<Frame>>,
    last_id: EventId,
}

/// The live channel of one run.
pub struct RunChannel {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    pub resumable: bool,
    /// Set once a worker of this process executes the run. A channel opened by the API for a
    /// run that another replica then claims never gets frames here.
    executing_here: AtomicBool,
    opened: Instant,
    state: Mutex<RunState>,
    done: watch::Sender<Option<RunResult>>,
}

impl RunChannel {
    fn lock(&self) -> MutexGuard<'_, RunState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Publishes one frame with the next id and returns it.
    pub fn publish(
        &self,
        event: String,
        data: String,
        thread_tx: Option<&ThreadSender>,
    ) -> Arc<Frame> {
        let mut state = self.lock();
        let id = next_id(state.last_id);
        state.last_id = id;
        let frame = Arc::new(Frame::new(id, self.run_id, event, data.into()));
        if self.resumable {
            state.unflushed.push(frame.clone());
        }
        if let Some(tx) = &state.tx {
            // No receivers is fine: nobody is watching right now.
            let _ = tx.send(frame.clone());
        }
        if let Some(tx) = thread_tx {
            let _ = tx.send(frame.clone());
        }
        frame
    }

    /// Whether a worker of this process executes (or executed) the run.
    pub fn is_executing_here(&self) -> bool {
        self.executing_here.load(Ordering::Acquire)
    }

    /// Continues a run's stream after `last` (its newest stored frame, written by an earlier
    /// attempt on any replica), so ids keep increasing across a takeover whatever the clocks.
    pub fn continue_after(&self, last: EventId) {
        let mut state = self.lock();
        if last > state.last_id {
            state.last_id = last;
        }
    }

    /// Whether nothing was published on this channel yet.
    pub fn is_fresh(&self) -> bool {
        self.lock().last_id == EventId { ms: 0, seq: 0 }
    }

    /// Frames to write to the store now.
    pub fn unflushed(&self) -> Vec<Arc<Frame>> {
        self.lock().unflushed.clone()
    }

    /// Forgets frames up to `upto`, which are now in the store.
    pub fn mark_flushed(&self, upto: EventId) {
        self.lock().unflushed.retain(|f| f.id > upto);
    }

    /// Ends live delivery (subscribers drain and then see the end) and hands out the result.
    pub fn close(&self, result: RunResult) {
        self.lock().tx = None;
        self.done.send_replace(Some(result));
    }

    /// Ends live delivery without a result: the run goes on (or ended) in another process, and
    /// subscribers and waiters follow it through the store.
    fn detach(&self) {
        let mut state = self.lock();
        state.tx = None;
        state.unflushed.clear();
    }

    /// A receiver of the run's result.
    pub fn result(&self) -> watch::Receiver<Option<RunResult>> {
        self.done.subscribe()
    }

    /// Subscribes to live frames and snapshots the unflushed ones, atomically.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        let state = self.lock();
        Subscription {
            channel: self.clone(),
            live: state.tx.as_ref().map(broadcast::Sender::subscribe),
            unflushed: state.unflushed.clone(),
        }
    }
}

/// A snapshot plus a live feed; see `stream::follow`.
pub struct Subscription {
    /// The channel subscribed to: whether it ran here tells a closed feed's meaning.
    pub channel: Arc<RunChannel>,
    /// `None` when the run has already closed.
    pub live: Option<broadcast::Receiver<Arc<Frame>>>,
    pub unflushed: Vec<Arc<Frame>>,
}

fn next_id(last: EventId) -> EventId {
    let ms = crate::time::Timestamp::now().millis();
    if ms > last.ms {
        EventId { ms, seq: 0 }
    } else {
        EventId {
            ms: last.ms,
            seq: last.seq + 1,
        }
    }
}

/// Sender of a thread-wide stream.
pub type ThreadSender = broadcast::Sender<Arc<Frame>>;

/// All live runs of this process.
#[derive(Clone, Default)]
pub struct Bus {
    runs: Arc<Mutex<HashMap<RunId, Arc<RunChannel>>>>,
    threads: Arc<Mutex<HashMap<ThreadId, ThreadSender>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Bus {
    pub fn new() -> Self {
        Self::default()
    }

    /// The run's channel, created on first use (by the request that creates the run, so it can
    /// subscribe before the first frame exists).
    pub fn open(&self, run_id: RunId, thread_id: ThreadId, resumable: bool) -> Arc<RunChannel> {
        channel_in(&mut lock(&self.runs), run_id, thread_id, resumable)
    }

    /// `open` for the worker about to execute the run; marked under the bus lock, so
    /// `release_foreign` never takes the channel from a run that starts here.
    pub fn open_for_execution(
        &self,
        run_id: RunId,
        thread_id: ThreadId,
        resumable: bool,
    ) -> Arc<RunChannel> {
        let mut runs = lock(&self.runs);
        let channel = channel_in(&mut runs, run_id, thread_id, resumable);
        channel.executing_here.store(true, Ordering::Release);
        channel
    }

    /// Runs announced here (their channel was opened by the API) that no worker of this
    /// process executes, opened at least `min_age` ago.
    pub fn foreign_runs(&self, min_age: Duration) -> Vec<RunId> {
        lock(&self.runs)
            .values()
            .filter(|c| !c.is_executing_here() && c.opened.elapsed() >= min_age)
            .map(|c| c.run_id)
            .collect()
    }

    /// Drops the channels of these runs unless a worker here has started one meanwhile. Their
    /// subscribers and waiters go on through the store; nothing is left in this process.
    pub fn release_foreign(&self, run_ids: &[RunId]) {
        let mut runs = lock(&self.runs);
        for run_id in run_ids {
            if let Entry::Occupied(entry) = runs.entry(*run_id)
                && !entry.get().is_executing_here()
            {
                entry.remove().detach();
            }
        }
    }

    /// Lets go of a run this process executed but no longer owns (another worker took it over,
    /// or it was handed back on shutdown): its subscribers and waiters go on through the store.
    pub fn hand_over(&self, run_id: RunId) {
        if let Some(channel) = lock(&self.runs).remove(&run_id) {
            channel.executing_here.store(false, Ordering::Release);
            channel.detach();
        }
    }

    /// The run's channel if the run is live in this process.
    pub fn get(&self, run_id: RunId) -> Option<Arc<RunChannel>> {
        lock(&self.runs).get(&run_id).cloned()
    }

    /// Closes and forgets a run's channel.
    pub fn close(&self, run_id: RunId, result: RunResult) {
        if let Some(ch) = lock(&self.runs).remove(&run_id) {
            ch.close(result);
        }
    }

    /// The sender for a thread's stream, if anyone listens.
    pub fn thread_sender(&self, thread_id: ThreadId) -> Option<ThreadSender> {
        let mut threads = lock(&self.threads);
        match threads.get(&thread_id) {
            Some(tx) if tx.receiver_count() > 0 => Some(tx.clone()),
            Some(_) => {
                threads.remove(&thread_id);
                None
            }
            None => None,
        }
    }

    /// Subscribes to every frame of every run on a thread from now on.
    pub fn subscribe_thread(&self, thread_id: ThreadId) -> broadcast::Receiver<Arc<Frame>> {
        lock(&self.threads)
            .entry(thread_id)
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    /// Number of live runs (for metrics and tests).
    pub fn live_runs(&self) -> usize {
        lock(&self.runs).len()
    }
}

/// The run's channel in `runs`, created when missing.
fn channel_in(
    runs: &mut HashMap<RunId, Arc<RunChannel>>,
    run_id: RunId,
    thread_id: ThreadId,
    resumable: bool,
) -> Arc<RunChannel> {
    runs.entry(run_id)
        .or_insert_with(|| {
            let (tx, _) = broadcast::channel(CHANNEL_CAPACITY);
            Arc::new(RunChannel {
                run_id,
                thread_id,
                resumable,
                executing_here: AtomicBool::new(false),
                opened: Instant::now(),
                state: Mutex::new(RunState {
                    tx: Some(tx),
                    unflushed: Vec::new(),
                    last_id: EventId { ms: 0, seq: 0 },
                }),
                done: watch::channel(None).0,
            })
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use uuid::Uuid;

    #[test]
    fn ids_increase_strictly_within_a_millisecond() {
        let bus = Bus::new();
        let ch = bus.open(Uuid::nil().into(), Uuid::nil().into(), true);
        let ids: Vec<EventId> = (0..500)
            .map(|_| ch.publish("values".into(), "{}".into(), None).id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ch.unflushed().len(), 500);
        ch.mark_flushed(ids[249]);
        assert_eq!(ch.unflushed().len(), 250);
    }

    #[tokio::test]
    async fn subscribers_see_frames_then_the_end() {
        let bus = Bus::new();
        let ch = bus.open(Uuid::nil().into(), Uuid::nil().into(), false);
        let mut sub = ch.subscribe();
        ch.publish("values".into(), json!({"a": 1}).to_string(), None);
        bus.close(Uuid::nil().into(), Some(json!({"a": 1})));
        let live = sub.live.as_mut().unwrap();
        assert_eq!(live.recv().await.unwrap().event, "values");
        assert!(live.recv().await.is_err());
        assert_eq!(*ch.result().borrow(), Some(Some(json!({"a": 1}))));
    }
}
