//! The HTTP connection loop. `axum::serve` sets no deadlines and no connection cap, and hyper's
//! own header timeout starts only once a request's first bytes arrive (the HTTP/1-or-2
//! detection waits for 24 bytes first), so a socket that sends nothing would hold its slot for
//! ever. Connections are served here with hyper directly, each watched by this module:
//!
//! - a connection must start its first request within `first_request_timeout`, and is closed
//!   once it has had no request in flight for `idle_timeout` (HTTP/1 keep-alive and HTTP/2 alike);
//! - at most `max_connections` at once, and `max_connections_per_address` from one address;
//! - at a cap, the longest-idle connection (one with no request in flight) is closed to make
//!   room, so silent sockets cannot lock out a client that has something to ask. Only when every
//!   connection is busy does the loop wait, and then new connections wait in the kernel backlog.
//!
//! All of them are drained gracefully on shutdown.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How connections are served.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client address (0: no cap of its own).
    pub max_connections_per_address: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a new connection may take to start its first request.
    pub first_request_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once.
    pub http2_max_concurrent_streams: u32,
}

/// Serves `app` on `listener` until `stop` fires, then waits for open connections to finish
/// (streams end on the same token).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let table = Arc::new(Table::new(limits.clone()));
    let graceful = GracefulShutdown::new();
    let builder = connection_builder(&limits);
    loop {
        // At the cap with every connection busy, stop accepting until one ends or goes idle.
        tokio::select! {
            () = table.wait_for_room() => {}
            () = stop.cancelled() => break,
        }
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let Some(slot) = table.admit(remote.ip()) else {
            tracing::debug!(%remote, "connection refused: its address has every slot busy");
            continue;
        };
        // Without TCP_NODELAY the small first SSE frame waits on the client's delayed ACK
        // (measured: ~45 ms to the first event on an idle server, 2.5 ms with it).
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let activity = slot.activity.clone();
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(remote));
            let in_flight = InFlight::begin(activity.clone());
            let response = app.clone().oneshot(req);
            async move {
                let response = response.await?;
                // The request stays in flight until its response body is sent (or dropped):
                // an SSE stream is a busy connection, not an idle one.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(TrackedBody {
                        body,
                        _in_flight: in_flight,
                    })
                }))
            }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), service)
            .into_owned();
        let conn = graceful.watch(conn);
        let table = table.clone();
        tokio::spawn(async move {
            watch_connection(conn, &slot, &table.limits).await;
            table.release(&slot);
        });
    }
    graceful.shutdown().await;
}

fn connection_builder(limits: &ConnectionLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        // A client that resets streams as fast as it opens them (CVE-2023-44487, "rapid
        // reset") is disconnected; one that never answers a ping too.
        .max_pending_accept_reset_streams(Some(20))
        .max_local_error_reset_streams(Some(256))
        .max_header_list_size(64 * 1024)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Runs one connection until it ends, is evicted, or sits idle past its deadline. A dropped
/// connection closes its socket; it is dropped only with no request in flight.
async fn watch_connection<C>(conn: C, slot: &Slot, limits: &ConnectionLimits)
where
    C: std::future::Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    tokio::pin!(conn);
    let activity = &slot.activity;
    // Checked at least this often: the deadline moves when requests begin and end.
    let every = limits.idle_timeout.min(limits.first_request_timeout);
    let mut wake = Instant::now() + every;
    loop {
        tokio::select! {
            ended = &mut conn => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = slot.evict.cancelled() => {
                tracing::debug!("idle connection closed to make room for another");
                return;
            }
            () = tokio::time::sleep_until(wake) => {
                let now = Instant::now();
                let deadline = activity.deadline(limits);
                if activity.in_flight() == 0 && deadline <= now {
                    tracing::debug!(
                        first_request = !activity.started(),
                        "connection closed after its idle deadline"
                    );
                    return;
                }
                wake = if activity.in_flight() == 0 {
                    deadline.min(now + every)
                } else {
                    now + every
                };
            }
        }
    }
}

/// What a connection is doing, shared by its watcher, its requests and the table.
struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    started: AtomicBool,
    /// When a request last began or ended, in milliseconds after `opened`.
    last_change_ms: AtomicU64,
    /// Woken when the connection goes idle (the accept loop may be waiting for room).
    room: Arc<Notify>,
}

impl Activity {
    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_change_ms.store(ms, Ordering::Release);
    }

    fn last_change(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_change_ms.load(Ordering::Acquire))
    }

    /// When the connection is closed if it has no request in flight by then.
    fn deadline(&self, limits: &ConnectionLimits) -> Instant {
        if self.started() {
            self.last_change() + limits.idle_timeout
        } else {
            self.opened + limits.first_request_timeout
        }
    }
}

/// One request in flight on a connection; dropped when its response body is done.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.started.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.touch();
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.room.notify_waiters();
        }
    }
}

/// A response body that keeps its request in flight until it is sent or dropped.
struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's place in the table.
struct Slot {
    id: u64,
    address: IpAddr,
    activity: Arc<Activity>,
    /// Cancelled when the table closes this connection to make room.
    evict: CancellationToken,
}

/// The open connections, counted in total and per address.
struct Table {
    limits: ConnectionLimits,
    state: Mutex<TableState>,
    /// Woken when a connection ends or goes idle.
    room: Arc<Notify>,
}

#[derive(Default)]
struct TableState {
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_address: HashMap<IpAddr, usize>,
}

struct Entry {
    address: IpAddr,
    activity: Arc<Activity>,
    evict: CancellationToken,
}

impl Table {
    fn new(limits: ConnectionLimits) -> Self {
        Table {
            limits,
            state: Mutex::new(TableState::default()),
            room: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableState> {
        // The table holds counts only; a panic elsewhere leaves them usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Returns once there is room for one more connection: below the cap, or an idle
    /// connection that can be closed for it.
    async fn wait_for_room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                if state.open.len() < self.limits.max_connections
                    || state.open.values().any(|e| e.activity.in_flight() == 0)
                {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Takes a slot for a connection from `address`, closing the longest-idle connection (of
    /// that address when its own cap is reached, of any otherwise) if there is no room.
    /// `None`: no room, and nothing idle to close.
    fn admit(&self, address: IpAddr) -> Option<Slot> {
        let mut state = self.lock();
        let per_address_cap = self.limits.max_connections_per_address;
        let from_address = state.per_address.get(&address).copied().unwrap_or(0);
        if per_address_cap > 0 && from_address >= per_address_cap {
            let victim = state.longest_idle(Some(address))?;
            state.evict(victim);
        }
        if state.open.len() >= self.limits.max_connections {
            let victim = state.longest_idle(None)?;
            state.evict(victim);
        }
        state.next_id += 1;
        let id = state.next_id;
        let activity = Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            last_change_ms: AtomicU64::new(0),
            room: self.room.clone(),
        });
        let evict = CancellationToken::new();
        state.open.insert(
            id,
            Entry {
                address,
                activity: activity.clone(),
                evict: evict.clone(),
            },
        );
        *state.per_address.entry(address).or_default() += 1;
        Some(Slot {
            id,
            address,
            activity,
            evict,
        })
    }

    /// Gives a finished connection's slot back (an evicted one has already left the table).
    fn release(&self, slot: &Slot) {
        let mut state = self.lock();
        if state.open.remove(&slot.id).is_some() {
            state.forget_address(slot.address);
        }
        drop(state);
        self.room.notify_waiters();
    }
}

impl TableState {
    /// The connection, from `address` if given, that has been idle longest.
    fn longest_idle(&self, address: Option<IpAddr>) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, e)| address.is_none_or(|a| e.address == a))
            .filter(|(_, e)| e.activity.in_flight() == 0)
            .min_by_key(|(_, e)| e.activity.last_change())
            .map(|(id, _)| *id)
    }

    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.open.remove(&id) {
            entry.evict.cancel();
            self.forget_address(entry.address);
        }
    }

    fn forget_address(&mut self, address: IpAddr) {
        if let Some(count) = self.per_address.get_mut(&address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
    }
}
