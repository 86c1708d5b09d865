//! The thread-centric event stream of `@langchain/react`'s `useStream` (LangGraph's "v2 event
//! streaming"): the thread's recent runs, oldest first, replayed and then followed, as protocol
//! events. An event's `event_id` derives from the frame it came from and its `seq` from that
//! frame's time (see `Writer::number`), so every connection, on any replica, gives the same
//! event the same id and number, whether it saw it live or replayed, and however many runs it
//! replayed or were deleted meanwhile. The same tape feeds an SSE body (`events_sse_body`)
//! or the subscriptions of one WebSocket (`SocketEvents`).

mod translate;

pub use translate::{ProtocolEvent, RunTranslator, node_of};

use super::{Bus, Frame, STORE_POLL, follow_run};
use crate::ids::{RunId, ThreadId};
use crate::store::{Run, Store};
use crate::telemetry::metrics::SseSubscriber;
use axum::body::Body;
use bytes::Bytes;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// The channels a subscription may name (besides `custom:<name>`).
pub const CHANNELS: [&str; 9] = [
    "values",
    "updates",
    "checkpoints",
    "messages",
    "tools",
    "custom",
    "lifecycle",
    "input",
    "tasks",
];

/// How often an idle connection looks for runs another replica created on its thread.
const DISCOVERY_POLL: Duration = Duration::from_secs(1);

/// The runs a new connection replays: the newest ones (clients need the current run; older
/// ones are in the thread's state), so a connection's work does not grow with the thread.
const REPLAYED_RUNS: i64 = 20;

/// `seq` = the event's time in milliseconds × this, plus its place among the events of the
/// same millisecond. Below 2^53 (exact in JavaScript) until the year 2100.
const SEQ_PER_MS: u64 = 2048;

/// Which events a connection wants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    channels: Vec<String>,
    /// Namespace prefixes; empty passes every namespace.
    namespaces: Vec<Vec<String>>,
    depth: Option<usize>,
    /// Events with `seq <= since` were seen already.
    since: Option<u64>,
}

impl Filter {
    /// Reads `{channels, namespaces?, depth?, since?}`; the error says what is wrong.
    pub fn parse(body: &Value) -> Result<Self, String> {
        let channels: Vec<String> = match body.get("channels") {
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|c| c.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or("channels must be a list of strings")?,
            _ => return Err("channels is required and must be a non-empty array".into()),
        };
        let unknown: Vec<&str> = channels
            .iter()
            .map(String::as_str)
            .filter(|c| {
                !CHANNELS.contains(c) && c.strip_prefix("custom:").is_none_or(str::is_empty)
            })
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "channels contains unsupported entries: {} (known: {}, custom:<name>)",
                unknown.join(", "),
                CHANNELS.join(", ")
            ));
        }
        let namespaces = body["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ns| {
                ns.as_array()?
                    .iter()
                    .map(|s| s.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .collect();
        let count = |key: &str| body.get(key).and_then(Value::as_u64);
        Ok(Self {
            channels,
            namespaces,
            depth: count("depth").map(|d| d as usize),
            since: count("since"),
        })
    }

    pub fn matches(&self, seq: u64, event: &ProtocolEvent) -> bool {
        if self.since.is_some_and(|since| seq <= since) {
            return false;
        }
        let channel = event.channel();
        let named = self.channels.iter().any(|c| {
            c == channel
                || (channel == "custom"
                    && c.strip_prefix("custom:")
                        .is_some_and(|name| event.data["name"] == name))
        });
        named && self.in_namespaces(event)
    }

    /// Namespaces: any when none are named; else under a named prefix, at most `depth` below.
    /// A subgraph's `messages` go only to connections that named that subgraph (a non-empty
    /// prefix): `useStream`'s root pump asks for depth 1 to learn of subagents, and merges every
    /// message it receives into the conversation, where the supervisor's and researchers'
    /// internal turns do not belong (a scoped view, `useMessages(stream, subgraph)`, names
    /// the subgraph and gets them).
    fn in_namespaces(&self, event: &ProtocolEvent) -> bool {
        let ns = &event.namespace;
        let internal_message = event.method == "messages" && !ns.is_empty();
        if self.namespaces.is_empty() {
            return true;
        }
        self.namespaces.iter().any(|prefix| {
            prefix.len() <= ns.len()
                && prefix.iter().zip(ns).all(|(p, s)| segment_matches(p, s))
                && self.depth.is_none_or(|d| ns.len() - prefix.len() <= d)
                && !(internal_message && prefix.is_empty())
        })
    }
}

/// A prefix segment without `:` names a node: it matches that node's segments of any task.
fn segment_matches(prefix: &str, segment: &str) -> bool {
    prefix == segment || (!prefix.contains(':') && node_of(segment) == prefix)
}

/// What the tape needs to know of a run: whether its frames are stored (else only its
/// lifecycle shows), and its graph's name. (Run parameters are the runs module's to read.)
pub type Describe = fn(&Run) -> (bool, String);

/// What a thread's event stream reads from.
pub struct ThreadTape {
    pub store: Arc<dyn Store>,
    pub describe: Describe,
    pub bus: Bus,
    pub thread_id: ThreadId,
    /// Who subscribed: runs are played only while the thread under this id is theirs.
    pub owner: crate::store::Owner,
    pub shutdown: CancellationToken,
    pub heartbeat: Duration,
}

/// The SSE body of `POST /threads/{id}/stream/events`: the thread's runs replayed, then new
/// ones as they come, with heartbeats, until the client goes away or the server stops.
pub fn events_sse_body(tape: ThreadTape, filter: Filter) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let _open = SseSubscriber::open();
        // The heartbeats end with the tape (client gone, or the server shutting down), so the
        // response ends and a graceful shutdown is not held up by open pages.
        let beats = AbortOnDropHandle::new(tokio::spawn(heartbeats(tx.clone(), tape.heartbeat)));
        let mut writer = Writer {
            out: Out::Sse(tx),
            filter: Some(filter),
            seq: 0,
        };
        tape.play(&mut writer).await;
        drop(beats);
    });
    Body::from_stream(ReceiverStream::new(rx))
}

/// The events of one WebSocket, shared by its subscriptions. One tape plays the thread for
/// the whole socket, and an event goes out once, in order, when any subscription passes it
/// (as LangGraph's server sends it: the client hands it to each subscription it matches).
/// A subscription made after events went out gets those it passes replayed by a tape of its
/// own, which stops where the socket's tape had got to; the client drops repeats by
/// `event_id`.
#[derive(Clone)]
pub struct SocketEvents {
    tx: mpsc::Sender<String>,
    shared: Arc<Mutex<Subscriptions>>,
}

#[derive(Default)]
struct Subscriptions {
    filters: HashMap<String, Filter>,
    /// The `seq` of the last event the socket's tape looked at.
    last_seq: u64,
    live: bool,
}

impl SocketEvents {
    /// Events go out as text frames on `tx`.
    pub fn new(tx: mpsc::Sender<String>) -> Self {
        Self {
            tx,
            shared: Arc::default(),
        }
    }

    /// Adds (or replaces) subscription `id`. Returns what to run for it: the socket's tape on
    /// its first subscription, the replay of what the socket had already passed on later ones.
    /// Either ends when the socket closes, the thread stops being the subscriber's or the
    /// server stops.
    pub fn subscribe(
        &self,
        id: String,
        tape: ThreadTape,
        filter: Filter,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let mut shared = self.shared();
        shared.filters.insert(id, filter.clone());
        let (out, filter) = if !shared.live {
            shared.live = true;
            (Out::Socket(self.clone()), None)
        } else if shared.last_seq > 0 {
            let until = shared.last_seq;
            (Out::Replay(self.tx.clone(), until), Some(filter))
        } else {
            return None;
        };
        let mut writer = Writer {
            out,
            filter,
            seq: 0,
        };
        Some(async move { tape.play(&mut writer).await })
    }

    /// Ends subscription `id`; false when the socket has none of that id.
    pub fn unsubscribe(&self, id: &str) -> bool {
        self.shared().filters.remove(id).is_some()
    }

    pub fn count(&self) -> usize {
        self.shared().filters.len()
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Subscriptions> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a subscription passes the event. Looked at under the lock a new subscription
    /// takes, so each event is either the socket tape's to send or in the new one's replay.
    fn passes(&self, event: &ProtocolEvent, seq: u64) -> bool {
        let mut shared = self.shared();
        shared.last_seq = shared.last_seq.max(seq);
        shared.filters.values().any(|f| f.matches(seq, event))
    }
}

async fn heartbeats(tx: mpsc::Sender<Result<Bytes, std::io::Error>>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tick.tick().await;
        if tx
            .send(Ok(Bytes::from_static(super::HEARTBEAT)))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Numbers every event of the tape and sends the ones the filter passes (all, without one).
struct Writer {
    out: Out,
    filter: Option<Filter>,
    seq: u64,
}

/// Where a tape's events go: an SSE body, a WebSocket's subscriptions, or one subscription's
/// replay of the events up to a `seq` (then it stops).
enum Out {
    Sse(mpsc::Sender<Result<Bytes, std::io::Error>>),
    Socket(SocketEvents),
    Replay(mpsc::Sender<String>, u64),
}

impl Out {
    async fn closed(&self) {
        match self {
            Self::Sse(tx) => tx.closed().await,
            Self::Socket(events) => events.tx.closed().await,
            Self::Replay(tx, _) => tx.closed().await,
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Self::Sse(tx) => tx.is_closed(),
            Self::Socket(events) => events.tx.is_closed(),
            Self::Replay(tx, _) => tx.is_closed(),
        }
    }

    /// A replay ends with the runs it found at its start.
    fn replays(&self) -> bool {
        matches!(self, Self::Replay(..))
    }

    /// False when the client went away (or a replay is done).
    async fn send(&self, event: &ProtocolEvent, seq: u64) -> bool {
        match self {
            Self::Sse(tx) => {
                let frame = format!(
                    "event: {}\r\ndata: {}\r\nid: {}\r\n\r\n",
                    event.method,
                    event.envelope(seq),
                    seq
                );
                tx.send(Ok(Bytes::from(frame))).await.is_ok()
            }
            Self::Socket(events) => {
                if !events.passes(event, seq) {
                    return true;
                }
                events
                    .tx
                    .send(event.envelope(seq).to_string())
                    .await
                    .is_ok()
            }
            Self::Replay(tx, _) => tx.send(event.envelope(seq).to_string()).await.is_ok(),
        }
    }
}

impl Writer {
    /// The event's `seq`: from its time, which the frame it came from fixes (or the run's
    /// creation and end for lifecycle events), kept increasing. Every connection numbers the
    /// same events alike, even one that replayed fewer runs or saw a run that was deleted
    /// since.
    fn number(&mut self, event: &ProtocolEvent) -> u64 {
        let floor = u64::try_from(event.timestamp).unwrap_or(0) * SEQ_PER_MS;
        self.seq = floor.max(self.seq + 1);
        self.seq
    }

    /// False when the client went away.
    async fn send(&mut self, events: Vec<ProtocolEvent>) -> bool {
        for event in events {
            let seq = self.number(&event);
            if let Out::Replay(_, until) = self.out
                && seq > until
            {
                return false;
            }
            if self
                .filter
                .as_ref()
                .is_some_and(|f| !f.matches(seq, &event))
            {
                continue;
            }
            if !self.out.send(&event, seq).await {
                return false;
            }
        }
        !self.out.is_closed()
    }
}

impl ThreadTape {
    async fn play(&self, out: &mut Writer) {
        let mut played: HashSet<RunId> = HashSet::new();
        let mut pinned: Option<crate::time::Timestamp> = None;
        // A run created here announces itself on the thread's channel at once; runs created
        // on other replicas are found by reading the store now and then.
        let mut nudges = self.bus.subscribe_thread(self.thread_id);
        loop {
            while !matches!(
                nudges.try_recv(),
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
            ) {}
            let window = if played.is_empty() { REPLAYED_RUNS } else { 5 };
            let runs = match self.runs(window, &played).await {
                Ok(runs) => runs,
                Err(error) => {
                    tracing::warn!(%error, thread_id = %self.thread_id, "could not list the thread's runs");
                    Vec::new()
                }
            };
            let new: Vec<Run> = runs
                .into_iter()
                .filter(|r| !played.contains(&r.run_id))
                .collect();
            // The subscription may come before the thread exists (the protocol creates threads
            // on first use): the thread is pinned when it appears, and must be the
            // subscriber's; one deleted and created again under this id ends the stream.
            if !new.is_empty() && !self.still_theirs(&mut pinned).await {
                return;
            }
            for run in new {
                if !self.play_run(&run, out).await {
                    return;
                }
                played.insert(run.run_id);
            }
            if out.out.replays() {
                return;
            }
            tokio::select! {
                _ = nudges.recv() => {}
                () = tokio::time::sleep(DISCOVERY_POLL) => {}
                () = out.out.closed() => return,
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Whether the thread under this id is the subscriber's, and the one first seen (its
    /// creation time pinned in `pinned`).
    async fn still_theirs(&self, pinned: &mut Option<crate::time::Timestamp>) -> bool {
        let thread = match self.store.get_thread(self.thread_id).await {
            Ok(Some(thread)) => thread,
            Ok(None) => return false,
            Err(error) => {
                tracing::warn!(%error, thread_id = %self.thread_id, "could not re-check the thread");
                return false;
            }
        };
        if thread.owner != self.owner {
            return false;
        }
        *pinned.get_or_insert(thread.created_at) == thread.created_at
    }

    /// The thread's newest runs, oldest first: `window` of them, or more while every one
    /// listed is new (runs created faster than a connection looks).
    async fn runs(
        &self,
        window: i64,
        played: &HashSet<RunId>,
    ) -> Result<Vec<Run>, crate::store::StoreError> {
        let mut limit = window;
        loop {
            let mut runs = self.store.list_runs(self.thread_id, None, limit, 0).await?;
            let all_new = runs.iter().all(|r| !played.contains(&r.run_id));
            if played.is_empty() || !all_new || runs.len() < limit as usize || limit >= 1000 {
                runs.reverse();
                return Ok(runs);
            }
            limit *= 4;
        }
    }

    /// One run from its start to its end; false when the client went away.
    async fn play_run(&self, run: &Run, out: &mut Writer) -> bool {
        let (resumable, graph) = (self.describe)(run);
        let mut translator = RunTranslator::new(run.run_id, graph);
        if !out.send(translator.start(run.created_at.millis())).await {
            return false;
        }
        if resumable {
            // Its frames are stored: replay them, then follow it live.
            let (tx, mut frames) = mpsc::channel::<Frame>(256);
            let follow = tokio::spawn(follow_run(
                self.store.clone(),
                self.bus.clone(),
                run.run_id,
                self.shutdown.clone(),
                tx,
            ));
            while let Some(frame) = frames.recv().await {
                if !out.send(translator.frame(&frame)).await {
                    follow.abort();
                    return false;
                }
            }
            let _ = follow.await;
        } else if !self.until_ended(run.run_id, out).await {
            // Runs started without a stored stream show only their lifecycle.
            return false;
        }
        if self.shutdown.is_cancelled() {
            return false;
        }
        let ended = match self.store.get_run(run.run_id).await {
            Ok(found) => found.map(|r| (r.status, r.updated_at.millis())),
            Err(error) => {
                tracing::warn!(%error, run_id = %run.run_id, "could not read a run's status");
                None
            }
        };
        out.send(translator.finish(ended)).await
    }

    async fn until_ended(&self, run_id: RunId, out: &Writer) -> bool {
        loop {
            match self.store.get_run(run_id).await {
                Ok(Some(run)) if run.status.is_inflight() => {}
                Ok(_) => return true,
                Err(error) => tracing::warn!(%error, %run_id, "could not read a run's status"),
            }
            tokio::select! {
                () = tokio::time::sleep(STORE_POLL) => {}
                () = out.out.closed() => return false,
                () = self.shutdown.cancelled() => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(method: &'static str, ns: &[&str]) -> ProtocolEvent {
        ProtocolEvent {
            event_id: "e".into(),
            method,
            namespace: ns.iter().map(|s| (*s).to_owned()).collect(),
            node: None,
            timestamp: 0,
            data: json!({}),
        }
    }

    #[test]
    fn filters_by_channel_namespace_prefix_depth_and_since() {
        let root_pump = Filter::parse(&json!({"channels": ["values", "lifecycle", "input"],
                                              "namespaces": [[]], "depth": 1}))
        .unwrap();
        assert!(root_pump.matches(1, &event("values", &[])));
        assert!(root_pump.matches(1, &event("lifecycle", &["research_supervisor:1"])));
        assert!(!root_pump.matches(1, &event("values", &["a:1", "researcher:2"])));
        assert!(root_pump.matches(1, &event("input.requested", &[])));
        assert!(!root_pump.matches(1, &event("messages", &[])));
        let with_messages =
            Filter::parse(&json!({"channels": ["messages"], "namespaces": [[]], "depth": 1}))
                .unwrap();
        assert!(with_messages.matches(1, &event("messages", &[])));
        assert!(
            !with_messages.matches(1, &event("messages", &["research_supervisor:1"])),
            "a subgraph's messages are not the conversation"
        );
        let scoped = Filter::parse(
            &json!({"channels": ["messages"], "namespaces": [["research_supervisor"]]}),
        )
        .unwrap();
        assert!(scoped.matches(1, &event("messages", &["research_supervisor:1"])));
        let everything = Filter::parse(&json!({"channels": ["messages"]})).unwrap();
        assert!(everything.matches(
            1,
            &event("messages", &["research_supervisor:1", "researcher:2"])
        ));
        let by_node = Filter::parse(
            &json!({"channels": ["values"], "namespaces": [["researcher"]], "since": 5}),
        )
        .unwrap();
        assert!(by_node.matches(6, &event("values", &["researcher:9", "x:1"])));
        assert!(!by_node.matches(5, &event("values", &["researcher:9"])));
        assert!(!by_node.matches(6, &event("values", &["supervisor:9"])));
    }

    #[test]
    fn bad_subscriptions_are_refused_with_the_reason() {
        for (body, says) in [
            (json!({}), "channels is required"),
            (json!({"channels": []}), "channels is required"),
            (json!({"channels": ["values", "debug"]}), "debug"),
            (json!({"channels": [1]}), "strings"),
        ] {
            let why = Filter::parse(&body).unwrap_err();
            assert!(why.contains(says), "{body}: {why}");
        }
        assert!(Filter::parse(&json!({"channels": ["custom:progress", "checkpoints"]})).is_ok());
    }
}
