//! The HTTP side: hyper's HTTP/1 server on a one-thread tokio runtime, on a
//! thread of its own, over TLS (rustls) when the web config says so. Limits
//! keep a slow or hostile client from holding resources: slots shared
//! fairly per peer (slots.rs), refused connections held rather than closed
//! (so idlers do not reconnect in a loop), a TLS handshake timeout, a header
//! read timeout (also between keep-alive requests), a response deadline,
//! and a request buffer cap.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Context as TaskContext;
use std::task::Poll;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Body;
use hyper::body::Frame;
use hyper::header;
use hyper::Method;
use hyper::Request;
use hyper::Response;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use slog::debug;
use slog::error;
use slog::info;
use slog::warn;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;

use crate::slots::Peer;
use crate::slots::Slots;
use crate::slots::Ticket;
use crate::webconfig::WebConfig;
use crate::Shared;

/// Connections open at once, over all peers.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Connections one peer may hold; Prometheus needs one per server.
pub(crate) const MAX_PER_PEER: usize = 4;
/// Refused connections held open (unread, without a slot) at most; more
/// are closed at once. Within the 1024 descriptors systemd gives a unit.
const MAX_PARKED: usize = 512;
/// Time to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to send a complete request head, from connecting or from the end
/// of the previous response (hyper restarts it for each head).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to take a whole response once the request arrived (a client that
/// reads slowly or stops reading); Prometheus' scrape timeout is 10 s.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Request head buffer (hyper's minimum); a larger head is refused.
const MAX_REQUEST_BYTES: usize = 8192;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The web config in force, re-read when it or a file it names changes.
pub(crate) struct Watch {
    path: PathBuf,
    /// What identified each watched file when last read.
    stamps: Vec<Option<Stamp>>,
    watched: Vec<PathBuf>,
    /// None while the file on disk is invalid: connections are refused
    /// until it is fixed, rather than served with a config nobody wrote.
    current: Option<Arc<WebConfig>>,
    checked: Instant,
}

/// How often the web config's files are looked at.
const RECHECK: Duration = Duration::from_millis(100);

type Stamp = (u64, u64, u64, i64, i64, i64, i64);

fn stamp(p: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

impl Watch {
    /// Loads `path`; an invalid config is the error `record` stops with.
    pub(crate) fn new(logger: &slog::Logger, path: PathBuf) -> Result<Watch> {
        let stamps_before: Vec<_> = vec![stamp(&path)];
        let cfg = crate::webconfig::load(&path)?;
        for w in &cfg.warnings {
            warn!(logger, "Web config {}: {}", path.display(), w);
        }
        let mut stamps = stamps_before;
        stamps.extend(cfg.watched[1..].iter().map(|p| stamp(p)));
        Ok(Watch {
            path,
            stamps,
            watched: cfg.watched.clone(),
            current: Some(Arc::new(cfg)),
            checked: Instant::now(),
        })
    }

    /// Whether the config in force serves TLS.
    pub(crate) fn tls(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.tls.is_some())
    }

    /// The config to serve a new connection with; re-read first if a file
    /// changed (a stat of each, at most every `RECHECK`: a flood of
    /// connections must not become a flood of stats).
    fn current(&mut self, logger: &slog::Logger) -> Option<Arc<WebConfig>> {
        if self.checked.elapsed() < RECHECK {
            return self.current.clone();
        }
        self.checked = Instant::now();
        let now: Vec<_> = self.watched.iter().map(|p| stamp(p)).collect();
        if now != self.stamps {
            // Stamped before reading: a write during the read is seen next time.
            let before = stamp(&self.path);
            match crate::webconfig::load(&self.path) {
                Ok(cfg) => {
                    info!(logger, "Web config {} reloaded", self.path.display());
                    for w in &cfg.warnings {
                        warn!(logger, "Web config {}: {}", self.path.display(), w);
                    }
                    self.watched = cfg.watched.clone();
                    let mut stamps = vec![before];
                    stamps.extend(self.watched[1..].iter().map(|p| stamp(p)));
                    self.stamps = stamps;
                    self.current = Some(Arc::new(cfg));
                }
                Err(e) => {
                    error!(
                        logger,
                        "Metrics: refusing connections until the web config is fixed: {:#}", e
                    );
                    self.stamps = now;
                    self.current = None;
                }
            }
        }
        self.current.clone()
    }
}

pub(crate) fn spawn(
    logger: slog::Logger,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    web: Option<Watch>,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        // bcrypt runs off the server thread, one at a time (see `authorized`).
        .max_blocking_threads(1)
        .build()
        .context("Failed to start the metrics server runtime")?;
    std::thread::Builder::new()
        .name("below-metrics".into())
        .spawn(move || rt.block_on(serve(logger, listener, shared, web)))
        .context("Failed to start the metrics server thread")?;
    Ok(())
}

/// What every connection's tasks share.
struct Ctx {
    logger: slog::Logger,
    shared: Arc<Shared>,
    /// One bcrypt at a time: each costs tens of ms of CPU.
    bcrypt: tokio::sync::Semaphore,
}

async fn serve(
    logger: slog::Logger,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    web: Option<Watch>,
) {
    let web = web.map(|w| Arc::new(std::sync::Mutex::new(w)));
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return warn!(logger, "Metrics server stopped: {:#}", e),
    };
    let slots = Slots::new(MAX_CONNECTIONS, MAX_PER_PEER);
    let parked = Arc::new(AtomicUsize::new(0));
    let ctx = Arc::new(Ctx {
        logger: logger.clone(),
        shared,
        bcrypt: tokio::sync::Semaphore::new(1),
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of fds and the like: back off instead of spinning.
                warn!(logger, "Metrics server: accept failed: {}", e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let cfg = match &web {
            None => None,
            Some(w) => match lock(w).current(&logger) {
                Some(c) => Some(c),
                None => continue,
            },
        };
        let Some(ticket) = slots.admit(Peer::of(peer.ip())) else {
            debug!(
                logger,
                "Metrics server: {} refused, no idle slot to take", peer
            );
            // Parked, not closed: an idler whose connection is closed
            // comes back at once, and each round trip costs us an accept.
            // Held unread for as long as an idle connection would be.
            if parked.load(Ordering::Relaxed) < MAX_PARKED {
                parked.fetch_add(1, Ordering::Relaxed);
                let parked = parked.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(HEADER_READ_TIMEOUT).await;
                    drop(stream);
                    parked.fetch_sub(1, Ordering::Relaxed);
                });
            }
            continue;
        };
        tokio::spawn(connection(
            ctx.clone(),
            stream,
            peer,
            ticket,
            cfg,
            web.clone(),
        ));
    }
}

async fn connection(
    ctx: Arc<Ctx>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    (ticket, evicted): (Ticket, tokio::sync::oneshot::Receiver<()>),
    cfg: Option<Arc<WebConfig>>,
    web: Option<Arc<std::sync::Mutex<Watch>>>,
) {
    let ticket = Arc::new(ticket);
    let work = async {
        match cfg.as_ref().and_then(|c| c.tls.clone()) {
            None => http(&ctx, stream, peer, &ticket, cfg, web).await,
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => {
                        ticket.handshaken();
                        http(&ctx, s, peer, &ticket, cfg, web).await
                    }
                    Ok(Err(e)) => debug!(ctx.logger, "Metrics server: {}: TLS: {}", peer, e),
                    Err(_) => debug!(
                        ctx.logger,
                        "Metrics server: {}: TLS handshake timed out", peer
                    ),
                }
            }
        }
    };
    tokio::select! {
        // Only a send counts: the sender goes away unsent only with the slot.
        Ok(()) = evicted => debug!(ctx.logger, "Metrics server: {}: idle, closed for a newcomer", peer),
        () = work => {}
    }
}

fn lock(w: &std::sync::Mutex<Watch>) -> std::sync::MutexGuard<'_, Watch> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves HTTP/1 on `io` until the client goes, a timeout, or the
/// response deadline passes. When the web config changes, a keep-alive
/// connection is closed after its current request, so the next one
/// follows the new config (its TLS and users).
async fn http<I>(
    ctx: &Arc<Ctx>,
    io: I,
    peer: SocketAddr,
    ticket: &Arc<Ticket>,
    cfg: Option<Arc<WebConfig>>,
    web: Option<Arc<std::sync::Mutex<Watch>>>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started_with = cfg.clone();
    let service = {
        let ctx = ctx.clone();
        let ticket = ticket.clone();
        hyper::service::service_fn(move |req| {
            let ctx = ctx.clone();
            let ticket = ticket.clone();
            let cfg = cfg.clone();
            async move { Ok::<_, Infallible>(handle(&ctx, ticket, cfg.as_deref(), req).await) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_REQUEST_BYTES)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut closing = false;
    loop {
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    debug!(ctx.logger, "Metrics server: {}: {}", peer, e);
                }
                return;
            }
            _ = tick.tick() => {
                if ticket.busy_for().is_some_and(|t| t > RESPONSE_TIMEOUT) {
                    debug!(ctx.logger, "Metrics server: {}: response not taken in {:?}", peer, RESPONSE_TIMEOUT);
                    return;
                }
                if let (Some(w), false) = (&web, closing) {
                    let now = lock(w).current(&ctx.logger);
                    let same = match (&now, &started_with) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        _ => false,
                    };
                    if !same {
                        debug!(ctx.logger, "Metrics server: {}: web config changed, closing after this request", peer);
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
    }
}

/// A response body that marks its connection idle again once hyper is done
/// with it (sent, or dropped with the connection).
struct Tracked {
    body: Full<Bytes>,
    ticket: Arc<Ticket>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.ticket.set_busy(false);
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

async fn handle<B>(
    ctx: &Ctx,
    ticket: Arc<Ticket>,
    cfg: Option<&WebConfig>,
    req: Request<B>,
) -> Response<Tracked> {
    ticket.set_busy(true);
    let mut resp = if authorized(ctx, cfg, &req).await {
        respond(&ctx.shared, &req)
    } else {
        let mut r = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic"),
        );
        r
    };
    if let Some(cfg) = cfg {
        for (k, v) in &cfg.headers {
            resp.headers_mut().insert(k.clone(), v.clone());
        }
    }
    resp.map(|body| Tracked { body, ticket })
}

/// Whether the request may be served: no users configured, or a user's
/// right password (Basic auth). Verdicts are cached per config.
async fn authorized<B>(ctx: &Ctx, cfg: Option<&WebConfig>, req: &Request<B>) -> bool {
    let Some(cfg) = cfg.filter(|c| !c.users.is_empty()) else {
        return true;
    };
    let Some((user, pass)) = basic_credentials(req) else {
        return false;
    };
    let key = crate::webconfig::cache_key(&user, &pass);
    if let Some(&ok) = cfg
        .auth_cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return ok;
    }
    let Ok(_permit) = ctx.bcrypt.acquire().await else {
        return false;
    };
    let users = cfg.users.clone();
    let ok = tokio::task::spawn_blocking(move || {
        crate::webconfig::check_password_in(&users, &user, &pass)
    })
    .await
    .unwrap_or(false);
    let mut cache = cfg.auth_cache.lock().unwrap_or_else(|e| e.into_inner());
    // Bounded: a guesser cannot grow it without limit.
    if cache.len() >= 1024 {
        cache.clear();
    }
    cache.insert(key, ok);
    ok
}

fn basic_credentials<B>(req: &Request<B>) -> Option<(String, String)> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, b64) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (u, p) = raw.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn plain(status: StatusCode, msg: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(msg.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// OpenMetrics if the client asks for it (Prometheus does), the 0.0.4 text
/// format otherwise.
fn wants_openmetrics<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"))
}

fn respond<B>(shared: &Shared, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
    }
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "below serves /metrics\n");
    }
    // Hold the lock only to clone the pointer.
    let snap = shared
        .latest
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(snap) = snap else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "no sample recorded yet\n");
    };
    let r = snap
        .text
        .get_or_init(|| crate::render::render(&snap, &shared.filters, &shared.dropped_total));
    let (body, ty) = if wants_openmetrics(req) {
        (r.openmetrics.clone(), OPENMETRICS)
    } else {
        let text = r.text.get_or_init(|| {
            crate::render::to_text_format(&String::from_utf8_lossy(&r.openmetrics)).into()
        });
        (text.clone(), TEXT_FORMAT)
    };
    let mut resp = Response::new(Full::new(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ty));
    resp
}
