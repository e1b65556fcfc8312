//! What a web page must not do to a server on loopback (issue 22 item 5), checked before any
//! route.
//!
//! Contract:
//! - Without `--tokens`, over TCP (the server then listens on loopback only: `klock serve`
//!   refuses anything else without tokens), a request's `Host` must be a loopback name:
//!   `localhost`, `127.0.0.1`, `[::1]` (or the loopback address the server listens on), with
//!   any port or none (a loopback forwarder or an `ssh -L` tunnel presents its own port).
//!   Anything else is `403 HOST_NOT_ALLOWED`: a page whose own name was re-pointed at
//!   127.0.0.1 (DNS rebinding) sends its own name, never one of these. With
//!   tokens, a page cannot send the bearer token, and a Unix socket is out of a browser's
//!   reach: no Host check then.
//! - On every server, a request that may change state (any method but GET, HEAD and OPTIONS)
//!   and carries a body, or names a Content-Type at all, must say `application/json`
//!   (parameters such as `charset` allowed); anything else is
//!   `415 UNSUPPORTED_MEDIA_TYPE` and nothing is parsed. A page can send a cross-origin POST
//!   without asking only as `text/plain`, a form or multipart, never as JSON, so none of its
//!   bodies is ever acted on.
//!
//! [`RequestGuard`] is a tower layer (`router.layer(guard)`): the checks read only headers, so
//! they run in the route's `call` with no future, task or clone of their own per request.

use crate::conn::NetMetrics;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The checks of one server.
#[derive(Clone)]
pub struct RequestGuard {
    /// The Host values accepted (lower case), or `None` for any.
    hosts: Option<Arc<[String]>>,
    metrics: Arc<NetMetrics>,
}

impl RequestGuard {
    /// Content-Type checks only (a server with tokens, or on a Unix socket).
    pub fn any_host(metrics: Arc<NetMetrics>) -> RequestGuard {
        RequestGuard {
            hosts: None,
            metrics,
        }
    }

    /// Also accept only loopback Host names (`listen` is the address the server listens on).
    pub fn loopback(listen: std::net::IpAddr, metrics: Arc<NetMetrics>) -> RequestGuard {
        let mut names = vec![
            String::from("localhost"),
            String::from("127.0.0.1"),
            String::from("[::1]"),
        ];
        let own = match listen {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        if listen.is_loopback() && !names.contains(&own) {
            names.push(own);
        }
        RequestGuard {
            hosts: Some(names.into()),
            metrics,
        }
    }
}

/// A refusal in the API's error shape (`{"error": {code, name, message}}`).
fn refuse(status: StatusCode, name: &'static str, message: String) -> Response {
    crate::api::ApiError::other(status, name, message).into_response()
}

/// The name of a Host value, without its port (`[::1]:7300` is `[::1]`); `None` if what
/// follows the name is not a port.
fn host_name(host: &[u8]) -> Option<&[u8]> {
    let end = if host.first() == Some(&b'[') {
        host.iter().position(|b| *b == b']')? + 1
    } else {
        host.iter().position(|b| *b == b':').unwrap_or(host.len())
    };
    let (name, rest) = host.split_at(end);
    match rest {
        [] => Some(name),
        [b':', port @ ..] if !port.is_empty() && port.iter().all(u8::is_ascii_digit) => Some(name),
        _ => None,
    }
}

/// Whether `value` names JSON: `application/json`, with parameters or not, any case.
fn is_json(value: &[u8]) -> bool {
    let media = value.split(|b| *b == b';').next().unwrap_or_default();
    media.trim_ascii().eq_ignore_ascii_case(b"application/json")
}

impl RequestGuard {
    /// The module contract's checks of `request`: a refusal, or `None` to serve it.
    pub(crate) fn refusal(&self, request: &Request) -> Option<Response> {
        let guard = self;
        if let Some(hosts) = &guard.hosts {
            let host = request.headers().get(header::HOST).map(|h| h.as_bytes());
            let allowed = host
                .and_then(host_name)
                .is_some_and(|h| hosts.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(h)));
            if !allowed {
                guard.metrics.refused_host.fetch_add(1, Relaxed);
                let shown = host.map_or_else(
                    || String::from("none"),
                    |h| format!("{:?}", String::from_utf8_lossy(h)),
                );
                return Some(refuse(
                StatusCode::FORBIDDEN,
                "HOST_NOT_ALLOWED",
                format!(
                    "Host {shown} is not this server: without --tokens it answers only to {} (a web page reaching it under another name is refused)",
                    hosts.join(", ")
                ),
            ));
            }
        }
        let method = request.method();
        if method != Method::GET && method != Method::HEAD && method != Method::OPTIONS {
            let headers = request.headers();
            let kind = headers.get(header::CONTENT_TYPE);
            let has_body = headers
                .get(header::CONTENT_LENGTH)
                .is_some_and(|n| n.as_bytes() != b"0")
                || headers.contains_key(header::TRANSFER_ENCODING);
            let refused = match kind {
                Some(kind) => !is_json(kind.as_bytes()),
                None => has_body,
            };
            if refused {
                guard.metrics.refused_content_type.fetch_add(1, Relaxed);
                let shown = kind.map_or_else(
                    || String::from("none"),
                    |k| format!("{:?}", String::from_utf8_lossy(k.as_bytes())),
                );
                return Some(refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UNSUPPORTED_MEDIA_TYPE",
                    format!(
                    "a {method} with a body must send Content-Type: application/json, got {shown}"
                ),
                ));
            }
        }
        None
    }
}

impl<S> tower_layer::Layer<S> for RequestGuard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: self.clone(),
            inner,
        }
    }
}

/// A route behind the [`RequestGuard`].
#[derive(Clone)]
pub struct Guarded<S> {
    guard: RequestGuard,
    inner: S,
}

impl<S> tower_service::Service<Request> for Guarded<S>
where
    S: tower_service::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.guard.refusal(&request) {
            Some(refused) => Either::Left(std::future::ready(Ok(refused))),
            None => Either::Right(self.inner.call(request)),
        }
    }
}
