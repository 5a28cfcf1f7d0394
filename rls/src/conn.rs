//! The connections of both ports: a cap on how many are open, deadlines for a request's
//! headers and body, an idle timeout, HTTP/2 keepalive pings, and the drain.
//!
//! Each port runs one accept loop ([`serve`]) and a task per connection. The loop takes a
//! slot of the port's semaphore before it accepts: at the cap it stops accepting, and further
//! connections wait in the kernel's listen backlog until a connection closes and frees its
//! slot. A connection task holds its slot until it ends, so "open connections" counts every
//! connection the process holds a socket for, served or closing.
//!
//! A connection task owns hyper's connection and one timer, which enforces:
//!
//! * no request in flight for `idle_timeout` (HTTP/1: or for `header_timeout`, if shorter;
//!   a request is in flight until its response's headers on HTTP/1, until its stream ends on
//!   HTTP/2, so that a streaming call such as a health Watch holds its connection open):
//!   a graceful close (HTTP/1 closes an idle connection at once, or once the response being
//!   written is out; HTTP/2 sends GOAWAY and closes once its streams are done);
//! * HTTP/2 only, no request's headers within `header_timeout` of the connection opening (a
//!   peer that never sends the preface, or sends it and nothing else): closed at once;
//! * an idle connection's graceful close that has not completed within [`CLOSE_GRACE`] (a peer
//!   that does not read the response, or does not answer GOAWAY's ping): closed at once;
//! * the drain: a graceful close, and closed at once at the drain's deadline (the instant
//!   [`serve`]'s `stop` resolves to, one for every connection of the port) if still open then.
//!
//! HTTP/1's header deadline is hyper's own `header_read_timeout`: hyper starts it when it
//! begins reading a request head, which is at the connection's opening and again at the end
//! of each response, so it also bounds how long a kept-alive connection waits between
//! requests. It does not run while a response is written; the idle timer does, from the
//! response's headers on, so a client that stops reading is closed at the shorter of the two
//! timeouts plus [`CLOSE_GRACE`].
//!
//! A request's body must arrive within `body_timeout` of its headers (`TimedBody`): past it
//! the request is answered 408 (HTTP) or `DEADLINE_EXCEEDED` (gRPC).
//!
//! HTTP/2 bounds what unfinished gRPC messages hold (`Budgeted`): tonic buffers a message
//! until it is complete, reserving the length its 5-byte prefix announces as soon as it reads
//! the prefix, and it reads (releasing the stream's flow-control window) whatever arrives. A
//! stream takes what each message of its body may hold (its announced length, and the request
//! decoded from it, which tonic holds until the stream ends), unless the message is whole in
//! a frame that ends the stream (a call sent at once, decoded and decided as it is read), from
//! its connection's budget ([`MAX_CONNECTION_MESSAGE_BYTES`]) and then from the port's
//! ([`Limits::max_buffered_bytes`]) before tonic sees the prefix, and gives it back when its body
//! is dropped (the message decoded, or the stream ended). A stream that cannot take it waits,
//! unread (so the peer's window closes), within its body deadline; calls sent at once never
//! wait for it.
//!
//! Requests their handlers hold while they wait on Redis take from a second budget of each
//! port, of the same size ([`HandlerBudget`]), so that a port holds at most twice
//! [`Limits::max_buffered_bytes`] (plus what each connection reads ahead), and unfinished
//! messages, a client's to choose, never make a waiting call refused. tonic drops a unary
//! call's body once it holds the message and the end of the stream, before it calls the
//! handler: whatever its framing, a call whose handler waits holds its decoded request
//! uncounted by its stream, so the `ShouldRateLimit` handler takes what it holds from the
//! gRPC port's waiting budget (given to it through [`serve_with_budget`]) for as long as its
//! future lives, and answers `UNAVAILABLE` at once when that budget cannot hold it.
//!
//! HTTP/1 bounds what unfinished `/json` bodies hold the same way: the handler collects a body
//! (up to 4 MiB) before it reads it, so each frame that does not end its body takes its bytes
//! from the port's budget ([`Limits::max_buffered_bytes`], the HTTP port's own) before it is
//! passed on, and gives them back when the body is dropped (collected, or the connection
//! gone). A body that cannot take them waits, its connection unread, within its body
//! deadline (408); a request whose body arrives with its headers takes nothing and never
//! waits. A handler that holds the request it read while it waits (on Redis) takes what it
//! holds from the HTTP port's waiting budget ([`HandlerBudget`], in the request's extensions)
//! for as long as its future lives, and answers 503 at once when that budget cannot hold it.
//!
//! HTTP/2 runs each stream (its request's handler, then its response's body) in a task of its
//! own, spawned by hyper on the connection's executor (`Streams`): the connection task owns
//! those tasks, and ends them (and waits for them) when it ends, so that no handler outlives
//! its connection, nor [`serve`] once it returns. Every task of a port (its accept loop, its
//! connections, their streams) holds a place in the port's [`Tasks`] until its future is
//! dropped, so that its caller can also wait for them after dropping `serve`'s future, which
//! aborts them without waiting.

use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// How long a connection may take to close once it was asked to close gracefully (idle):
/// a peer that does not read its response or answer HTTP/2's GOAWAY ping is cut off then.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// How long the accept loop pauses after an accept error that is not about one connection
/// (out of file descriptors, out of memory), so that it does not spin while the error lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The least time between two log lines of accept errors on one port.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

/// The most streams one HTTP/2 connection of the gRPC port holds open (hyper's server default,
/// set here explicitly: tonic's builder, for one, turns it off when left unset): each open
/// stream may buffer a message of up to 4 MiB while it arrives. Envoy opens another connection
/// when it needs more.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 200;

/// The most an HTTP/1 connection reads ahead of its request's handler (hyper's read buffer:
/// a request's headers must fit in it, Envoy's own default limit being 60 KiB). A `/json`
/// body that waits for the port's budget holds at most this beyond it, so that the port holds
/// about its budget (`Limits::max_buffered_bytes`) plus this much per connection (at hyper's default, about
/// 400 KiB, 10,000 connections could hold 4 GB).
const HTTP1_READ_BUFFER: usize = 64 << 10;

/// The limits one port applies to its connections (`--max-connections`, `--header-timeout-ms`,
/// `--body-timeout-ms`, `--idle-timeout-ms`, `--grpc-keepalive-ms`,
/// `--grpc-keepalive-timeout-ms`, `--max-buffered-mib`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// HTTP/1: a request's headers complete within this of the connection opening or of the
    /// previous response. HTTP/2: the first request's headers within this of the opening.
    pub header_timeout: Duration,
    /// A request's body complete within this of its headers.
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long is closed gracefully.
    pub idle_timeout: Duration,
    /// HTTP/2: a PING after this long without a frame from the peer.
    pub keepalive_interval: Duration,
    /// HTTP/2: the connection is closed when a PING is not acknowledged within this.
    pub keepalive_timeout: Duration,
    /// The most bytes the port's unfinished requests hold together: gRPC messages and what
    /// they decode to (HTTP/2), `/json` bodies while they arrive (HTTP/1); and, apart, the
    /// most the requests its handlers hold while they wait on Redis hold together. Default
    /// [`MAX_PORT_MESSAGE_BYTES`]; a value below [`MIN_PORT_MESSAGE_BYTES`] is raised to it, so
    /// that any one message fits.
    pub max_buffered_bytes: usize,
}

/// The protocol a port speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 only (the HTTP port).
    Http1,
    /// HTTP/2 only, prior knowledge (the gRPC port).
    Http2,
}

impl Protocol {
    /// The port's name in metrics.
    fn port(self) -> &'static str {
        match self {
            Protocol::Http1 => "http",
            Protocol::Http2 => "grpc",
        }
    }
}

/// Serves `app` on `listener` until `stop` resolves, then drains: the listener is closed,
/// every connection is asked to close gracefully (HTTP/1 after its request in flight,
/// HTTP/2 by GOAWAY), and this returns once every connection has closed and every call on
/// them has ended. `stop` resolves to the drain's deadline: a connection still open then (a
/// peer that does not answer the GOAWAY, a call that does not end) is closed at that instant
/// and its calls are aborted, so that this returns shortly after the deadline at the latest
/// (once the aborted calls' futures are dropped, at their next turn). A deadline already past
/// closes every connection at once.
///
/// `serve` and each task it spawns hold a place in `tasks` (from [`Tasks::token`]) until
/// they end. Dropping the future (or aborting its task) closes every connection at once and
/// aborts every call without waiting for them: [`Tasks::ended`] tells when they have ended.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    protocol: Protocol,
    limits: Limits,
    tasks: TaskToken,
    stop: impl Future<Output = Instant>,
) {
    let budget = HandlerBudget::for_port(&limits, protocol);
    serve_with_budget(listener, app, protocol, limits, budget, tasks, stop).await;
}

/// [`serve`], with `budget` (made by [`HandlerBudget::for_port`] from the same `limits` and
/// `protocol`) as the port's waiting budget, so that the port's handlers can hold it
/// themselves: the gRPC port's `ShouldRateLimit` handler
/// ([`crate::grpc::Server::with_budget`]) takes from it what a call holds while it waits on
/// Redis, as a `/json` handler does with the [`HandlerBudget`] in its request's extensions.
/// Unfinished messages and bodies take from a budget of the same size of their own.
pub async fn serve_with_budget(
    listener: TcpListener,
    app: axum::Router,
    protocol: Protocol,
    limits: Limits,
    budget: HandlerBudget,
    tasks: TaskToken,
    stop: impl Future<Output = Instant>,
) {
    // A cap beyond what a semaphore holds (a `Limits` built in code) is cut to that, as
    // timeouts beyond `FAR` are: no process holds that many sockets anyway.
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    // What every connection's unfinished gRPC messages (HTTP/2) or bodies (HTTP/1) may hold
    // together. The requests handlers hold while they wait on Redis take from `budget`, a
    // budget of their own, so that unfinished messages never make a waiting call refused.
    let messages = port_budget(&limits);
    // The drain's deadline, once `stop` resolved.
    let (drain_tx, drain_rx) = watch::channel(None);
    // Connection tasks live in the set so that dropping it (`serve`'s future dropped) aborts
    // them; finished ones are reaped at each accept, so it holds at most the open ones and
    // those that ended since.
    let mut conns = JoinSet::new();
    let mut stop = pin!(stop);
    // Accept errors that last (out of file descriptors) are logged at most once per
    // `ACCEPT_LOG_EVERY`, with the count since the last line.
    let mut accept_log: Option<tokio::time::Instant> = None;
    let mut unlogged = 0u64;
    let deadline = loop {
        while conns.try_join_next().is_some() {}
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                crate::metrics::connection_limit(protocol.port(), "max_connections");
                tokio::select! {
                    biased;
                    deadline = &mut stop => break deadline,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(s) => s,
                        // The semaphore is never closed; were it, no connection could be
                        // accepted any more: the port waits for its drain.
                        Err(_) => break (&mut stop).await,
                    },
                }
            }
        };
        let stream = tokio::select! {
            biased;
            deadline = &mut stop => break deadline,
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
                        unlogged += 1;
                        let now = tokio::time::Instant::now();
                        if accept_log.is_none_or(|at| now - at >= ACCEPT_LOG_EVERY) {
                            crate::server::log(format_args!(
                                "accept failed {unlogged} time(s) on the {} port, pausing \
                                 {ACCEPT_BACKOFF:?} after each: {e}",
                                protocol.port()
                            ));
                            accept_log = Some(now);
                            unlogged = 0;
                        }
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                    continue;
                }
            },
        };
        conns.spawn(connection(
            stream,
            slot,
            app.clone(),
            protocol,
            limits,
            drain_rx.clone(),
            tasks.clone(),
            messages.clone(),
            budget.clone(),
        ));
    };
    drop(listener);
    let _ = drain_tx.send(Some(deadline));
    while conns.join_next().await.is_some() {}
}

/// Counts the tasks that [`serve`] runs for one port: its accept loop, one per connection,
/// one per HTTP/2 stream (a call). Each holds a [`TaskToken`] until it ends, its future
/// dropped, also when it was aborted: dropping `serve`'s future aborts its connections'
/// tasks without waiting for them, and [`Tasks::ended`] is how its caller waits for them.
#[derive(Debug)]
pub struct Tasks(watch::Sender<()>);

/// One task's place in a [`Tasks`], given up when it is dropped.
#[derive(Debug, Clone)]
pub struct TaskToken {
    /// Only counted: the end of a channel's receivers is what its sender can wait for.
    _place: watch::Receiver<()>,
}

impl Tasks {
    /// No task yet.
    pub fn new() -> Tasks {
        // The channel's first receiver is dropped at once: only tokens count.
        Tasks(watch::channel(()).0)
    }

    /// A place for one more task, held until the token (and every clone of it) is dropped.
    pub fn token(&self) -> TaskToken {
        TaskToken {
            _place: self.0.subscribe(),
        }
    }

    /// How many tokens are held: the tasks (and their clones of the token) not yet ended.
    pub fn running(&self) -> usize {
        self.0.receiver_count()
    }

    /// Resolves once no token is held: every task that held one has ended.
    pub async fn ended(&self) {
        self.0.closed().await;
    }
}

impl Default for Tasks {
    fn default() -> Tasks {
        Tasks::new()
    }
}

/// Errors of accepting one connection (the peer gave up meanwhile): the next accept is
/// unaffected.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// hyper's connection builder for `protocol` under `limits`, spawning on `executor`.
fn builder(
    protocol: Protocol,
    limits: &Limits,
    executor: StreamExecutor,
) -> auto::Builder<StreamExecutor> {
    let mut b = auto::Builder::new(executor);
    match protocol {
        Protocol::Http1 => {
            b = b.http1_only();
            b.http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout.min(FAR))
                .max_buf_size(HTTP1_READ_BUFFER)
                .keep_alive(true);
        }
        Protocol::Http2 => {
            b = b.http2_only();
            b.http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
                .keep_alive_interval(limits.keepalive_interval.min(FAR))
                .keep_alive_timeout(limits.keepalive_timeout.min(FAR));
        }
    }
    b
}

/// What a connection's requests tell its task: how many are in flight, whether one has
/// started, when the last one ended. Atomics, as a connection's HTTP/2 streams (up to
/// [`MAX_STREAMS_PER_CONNECTION`]) begin and end on every worker thread at once.
#[derive(Debug)]
struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Set by the first request; read before it is written, so that later requests do not
    /// write its line.
    started: AtomicBool,
    /// The end of the last request, in nanoseconds after `opened` (0 before the first one).
    /// Written before `in_flight` is decremented (release), so that a task that reads no
    /// request in flight (acquire) reads the end of every request that was.
    last_end: AtomicU64,
}

impl Activity {
    fn new(opened: Instant) -> Activity {
        Activity {
            opened,
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            last_end: AtomicU64::new(0),
        }
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if !self.started.load(Ordering::Relaxed) {
            self.started.store(true, Ordering::Relaxed);
        }
        InFlight(self.clone())
    }

    /// The end of the last request, or the opening before the first one.
    fn last_end(&self) -> Instant {
        self.opened + Duration::from_nanos(self.last_end.load(Ordering::Relaxed))
    }
}

/// A request in flight on its connection, from its headers to its response's headers
/// (HTTP/1) or to its stream's end (HTTP/2); dropped with the request's future or the
/// response's body, also when the peer resets the stream.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &*self.0;
        // Cut at `FAR`, so that `last_end` cannot overflow an `Instant`; the maximum keeps a
        // request ending concurrently with a later one from moving the end back.
        let ns = u64::try_from(a.opened.elapsed().min(FAR).as_nanos()).unwrap_or(u64::MAX);
        a.last_end.fetch_max(ns, Ordering::Relaxed);
        a.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// What the connection's timer decides when it fires.
enum Due {
    /// Nothing yet: fire again then.
    At(Instant),
    /// Idle too long: close gracefully.
    Idle,
    /// HTTP/2 without a request's headers in time: close at once.
    NoRequest,
}

/// What "never" is cut to: a `Limits` built in code may hold `Duration::MAX`, which would
/// overflow an `Instant` (in hyper's timers too).
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// `t + d`, or `t + FAR` where `d` is longer.
fn later(t: Instant, d: Duration) -> Instant {
    t + d.min(FAR)
}

fn due(
    activity: &Activity,
    protocol: Protocol,
    limits: &Limits,
    opened: Instant,
    now: Instant,
) -> Due {
    let in_flight = activity.in_flight.load(Ordering::Acquire);
    let started = activity.started.load(Ordering::Relaxed);
    let header_at = later(opened, limits.header_timeout);
    // HTTP/1: hyper's header timer closes a connection idle for `header_timeout` anyway; the
    // same bound here also covers the time a response takes to be read.
    let idle = match protocol {
        Protocol::Http1 => limits.idle_timeout.min(limits.header_timeout),
        Protocol::Http2 => limits.idle_timeout,
    };
    if protocol == Protocol::Http2 && !started && now >= header_at {
        return Due::NoRequest;
    }
    let idle_at = if in_flight > 0 {
        // Looked at again one idle period from now: the request in flight ends no earlier
        // than now, so the connection cannot be idle long enough before then.
        later(now, idle)
    } else if now >= later(activity.last_end(), idle) {
        return Due::Idle;
    } else {
        later(activity.last_end(), idle)
    };
    if protocol == Protocol::Http2 && !started {
        Due::At(idle_at.min(header_at))
    } else {
        Due::At(idle_at)
    }
}

/// One connection's task: it holds the connection's slot, and counts as open, until hyper's
/// connection and every task of its streams have ended.
#[allow(clippy::too_many_arguments)]
async fn connection(
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    app: axum::Router,
    protocol: Protocol,
    limits: Limits,
    drain: watch::Receiver<Option<Instant>>,
    task: TaskToken,
    port_messages: Arc<Semaphore>,
    waiting: HandlerBudget,
) {
    let _open = crate::metrics::OpenConnection::new(protocol.port());
    let streams = Streams::new(task);
    let builder = builder(protocol, &limits, streams.executor());
    let budget = match protocol {
        Protocol::Http1 => Budget::Bytes {
            port: port_messages,
        },
        Protocol::Http2 => Budget::Messages {
            connection: Arc::new(Semaphore::new(MAX_CONNECTION_MESSAGE_BYTES)),
            port: port_messages,
        },
    };
    drive(
        stream,
        app,
        builder,
        protocol,
        limits,
        drain,
        Some(budget),
        waiting,
    )
    .await;
    // hyper's connection is gone: a stream task left has nobody to answer (a handler stuck in
    // a backend that does not answer, past the drain's deadline or after the peer left).
    streams.close().await;
}

/// Serves one connection until it ends: by the peer, by a limit, or by the drain (its
/// deadline included). Dropping it drops hyper's connection.
#[allow(clippy::too_many_arguments)]
async fn drive(
    stream: TcpStream,
    app: axum::Router,
    builder: auto::Builder<StreamExecutor>,
    protocol: Protocol,
    limits: Limits,
    mut drain: watch::Receiver<Option<Instant>>,
    budget: Option<Budget>,
    waiting: HandlerBudget,
) {
    // Small answers go out at once (tonic's own listener sets it too).
    let _ = stream.set_nodelay(true);
    let opened = Instant::now();
    let activity = Arc::new(Activity::new(opened));
    let service = Tracked {
        app,
        activity: activity.clone(),
        protocol,
        body_timeout: limits.body_timeout,
        budget,
        waiting,
    };
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let first = match due(&activity, protocol, &limits, opened, opened) {
        Due::At(at) => at,
        Due::Idle | Due::NoRequest => opened,
    };
    let mut timer = pin!(tokio::time::sleep_until(first));
    // Once a graceful close has begun, the timer is its bound.
    let mut closing = false;
    let mut draining = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                // hyper's HTTP/1 header timer ends the connection with a timeout error.
                let timed_out = r.as_ref().err().and_then(|e| e.downcast_ref::<hyper::Error>())
                    .is_some_and(hyper::Error::is_timeout);
                if timed_out {
                    crate::metrics::connection_limit(protocol.port(), "header_timeout");
                }
                return;
            }
            r = drain.wait_for(Option::is_some), if !draining => {
                draining = true;
                if let Some(deadline) = r.ok().and_then(|d| *d) {
                    conn.as_mut().graceful_shutdown();
                    // The drain's deadline bounds every connection of the port; one already
                    // closing because it was idle keeps its own bound if that is earlier.
                    let at = if closing { timer.deadline().min(deadline) } else { deadline };
                    closing = true;
                    timer.as_mut().reset(at);
                }
            }
            () = timer.as_mut() => {
                if closing {
                    if !draining {
                        crate::metrics::connection_limit(protocol.port(), "close_grace");
                    }
                    return;
                }
                let now = Instant::now();
                match due(&activity, protocol, &limits, opened, now) {
                    Due::At(at) => timer.as_mut().reset(at),
                    Due::NoRequest => {
                        crate::metrics::connection_limit(protocol.port(), "header_timeout");
                        return;
                    }
                    Due::Idle => {
                        crate::metrics::connection_limit(protocol.port(), "idle_timeout");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        timer.as_mut().reset(later(now, CLOSE_GRACE));
                    }
                }
            }
        }
    }
}

/// The tasks hyper spawns for one connection: on HTTP/2, one per stream, which runs the
/// request's handler and then sends its response's body. The connection task owns the set;
/// hyper (its connection and each stream task, which keeps a copy of the executor) holds only
/// [`StreamExecutor`]s, which do not keep the set alive, so that dropping the owner (the
/// connection task aborted, or `serve` dropped) drops the set, which aborts every task in it.
///
/// The set holds the tasks still running and those that ended since the last spawn, which
/// each spawn reaps first: it never holds more than one more task than were running at the
/// last spawn, however many streams a long-lived connection opens one after the other.
/// The running ones are those of the streams open (at most [`MAX_STREAMS_PER_CONNECTION`] on
/// the gRPC port) and those of streams just reset, which hyper ends at their next turn.
struct Streams {
    tasks: Arc<Mutex<JoinSet<()>>>,
    /// The connection task's place in its port's [`Tasks`], of which each stream task holds a
    /// copy.
    token: TaskToken,
}

impl Streams {
    fn new(token: TaskToken) -> Streams {
        Streams {
            tasks: Arc::new(Mutex::new(JoinSet::new())),
            token,
        }
    }

    /// The executor for hyper's connection, spawning into this set while it lives.
    fn executor(&self) -> StreamExecutor {
        StreamExecutor {
            tasks: Arc::downgrade(&self.tasks),
            token: self.token.clone(),
        }
    }

    /// The tasks in the set: running ones and those ended since the last spawn.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.tasks).len()
    }

    /// Aborts every task and returns once each has ended (its future dropped). Handlers only
    /// wait (on the peer, a backend), never block a thread, so each ends at its next turn.
    async fn close(self) {
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        tasks.shutdown().await;
    }
}

/// The set, also after a task panicked while holding its lock (its contents stay sound: a
/// panic in `JoinSet::spawn` leaves the set as it was).
fn lock(tasks: &Mutex<JoinSet<()>>) -> std::sync::MutexGuard<'_, JoinSet<()>> {
    tasks.lock().unwrap_or_else(PoisonError::into_inner)
}

/// hyper's executor for one connection: spawns into the connection's [`Streams`]. In place
/// of hyper-util's `TokioExecutor`, whose tasks are detached: nothing waits for them, and
/// only hyper's own check for a reset stream ends one, at some turn after its connection went.
#[derive(Clone)]
struct StreamExecutor {
    tasks: Weak<Mutex<JoinSet<()>>>,
    /// Copied into each task spawned, which holds it until its future is dropped.
    token: TaskToken,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
{
    fn execute(&self, fut: F) {
        // Once the connection task has let go of its streams, a task spawned now would
        // answer nobody: it is dropped unstarted.
        let Some(tasks) = self.tasks.upgrade() else {
            return;
        };
        let token = self.token.clone();
        let mut set = lock(&tasks);
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            let _token = token;
            fut.await;
        });
    }
}

/// The port's app with each request counted on its connection and its body under the
/// body deadline.
#[derive(Clone)]
struct Tracked {
    app: axum::Router,
    activity: Arc<Activity>,
    protocol: Protocol,
    body_timeout: Duration,
    /// What the connection's unfinished bodies may hold (see [`Budget`]).
    budget: Option<Budget>,
    /// What the port's handlers hold while they wait on Redis: in each HTTP/1 request's
    /// extensions (for `/json`).
    waiting: HandlerBudget,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        let expired = Arc::new(AtomicBool::new(false));
        let body_timeout = self.body_timeout;
        let budget = self.budget.clone();
        let mut req = req;
        if let Some(Budget::Bytes { .. }) = &budget {
            req.extensions_mut().insert(self.waiting.clone());
        }
        let req = req.map(|b| {
            Body::new(TimedBody {
                inner: Budgeted::new(b, budget),
                deadline: later(Instant::now(), body_timeout),
                sleep: None,
                expired: expired.clone(),
            })
        });
        let (app, protocol) = (self.app.clone(), self.protocol);
        // gRPC: the client's deadline bounds the call, as tonic's own server does it (and
        // answers it: CANCELLED, "Timeout expired").
        let deadline = match protocol {
            Protocol::Http1 => None,
            Protocol::Http2 => req
                .headers()
                .get("grpc-timeout")
                .and_then(|v| grpc_timeout(v.as_bytes())),
        };
        Box::pin(async move {
            let resp = match deadline {
                None => app.oneshot(req).await?,
                Some(d) => match tokio::time::timeout(d, app.oneshot(req)).await {
                    Ok(r) => r?,
                    Err(_) => return Ok(tonic::Status::cancelled("Timeout expired").into_http()),
                },
            };
            if !expired.load(Ordering::Relaxed) {
                return Ok(match protocol {
                    // HTTP/1: the request ends with its response's headers, so that the idle
                    // timer bounds a client that stops reading the response.
                    Protocol::Http1 => {
                        drop(in_flight);
                        resp
                    }
                    // HTTP/2: a call ends with its stream, as gRPC counts a connection idle
                    // only without calls; a streaming response (a health Watch) is a call in
                    // flight for as long as it lasts. The stream's body is dropped when the
                    // stream ends, reset included. A peer that stops reading is bounded by
                    // the keepalive PINGs and the cap, as a peer that keeps calling is.
                    Protocol::Http2 => resp.map(|b| {
                        Body::new(Held {
                            inner: b,
                            _in_flight: in_flight,
                        })
                    }),
                });
            }
            drop(in_flight);
            crate::metrics::connection_limit(protocol.port(), "body_timeout");
            let why = format!("the request's body did not arrive within {body_timeout:?}");
            Ok(match protocol {
                // The rest of the body may still be on its way: the connection closes after
                // the answer.
                Protocol::Http1 => (
                    StatusCode::REQUEST_TIMEOUT,
                    [(header::CONNECTION, "close")],
                    format!("{why}\n"),
                )
                    .into_response(),
                Protocol::Http2 => tonic::Status::deadline_exceeded(why).into_http(),
            })
        })
    }
}

/// A response body that keeps its call in flight until hyper drops it (the stream ended).
struct Held {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Held {
    type Data = hyper::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A `grpc-timeout` header's value (gRPC over HTTP/2: at most 8 digits and a unit, `H`,
/// `M`, `S`, `m`, `u` or `n`); `None` for a malformed one, which is ignored as tonic ignores it.
fn grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 8 digits: no overflow, even in hours.
    let n = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A request body that fails once its deadline passes before its end, and says so in
/// `expired` (the service then answers for the timeout, whatever the handler made of the
/// error).
struct TimedBody {
    inner: Budgeted,
    deadline: Instant,
    /// Made when the body first waits for data: a body that arrives with its headers (most
    /// do) costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    expired: Arc<AtomicBool>,
}

impl hyper::body::Body for TimedBody {
    type Data = hyper::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => Poll::Ready(r.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => {
                        this.expired.store(true, Ordering::Relaxed);
                        Poll::Ready(Some(Err("request body timeout".into())))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The most bytes of unfinished gRPC messages one HTTP/2 connection's streams hold: two
/// messages of the largest size, so that any one message can always be read.
pub const MAX_CONNECTION_MESSAGE_BYTES: usize = 2 * crate::grpc::MAX_MESSAGE_BYTES;

/// The default of [`Limits::max_buffered_bytes`] (`--max-buffered-mib`): the most bytes of
/// unfinished gRPC messages all connections of the gRPC port hold together (Envoy's requests
/// are a few hundred bytes: thousands of calls in flight hold a few MiB), and the most bytes
/// of unfinished `/json` bodies (beyond the frame each body has read and waits to take it for)
/// and of `/json` requests waiting on Redis all connections of the HTTP port hold together.
pub const MAX_PORT_MESSAGE_BYTES: usize = 256 << 20;

/// The least a port's budget may be ([`Limits::max_buffered_bytes`]), so that every take can
/// be granted: what one connection's unfinished messages take at most (8 MiB), and what a valid
/// `/json` request at the body limit may hold while it waits on Redis (its 4 MiB body twice,
/// and what it decodes to: about 7 MiB at the request limits).
pub const MIN_PORT_MESSAGE_BYTES: usize = 16 << 20;

/// A budget of [`Limits::max_buffered_bytes`] bytes, raised to [`MIN_PORT_MESSAGE_BYTES`] and
/// cut to what a semaphore holds: a port's for unfinished messages or bodies, or its waiting
/// budget ([`HandlerBudget::for_port`]).
fn port_budget(limits: &Limits) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        limits
            .max_buffered_bytes
            .clamp(MIN_PORT_MESSAGE_BYTES, Semaphore::MAX_PERMITS),
    ))
}

/// What a request body takes before its bytes are passed on, given back when it is dropped.
#[derive(Clone, Debug)]
enum Budget {
    /// HTTP/2: each gRPC message's announced length ([`held`]), from the connection's budget
    /// and then the port's.
    Messages {
        connection: Arc<Semaphore>,
        port: Arc<Semaphore>,
    },
    /// HTTP/1 (`/json`): each frame's bytes, unless the frame ends the body, from the port's
    /// budget. One body at a time per connection, each cut at `/json`'s size limit.
    Bytes { port: Arc<Semaphore> },
}

/// A port's waiting budget ([`Limits::max_buffered_bytes`] bytes, apart from the budget of
/// its unfinished messages and bodies): what a handler holds while it waits (the request it
/// read, on Redis) is taken from it for that long. On the HTTP port it is in each request's
/// extensions (for `/json`); the gRPC port's `ShouldRateLimit` handler holds it itself
/// ([`serve_with_budget`]), so that a call costs no extension. What its handlers hold is
/// reported in `tollgate_rls_redis_waiting_bytes` under the port's name.
#[derive(Clone, Debug)]
pub struct HandlerBudget {
    permits: Arc<Semaphore>,
    port: &'static str,
}

impl HandlerBudget {
    /// The whole waiting budget under `limits` of the port that speaks `protocol`:
    /// [`Limits::max_buffered_bytes`], raised to [`MIN_PORT_MESSAGE_BYTES`] and cut to what a
    /// semaphore holds.
    pub fn for_port(limits: &Limits, protocol: Protocol) -> HandlerBudget {
        HandlerBudget {
            permits: port_budget(limits),
            port: protocol.port(),
        }
    }

    /// Takes `bytes` if the budget holds them now, without waiting (`None` otherwise, also
    /// for more than the whole budget); given back when the returned [`Taken`] is dropped,
    /// with the handler's future whatever ends it (its answer, or its connection gone).
    pub fn try_take(&self, bytes: usize) -> Option<Taken> {
        let n = u32::try_from(bytes).ok()?;
        let permit = self.permits.clone().try_acquire_many_owned(n).ok()?;
        crate::metrics::waiting_bytes(self.port, f64::from(n));
        Some(Taken {
            permit: Some(permit),
            port: self.port,
            bytes: n,
        })
    }
}

/// Bytes taken from a port's [`HandlerBudget`], counted in `tollgate_rls_redis_waiting_bytes`
/// while held. The gauge counts them from after they were taken until after they are given
/// back, so that it never reads less than the budget holds taken: once it reads 0, every
/// take it counted is back in the budget.
#[derive(Debug)]
pub struct Taken {
    permit: Option<OwnedSemaphorePermit>,
    port: &'static str,
    bytes: u32,
}

impl Drop for Taken {
    fn drop(&mut self) {
        drop(self.permit.take());
        crate::metrics::waiting_bytes(self.port, -f64::from(self.bytes));
    }
}

type Taking = Pin<
    Box<dyn Future<Output = Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)>> + Send>,
>;

/// A request body that takes, from its [`Budget`], the length each gRPC message of it
/// announces before passing on the frame holding that message's prefix, and holds it until
/// the body is dropped (see the module docs); on HTTP/1, each frame's bytes unless it ends
/// the body ([`Budget::Bytes`]). Without a budget, the body as it is.
struct Budgeted {
    inner: Incoming,
    budget: Option<Budget>,
    messages: Messages,
    /// A frame held back while its messages' lengths are taken.
    waiting: Option<(Frame<hyper::body::Bytes>, Taking)>,
    /// What the body holds of the budgets.
    held: Vec<OwnedSemaphorePermit>,
}

impl Budgeted {
    fn new(inner: Incoming, budget: Option<Budget>) -> Budgeted {
        Budgeted {
            inner,
            budget,
            messages: Messages::default(),
            waiting: None,
            held: Vec::new(),
        }
    }
}

/// How much more than its wire size a decoded `RateLimitRequest` may hold: an empty entry is
/// 2 bytes on the wire and two strings (48 bytes) decoded, and again as the service's pair,
/// in vectors that grow by doubling.
const DECODED_PER_BYTE: usize = 64;

/// The most a decoded `RateLimitRequest` holds (the request limits bound it: 1,024 descriptors
/// of 64 entries, about 3 MB).
const MAX_DECODED: usize = 4 << 20;

/// What a message of `len` bytes may hold until its stream ends: its bytes, and the request
/// decoded from them (tonic decodes a unary call's message, then waits for the end of the
/// stream before handing it over, so a stream that withholds its end holds both).
pub(crate) fn held(len: usize) -> usize {
    len.saturating_add(len.saturating_mul(DECODED_PER_BYTE).min(MAX_DECODED))
}

/// Where a body's bytes are in its gRPC messages (a 5-byte prefix, a flag and a big-endian
/// length, then that many bytes).
#[derive(Debug, Default)]
pub(crate) struct Messages {
    /// The current message prefix's bytes read so far (`have` of 5).
    prefix: [u8; 5],
    have: usize,
    /// The current message's bytes still to come after its prefix.
    rest: usize,
}

impl Messages {
    /// Reads `data`, a frame that ends the body if `ended`, as the next bytes of the gRPC
    /// messages: what the messages whose prefix it completes may hold ([`held`]). A message
    /// whole in a frame that ends the body (an ordinary call, sent at once) is decoded and
    /// handed to the service as soon as it is read, holding nothing beyond what arrived, so it
    /// takes nothing and never waits behind messages that do. A length past the largest
    /// message takes nothing either: tonic refuses the message as soon as it reads its prefix,
    /// reserving nothing.
    pub(crate) fn announced(&mut self, mut data: &[u8], ended: bool) -> usize {
        let mut sum = 0usize;
        while !data.is_empty() {
            if self.rest > 0 {
                let n = self.rest.min(data.len());
                self.rest -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.have).min(data.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == 5 {
                self.have = 0;
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                self.rest = len;
                let sent_at_once = ended && data.len() >= len;
                if len <= crate::grpc::MAX_MESSAGE_BYTES && !sent_at_once {
                    sum = sum.saturating_add(held(len));
                }
            }
        }
        sum
    }
}

impl hyper::body::Body for Budgeted {
    type Data = hyper::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if let Some((_, taking)) = this.waiting.as_mut() {
                let Some((first, second)) = ready!(taking.as_mut().poll(cx)) else {
                    // A budget closed: never, as nothing closes them.
                    return Poll::Ready(None);
                };
                this.held.push(first);
                this.held.extend(second);
                let (frame, _) = this.waiting.take().expect("a frame waiting");
                return Poll::Ready(Some(Ok(frame)));
            }
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(f)) => f,
                other => return Poll::Ready(other),
            };
            let Some(budget) = this.budget.clone() else {
                return Poll::Ready(Some(Ok(frame)));
            };
            let ended = this.inner.is_end_stream();
            let taking: Taking = match budget {
                Budget::Messages { connection, port } => {
                    let need = match frame.data_ref() {
                        Some(d) => this.messages.announced(d, ended),
                        None => 0,
                    };
                    if need == 0 {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    // A frame completing several prefixes takes their sum at once, cut to the
                    // connection's budget so that it can be granted.
                    let need = need.min(MAX_CONNECTION_MESSAGE_BYTES) as u32;
                    Box::pin(async move {
                        let c = connection.acquire_many_owned(need).await.ok()?;
                        let p = port.acquire_many_owned(need).await.ok()?;
                        Some((c, Some(p)))
                    })
                }
                Budget::Bytes { port } => {
                    // The frame that ends a body (all of an ordinary request, which arrives
                    // with its headers) takes nothing: the body is handed to the handler as it
                    // is read, so it never waits behind bodies that hold the budget.
                    let n = frame.data_ref().map_or(0, |d| d.len());
                    if n == 0 || ended {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    let n = n.min(MIN_PORT_MESSAGE_BYTES) as u32;
                    Box::pin(async move { Some((port.acquire_many_owned(n).await.ok()?, None)) })
                }
            };
            this.waiting = Some((frame, taking));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Limits` built in code may hold `usize::MAX` connections, as it may hold
    /// `Duration::MAX` timeouts: both are cut, neither panics.
    /// A body's message lengths are read across any split of its frames.
    #[test]
    fn message_prefixes_are_read_across_frames() {
        let mut body = Vec::new();
        for len in [3u32, 0, 70_000, 5 << 20, 1] {
            body.push(0);
            body.extend_from_slice(&len.to_be_bytes());
            body.extend(std::iter::repeat_n(7u8, len as usize));
        }
        // Counted (what it may hold): a message of at most the largest size (not the 5 MiB
        // one) unless it is whole in the chunk where its prefix ends and that chunk ends the
        // body.
        let chunks_of = |chunk: usize| body.len().div_ceil(chunk);
        let expected = |chunk: usize| {
            let (mut at, mut sum) = (0, 0);
            for len in [3usize, 0, 70_000, 5 << 20, 1] {
                let prefix_end = at + 5;
                let in_chunk = (prefix_end - 1) / chunk;
                let whole = len == 0 || (prefix_end + len - 1) / chunk == in_chunk;
                let at_once = whole && in_chunk + 1 == chunks_of(chunk);
                if len <= crate::grpc::MAX_MESSAGE_BYTES && !at_once {
                    sum += held(len);
                }
                at = prefix_end + len;
            }
            sum
        };
        assert_eq!(expected(1), held(3) + held(0) + held(70_000) + held(1));
        // All in one frame that ends the body: every message is sent at once.
        assert_eq!(expected(body.len()), 0);
        assert_eq!(held(70_000), 70_000 + MAX_DECODED);
        assert_eq!(held(100), 100 + 6_400);
        for chunk in [1, 2, 4, 5, 6, 7, 4096, 70_004, body.len()] {
            let mut m = Messages::default();
            let n = chunks_of(chunk);
            let sum: usize = body
                .chunks(chunk)
                .enumerate()
                .map(|(i, c)| m.announced(c, i + 1 == n))
                .sum();
            assert_eq!(sum, expected(chunk), "chunks of {chunk}");
            assert_eq!((m.have, m.rest), (0, 0));
        }
    }

    #[tokio::test]
    async fn limits_at_their_types_maximum_serve() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: usize::MAX,
            header_timeout: Duration::MAX,
            body_timeout: Duration::MAX,
            idle_timeout: Duration::MAX,
            keepalive_interval: Duration::MAX,
            keepalive_timeout: Duration::MAX,
            max_buffered_bytes: usize::MAX,
        };
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<Instant>();
        let server = tokio::spawn(serve(
            listener,
            app,
            Protocol::Http1,
            limits,
            Tasks::new().token(),
            async { stop_rx.await.expect("a deadline") },
        ));
        let mut c = TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut answer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        let _ = stop_tx.send(Instant::now() + Duration::from_secs(5));
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("drained in time")
            .expect("served without a panic");
    }

    /// Limits that never fire during a test.
    fn long_limits() -> Limits {
        let long = Duration::from_secs(600);
        Limits {
            max_connections: 16,
            header_timeout: long,
            body_timeout: long,
            idle_timeout: long,
            keepalive_interval: long,
            keepalive_timeout: long,
            max_buffered_bytes: MAX_PORT_MESSAGE_BYTES,
        }
    }

    /// A call in flight of `stuck_app`, counted in its `live` for as long as the call's future
    /// lives. Its release takes a while, as a handler's cleanup may: whoever says the call
    /// ended must have waited for it.
    struct Live(Arc<AtomicUsize>);

    impl Drop for Live {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(50));
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// An app whose one call never answers (a handler stuck in a backend that does not
    /// answer): each call counts itself in `live` and says on `began` that it runs.
    fn stuck_app(
        live: Arc<AtomicUsize>,
        began: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> axum::Router {
        axum::Router::new().route(
            "/test.Stuck/Call",
            axum::routing::post(move || {
                live.fetch_add(1, Ordering::SeqCst);
                let (live, began) = (Live(live.clone()), began.clone());
                async move {
                    let _live = live;
                    let _ = began.send(());
                    std::future::pending::<&'static str>().await
                }
            }),
        )
    }

    /// The client's side of a call to `stuck_app`: it holds the connection and the stream
    /// open until dropped.
    struct StuckCall {
        _client: h2::client::SendRequest<axum::body::Bytes>,
        _answer: h2::client::ResponseFuture,
        conn: tokio::task::JoinHandle<Result<(), h2::Error>>,
    }

    impl Drop for StuckCall {
        fn drop(&mut self) {
            self.conn.abort();
        }
    }

    /// A call to `stuck_app` on `addr` over a fresh HTTP/2 connection, once its handler runs.
    async fn stuck_call(
        addr: std::net::SocketAddr,
        began: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
    ) -> StuckCall {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        let req = Request::post(format!("http://{addr}/test.Stuck/Call"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (answer, _) = client.send_request(req, true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), began.recv())
            .await
            .expect("the handler ran in time")
            .unwrap();
        StuckCall {
            _client: client,
            _answer: answer,
            conn,
        }
    }

    /// At the drain's deadline `serve` closes the connections still open (a peer that answers
    /// neither its settings nor the GOAWAY's ping, a call that never ends), whatever the
    /// port's own bounds, and returns once their calls have ended: shortly after the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_closes_its_connections_at_the_drains_deadline() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let live = Arc::new(AtomicUsize::new(0));
        let (began_tx, mut began) = tokio::sync::mpsc::unbounded_channel();
        let app = stuck_app(live.clone(), began_tx);
        let tasks = Tasks::new();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<Instant>();
        let server = tokio::spawn(serve(
            listener,
            app,
            Protocol::Http2,
            long_limits(),
            tasks.token(),
            async { stop_rx.await.expect("a deadline") },
        ));
        let _call = stuck_call(addr, &mut began).await;
        assert_eq!(live.load(Ordering::SeqCst), 1, "the call is in flight");
        // HTTP/2's preface and empty settings, then only reads; the server's first frame says
        // that its connection task runs.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        silent
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let mut frame = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(5), silent.read_exact(&mut frame))
            .await
            .expect("the server's settings in time")
            .unwrap();
        let silent = tokio::spawn(async move {
            let mut sink = [0u8; 1024];
            while silent.read(&mut sink).await.is_ok_and(|n| n > 0) {}
            Instant::now()
        });

        let deadline = Instant::now() + Duration::from_millis(500);
        stop_tx.send(deadline).unwrap();
        tokio::time::timeout_at(deadline + Duration::from_secs(3), server)
            .await
            .expect("serve still ran 3 s past the drain's deadline")
            .expect("served without a panic");
        assert!(
            Instant::now() >= deadline,
            "serve returned before the deadline with a call in flight"
        );
        assert_eq!(
            live.load(Ordering::SeqCst),
            0,
            "a call's handler still ran when serve returned"
        );
        assert_eq!(tasks.running(), 0, "a task of the port outlived serve");
        let closed = tokio::time::timeout(Duration::from_secs(1), silent)
            .await
            .expect("the silent peer's connection still open after serve returned")
            .unwrap();
        assert!(
            closed >= deadline,
            "the silent peer's connection closed before the deadline"
        );
    }

    /// Aborting `serve`'s task (the drain's backstop) ends the calls in flight on its HTTP/2
    /// connections: an abort takes effect at each task's next turn, so their handlers'
    /// futures are dropped soon after, never left running, and the port's [`Tasks`] tell when
    /// the last has been.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_aborted_serve_ends_its_calls() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let live = Arc::new(AtomicUsize::new(0));
        let (began_tx, mut began) = tokio::sync::mpsc::unbounded_channel();
        let app = stuck_app(live.clone(), began_tx);
        let tasks = Tasks::new();
        let server = tokio::spawn(serve(
            listener,
            app,
            Protocol::Http2,
            long_limits(),
            tasks.token(),
            std::future::pending(),
        ));
        let _call = stuck_call(addr, &mut began).await;
        assert_eq!(live.load(Ordering::SeqCst), 1, "the call is in flight");
        assert!(tasks.running() >= 3, "serve, its connection, its call");
        server.abort();
        assert!(server.await.unwrap_err().is_cancelled());
        tokio::time::timeout(Duration::from_secs(5), tasks.ended())
            .await
            .expect("a task of the port still ran 5 s after serve was aborted");
        assert_eq!(
            live.load(Ordering::SeqCst),
            0,
            "the port's tasks said they ended before a call's handler was dropped"
        );
    }

    /// A long-lived connection's stream tasks, spawned one after the other, each ended before
    /// the next: the set never holds more than the one running.
    #[tokio::test]
    async fn ended_stream_tasks_are_reaped_at_each_spawn() {
        use hyper::rt::Executor;
        let streams = Streams::new(Tasks::new().token());
        let executor = streams.executor();
        for _ in 0..1000 {
            let (done, ended) = tokio::sync::oneshot::channel();
            executor.execute(async move {
                let _ = done.send(());
            });
            assert_eq!(streams.len(), 1);
            ended.await.unwrap();
        }
    }

    /// A task that holds `live` (as `Live` counts it) until it is dropped, and never ends.
    fn pending_task(live: &Arc<AtomicUsize>) -> impl Future<Output = ()> + Send + 'static {
        live.fetch_add(1, Ordering::SeqCst);
        let live = Live(live.clone());
        async move {
            let _live = live;
            std::future::pending::<()>().await
        }
    }

    /// `close` returns once every task has been dropped; dropping the set (the connection task
    /// aborted) aborts them too; a task spawned once the set is gone is dropped unstarted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stream_tasks_end_with_their_connection() {
        use hyper::rt::Executor;
        let live = Arc::new(AtomicUsize::new(0));
        let streams = Streams::new(Tasks::new().token());
        for _ in 0..3 {
            streams.executor().execute(pending_task(&live));
        }
        streams.close().await;
        assert_eq!(live.load(Ordering::SeqCst), 0, "a task outlived close");

        let streams = Streams::new(Tasks::new().token());
        let executor = streams.executor();
        executor.execute(pending_task(&live));
        drop(streams);
        tokio::time::timeout(Duration::from_secs(5), async {
            while live.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("a task outlived its set by 5 s");
        executor.execute(pending_task(&live));
        assert_eq!(live.load(Ordering::SeqCst), 0, "a task spawned with no set");
    }

    #[test]
    fn grpc_timeouts_parse_as_the_spec_says() {
        assert_eq!(grpc_timeout(b"20m"), Some(Duration::from_millis(20)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"123456789m", b"5x", b"-5m", b"5 m", b"+5m"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
