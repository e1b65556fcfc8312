//! The HTTP API (`/v1`, JSON): translation only. Every route checks its input, names the
//! namespace and the session (with the session's secret token) before any kernel call, and
//! turns one request into one engine command; the kernel decides everything.
//!
//! Contract:
//! - Verdicts are 200s. Errors are `{"error": {"code", "name", "message"}}` with the SPEC's
//!   stable code and name and a 4xx status that fits: 400 bad input, 401 a missing or wrong
//!   session token, 404 unknown ids, 409 state conflicts, 413 too large, 503 engine stopped.
//!   Malformed JSON, unknown fields and wrong types are `BAD_REQUEST` (code 0) naming the
//!   problem; nothing reaches the kernel then.
//! - A session belongs to the namespace in the path: another namespace's session id is
//!   `UNKNOWN_SESSION` (it does not exist there), and every call naming a session carries its
//!   token in `Klock-Session-Token` (handed out by open and resume; a session id alone never
//!   grants anything). Tokens are compared as SHA-256 digests, in constant time.
//! - `Idempotency-Key` on a mutating request: a retry with the same key (same namespace,
//!   session and route) answers the first answer and changes nothing, across restarts too.
//! - Under `--clock manual` every request carries `Klock-Now` (ms); otherwise it is refused.
//! - Every answer to a command carries `Klock-Index`, the log index of its entry (its events'
//!   ids start with it), and `Klock-Now`, the server time of the answer (for a repeated
//!   idempotency key, the first answer's time); errors included, since a failed call still
//!   settles time.
//! - Acquire may hold the request up to `hold_ms` (≤ 30 000) for the final verdict of a WAIT;
//!   a ticket can be long-polled; a session's events are read with `?after=&wait_ms=`.

use crate::auth::{self, Auth, PollSlots, Role};
use crate::engine::{EngineError, EngineHandle, Reply, Submission};
use crate::events::{EventId, Stream};
use crate::machine::{Caller, Refused};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use klock_core::{
    AcquireOptions, Command, Error, ErrorCode, Event, LeaseId, Output, SessionId, StateDigest,
    TicketId, Verdict,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Longest an acquire may hold the request, or a long-poll wait, in ms.
pub const MAX_HOLD_MS: u64 = 30_000;

/// What every handler shares.
#[derive(Clone)]
pub struct Api {
    pub engine: EngineHandle,
    pub auth: Arc<Auth>,
}

/// The router of `/v1`.
pub fn router(api: Api) -> Router {
    let (routes, doc) = documented().split_for_parts();
    let doc = Arc::new(doc);
    routes
        .route(
            "/v1/openapi.json",
            get(move || {
                let doc = Arc::clone(&doc);
                async move { Json(doc.as_ref().clone()) }
            }),
        )
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(api.clone(), guard))
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            with_index,
        ))
        .with_state(api)
}

/// Every route with its OpenAPI description: the router and the document come from this one
/// list, so they cannot drift apart (`routes!` takes only handlers that describe themselves).
pub fn documented() -> OpenApiRouter<Api> {
    let mut info = utoipa::openapi::Info::new("klock serve", env!("CARGO_PKG_VERSION"));
    info.description = Some(String::from(
        "The Klock control plane: sessions, leases and their events over HTTP. See server/README.md.",
    ));
    let doc = utoipa::openapi::OpenApiBuilder::new().info(info).build();
    OpenApiRouter::with_openapi(doc)
        .routes(routes!(health))
        .routes(routes!(version))
        .routes(routes!(open))
        .routes(routes!(resume))
        .routes(routes!(close))
        .routes(routes!(suspend))
        .routes(routes!(digest))
        .routes(routes!(acquire))
        .routes(routes!(ticket, cancel))
        .routes(routes!(heartbeat))
        .routes(routes!(release))
        .routes(routes!(reconcile))
        .routes(routes!(events))
        .routes(routes!(resource_state))
        .routes(routes!(stats))
        .routes(routes!(watch))
        .routes(routes!(batch))
        .routes(routes!(deadline))
        .routes(routes!(advance))
        .routes(routes!(reset))
        .routes(routes!(metrics))
}

// ---- errors --------------------------------------------------------------------------------

/// The JSON of every error answer (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ErrorDetail {
    /// The SPEC's stable numeric code (0 for the server's own conditions).
    code: u32,
    /// The stable upper-case name, e.g. `NOT_OWNER`, `BAD_REQUEST`, `UNAUTHORIZED`.
    name: String,
    /// What went wrong and what to fix.
    message: String,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: u32,
    name: &'static str,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: 0,
            name: "BAD_REQUEST",
            message: message.into(),
        }
    }

    fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: 0,
            name: "UNAUTHORIZED",
            message: message.into(),
        }
    }

    fn kernel(e: Error) -> ApiError {
        use ErrorCode::*;
        let status = match e.code {
            UnknownSession | UnknownLease | UnknownTicket => StatusCode::NOT_FOUND,
            NotOwner | LeaseExpired | LeaseReleased | HoldAndWait | LifetimeExceeded
            | QuotaExceeded => StatusCode::CONFLICT,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError {
            status,
            code: e.code.code(),
            name: e.code.name(),
            message: e.message,
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::Stopped => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: 0,
                name: "UNAVAILABLE",
                message: String::from("the server is stopping"),
            },
            EngineError::Clock(message) => ApiError::bad_request(format!(
                "{message} (over HTTP: the Klock-Now header, in ms)"
            )),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            json!({"error": {"code": self.code, "name": self.name, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

type Answer = Result<Json<Value>, ApiError>;

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: 0,
        name: "NOT_FOUND",
        message: String::from("no such route; the API is under /v1"),
    }
}

// ---- input ---------------------------------------------------------------------------------

/// Parses a JSON body strictly (unknown fields and wrong types are errors naming them).
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    let text = if bytes.is_empty() { &b"{}"[..] } else { bytes };
    serde_json::from_slice(text).map_err(|e| ApiError::bad_request(format!("request body: {e}")))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("header {name} is not ASCII text")))
        })
        .transpose()
}

/// `Klock-Now`, for the manual clock.
fn now_of(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    header(headers, "klock-now")?
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "header Klock-Now must be a whole number of ms, got {v:?}"
                ))
            })
        })
        .transpose()
}

fn session_id(sid: &str) -> Result<SessionId, ApiError> {
    sid.parse::<u64>()
        .map(SessionId)
        .map_err(|_| ApiError::bad_request(format!("session id must be a number, got {sid:?}")))
}

/// The SHA-256 of a secret, in hex.
fn digest_of(secret: &str) -> String {
    auth::hex(&auth::digest(secret))
}

/// A fresh secret session token.
fn new_token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: 0,
        name: "UNAVAILABLE",
        message: format!("no randomness for a session token: {e}"),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// For reads that make no command (event streams, ticket polls): checks that `sid` is an open
/// session of `ns` and that the request carries its token.
async fn authorize(
    api: &Api,
    ns: &str,
    sid: &str,
    headers: &HeaderMap,
) -> Result<SessionId, ApiError> {
    let (session, caller) = named(ns, sid, headers)?;
    api.engine
        .read(move |m| m.check_reader(session, &caller))
        .await?
        .map_err(refusal)?;
    Ok(session)
}

/// The role a route needs (`None`: anyone, even without a token).
fn role_for(route: &str) -> Option<Role> {
    match route {
        "/v1/health" | "/v1/openapi.json" => None,
        "/v1/advance" | "/v1/reset" => Some(Role::Admin),
        r if r.starts_with("/v1/ns/{ns}/sessions") || r == "/v1/ns/{ns}/batch" => Some(Role::Agent),
        _ => Some(Role::Observer),
    }
}

/// Routes whose requests may wait: they take one of the caller's long-poll slots.
fn waits(route: &str) -> bool {
    route.ends_with("/tickets/{tid}") || route.ends_with("/events") || route.ends_with("/watch")
}

/// The namespace a `/v1/ns/{ns}/...` path names, percent-decoded.
fn path_namespace(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/ns/")?;
    let raw = rest.split('/').next()?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                let text = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(text, 16).ok()?);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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

/// Bearer token, role, namespace, rate and long-poll slots, before any handler runs.
async fn guard(
    State(api): State<Api>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let Some(route) = route else {
        return next.run(request).await; // the 404 fallback
    };
    let Some(needed) = role_for(&route) else {
        return next.run(request).await;
    };
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let caller = match api.auth.identify(authorization) {
        Ok(caller) => caller,
        Err(why) => return refuse(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", why.to_owned()),
    };
    if let auth::Caller::Token(grant) = &caller {
        if grant.role < needed {
            let message = format!(
                "token {:?} is a {:?}; this route needs {needed:?}",
                grant.name, grant.role
            );
            return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", message);
        }
        if let Some(ns) = path_namespace(request.uri().path()) {
            if !grant.covers(&ns) {
                let message = format!("token {:?} does not cover namespace {ns:?}", grant.name);
                return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", message);
            }
        }
    }
    let limits = caller.limits();
    if !limits.admit() {
        let message = String::from("over this token's rate of requests per second; slow down");
        return refuse(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", message);
    }
    let slots = limits.long_polls().clone();
    let _slot = if waits(&route) {
        match slots.take() {
            Some(slot) => Some(slot),
            None => {
                let message = format!(
                    "at most {} waiting requests at once for this token",
                    slots.max()
                );
                return refuse(StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_WAITS", message);
            }
        }
    } else {
        None
    };
    request.extensions_mut().insert(slots);
    next.run(request).await
}

tokio::task_local! {
    /// The log index and time of the command the current request made, for the
    /// `Klock-Index` and `Klock-Now` headers.
    static INDEX: std::cell::Cell<Option<(u64, u64)>>;
}

/// Adds `Klock-Index` and `Klock-Now` to the answer of a request that made a command, and
/// counts the request by route template and status.
async fn with_index(
    State(api): State<Api>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let started = std::time::Instant::now();
    INDEX
        .scope(std::cell::Cell::new(None), async move {
            let mut response = next.run(request).await;
            let status = response.status().as_u16();
            api.engine
                .metrics()
                .request(&route, status, started.elapsed());
            if let Some((index, now)) = INDEX.with(std::cell::Cell::get) {
                let headers = response.headers_mut();
                headers.insert("klock-index", index.to_string().parse().expect("digits"));
                headers.insert("klock-now", now.to_string().parse().expect("digits"));
            }
            response
        })
        .await
}

/// The engine command, scoped idempotency key included; `token` is bound to the session an
/// open or resume creates.
async fn run(
    api: &Api,
    headers: &HeaderMap,
    scope: &str,
    command: Command,
    token: Option<String>,
) -> Result<Reply, ApiError> {
    submit(api, headers, scope, command, token, None).await
}

/// The engine command of a request naming a session, checked against `caller` in the log.
async fn run_as(
    api: &Api,
    headers: &HeaderMap,
    scope: &str,
    command: Command,
    caller: Caller,
) -> Result<Reply, ApiError> {
    submit(api, headers, scope, command, None, Some(caller)).await
}

async fn submit(
    api: &Api,
    headers: &HeaderMap,
    scope: &str,
    command: Command,
    token: Option<String>,
    caller: Option<Caller>,
) -> Result<Reply, ApiError> {
    let mut submission = Submission::new(command, now_of(headers)?);
    submission.key = header(headers, "idempotency-key")?.map(|k| format!("{scope}\u{0}{k}"));
    submission.token = token;
    submission.caller = caller;
    let reply = api.engine.submit(submission).await?;
    let _ = INDEX.try_with(|cell| cell.set(Some((reply.index, reply.now))));
    Ok(reply)
}

/// The session a command's path names, and who is asking (checked by the machine).
fn named(ns: &str, sid: &str, headers: &HeaderMap) -> Result<(SessionId, Caller), ApiError> {
    let session = session_id(sid)?;
    let token = header(headers, "klock-session-token")?.map(digest_of);
    let caller = Caller {
        namespace: ns.to_owned(),
        token,
    };
    Ok((session, caller))
}

fn refusal(refused: Refused) -> ApiError {
    match refused {
        Refused::Kernel(e) => ApiError::kernel(e),
        Refused::Unauthorized(message) => ApiError::unauthorized(message),
    }
}

fn output(reply: Reply) -> Result<Output, ApiError> {
    reply.output.map_err(refusal)
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("API values serialize")
}

/// The JSON of a lease command's answer, the same on its own route and in a batch.
fn render(output: &Output) -> Value {
    match output {
        Output::Verdict { verdict } => to_json(verdict),
        Output::Heartbeat { results } => json!({
            "results": results.iter().map(|(id, r)| match r {
                Ok(expires_at) => json!({"lease_id": id, "status": "OK", "expires_at": expires_at}),
                Err(code) => json!({"lease_id": id, "status": code.name()}),
            }).collect::<Vec<_>>()
        }),
        Output::Released { released } => json!({ "released": released }),
        Output::ReleasedAll { count } => json!({ "released": count }),
        Output::Reconcile { statuses } => json!({
            "statuses": statuses.iter().map(|(id, s)| {
                let mut v = to_json(s);
                v["lease_id"] = json!(id);
                v
            }).collect::<Vec<_>>()
        }),
        Output::Done => json!({ "done": true }),
        other => to_json(other),
    }
}

// ---- routes --------------------------------------------------------------------------------

#[utoipa::path(
    get,
    path = "/v1/health",
    tag = "server",
    summary = "Liveness, without any token",
    params(),
    responses((status = 200, description = "Liveness, without any token", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

#[utoipa::path(
    get,
    path = "/v1/version",
    tag = "server",
    summary = "Server and state versions",
    params(),
    responses((status = 200, description = "Server and state versions", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn version() -> Json<Value> {
    Json(json!({
        "server": env!("CARGO_PKG_VERSION"),
        "api": "v1",
        "state_version": klock_core::STATE_VERSION,
    }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct OpenBody {
    agent_id: String,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions",
    tag = "sessions",
    summary = "Open a session: its id, priority, token and the server time",
    params(("ns" = String, Path, description = "the namespace"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = OpenBody,
    responses((status = 200, description = "Open a session: its id, priority, token and the server time", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn open(
    State(api): State<Api>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: OpenBody = body(&raw)?;
    let command = Command::Open {
        agent_id: b.agent_id,
        namespace: ns.clone(),
    };
    start_session(&api, &headers, &ns, "open", command, None).await
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    /// A StateDigest (version, identity, recovery) as `digest` answered it.
    #[schema(value_type = Object)]
    digest: StateDigest,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/resume",
    tag = "sessions",
    summary = "Resume a session from its StateDigest, with a new token",
    params(("ns" = String, Path, description = "the namespace"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = ResumeBody,
    responses((status = 200, description = "Resume a session from its StateDigest, with a new token", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn resume(
    State(api): State<Api>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: ResumeBody = body(&raw)?;
    let command = Command::Resume {
        digest: Box::new(b.digest),
    };
    // The session must live in the path's namespace (the machine checks it with the command);
    // the digest's own fields are the kernel's to check.
    let caller = Caller {
        namespace: ns.clone(),
        token: None,
    };
    start_session(&api, &headers, &ns, "resume", command, Some(caller)).await
}

/// Open or resume: the command, with a fresh secret token bound (as its SHA-256) to the
/// session it answers; the answer is the session, its token and the server's time.
async fn start_session(
    api: &Api,
    headers: &HeaderMap,
    ns: &str,
    what: &str,
    command: Command,
    caller: Option<Caller>,
) -> Answer {
    let token = new_token()?;
    let scope = format!("{ns}/{what}");
    let reply = submit(
        api,
        headers,
        &scope,
        command,
        Some(digest_of(&token)),
        caller,
    )
    .await?;
    let now = reply.now;
    match output(reply)? {
        Output::Session { session } => {
            let mut v = to_json(&session);
            v["session_token"] = json!(token);
            v["server_now"] = json!(now);
            Ok(Json(v))
        }
        other => Err(unexpected(what, &other)),
    }
}

/// The session named by the path.
type SessionPath = Path<(String, String)>;

/// Runs the command `make` builds for the session in the path, as the request's caller (the
/// idempotency scope is the session and `what`); its entry's index and output.
async fn on_session(
    api: &Api,
    headers: &HeaderMap,
    (ns, sid): &(String, String),
    what: &str,
    make: impl FnOnce(SessionId) -> Command,
) -> Result<(u64, Output), ApiError> {
    let (session, caller) = named(ns, sid, headers)?;
    let scope = format!("{ns}/{sid}/{what}");
    let reply = run_as(api, headers, &scope, make(session), caller).await?;
    Ok((reply.index, output(reply)?))
}

/// A kernel answer of the wrong kind for the route: a bug, answered as one (500), not a panic.
fn unexpected(route: &str, output: &Output) -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: 0,
        name: "INTERNAL",
        message: format!("{route} got an answer of another kind: {output:?}"),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/ns/{ns}/sessions/{sid}",
    tag = "sessions",
    summary = "Close a session: release every lease, cancel every wait",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    responses((status = 200, description = "Close a session: release every lease, cancel every wait", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn close(State(api): State<Api>, Path(path): SessionPath, headers: HeaderMap) -> Answer {
    let session = session_id(&path.1)?;
    on_session(&api, &headers, &path, "close", |session| Command::Close {
        session,
    })
    .await?;
    api.engine.events().forget(session);
    Ok(Json(json!({"closed": true})))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/suspend",
    tag = "sessions",
    summary = "Mark a session as restarting: its leases keep the grace",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    responses((status = 200, description = "Mark a session as restarting: its leases keep the grace", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn suspend(State(api): State<Api>, Path(path): SessionPath, headers: HeaderMap) -> Answer {
    on_session(&api, &headers, &path, "suspend", |session| {
        Command::Suspend { session }
    })
    .await?;
    Ok(Json(json!({"suspended": true})))
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/sessions/{sid}/digest",
    tag = "sessions",
    summary = "The session's StateDigest",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    responses((status = 200, description = "The session's StateDigest", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn digest(State(api): State<Api>, Path(path): SessionPath, headers: HeaderMap) -> Answer {
    let make = |session| Command::Digest { session };
    match on_session(&api, &headers, &path, "digest", make).await?.1 {
        Output::Digest { digest } => Ok(Json(to_json(&digest))),
        other => Err(unexpected("digest", &other)),
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    intents: Vec<String>,
    ttl_ms: Option<u64>,
    wait: Option<bool>,
    wait_timeout_ms: Option<u64>,
    hold_ms: Option<u64>,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/acquire",
    tag = "leases",
    summary = "Ask for a manifest: GRANTED, WAIT or DIE; with hold_ms a WAIT is held for its outcome",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = AcquireBody,
    responses((status = 200, description = "Ask for a manifest: GRANTED, WAIT or DIE; with hold_ms a WAIT is held for its outcome", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn acquire(
    State(api): State<Api>,
    Path(path): SessionPath,
    slots: Option<axum::Extension<PollSlots>>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: AcquireBody = body(&raw)?;
    let hold = hold_of(b.hold_ms, "hold_ms")?;
    // A held acquire waits: it takes one of the caller's long-poll slots for its whole time.
    let _slot = match (&hold, slots) {
        (Some(_), Some(axum::Extension(slots))) => Some(slots.take().ok_or_else(|| ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: 0,
            name: "TOO_MANY_WAITS",
            message: format!(
                "at most {} waiting requests at once for this token; retry without hold_ms",
                slots.max()
            ),
        })?),
        _ => None,
    };
    let options = AcquireOptions {
        ttl_ms: b.ttl_ms,
        wait: b.wait.unwrap_or(true),
        wait_timeout_ms: b.wait_timeout_ms,
    };
    let make = |session| Command::Acquire {
        session,
        intents: b.intents,
        options,
    };
    let (index, verdict) = match on_session(&api, &headers, &path, "acquire", make).await? {
        (index, Output::Verdict { verdict }) => (index, verdict),
        (_, other) => return Err(unexpected("acquire", &other)),
    };
    if let (Verdict::Wait { ticket, .. }, Some(hold)) = (&verdict, hold) {
        let session = session_id(&path.1)?;
        let after = EventId { index, k: 0 };
        if let Some(resolution) = resolve_ticket(&api, session, *ticket, after, hold).await {
            return Ok(Json(resolution));
        }
    }
    Ok(Json(to_json(&verdict)))
}

fn hold_of(ms: Option<u64>, what: &str) -> Result<Option<Duration>, ApiError> {
    match ms {
        None | Some(0) => Ok(None),
        Some(ms) if ms <= MAX_HOLD_MS => Ok(Some(Duration::from_millis(ms))),
        Some(ms) => Err(ApiError::bad_request(format!(
            "{what} must be at most {MAX_HOLD_MS} ms, got {ms}"
        ))),
    }
}

/// The event that resolved `ticket` after `after`, waiting up to `hold`, as a final answer.
async fn resolve_ticket(
    api: &Api,
    session: SessionId,
    ticket: TicketId,
    mut after: EventId,
    hold: Duration,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + hold;
    let stream = Stream::Session(session);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let batch = api.engine.events().wait_after(&stream, after, left).await;
        for stamped in &batch.events {
            let resolves = match &stamped.event {
                Event::Granted { ticket: t, .. }
                | Event::WaitTimeout { ticket: t, .. }
                | Event::Died { ticket: t, .. } => *t == ticket,
                Event::Wounded { lost_tickets, .. } => lost_tickets.contains(&ticket),
                _ => false,
            };
            if resolves {
                let mut v = to_json(&stamped.event);
                v["ticket"] = json!(ticket);
                v["event_id"] = json!(stamped.id);
                return Some(v);
            }
        }
        after = EventId::parse(&batch.next).unwrap_or(after);
        if left.is_zero() || batch.events.is_empty() {
            return None;
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    wait_ms: Option<u64>,
    after: Option<String>,
}

impl WaitQuery {
    /// How long to wait, and the event id to read after.
    fn parse(&self) -> Result<(Duration, EventId), ApiError> {
        let hold = hold_of(self.wait_ms, "wait_ms")?.unwrap_or(Duration::ZERO);
        let after = match &self.after {
            Some(a) => EventId::parse(a).ok_or_else(|| {
                ApiError::bad_request(format!("after must be an event id like 12.0, got {a:?}"))
            })?,
            None => EventId::default(),
        };
        Ok((hold, after))
    }
}

fn ticket_id(tid: &str) -> Result<TicketId, ApiError> {
    tid.parse::<u64>()
        .map(TicketId)
        .map_err(|_| ApiError::bad_request(format!("ticket must be a number, got {tid:?}")))
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/sessions/{sid}/tickets/{tid}",
    tag = "leases",
    summary = "Long-poll a ticket's outcome",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("tid" = u64, Path, description = "the ticket"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), WaitQuery),
    responses((status = 200, description = "Long-poll a ticket's outcome", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn ticket(
    State(api): State<Api>,
    Path((ns, sid, tid)): Path<(String, String, String)>,
    Query(q): Query<WaitQuery>,
    headers: HeaderMap,
) -> Answer {
    let session = authorize(&api, &ns, &sid, &headers).await?;
    let ticket = ticket_id(&tid)?;
    let (hold, after) = q.parse()?;
    match resolve_ticket(&api, session, ticket, after, hold).await {
        Some(v) => Ok(Json(v)),
        None => Ok(Json(json!({"verdict": "WAIT", "ticket": ticket}))),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/ns/{ns}/sessions/{sid}/tickets/{tid}",
    tag = "leases",
    summary = "Withdraw a waiting ticket",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("tid" = u64, Path, description = "the ticket"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    responses((status = 200, description = "Withdraw a waiting ticket", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn cancel(
    State(api): State<Api>,
    Path((ns, sid, tid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Answer {
    let ticket = ticket_id(&tid)?;
    let make = |session| Command::CancelWait { session, ticket };
    on_session(&api, &headers, &(ns, sid), &format!("cancel/{tid}"), make).await?;
    Ok(Json(json!({"cancelled": true})))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct LeasesBody {
    lease_ids: Option<Vec<u64>>,
    all: Option<bool>,
}

fn lease_ids(ids: Vec<u64>) -> Vec<LeaseId> {
    ids.into_iter().map(LeaseId).collect()
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/heartbeat",
    tag = "leases",
    summary = "Renew the chosen leases, or all of them",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = LeasesBody,
    responses((status = 200, description = "Renew the chosen leases, or all of them", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn heartbeat(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: LeasesBody = body(&raw)?;
    if b.all.is_some() {
        return Err(ApiError::bad_request(
            "heartbeat takes lease_ids, or nothing for every lease",
        ));
    }
    let leases = b.lease_ids.map(lease_ids);
    let make = |session| Command::Heartbeat { session, leases };
    let (_, out) = on_session(&api, &headers, &path, "heartbeat", make).await?;
    Ok(Json(render(&out)))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/release",
    tag = "leases",
    summary = "Release one lease, or all of them (idempotent)",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = LeasesBody,
    responses((status = 200, description = "Release one lease, or all of them (idempotent)", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn release(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: LeasesBody = body(&raw)?;
    let make: Box<dyn FnOnce(SessionId) -> Command + Send> = match (b.lease_ids, b.all) {
        (None, Some(true)) => Box::new(|session| Command::ReleaseAll { session }),
        (Some(ids), None) if ids.len() == 1 => Box::new(move |session| Command::Release {
            session,
            lease: LeaseId(ids[0]),
        }),
        _ => {
            return Err(ApiError::bad_request(
                "release takes {\"lease_ids\": [one id]} or {\"all\": true}",
            ))
        }
    };
    let (_, out) = on_session(&api, &headers, &path, "release", make).await?;
    Ok(Json(render(&out)))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/reconcile",
    tag = "leases",
    summary = "The kernel's truth about each lease",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = LeasesBody,
    responses((status = 200, description = "The kernel's truth about each lease", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn reconcile(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: LeasesBody = body(&raw)?;
    let (Some(ids), None) = (b.lease_ids, b.all) else {
        return Err(ApiError::bad_request(
            "reconcile takes {\"lease_ids\": [...]}",
        ));
    };
    let leases = lease_ids(ids);
    let make = |session| Command::Reconcile { session, leases };
    let (_, out) = on_session(&api, &headers, &path, "reconcile", make).await?;
    Ok(Json(render(&out)))
}

/// A session's events: Server-Sent Events when the request accepts `text/event-stream`
/// (resumed after `Last-Event-ID`, or `?after=`), otherwise the JSON long-poll.
#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/sessions/{sid}/events",
    tag = "events",
    summary = "The session's events: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll",
    params(("ns" = String, Path, description = "the namespace"), ("sid" = u64, Path, description = "the session id"), ("Klock-Session-Token" = String, Header, description = "the session token from open or resume"), WaitQuery),
    responses((status = 200, description = "The session's events: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn events(
    State(api): State<Api>,
    Path((ns, sid)): SessionPath,
    Query(q): Query<WaitQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = authorize(&api, &ns, &sid, &headers).await?;
    follow(api, Stream::Session(session), &q, &headers).await
}

/// A stream of events: Server-Sent Events when the request accepts `text/event-stream`
/// (resumed after `Last-Event-ID`, or `?after=`), otherwise the JSON long-poll.
async fn follow(
    api: Api,
    stream: Stream,
    q: &WaitQuery,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (hold, mut after) = q.parse()?;
    let accepts = header(headers, "accept")?.unwrap_or_default();
    if !accepts.contains("text/event-stream") {
        let batch = api.engine.events().wait_after(&stream, after, hold).await;
        return Ok(Json(to_json(&batch)).into_response());
    }
    if let Some(last) = header(headers, "last-event-id")? {
        after = EventId::parse(last).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Last-Event-ID must be an event id like 12.0, got {last:?}"
            ))
        })?;
    }
    Ok(sse(api, stream, after).into_response())
}

/// An endless SSE stream of `stream` after `after`; a `gap` event says the ring dropped some.
fn sse(api: Api, stream: Stream, after: EventId) -> impl IntoResponse {
    use axum::response::sse::{Event as Sse, KeepAlive};
    type Pending = std::collections::VecDeque<Sse>;
    let start = (api, stream, after, Pending::new());
    let events =
        futures_util::stream::unfold(start, |(api, stream, mut after, mut pending)| async move {
            loop {
                if let Some(next) = pending.pop_front() {
                    return Some((
                        Ok::<_, std::convert::Infallible>(next),
                        (api, stream, after, pending),
                    ));
                }
                let hub = api.engine.events();
                let batch = hub
                    .wait_after(&stream, after, Duration::from_secs(15))
                    .await;
                if batch.gap {
                    pending.push_back(Sse::default().event("gap").data(&batch.next));
                }
                for stamped in batch.events {
                    let name = stamped.event.name();
                    let data = serde_json::to_string(&stamped.event).expect("events serialize");
                    pending.push_back(Sse::default().id(&stamped.id).event(name).data(data));
                }
                after = EventId::parse(&batch.next).unwrap_or(after);
            }
        });
    axum::response::sse::Sse::new(events).keep_alive(KeepAlive::default())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ResourceQuery {
    resource: String,
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/resources/state",
    tag = "observe",
    summary = "Holders, waiters and covering holders of one resource",
    params(("ns" = String, Path, description = "the namespace"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only"), ResourceQuery),
    responses((status = 200, description = "Holders, waiters and covering holders of one resource", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn resource_state(
    State(api): State<Api>,
    Path(ns): Path<String>,
    Query(q): Query<ResourceQuery>,
    headers: HeaderMap,
) -> Answer {
    let command = Command::ResourceState {
        resource: q.resource,
        namespace: ns,
    };
    match output(run(&api, &headers, "resource_state", command, None).await?)? {
        Output::ResourceState { state } => Ok(Json(to_json(&state))),
        other => Err(unexpected("resource_state", &other)),
    }
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/stats",
    tag = "observe",
    summary = "Counters, live totals, top contended resources, ghost agents",
    params(("ns" = String, Path, description = "the namespace")),
    responses((status = 200, description = "Counters, live totals, top contended resources, ghost agents", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn stats(State(api): State<Api>, Path(_ns): Path<String>) -> Answer {
    let stats = api.engine.read(|m| m.kernel().stats()).await?;
    Ok(Json(to_json(&stats)))
}

/// Manual clock only: settles time at `Klock-Now`.
#[utoipa::path(
    post,
    path = "/v1/advance",
    tag = "server",
    summary = "Settle time now (admin)",
    params(("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    responses((status = 200, description = "Settle time now (admin)", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn advance(State(api): State<Api>, headers: HeaderMap) -> Answer {
    let reply = run(&api, &headers, "advance", Command::Advance, None).await?;
    let events = reply.events.clone();
    output(reply)?;
    Ok(Json(json!({"events": to_json(&events)})))
}

/// A namespace's events (every session's), for dashboards: `?after=&wait_ms=`.
#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/watch",
    tag = "events",
    summary = "Every session's events in the namespace: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll",
    params(("ns" = String, Path, description = "the namespace"), WaitQuery),
    responses((status = 200, description = "Every session's events in the namespace: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn watch(
    State(api): State<Api>,
    Path(ns): Path<String>,
    Query(q): Query<WaitQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    follow(api, Stream::Namespace(ns), &q, &headers).await
}

/// The kernel's next deadline (a pure read).
#[utoipa::path(
    get,
    path = "/v1/deadline",
    tag = "observe",
    summary = "The kernel's next deadline",
    params(),
    responses((status = 200, description = "The kernel's next deadline", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn deadline(State(api): State<Api>) -> Answer {
    let next = api.engine.read(|m| m.kernel().next_deadline()).await?;
    Ok(Json(json!({ "deadline": next })))
}

/// Manual clock without a data file only: starts over with the kernel config in the body.
#[utoipa::path(
    post,
    path = "/v1/reset",
    tag = "server",
    summary = "Start over with a kernel config (--memory --clock manual only)",
    params(),
    request_body = Object,
    responses((status = 200, description = "Start over with a kernel config (--memory --clock manual only)", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn reset(State(api): State<Api>, raw: Bytes) -> Answer {
    let config: klock_core::Config = body(&raw)?;
    api.engine
        .reset(config)
        .await
        .map_err(ApiError::bad_request)?;
    Ok(Json(json!({ "reset": true })))
}

/// Most operations one batch request may carry.
pub const MAX_BATCH: usize = 1000;

/// One operation of a batch: a lease command on a session, with that session's token.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum BatchOp {
    Acquire {
        session: u64,
        token: String,
        intents: Vec<String>,
        ttl_ms: Option<u64>,
        wait: Option<bool>,
        wait_timeout_ms: Option<u64>,
    },
    Heartbeat {
        session: u64,
        token: String,
        lease_ids: Option<Vec<u64>>,
    },
    Release {
        session: u64,
        token: String,
        lease_id: u64,
    },
    ReleaseAll {
        session: u64,
        token: String,
    },
    Reconcile {
        session: u64,
        token: String,
        lease_ids: Vec<u64>,
    },
    CancelWait {
        session: u64,
        token: String,
        ticket: u64,
    },
}

impl BatchOp {
    /// The command and the session token it carries.
    fn into_command(self) -> (Command, String) {
        let s = SessionId;
        match self {
            BatchOp::Acquire {
                session,
                token,
                intents,
                ttl_ms,
                wait,
                wait_timeout_ms,
            } => {
                let options = AcquireOptions {
                    ttl_ms,
                    wait: wait.unwrap_or(true),
                    wait_timeout_ms,
                };
                (
                    Command::Acquire {
                        session: s(session),
                        intents,
                        options,
                    },
                    token,
                )
            }
            BatchOp::Heartbeat {
                session,
                token,
                lease_ids: ids,
            } => (
                Command::Heartbeat {
                    session: s(session),
                    leases: ids.map(lease_ids),
                },
                token,
            ),
            BatchOp::Release {
                session,
                token,
                lease_id,
            } => (
                Command::Release {
                    session: s(session),
                    lease: LeaseId(lease_id),
                },
                token,
            ),
            BatchOp::ReleaseAll { session, token } => (
                Command::ReleaseAll {
                    session: s(session),
                },
                token,
            ),
            BatchOp::Reconcile {
                session,
                token,
                lease_ids: ids,
            } => (
                Command::Reconcile {
                    session: s(session),
                    leases: lease_ids(ids),
                },
                token,
            ),
            BatchOp::CancelWait {
                session,
                token,
                ticket,
            } => (
                Command::CancelWait {
                    session: s(session),
                    ticket: TicketId(ticket),
                },
                token,
            ),
        }
    }
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    operations: Vec<BatchOp>,
}

/// Several lease commands in one request, applied in order in one durable batch; each gets
/// the answer its own route would give (`{"ok": ...}` or `{"error": ...}`).
#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/batch",
    tag = "leases",
    summary = "Up to 1,000 lease commands, in order, in one durable batch",
    params(("ns" = String, Path, description = "the namespace"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key answers the first answer"), ("Klock-Now" = Option<u64>, Header, description = "the time in ms, under --clock manual only")),
    request_body = BatchBody,
    responses((status = 200, description = "Up to 1,000 lease commands, in order, in one durable batch", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn batch(
    State(api): State<Api>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: BatchBody = body(&raw)?;
    if b.operations.is_empty() || b.operations.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "a batch carries 1 to {MAX_BATCH} operations, got {}",
            b.operations.len()
        )));
    }
    let now = now_of(&headers)?;
    let key = header(&headers, "idempotency-key")?;
    let submissions = b
        .operations
        .into_iter()
        .enumerate()
        .map(|(i, op)| {
            let (command, token) = op.into_command();
            let mut submission = Submission::new(command, now);
            submission.key = key.map(|k| format!("{ns}/batch/{i}\u{0}{k}"));
            submission.caller = Some(Caller {
                namespace: ns.clone(),
                token: Some(digest_of(&token)),
            });
            submission
        })
        .collect();
    let replies = api.engine.submit_many(submissions).await?;
    let results: Vec<Value> = replies
        .into_iter()
        .map(
            |reply| match reply.map_err(ApiError::from).and_then(output) {
                Ok(out) => json!({ "ok": render(&out) }),
                Err(e) => {
                    json!({ "error": {"code": e.code, "name": e.name, "message": e.message} })
                }
            },
        )
        .collect();
    Ok(Json(json!({ "results": results })))
}

/// Prometheus text metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "observe",
    summary = "Prometheus text metrics",
    params(),
    responses((status = 200, description = "Prometheus text metrics", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
async fn metrics(State(api): State<Api>) -> Result<Response, ApiError> {
    let stats = api.engine.read(|m| m.kernel().stats()).await?;
    let text = api.engine.metrics().render(&stats);
    let kind = [("content-type", "text/plain; version=0.0.4")];
    Ok((kind, text).into_response())
}
