//! The connections and what every request passes before its handler: the accept loop with its
//! connection limit and timeouts, the Host, Origin and Content-Type checks, the request body's
//! deadline, and errors in JSON.
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use http_body::{Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, Semaphore};

use crate::api::ErrorBody;
use crate::config::ServeConfig;
use crate::names::{host_name, normal_name};

/// A request body not received whole within the server's body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body: not received within {} s", .0.as_secs_f64())]
pub(crate) struct BodyTimeout(pub(crate) Duration);

/// How long a connection may take and how many may be open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnLimits {
    /// A request's head must arrive within it (and an idle kept-alive connection is closed after it).
    pub(crate) header_timeout: Duration,
    /// Connections open at once; past it the next waits to be accepted.
    pub(crate) max_connections: usize,
}

impl ConnLimits {
    /// The limits `config` asks for.
    pub(crate) fn of(config: &ServeConfig) -> Self {
        Self { header_timeout: config.header_timeout, max_connections: config.max_connections }
    }
}

/// Serve `router` on `listener` until `stop` turns true: then stop accepting, let each
/// connection finish its request in flight, and return once all are closed (the caller bounds
/// that wait). At most `limits.max_connections` connections are open; the next waits in the
/// listen queue until one closes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    // Checked at start (`ServeConfig::validate`); clamped again so a permit count always fits.
    let most = limits.max_connections.clamp(1, 1_000_000);
    let open = Arc::new(Semaphore::new(most));
    loop {
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                // Out of file descriptors and the like: wait rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => break,
        };
        let (router, stop) = (router.clone(), stop.clone());
        tokio::spawn(async move {
            connection(stream, router, limits, stop).await;
            drop(permit);
        });
    }
    drop(listener);
    // Every connection holds a permit until it closes: all of them back means all closed.
    let _ = open.acquire_many(most as u32).await;
    Ok(())
}

/// Accept errors that concern one connection only.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// One connection, HTTP/1.1, until it closes or a stop lets its request in flight finish.
async fn connection(
    stream: tokio::net::TcpStream,
    router: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper starts this clock whenever it waits for a request's head, so it bounds idle
    // kept-alive connections as well as slow heads.
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// What the guard checks requests against.
pub(crate) struct Guard {
    /// The address the server is bound to.
    addr: SocketAddr,
    /// Further names the server answers to (lower case).
    names: Vec<String>,
    /// Origins a browser may call from (`*`: any).
    cors: Vec<String>,
    /// The request body's deadline.
    body_timeout: Duration,
}

impl Guard {
    /// The checks for a server bound to `addr` with `config`.
    pub(crate) fn new(config: &ServeConfig, addr: SocketAddr) -> Self {
        Self {
            addr,
            names: config.allowed_hosts.iter().map(|n| normal_name(n)).collect(),
            cors: config.cors_origins.iter().map(|o| o.trim().to_string()).collect(),
            body_timeout: config.body_timeout,
        }
    }

    /// Whether `host` (a Host header) names this server: its bound address, `localhost` when
    /// it is bound to loopback, any IP literal when it is bound to all interfaces, or a name
    /// it was given. The port is not compared: a port forward changes it, and a rebinding
    /// attack needs a name, not a port.
    fn host_allowed(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else { return false };
        let bound = self.addr.ip();
        if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return bound.is_unspecified() || ip == bound || self.names.contains(&normal_name(name));
        }
        let name = normal_name(name);
        (name == "localhost" && (bound.is_loopback() || bound.is_unspecified())) || self.names.contains(&name)
    }

    /// Whether a request from `origin` that reached the server as `host` may go on: the
    /// server's own page (http or https behind a proxy, at the same host) or a CORS origin.
    fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim();
        let own = |scheme: &str| {
            origin.len() == scheme.len() + 3 + host.len()
                && origin[..scheme.len() + 3].eq_ignore_ascii_case(&format!("{scheme}://"))
                && origin[scheme.len() + 3..].eq_ignore_ascii_case(host)
        };
        own("http") || own("https") || self.cors.iter().any(|c| c == "*" || c.eq_ignore_ascii_case(origin))
    }
}

/// A JSON error answer.
fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody { error: message.into() })).into_response()
}

/// Every request but `/health`'s passes this first: a Host the server answers to (against DNS
/// rebinding), an Origin that is its own page or a CORS origin (against cross-site requests),
/// a POST body declared as JSON (which a cross-site form cannot send without a preflight);
/// then its body gets a deadline, and a plain-text error answer (axum's own rejections)
/// becomes JSON like every other.
pub(crate) async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let mut response = match check(&guard, &request) {
        Some(refused) => refused,
        None => {
            let limit = guard.body_timeout;
            let request = request.map(|body| Body::new(DeadlineBody::new(body, limit)));
            json_error(next.run(request).await).await
        }
    };
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The guard's refusal of `request`, if it refuses it.
fn check(guard: &Guard, request: &Request) -> Option<Response> {
    if request.uri().path() != "/health" {
        let host = request.headers().get(header::HOST).map(|h| h.to_str().unwrap_or("\u{fffd}"));
        let Some(host) = host.filter(|h| guard.host_allowed(h)) else {
            let shown = host.map_or_else(|| "none".to_string(), |h| format!("{h:?}"));
            return Some(refuse(
                StatusCode::MISDIRECTED_REQUEST,
                format!("Host {shown}: this server does not answer to that name"),
            ));
        };
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("\u{fffd}");
            if !guard.origin_allowed(origin, host) {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    format!("Origin {origin:?}: requests from that site are not allowed (only this server's page and its CORS origins)"),
                ));
            }
        }
    }
    if request.method() == Method::POST {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Some(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the request body must be JSON, sent with Content-Type: application/json",
            ));
        }
    }
    None
}

/// An error answer that is not JSON (axum's rejections: a path that does not decode, an unknown
/// route, a wrong method) as `{"error": ...}`, its headers kept.
async fn json_error(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // axum's rejections are a line or two; a larger body is not one of them.
    let text = axum::body::to_bytes(body, 64 << 10).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let message = match text {
        Ok(text) if !text.is_empty() => text,
        _ => match status {
            StatusCode::NOT_FOUND => "no such endpoint".to_string(),
            StatusCode::METHOD_NOT_ALLOWED => "this endpoint does not take that method".to_string(),
            _ => status.canonical_reason().unwrap_or("error").to_lowercase(),
        },
    };
    let body = serde_json::to_vec(&ErrorBody { error: message }).unwrap_or_default();
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// A request body that fails with [`BodyTimeout`] when it is not whole by its deadline
/// (counted from the request's head): a client sending a byte now and then cannot hold a
/// connection and its handler.
struct DeadlineBody {
    body: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl DeadlineBody {
    fn new(body: Body, limit: Duration) -> Self {
        Self { body, deadline: Box::pin(tokio::time::sleep(limit)), limit }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(this.limit).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Whether an Authorization header carries `Bearer <key>`, compared in constant time (the
/// time taken does not tell how much of a guess was right; only the key's length shows).
pub(crate) fn key_matches(key: &str, header: Option<&HeaderValue>) -> bool {
    use subtle::ConstantTimeEq;
    let Some(given) = header.and_then(|v| v.as_bytes().strip_prefix(b"Bearer ")) else { return false };
    bool::from(given.ct_eq(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(addr: &str, names: &[&str], cors: &[&str]) -> Guard {
        let config = ServeConfig {
            allowed_hosts: names.iter().map(|n| n.to_string()).collect(),
            cors_origins: cors.iter().map(|n| n.to_string()).collect(),
            ..ServeConfig::default()
        };
        Guard::new(&config, addr.parse().unwrap())
    }

    #[test]
    fn hosts_are_the_bound_address_localhost_on_loopback_and_the_given_names() {
        let local = guard("127.0.0.1:8080", &["lab.example.org"], &[]);
        for ok in
            ["127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LOCALHOST", "lab.example.org", "Lab.Example.Org.:443"]
        {
            assert!(local.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example:8080", "10.0.0.1:8080", "", ":8080", "127.0.0.1:80x", "localhost.evil.example"] {
            assert!(!local.host_allowed(bad), "{bad}");
        }
        let all = guard("0.0.0.0:8080", &[], &[]);
        assert!(
            all.host_allowed("192.168.1.5:8080") && all.host_allowed("[fe80::1]:8080") && all.host_allowed("localhost")
        );
        assert!(!all.host_allowed("lab.example.org:8080"), "a name needs allowed_hosts");
        let lan = guard("192.168.1.5:8080", &[], &[]);
        assert!(!lan.host_allowed("localhost:8080") && lan.host_allowed("192.168.1.5:8080"));
        let v6 = guard("[::1]:8080", &[], &[]);
        assert!(v6.host_allowed("[::1]:8080") && v6.host_allowed("localhost:8080") && !v6.host_allowed("[::2]:8080"));
    }

    #[test]
    fn origins_are_the_servers_own_page_or_a_cors_origin() {
        let g = guard("127.0.0.1:8080", &[], &["https://lab.example.org"]);
        assert!(g.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(g.origin_allowed("https://lab.example.org", "127.0.0.1:8080"));
        assert!(!g.origin_allowed("http://evil.example", "127.0.0.1:8080"));
        assert!(!g.origin_allowed("http://127.0.0.1:9999", "127.0.0.1:8080"));
        assert!(!g.origin_allowed("null", "127.0.0.1:8080"));
        assert!(guard("127.0.0.1:8080", &[], &["*"]).origin_allowed("http://evil.example", "127.0.0.1:8080"));
    }

    #[test]
    fn the_key_comparison_accepts_the_key_and_nothing_else() {
        let header = |v: &str| HeaderValue::from_str(v).unwrap();
        assert!(key_matches("s3cret", Some(&header("Bearer s3cret"))));
        for wrong in
            ["Bearer s3cre", "Bearer s3cret2", "Bearer S3cret", "bearer s3cret", "s3cret", "Bearer ", "Basic s3cret"]
        {
            assert!(!key_matches("s3cret", Some(&header(wrong))), "{wrong}");
        }
        assert!(!key_matches("s3cret", None));
    }
}
