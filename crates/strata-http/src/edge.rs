//! The connections under the router, served by hyper (HTTP/1.1) from our own accept loop
//! so that no client can hold the server: a connection doing nothing is closed after
//! `server.idle_timeout_ms`, a request head that dribbles in after
//! `server.header_timeout_ms`; at `server.max_connections` (kept below the open-file
//! limit) the connection idle longest makes room for a new one, and when every connection
//! is busy the new one is answered 503 and closed; beyond `server.max_requests` requests
//! in progress a request is answered 503. On shutdown the server stops accepting, lets the
//! requests in progress finish within the grace period, then answers them 503 and closes
//! what is left. Every response says `X-Content-Type-Options: nosniff`.

use super::ApiError;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// The limits [`serve`] holds connections to.
#[derive(Clone, Debug)]
pub(super) struct Limits {
    pub idle: Duration,
    pub header: Duration,
    /// Open connections at most (already below the open-file limit: [`connection_cap`]).
    pub max_connections: usize,
    pub max_requests: usize,
    /// How long requests in progress may run on after shutdown begins.
    pub grace: Duration,
}

/// Seconds a client refused for load is told to wait (`Retry-After`).
const RETRY_AFTER_SECS: u64 = 1;
/// After the grace period, how long the requests cut get to send their 503 before their
/// connections are dropped.
const CUT_MARGIN: Duration = Duration::from_secs(1);
/// Connections being refused (503) at once; beyond, a refused connection is closed unanswered.
const REFUSERS: usize = 64;
/// How long a refused connection gets to read its 503.
const REFUSE_TIME: Duration = Duration::from_secs(2);
/// File descriptors kept for everything but client connections (the store, the index,
/// model and database connections, refusals), at most half the limit.
const RESERVED_FDS: u64 = 256;

/// The open-file limit after raising the soft limit to the hard one (`None`: unlimited or
/// unknown). Each connection takes a descriptor, so the cap on connections must stay below it.
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let l = getrlimit(Resource::Nofile);
        if l.current.is_some() && l.current != l.maximum {
            // Refused (macOS caps it below an unlimited hard limit): the soft limit stays.
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: l.maximum,
                    maximum: l.maximum,
                },
            );
        }
        open_file_limit()
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The open-file (soft) limit now.
fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `wanted` connections at most, and fewer than the open-file limit leaves for them.
pub(super) fn connection_cap(wanted: usize) -> usize {
    match open_file_limit() {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED_FDS.min(limit / 2)).max(1);
            wanted.min(usize::try_from(room).unwrap_or(usize::MAX))
        }
        None => wanted,
    }
}

/// Milliseconds since the server started: connections' times fit in atomics.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// One connection as its watchdog and the accept loop see it.
struct Conn {
    /// When bytes last moved either way.
    last_io: AtomicU64,
    /// When the first byte of the request head being read arrived, plus one (0: none).
    head_from: AtomicU64,
    /// Requests of this connection in progress.
    busy: AtomicUsize,
    /// Close it now (it was chosen to make room); `wake` tells its watchdog.
    close: AtomicBool,
    wake: Notify,
}

impl Conn {
    fn new(now: u64) -> Conn {
        Conn {
            last_io: AtomicU64::new(now),
            head_from: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            close: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }
}

type Registry = Arc<Mutex<HashMap<u64, Arc<Conn>>>>;

/// What every connection task shares.
struct Shared {
    app: Router,
    limits: Limits,
    clock: Clock,
    conns: Registry,
    /// Requests in progress (`max_requests` permits).
    gate: Arc<Semaphore>,
    /// Shutdown began: finish the request in progress, then close.
    drain: watch::Receiver<bool>,
    /// The grace period is over: answer the request in progress 503 now.
    cut: watch::Receiver<bool>,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains (see the module).
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let (drain_tx, drain) = watch::channel(false);
    let (cut_tx, cut) = watch::channel(false);
    let shared = Arc::new(Shared {
        app,
        clock: Clock(Instant::now()),
        conns: Arc::new(Mutex::new(HashMap::new())),
        gate: Arc::new(Semaphore::new(limits.max_requests)),
        drain,
        cut,
        limits,
    });
    let refusers = Arc::new(Semaphore::new(REFUSERS));
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    let mut last_warned: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            r = listener.accept() => {
                let sock = match r {
                    Ok((sock, _)) => sock,
                    Err(e) => {
                        // Out of descriptors (or a connection reset before it was taken):
                        // wait a little rather than spin.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                if !make_room(&shared.conns, shared.limits.max_connections) {
                    if last_warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        last_warned = Some(Instant::now());
                        tracing::warn!(
                            max = shared.limits.max_connections,
                            "every connection is busy: refusing new ones with 503"
                        );
                    }
                    match refusers.clone().try_acquire_owned() {
                        Ok(permit) => {
                            tasks.spawn(async move {
                                refuse(sock).await;
                                drop(permit);
                            });
                        }
                        Err(_) => drop(sock),
                    }
                    continue;
                }
                next_id += 1;
                let conn = Arc::new(Conn::new(shared.clock.ms()));
                shared
                    .conns
                    .lock()
                    .expect("poisoned")
                    .insert(next_id, conn.clone());
                tasks.spawn(serve_conn(sock, next_id, conn, shared.clone()));
            }
        }
    }
    drop(listener);
    let _ = drain_tx.send(true);
    let in_grace = tokio::time::Instant::now() + shared.limits.grace;
    if !drained(&mut tasks, in_grace).await {
        tracing::warn!(
            connections = tasks.len(),
            "the grace period is over: cutting the requests still in progress"
        );
        let _ = cut_tx.send(true);
        if !drained(&mut tasks, tokio::time::Instant::now() + CUT_MARGIN).await {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
    }
}

/// Waits until every task has ended (true) or `deadline` (false).
async fn drained(tasks: &mut JoinSet<()>, deadline: tokio::time::Instant) -> bool {
    loop {
        tokio::select! {
            r = tasks.join_next() => if r.is_none() { return true },
            () = tokio::time::sleep_until(deadline) => return false,
        }
    }
}

/// Whether a new connection may be served: below the cap, or once the connection idle
/// longest (no request in progress) has been told to close.
fn make_room(conns: &Registry, cap: usize) -> bool {
    let conns = conns.lock().expect("poisoned");
    let open = conns
        .values()
        .filter(|c| !c.close.load(Ordering::Acquire))
        .count();
    if open < cap {
        return true;
    }
    let victim = conns
        .values()
        .filter(|c| !c.close.load(Ordering::Acquire) && c.busy.load(Ordering::Acquire) == 0)
        .min_by_key(|c| c.last_io.load(Ordering::Acquire));
    match victim {
        Some(v) => {
            v.close.store(true, Ordering::Release);
            v.wake.notify_one();
            true
        }
        None => false,
    }
}

/// The answer of a connection refused for load: a 503 written on the socket as it is,
/// then the socket closed once the client has read it (or after [`REFUSE_TIME`]).
async fn refuse(mut sock: TcpStream) {
    let body = serde_json::to_string(&super::Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many connections: retry shortly".into(),
    ))
    .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nretry-after: {RETRY_AFTER_SECS}\r\nx-content-type-options: nosniff\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSE_TIME, async {
        sock.write_all(format!("{head}{body}").as_bytes()).await?;
        sock.shutdown().await?;
        // Closing with the request unread would reset the connection, and the client might
        // lose the answer: read until the client closes.
        let mut buf = [0u8; 1024];
        while sock.read(&mut buf).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Takes the connection out of the registry when its task ends (or is aborted).
struct Registered {
    conns: Registry,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.conns.lock().expect("poisoned").remove(&self.id);
    }
}

async fn serve_conn(sock: TcpStream, id: u64, conn: Arc<Conn>, shared: Arc<Shared>) {
    let _registered = Registered {
        conns: shared.conns.clone(),
        id,
    };
    let io = TokioIo::new(Watched {
        io: sock,
        conn: conn.clone(),
        clock: shared.clock,
    });
    let svc = {
        let (conn, shared) = (conn.clone(), shared.clone());
        hyper::service::service_fn(move |req| handle(req, conn.clone(), shared.clone()))
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    // The watchdog below times heads and idleness; hyper's own timer is not used.
    http.header_read_timeout(None);
    let served = http.serve_connection(io, svc);
    tokio::pin!(served);
    let watchdog = watchdog(&conn, &shared.limits, shared.clock);
    tokio::pin!(watchdog);
    let mut drain = shared.drain.clone();
    let mut draining = false;
    loop {
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            Ok(_) = drain.wait_for(|d| *d), if !draining => {
                draining = true;
                served.as_mut().graceful_shutdown();
            }
            // Idle, a head too slow, or making room: dropping the connection closes it.
            () = &mut watchdog => return,
        }
    }
}

/// Ends when the connection must close: nothing in progress and nothing moved for the idle
/// time, a request head still incomplete after the header time, or told to make room.
async fn watchdog(conn: &Conn, limits: &Limits, clock: Clock) {
    let idle = limits.idle.as_millis() as u64;
    let header = limits.header.as_millis() as u64;
    loop {
        if conn.close.load(Ordering::Acquire) {
            return;
        }
        let now = clock.ms();
        let wait = if conn.busy.load(Ordering::Acquire) > 0 {
            // A request runs: its body has its own time limit, its handler none here.
            idle
        } else {
            let mut end = conn.last_io.load(Ordering::Acquire) + idle;
            let head = conn.head_from.load(Ordering::Acquire);
            if head > 0 {
                end = end.min(head - 1 + header);
            }
            if end <= now {
                tracing::debug!("closing an idle or too slow connection");
                return;
            }
            end - now
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(wait)) => {}
            () = conn.wake.notified() => {}
        }
    }
}

/// One request: counted against its connection (so the watchdog leaves it be) and against
/// `max_requests` (`/healthz` and `/metrics` aside), cut with a 503 when the grace period
/// ends, and marked `nosniff`.
async fn handle(
    req: Request<Incoming>,
    conn: Arc<Conn>,
    shared: Arc<Shared>,
) -> Result<Response<Body>, Infallible> {
    let _busy = Busy::start(conn, shared.clock);
    let exempt = matches!(req.uri().path(), "/healthz" | "/metrics");
    let permit = if exempt {
        None
    } else {
        match shared.gate.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                return Ok(nosniff(unavailable(
                    "too many requests in progress: retry shortly",
                )));
            }
        }
    };
    let mut cut = shared.cut.clone();
    let resp = tokio::select! {
        r = shared.app.clone().oneshot(req.map(Body::new)) => match r {
            Ok(r) => r,
            Err(e) => match e {},
        },
        Ok(_) = cut.wait_for(|c| *c) => unavailable(
            "the server is shutting down and cut this request before it finished: it was not acknowledged (a write it carried may or may not have been applied)",
        ),
    };
    drop(permit);
    Ok(nosniff(resp))
}

/// A 503 problem with `Retry-After`.
pub(super) fn unavailable(why: &str) -> Response<Body> {
    use axum::response::IntoResponse;
    let mut r = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

fn nosniff(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A request in progress on a connection, until dropped.
struct Busy {
    conn: Arc<Conn>,
    clock: Clock,
}

impl Busy {
    fn start(conn: Arc<Conn>, clock: Clock) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        conn.head_from.store(0, Ordering::Release);
        Busy { conn, clock }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The idle time counts from the request's end.
        self.conn.last_io.store(self.clock.ms(), Ordering::Release);
        self.conn.head_from.store(0, Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket that records when bytes move, and when a request head begins to arrive.
struct Watched {
    io: TcpStream,
    conn: Arc<Conn>,
    clock: Clock,
}

impl Watched {
    fn wrote(&self, n: usize) {
        if n > 0 {
            self.conn.last_io.store(self.clock.ms(), Ordering::Release);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = this.clock.ms();
            let c = &this.conn;
            c.last_io.store(now, Ordering::Release);
            if c.busy.load(Ordering::Acquire) == 0 && c.head_from.load(Ordering::Acquire) == 0 {
                // Bytes between requests: a head begins; its time limit starts now.
                c.head_from.store(now + 1, Ordering::Release);
                c.wake.notify_one();
            }
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
