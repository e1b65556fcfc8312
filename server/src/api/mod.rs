//! The HTTP API (`/v1`, JSON): translation only. Every route checks its input, names the
//! namespace and the session (with the session's secret token) before any kernel call, and
//! turns one request into one engine command; the kernel decides everything.
//!
//! Contract:
//! - Verdicts are 200s. Errors are `{"error": {"code", "name", "message"}}` with the SPEC's
//!   stable code and name and a 4xx status that fits: 400 bad input, 401 a missing or wrong
//!   session token, 404 unknown ids, 409 state conflicts, 413 too large, 503 engine stopped
//!   (and `NO_LEADER` with `Retry-After: 1` on a cluster node that cannot write now).
//!   Malformed JSON, unknown fields and wrong types are `BAD_REQUEST` (code 0) naming the
//!   problem; nothing reaches the kernel then.
//! - A session belongs to the namespace in the path: another namespace's session id is
//!   `UNKNOWN_SESSION` (it does not exist there), and every call naming a session carries its
//!   token in `Klock-Session-Token` (handed out by open and resume; a session id alone never
//!   grants anything). Tokens are compared as SHA-256 digests, in constant time.
//! - `Idempotency-Key` on a mutating request: a retry with the same key (same bearer token,
//!   namespace, session and route) answers the first answer and changes nothing, across
//!   restarts too. A key is bound to its request's fingerprint (SHA-256 of query and body): the
//!   same key with another request is 422 `IDEMPOTENCY_KEY_REUSED`. A key's first answer may be
//!   dropped to keep remembered answers in their byte budget: a retry is then 409
//!   `IDEMPOTENCY_ANSWER_FORGOTTEN` (never applied twice).
//! - Resuming a session needs its resume secret (handed out by open and by each resume, which
//!   replaces it): a StateDigest holds only public data.
//! - Under `--clock manual` every request carries `Klock-Now` (ms); otherwise it is refused.
//! - Every answer to a command carries `Klock-Index`, the log index of its entry (its events'
//!   ids start with it), and `Klock-Now`, the server time of the answer (for a repeated
//!   idempotency key, the first answer's time); errors included, since a failed call still
//!   settles time.
//! - Acquire may hold the request up to `hold_ms` (≤ 30 000) for the final verdict of a WAIT;
//!   a ticket can be long-polled; a session's events are read with `?after=&wait_ms=`.
//!
//! Modules: `access` (tokens, roles, limits, index headers), `sessions`, `leases`,
//! `events` (SSE and long-polls), `batch`, `observe`, `replay` (history export, state hash,
//! namespace overview), `admin` (the online backup); this one holds the router, the
//! OpenAPI list it is built from, errors and the helpers every route shares.

use crate::auth::{self, Auth, PollSlots, Role};
use crate::engine::{EngineError, EngineHandle, Reply, Submission};
use crate::events::{EventId, Kinds, Stream};
use crate::machine::{Caller, Machine, Refused, SessionCaps};
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
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use utoipa_axum::{router::OpenApiRouter, routes};

mod access;
mod admin;
mod batch;
mod busy;
mod events;
mod leases;
mod observe;
mod replay;
mod sessions;

use access::ASKER;
pub use busy::{Dispatch, Front};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Longest an acquire may hold the request, or a long-poll wait, in ms.
pub const MAX_HOLD_MS: u64 = 30_000;

/// What every handler shares.
#[derive(Clone)]
pub struct Api {
    pub engine: EngineHandle,
    pub auth: Arc<Auth>,
    /// The session caps an open is logged with.
    pub caps: SessionCaps,
    /// How much work one request may put on the engine (issue 22 item 11).
    pub work: WorkLimits,
}

/// The routes' state: one [`Api`] behind an `Arc`, so a request clones one pointer, not the
/// engine handle's channel sender and `Arc`s (contended counters shared by every worker).
type Shared = Arc<Api>;

/// How much work one request may give the engine, which runs every command in turn: a
/// request over a bound is refused (413 `TOO_MANY_IDS`) before anything reaches the kernel,
/// so one client's huge lists cannot hold back another's heartbeats (issue 22 item 11).
#[derive(Clone, Copy, Debug)]
pub struct WorkLimits {
    /// Most lease ids a heartbeat or reconcile names: no more than a session can hold
    /// (the kernel's `max_leases_per_session`), unless `--max-request-ids` says otherwise.
    pub max_ids: usize,
    /// Most lease ids and intents one batch carries in all, over all its operations.
    pub max_batch_items: usize,
}

impl WorkLimits {
    /// The bounds for a kernel with `config`: ids up to what one session can hold; a batch
    /// up to [`batch::MAX_BATCH`] operations' worth, or four sessions' worth if that is more.
    pub fn for_config(config: &klock_core::Config) -> WorkLimits {
        let max_ids = usize::try_from(config.max_leases_per_session.max(1)).unwrap_or(usize::MAX);
        WorkLimits {
            max_ids,
            max_batch_items: max_ids.saturating_mul(4).max(batch::MAX_BATCH * 4),
        }
    }

    /// `count` ids of a `what` against `limit`, refused by name (and counted) over it.
    fn check(api: &Api, count: usize, limit: usize, what: &str) -> Result<(), ApiError> {
        if count <= limit {
            return Ok(());
        }
        let refused = &api.engine.metrics().net.refused_too_many_ids;
        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(ApiError::other(
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_MANY_IDS",
            format!(
                "{what} carries {count} lease ids or intents; at most {limit} per request \
                 (split it: one request may not hold the engine for everyone)"
            ),
        ))
    }
}

/// Open sessions per bearer token at most, by default (`--max-sessions-per-token`).
pub const DEFAULT_SESSIONS_PER_TOKEN: u32 = 10_000;
/// Open sessions per namespace at most, by default (`--max-sessions-per-namespace`).
pub const DEFAULT_SESSIONS_PER_NAMESPACE: u32 = 10_000;

/// What serves `/v1`: its router, with `more` routes merged into it (the dashboard's, a
/// cluster node's `/raft/*`, a CORS layer), and the busy routes before it.
pub fn front(api: Api, more: impl FnOnce(Router) -> Router) -> Front {
    let api: Shared = Arc::new(api);
    Front::new(more(router(&api)), api)
}

/// The router of `/v1`.
fn router(api: &Shared) -> Router {
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
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            access::access,
        ))
        .with_state(api.clone())
}

/// Every route template the router matches, as `MatchedPath` names it, and `unmatched` (the
/// fallback): the table the request metrics count into (crate::metrics).
pub fn route_templates() -> Vec<String> {
    let (_, doc) = documented().split_for_parts();
    let mut routes: Vec<String> = doc.paths.paths.into_keys().collect();
    routes.push(String::from("/v1/openapi.json"));
    routes.push(String::from(UNMATCHED));
    routes
}

/// The route a request is counted and logged under when no route matched it (404).
pub const UNMATCHED: &str = "unmatched";

/// Every route with its OpenAPI description: the router and the document come from this one
/// list, so they cannot drift apart (`routes!` takes only handlers that describe themselves).
pub fn documented() -> OpenApiRouter<Shared> {
    let mut info = utoipa::openapi::Info::new("klock serve", env!("CARGO_PKG_VERSION"));
    info.description = Some(String::from(
        "The Klock control plane: sessions, leases and their events over HTTP. See server/README.md.",
    ));
    let doc = utoipa::openapi::OpenApiBuilder::new().info(info).build();
    OpenApiRouter::with_openapi(doc)
        .routes(routes!(observe::health))
        .routes(routes!(observe::version))
        .routes(routes!(sessions::open))
        .routes(routes!(sessions::resume))
        .routes(routes!(sessions::close))
        .routes(routes!(sessions::suspend))
        .routes(routes!(sessions::digest))
        .routes(routes!(leases::acquire))
        .routes(routes!(leases::ticket, leases::cancel))
        .routes(routes!(leases::heartbeat))
        .routes(routes!(leases::release))
        .routes(routes!(leases::reconcile))
        .routes(routes!(events::events))
        .routes(routes!(observe::resource_state))
        .routes(routes!(observe::stats))
        .routes(routes!(events::watch))
        .routes(routes!(batch::batch))
        .routes(routes!(observe::deadline))
        .routes(routes!(observe::advance))
        .routes(routes!(observe::metrics))
        .routes(routes!(replay::history))
        .routes(routes!(replay::state_hash))
        .routes(routes!(replay::overview))
        .routes(routes!(admin::backup))
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

    /// An error of the server's own (not a kernel error): its status and stable name.
    pub(crate) fn other(status: StatusCode, name: &'static str, message: String) -> ApiError {
        ApiError {
            status,
            code: 0,
            name,
            message,
        }
    }

    /// A resume without the session's current resume secret (401).
    fn resume_refused(message: impl Into<String>) -> ApiError {
        ApiError::other(
            StatusCode::UNAUTHORIZED,
            "RESUME_SECRET_REFUSED",
            message.into(),
        )
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
            EngineError::Unavailable(message) => {
                ApiError::other(StatusCode::SERVICE_UNAVAILABLE, NO_LEADER, message)
            }
        }
    }
}

/// The fields of an error answer, serialized as they are (no `Value` tree).
#[derive(Serialize)]
struct ErrorFields {
    code: u32,
    name: &'static str,
    message: String,
}

/// `{"error": {...}}`.
#[derive(Serialize)]
struct ErrorAnswer {
    error: ErrorFields,
}

impl ApiError {
    /// Its `{"code", "name", "message"}` fields, for an answer or a batch's result.
    fn into_fields(self) -> ErrorFields {
        ErrorFields {
            code: self.code,
            name: self.name,
            message: self.message,
        }
    }
}

/// A cluster node's answer when no leader can take a write now (503, `Retry-After: 1`).
const NO_LEADER: &str = "NO_LEADER";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let retry = self.name == NO_LEADER;
        let body = ErrorAnswer {
            error: self.into_fields(),
        };
        let mut response = (status, Json(body)).into_response();
        if retry {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

/// A route's answer: its JSON (a `Value` by default, a typed answer on the busy routes).
type Answer<T = Value> = Result<Json<T>, ApiError>;

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
    Ok(auth::hex(&bytes))
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
    let check = |caller: Caller| {
        move |m: &Machine| {
            let known = m.kernel().session_info_of(session).is_some();
            (known, m.check_reader(session, &caller))
        }
    };
    let (known, checked) = api.engine.read(check(caller.clone())).await?;
    // A session opened through another node a moment ago may not be applied here yet: once
    // this node caught up with the cluster (a read index) it knows every session that exists.
    let checked = if known {
        checked
    } else {
        api.engine.read_caught_up(check(caller)).await?.1
    };
    checked.map_err(refusal)?;
    Ok(session)
}

/// Where an idempotency key applies: namespace, session and route (`-` for none), joined with
/// `\0` after who asks and before the key. Keys are stored in the log with these bytes, so
/// they never change; they are rendered only for a request that carries a key.
#[derive(Clone, Copy)]
struct Scope<'a> {
    ns: &'a str,
    session: Option<u64>,
    /// The route, and an item of it (`cancel/{ticket}`, `batch/{i}`).
    what: &'a str,
    item: Option<&'a (dyn std::fmt::Display + Sync)>,
}

impl<'a> Scope<'a> {
    /// `what` in the namespace `ns`, for no session.
    fn of(ns: &'a str, what: &'a str) -> Scope<'a> {
        Scope {
            ns,
            session: None,
            what,
            item: None,
        }
    }

    /// The scoped key: `who \0 ns \0 session \0 what[/item] \0 key`.
    fn key(&self, who: &str, key: &str) -> String {
        use std::fmt::Write as _;
        let mut out =
            String::with_capacity(who.len() + self.ns.len() + self.what.len() + key.len() + 32);
        out.push_str(who);
        out.push('\0');
        out.push_str(self.ns);
        out.push('\0');
        match self.session {
            Some(session) => {
                let _ = write!(out, "{session}");
            }
            None => out.push('-'),
        }
        out.push('\0');
        out.push_str(self.what);
        if let Some(item) = self.item {
            let _ = write!(out, "/{item}");
        }
        out.push('\0');
        out.push_str(key);
        out
    }
}

/// The engine command, scoped idempotency key included; `token` is bound to the session an
/// open or resume creates.
async fn run(
    api: &Api,
    headers: &HeaderMap,
    scope: Scope<'_>,
    command: Command,
    token: Option<String>,
) -> Result<Reply, ApiError> {
    submit(api, headers, scope, command, token, None).await
}

/// The engine command of a request naming a session, checked against `caller` in the log.
async fn run_as(
    api: &Api,
    headers: &HeaderMap,
    scope: Scope<'_>,
    command: Command,
    caller: Caller,
) -> Result<Reply, ApiError> {
    submit(api, headers, scope, command, None, Some(caller)).await
}

async fn submit(
    api: &Api,
    headers: &HeaderMap,
    scope: Scope<'_>,
    command: Command,
    token: Option<String>,
    caller: Option<Caller>,
) -> Result<Reply, ApiError> {
    let mut submission = Submission::new(command, now_of(headers)?);
    keyed(&mut submission, headers, scope)?;
    submission.token = token;
    submission.caller = caller;
    let reply = api.engine.submit(submission).await?;
    access::note_index(reply.index, reply.now);
    Ok(reply)
}

/// Sets the submission's idempotency key, scoped to who asks (the bearer token's name) and
/// `scope`, and its request's fingerprint.
fn keyed(
    submission: &mut Submission,
    headers: &HeaderMap,
    scope: Scope<'_>,
) -> Result<(), ApiError> {
    let Some(key) = header(headers, "idempotency-key")? else {
        return Ok(());
    };
    let (who, fingerprint) = ASKER
        .try_with(|a| (a.who.clone(), a.fingerprint.clone()))
        .unwrap_or_default();
    submission.key = Some(scope.key(who.as_deref().unwrap_or(""), key));
    submission.fingerprint = fingerprint;
    Ok(())
}

/// The session a command's path names, and who is asking (checked by the machine).
fn named(ns: &str, sid: &str, headers: &HeaderMap) -> Result<(SessionId, Caller), ApiError> {
    let session = session_id(sid)?;
    let token = header(headers, "klock-session-token")?.map(digest_of);
    let caller = Caller {
        namespace: ns.to_owned(),
        token,
        ..Caller::default()
    };
    Ok((session, caller))
}

fn refusal(refused: Refused) -> ApiError {
    match refused {
        Refused::Kernel(e) => ApiError::kernel(e),
        Refused::SessionToken(message) => {
            ApiError::other(StatusCode::UNAUTHORIZED, "SESSION_TOKEN_REFUSED", message)
        }
        Refused::ResumeSecret(message) => ApiError::resume_refused(message),
        Refused::KeyReused(message) => ApiError::other(
            StatusCode::UNPROCESSABLE_ENTITY,
            "IDEMPOTENCY_KEY_REUSED",
            message,
        ),
        Refused::AnswerForgotten(message) => ApiError::other(
            StatusCode::CONFLICT,
            "IDEMPOTENCY_ANSWER_FORGOTTEN",
            message,
        ),
        Refused::TooManySessions(message) => {
            ApiError::other(StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_SESSIONS", message)
        }
    }
}

fn output(reply: Reply) -> Result<Output, ApiError> {
    reply.output.map_err(refusal)
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("API values serialize")
}

/// `{key: value}`.
fn one<S: serde::Serializer, V: Serialize>(s: S, key: &str, value: &V) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(1))?;
    map.serialize_entry(key, value)?;
    map.end()
}

/// The JSON of a lease command's answer, the same on its own route and in a batch,
/// serialized straight from the kernel's values on the busy routes (acquire, release).
struct Rendered(Output);

impl Serialize for Rendered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Output::Verdict { verdict } => verdict.serialize(s),
            Output::Released { released } => one(s, "released", released),
            Output::ReleasedAll { count } => one(s, "released", count),
            Output::Done => one(s, "done", &true),
            // The kernel's own shape (per-lease objects named by `lease_id`), without the tag.
            other => {
                let mut value = to_json(other);
                if let Some(fields) = value.as_object_mut() {
                    fields.remove("output");
                }
                value.serialize(s)
            }
        }
    }
}

// ---- routes --------------------------------------------------------------------------------

/// The session named by the path.
type SessionPath = Path<(String, String)>;

// ---- what the OpenAPI document says about paths and headers (shared by the routes) ----------

/// `{ns}` of a path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct NamespacePath {
    /// The namespace.
    ns: String,
}

/// `{ns}` and `{sid}` of a session's path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, names("ns", "sid"))]
#[allow(dead_code)]
struct SessionParams(
    /// The namespace.
    String,
    /// The session id.
    u64,
);

/// `{tid}` of a ticket's path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct TicketPath {
    /// The ticket.
    tid: u64,
}

/// The header every call naming a session carries.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct SessionHeaders {
    /// The session token from open or resume.
    #[param(rename = "Klock-Session-Token")]
    token: String,
}

/// The headers of a command: its idempotency key, and its time under the manual clock.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct CommandHeaders {
    /// A retry with the same key answers the first answer.
    #[param(rename = "Idempotency-Key")]
    key: Option<String>,
    /// The time in ms, under `--clock manual` only.
    #[param(rename = "Klock-Now")]
    now: Option<u64>,
}

/// The time of a read under the manual clock.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
struct ClockHeader {
    /// The time in ms, under `--clock manual` only.
    #[param(rename = "Klock-Now")]
    now: Option<u64>,
}

/// Runs the command `make` builds for the session in the path, as the request's caller (the
/// idempotency scope is the session and `what`, with `item`); its entry's index and output.
async fn on_session(
    api: &Api,
    headers: &HeaderMap,
    (ns, sid): &(String, String),
    what: &str,
    item: Option<&(dyn std::fmt::Display + Sync)>,
    make: impl FnOnce(SessionId) -> Command,
) -> Result<(u64, Output), ApiError> {
    let (session, caller) = named(ns, sid, headers)?;
    let scope = Scope {
        ns,
        session: Some(session.0),
        what,
        item,
    };
    let reply = run_as(api, headers, scope, make(session), caller).await?;
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

fn hold_of(ms: Option<u64>, what: &str) -> Result<Option<Duration>, ApiError> {
    match ms {
        None | Some(0) => Ok(None),
        Some(ms) if ms <= MAX_HOLD_MS => Ok(Some(Duration::from_millis(ms))),
        Some(ms) => Err(ApiError::bad_request(format!(
            "{what} must be at most {MAX_HOLD_MS} ms, got {ms}"
        ))),
    }
}

/// axum's `Query`, whose refusal is the API's JSON error (400 naming the parameter and what was
/// wrong with it) rather than axum's plain text.
struct Q<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Q<T>, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Q(value)),
            Err(refused) => Err(ApiError::bad_request(refused.body_text())),
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    wait_ms: Option<u64>,
    after: Option<String>,
    /// The log `after` is an event id of (a watch answer's `log`, an open's): a cursor of
    /// another log is read from this log's start, with a gap.
    log: Option<String>,
    /// `false`: leave out the holder events (ACQUIRED, RELEASED), which a client that learns
    /// its grants and releases from their answers needs nowhere (default `true`).
    holder_events: Option<bool>,
}

/// The longest log id a query may name (the server's are 32 hex digits).
const MAX_LOG_ID: usize = 64;

impl WaitQuery {
    /// How long to wait, the event id to read after, the log that id is of, and which events.
    fn parse(&self) -> Result<(Duration, EventId, Option<&str>, Kinds), ApiError> {
        let hold = hold_of(self.wait_ms, "wait_ms")?.unwrap_or(Duration::ZERO);
        let after = match &self.after {
            Some(a) => EventId::parse(a).ok_or_else(|| {
                ApiError::bad_request(format!("after must be an event id like 12.0, got {a:?}"))
            })?,
            None => EventId::default(),
        };
        let log = self.log.as_deref();
        if let Some(log) = log {
            let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
            if log.is_empty() || log.len() > MAX_LOG_ID || !log.chars().all(hex) {
                return Err(ApiError::bad_request(format!(
                    "log must be a log id as a watch or an open answered it (1 to \
                     {MAX_LOG_ID} lowercase hex digits), got {:?}",
                    log.chars().take(MAX_LOG_ID + 8).collect::<String>()
                )));
            }
        }
        let kinds = match self.holder_events {
            Some(false) => Kinds::NoHolderEvents,
            Some(true) | None => Kinds::Every,
        };
        Ok((hold, after, log, kinds))
    }
}

fn lease_ids(ids: Vec<u64>) -> Vec<LeaseId> {
    ids.into_iter().map(LeaseId).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are stored in the log: the scoped key must keep the bytes the routes always
    /// built (`format!("{who}\u{0}{ns}\u{0}{session}\u{0}{what}\u{0}{key}")`).
    #[test]
    fn scoped_keys_keep_their_bytes() {
        let on_session = Scope {
            ns: "team",
            session: Some(7),
            what: "acquire",
            item: None,
        };
        assert_eq!(
            on_session.key("ci", "k1"),
            "ci\u{0}team\u{0}7\u{0}acquire\u{0}k1"
        );
        let cancel = Scope {
            item: Some(&"12"),
            what: "cancel",
            ..on_session
        };
        assert_eq!(cancel.key("", "k"), "\u{0}team\u{0}7\u{0}cancel/12\u{0}k");
        let batch = Scope {
            ns: "team",
            session: Some(0),
            what: "batch",
            item: Some(&3usize),
        };
        assert_eq!(batch.key("", "k"), "\u{0}team\u{0}0\u{0}batch/3\u{0}k");
        assert_eq!(
            Scope::of("team", "open").key("", "k"),
            "\u{0}team\u{0}-\u{0}open\u{0}k"
        );
        assert_eq!(
            Scope::of("-", "advance").key("a", "k"),
            "a\u{0}-\u{0}-\u{0}advance\u{0}k"
        );
    }

    /// The typed answers serialize as the `Value` rendering did.
    #[test]
    fn rendered_answers_are_the_route_shapes() {
        let json = |o: Output| serde_json::to_value(Rendered(o)).unwrap();
        assert_eq!(
            json(Output::Released { released: true }),
            json!({"released": true})
        );
        assert_eq!(
            json(Output::ReleasedAll { count: 2 }),
            json!({"released": 2})
        );
        assert_eq!(json(Output::Done), json!({"done": true}));
        for cycle in [Vec::new(), vec![SessionId(3), SessionId(1)]] {
            let verdict = Verdict::Die {
                retry_after_ms: 5,
                held_by: Vec::new(),
                cycle,
            };
            assert_eq!(
                json(Output::Verdict {
                    verdict: verdict.clone()
                }),
                to_json(&verdict)
            );
        }
        let heartbeat = Output::Heartbeat {
            results: Vec::new(),
        };
        assert_eq!(json(heartbeat), json!({"results": []}));
    }
}
