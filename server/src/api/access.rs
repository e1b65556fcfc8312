//! Who may call what: bearer token, role, namespace, rate and long-poll slots (before any
//! handler), and the `Klock-Index` / `Klock-Now` headers, request metrics and the request
//! log line (debug, target `klock::request`: method, route template, status, duration) around it.
//!
//! Contract (besides `crate::auth`'s):
//! - A path under `/v1/ns/` whose namespace cannot be percent-decoded (a `%` not followed by
//!   two hex digits, or bytes that are not UTF-8) is 400: a namespace is never left unchecked.
//! - Routes outside `/v1/ns/{ns}` that answer with server-wide values (`/metrics`,
//!   `/v1/deadline`, `/v1/state/hash`) need a token covering every namespace (`"*"`), or admin.
//! - With a token file, only an admin token may carry `Klock-Now` (the manual clock is one
//!   clock for every namespace): any other is 403 before the request does anything.
//! - A request with an `Idempotency-Key` is fingerprinted here (SHA-256 of its query and body)
//!   and runs with [`ASKER`] set: who asks (the token's name) and that fingerprint, which the
//!   key's scope and the machine's reuse check take.

use super::*;

/// The target of the request log's lines (`--log-level klock::request=debug` turns on only
/// it).
pub const REQUEST_LOG: &str = "klock::request";

/// Routes outside a namespace that answer with server-wide values.
fn global(route: &str) -> bool {
    matches!(route, "/metrics" | "/v1/deadline" | "/v1/state/hash")
}

/// The role a route needs (`None`: anyone, even without a token).
fn role_for(route: &str) -> Option<Role> {
    match route {
        "/v1/health" => None,
        "/v1/advance" | "/v1/backup" => Some(Role::Admin),
        r if r.starts_with("/v1/ns/{ns}/sessions") || r == "/v1/ns/{ns}/batch" => Some(Role::Agent),
        _ => Some(Role::Observer),
    }
}

/// Routes whose requests may wait: they take one of the caller's long-poll slots.
fn waits(route: &str) -> bool {
    route.ends_with("/tickets/{tid}") || route.ends_with("/events") || route.ends_with("/watch")
}

/// The namespace a `/v1/ns/{ns}/...` path names, percent-decoded: `Ok(None)` for a path
/// outside `/v1/ns/`, `Err` for one whose namespace cannot be decoded (checked by nobody,
/// so refused). Borrowed from the path when it has no `%` (no allocation per request).
fn path_namespace(path: &str) -> Result<Option<std::borrow::Cow<'_, str>>, String> {
    let Some(rest) = path.strip_prefix("/v1/ns/") else {
        return Ok(None);
    };
    let raw = rest.split('/').next().unwrap_or("");
    if !raw.contains('%') {
        return Ok(Some(std::borrow::Cow::Borrowed(raw)));
    }
    let bad = || {
        format!(
            "the namespace {raw:?} in the path cannot be decoded: % must be followed by two hex \
             digits, and the decoded bytes must be UTF-8"
        )
    };
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let text = std::str::from_utf8(hex).map_err(|_| bad())?;
            if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            out.push(u8::from_str_radix(text, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map(|ns| Some(std::borrow::Cow::Owned(ns)))
        .map_err(|_| bad())
}

/// What the request being handled carries through its handler: who asks (the token's name;
/// none without a token file), with an `Idempotency-Key` the fingerprint of the request, and
/// the log index and time of the command it made (for the `Klock-Index` and `Klock-Now`
/// headers). One task-local per request, set by [`access`].
#[derive(Default)]
pub(super) struct Asker {
    pub who: Option<Arc<str>>,
    pub fingerprint: Option<String>,
    pub index: std::cell::Cell<Option<(u64, u64)>>,
}

tokio::task_local! {
    /// The [`Asker`] of the current request.
    pub(super) static ASKER: Asker;
}

/// Notes the log index and time of the command the current request made.
pub(super) fn note_index(index: u64, now: u64) {
    let _ = ASKER.try_with(|a| a.index.set(Some((index, now))));
}

/// The fingerprint of a request: SHA-256 (hex) of its query and body.
fn fingerprint(query: Option<&str>, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(query.unwrap_or("").as_bytes());
    h.update(b"\n");
    h.update(body);
    auth::hex(&h.finalize())
}

/// Who the caller is, for the routes that export every namespace: whether it may see every
/// namespace (no token file, or a token for `"*"`), the token's name and role.
#[derive(Clone)]
pub(super) struct Reach {
    pub everywhere: bool,
    pub name: Option<String>,
    pub role: Option<Role>,
}

fn refuse(status: StatusCode, name: &'static str, message: String) -> Response {
    ApiError {
        status,
        code: 0,
        name,
        message,
    }
    .into_response()
}

/// A 429 before the handler (nothing was done): with `Retry-After: 1`, since a rate bucket
/// refills and a waiting slot frees within about a second, and the clients ask again after
/// what the server says (never sooner) within their budget.
fn busy(name: &'static str, message: String) -> Response {
    let mut refused = refuse(StatusCode::TOO_MANY_REQUESTS, name, message);
    refused
        .headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from_static("1"));
    refused
}

/// The namespace, role, server-wide and clock rules of the module contract for `caller`.
fn check_scope(
    caller: &auth::Caller<'_>,
    needed: Role,
    route: &str,
    request: &axum::extract::Request,
) -> Result<(), ApiError> {
    let namespace = match path_namespace(request.uri().path()) {
        Ok(ns) => ns,
        Err(why) => return Err(ApiError::bad_request(why)),
    };
    let auth::Caller::Token(grant) = caller else {
        return Ok(());
    };
    let forbid =
        |message: String| Err(ApiError::other(StatusCode::FORBIDDEN, "FORBIDDEN", message));
    if grant.role < needed {
        return forbid(format!(
            "token {:?} is a {:?}; this route needs {needed:?}",
            grant.name, grant.role
        ));
    }
    if let Some(ns) = &namespace {
        if !grant.covers(ns) {
            return forbid(format!(
                "token {:?} does not cover namespace {ns:?}",
                grant.name
            ));
        }
    }
    if global(route) && !grant.covers_all() && grant.role < Role::Admin {
        return forbid(format!(
            "token {:?} does not cover every namespace; {route} answers with server-wide \
             values: use a token whose namespaces are [\"*\"] (or an admin token)",
            grant.name
        ));
    }
    if grant.role < Role::Admin && request.headers().contains_key("klock-now") {
        return forbid(format!(
            "token {:?} is a {:?}; only an admin token may set the server's time with \
             Klock-Now (the manual clock is one clock for every namespace)",
            grant.name, grant.role
        ));
    }
    Ok(())
}

/// On a node that another node leads: the leader's API URL in `Klock-Leader`, which a client
/// goes to from then on when it is one of its URLs (docs/SPEC.md §13.7; the rule is the client
/// core's `Servers::led_by`). Every answer gets it, a relayed batch's too (the leader's own
/// headers name none).
fn name_leader(api: &Api, response: &mut Response) {
    if let Some(url) = api.engine.leader_url() {
        if let Ok(value) = axum::http::HeaderValue::try_from(url) {
            response
                .headers_mut()
                .insert(klock_core::client::failover::LEADER_HEADER, value);
        }
    }
}

/// The one layer around every route: bearer token, role, namespace, rate and long-poll slots
/// before the handler; after it, the `Klock-Index` and `Klock-Now` headers of a request that
/// made a command, and the request counted by route template and status. (One layer and one
/// task-local: each middleware layer costs a boxed future and a clone of the route per
/// request.)
pub(super) async fn access(
    State(api): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let route = route.as_ref().map(axum::extract::MatchedPath::as_str);
    around(&api, route, request, |request| next.run(request)).await
}

/// [`access`]'s work around `handler`, for a request of the route template `route` (`None`:
/// no route matched): the layer calls it with the router's next service, the busy routes
/// (`super::busy`) with their handler.
pub(super) async fn around<F, H>(
    api: &Api,
    route: Option<&str>,
    request: axum::extract::Request,
    handler: H,
) -> Response
where
    H: FnOnce(axum::extract::Request) -> F,
    F: std::future::Future<Output = Response>,
{
    // Only when the request log is on: otherwise this costs one check of a cached level.
    let method = tracing::enabled!(target: REQUEST_LOG, tracing::Level::DEBUG)
        .then(|| request.method().clone());
    let started = std::time::Instant::now();
    let mut response = match admit(api, route, request).await {
        Err(refused) => refused,
        Ok(Admitted {
            request,
            asker,
            slot,
        }) => {
            let response = ASKER
                .scope(asker, async move {
                    let mut response = handler(request).await;
                    if let Some((index, now)) = ASKER.with(|a| a.index.get()) {
                        let headers = response.headers_mut();
                        headers.insert(crate::relay::INDEX_HEADER, index.into());
                        headers.insert("klock-now", now.into());
                    }
                    response
                })
                .await;
            drop(slot); // held while the handler ran
            response
        }
    };
    name_leader(api, &mut response);
    let route = route.unwrap_or(UNMATCHED);
    let (status, took) = (response.status().as_u16(), started.elapsed());
    api.engine.metrics().request(route, status, took);
    if let Some(method) = method {
        // The route template, never the path's ids, nor any header (tokens stay out).
        tracing::debug!(
            target: REQUEST_LOG,
            %method,
            route,
            status,
            duration_us = took.as_micros() as u64,
            "request"
        );
    }
    response
}

/// A request let through: who asks, and the long-poll slot it holds while it runs.
struct Admitted {
    request: axum::extract::Request,
    asker: Asker,
    slot: Option<auth::LongPoll>,
}

/// The checks before any handler (the module contract); a refusal is the answer.
async fn admit(
    api: &Api,
    route: Option<&str>,
    mut request: axum::extract::Request,
) -> Result<Admitted, Response> {
    let pass = |request| Admitted {
        request,
        asker: Asker::default(),
        slot: None,
    };
    let Some(route) = route else {
        return Ok(pass(request)); // the 404 fallback
    };
    let Some(needed) = role_for(route) else {
        return Ok(pass(request));
    };
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let caller = match api.auth.identify(authorization) {
        Ok(caller) => caller,
        Err(why) => {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                why.to_owned(),
            ))
        }
    };
    if let Err(refused) = check_scope(&caller, needed, route, &request) {
        return Err(refused.into_response());
    }
    let limits = caller.limits();
    if !limits.admit() {
        let message = String::from("over this token's rate of requests per second; slow down");
        return Err(busy("RATE_LIMITED", message));
    }
    let slots = limits.long_polls().clone();
    let slot = if waits(route) {
        match slots.take() {
            Some(slot) => Some(slot),
            None => {
                let message = format!(
                    "at most {} waiting requests at once for this token",
                    slots.max()
                );
                return Err(busy("TOO_MANY_WAITS", message));
            }
        }
    } else {
        None
    };
    let reach = match &caller {
        auth::Caller::Local(_) => Reach {
            everywhere: true,
            name: None,
            role: None,
        },
        auth::Caller::Token(grant) => Reach {
            everywhere: grant.covers_all(),
            name: Some(grant.name.clone()),
            role: Some(grant.role),
        },
    };
    let who = match &caller {
        auth::Caller::Local(_) => None,
        auth::Caller::Token(grant) => Some(Arc::clone(&grant.id)),
    };
    request.extensions_mut().insert(slots);
    request.extensions_mut().insert(reach);
    let mut asker = Asker {
        who,
        ..Asker::default()
    };
    if request.headers().contains_key("idempotency-key") {
        // Read here (the handler reads the same bytes again) only for keyed requests: the
        // fingerprint binds the key to this request.
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
            let message = format!("the request body is over {MAX_BODY_BYTES} bytes");
            return Err(refuse(StatusCode::PAYLOAD_TOO_LARGE, "TOO_LARGE", message));
        };
        asker.fingerprint = Some(fingerprint(parts.uri.query(), &bytes));
        request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    }
    Ok(Admitted {
        request,
        asker,
        slot,
    })
}
