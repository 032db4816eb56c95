//! The HTTP side: hyper's HTTP/1 server on a one-thread tokio runtime, on a
//! thread of its own. Limits keep a slow or hostile client from holding
//! resources: a bounded number of connections (more are closed at once), a
//! header read timeout, a request buffer cap, and a lifetime per connection.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header;
use hyper::Method;
use hyper::Request;
use hyper::Response;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use slog::debug;
use slog::warn;

use crate::Shared;

/// Concurrent connections; Prometheus needs one per scraping server.
const MAX_CONNECTIONS: usize = 8;
/// Time to send a complete request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this long, whatever it is doing (a client
/// that stops reading its response included).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Request head buffer (hyper's minimum); a larger head is refused.
const MAX_REQUEST_BYTES: usize = 8192;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) fn spawn(
    logger: slog::Logger,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("Failed to start the metrics server runtime")?;
    std::thread::Builder::new()
        .name("below-metrics".into())
        .spawn(move || rt.block_on(serve(logger, listener, shared)))
        .context("Failed to start the metrics server thread")?;
    Ok(())
}

async fn serve(logger: slog::Logger, listener: std::net::TcpListener, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return warn!(logger, "Metrics server stopped: {:#}", e),
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(
                logger,
                "Metrics server: {} refused, {} connections open", peer, MAX_CONNECTIONS
            );
            continue;
        };
        let shared = shared.clone();
        let logger = logger.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_REQUEST_BYTES)
                .serve_connection(
                    TokioIo::new(stream),
                    hyper::service::service_fn(move |req| {
                        let resp = respond(&shared, &req);
                        async move { Ok::<_, Infallible>(resp) }
                    }),
                );
            match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                Ok(Err(e)) => debug!(logger, "Metrics server: {}: {}", peer, e),
                Err(_) => debug!(
                    logger,
                    "Metrics server: {}: closed after {:?}", peer, CONNECTION_LIFETIME
                ),
                Ok(Ok(())) => {}
            }
            drop(slot);
        });
    }
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
