//! Replay and live views for dashboards: the history export, the state hash at a log index,
//! and a namespace's overview.
//!
//! Contract:
//! - `GET /v1/ns/{ns}/history?from=&to=` (observer and admin tokens) exports the kernel's state at `from` (the state after
//!   the last entry stamped at or before it) and every kernel call after it up to `to`, as the
//!   history keeps them (`crate::history`). The kernel is one state machine for every namespace,
//!   so a bit-exact replay needs every namespace's calls: the export is refused (403) to a
//!   token that does not cover every namespace (`"*"`), and to agent tokens (agents never
//!   need another namespace's history). The namespace
//!   names what the page shows and must be known in the range (a session of it open at the
//!   start or opened in the range), else 404 `UNKNOWN_NAMESPACE`.
//! - `GET /v1/state/hash?index=` is the state hash (`KernelState::hash`, 16 hex digits) after
//!   log entry `index` (by default the last applied one), computed from the history.
//! - `GET /v1/ns/{ns}/overview` is the kernel's snapshot (docs/SPEC.md §10) at the last applied
//!   entry, cut to the namespace: its sessions, their leases and tickets, its top contended
//!   resources, its next deadline (of its leases and tickets); counters and ghost agents are
//!   server-wide, as `/stats` reports them (only to callers that may read every namespace);
//!   `log` names the log its `index` counts entries of (as a watch answer's `log`).
//! - Every bad input is a 4xx with a stable name and a message naming the fix; nothing panics.

use super::access::Reach;
use super::*;
use crate::history::Step;
use axum::extract::RawQuery;
use klock_core::KernelState;

/// `name=value&...` with whole numbers, every name among `allowed`.
fn numbers(raw: Option<String>, allowed: &[&str]) -> Result<Vec<(String, u64)>, ApiError> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for pair in raw
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !allowed.contains(&name) {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter {name:?}; this route takes {}",
                allowed.join(", ")
            )));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(ApiError::bad_request(format!("{name} is given twice")));
        }
        let number = value.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "{name} must be a whole number (server time in ms, or a log index), got {value:?}"
            ))
        })?;
        out.push((name.to_owned(), number));
    }
    Ok(out)
}

fn get(params: &[(String, u64)], name: &str) -> Option<u64> {
    params.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// A namespace read from the path, checked by the kernel's own rule.
fn check_namespace(ns: &str) -> Result<(), ApiError> {
    klock_core::check_namespace(ns).map_err(ApiError::kernel)
}

fn not_kept(kept: ((u64, u64), (u64, u64)), what: String) -> ApiError {
    let ((oldest_index, oldest_now), (newest_index, newest_now)) = kept;
    ApiError::other(
        StatusCode::GONE,
        "HISTORY_NOT_KEPT",
        format!(
            "{what}: the server keeps entries {oldest_index}..={newest_index} (times \
             {oldest_now}..={newest_now} ms); older ones were dropped (klock serve --history N \
             keeps about the last N entries, fewer when they are large, and a restart keeps \
             what follows the latest snapshot)"
        ),
    )
}

/// The answer of a server started without a history.
fn nothing_kept() -> ApiError {
    ApiError::other(
        StatusCode::GONE,
        "HISTORY_NOT_KEPT",
        String::from(
            "this server keeps no history: start klock serve with --history N (about the last N \
             kernel calls) or --dashboard (which keeps the default 200000)",
        ),
    )
}

fn internal(message: String) -> ApiError {
    ApiError::other(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
}

/// Whether `ns` has a session open in `state` or opened (or resumed) in `steps`.
fn known(ns: &str, state: &KernelState, steps: &[Step]) -> bool {
    state.sessions.iter().any(|s| s.namespace == ns)
        || steps.iter().flat_map(|s| &s.commands).any(|c| match c {
            Command::Open { namespace, .. } => namespace == ns,
            Command::Resume { digest } => digest.identity.namespace == ns,
            _ => false,
        })
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/history",
    tag = "observe",
    summary = "The kernel's state at `from` and every kernel call up to `to`, for a bit-exact replay (observer or admin token covering every namespace)",
    params(NamespacePath, ("from" = Option<u64>, Query, description = "server time in ms the replay starts at (default: the oldest kept)"), ("to" = Option<u64>, Query, description = "server time in ms it ends at (default: now)")),
    responses((status = 200, description = "{namespace, from, to, kept, config, start: {index, now, hash, state}, steps: [{index, now, commands}], end: {index, now, hash}}", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn history(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    RawQuery(raw): RawQuery,
    reach: Option<axum::Extension<Reach>>,
) -> Answer {
    check_namespace(&ns)?;
    if let Some(axum::Extension(reach)) = reach {
        let name = reach.name.unwrap_or_default();
        if reach.role == Some(Role::Agent) {
            return Err(ApiError::other(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                format!(
                    "token {name:?} is an agent token; the history export is for observer and \
                     admin tokens (dashboards and operators), which may read every namespace"
                ),
            ));
        }
        if !reach.everywhere {
            return Err(ApiError::other(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                format!(
                    "token {name:?} does not cover every namespace; the history export carries \
                     every namespace's kernel calls (the kernel is one state machine, so an exact \
                     replay needs them all): use a token whose namespaces are [\"*\"]"
                ),
            ));
        }
    }
    let params = numbers(raw, &["from", "to"])?;
    let (from, to) = (get(&params, "from"), get(&params, "to"));
    if let (Some(f), Some(t)) = (from, to) {
        if f > t {
            return Err(ApiError::other(
                StatusCode::BAD_REQUEST,
                "BAD_RANGE",
                format!("from ({f}) is after to ({t}): a range runs forward in time"),
            ));
        }
    }
    // Every write this node answered is in its history first.
    api.engine.settled().await?;
    let history = Arc::clone(api.engine.history());
    let work = move || -> Result<Value, ApiError> {
        let (slice, start_index, kept, config) = {
            let h = history.lock().expect("history lock");
            if h.capacity() == 0 {
                return Err(nothing_kept());
            }
            let kept = (h.oldest(), h.newest());
            let from = from.unwrap_or(kept.0 .1);
            let Some(start_index) = h.index_at(from) else {
                return Err(not_kept(
                    kept,
                    format!("from = {from} is before the kept history"),
                ));
            };
            if let Some(t) = to.filter(|t| *t < kept.0 .1) {
                return Err(not_kept(
                    kept,
                    format!("to = {t} is before the kept history"),
                ));
            }
            let slice = h.slice(start_index, to).ok_or_else(|| {
                not_kept(
                    kept,
                    format!("entry {start_index} is before the kept history"),
                )
            })?;
            let config = slice.checkpoint.state.config.clone();
            (slice, start_index, kept, config)
        };
        let (mut kernel, start_now, steps) = slice.state_at(start_index).map_err(internal)?;
        let state = kernel.export_state();
        if !known(&ns, &state, &steps) {
            return Err(ApiError::other(
                StatusCode::NOT_FOUND,
                "UNKNOWN_NAMESPACE",
                format!(
                    "no session of namespace {ns:?} is open at the start of the range or opened \
                     in it; nothing to show there"
                ),
            ));
        }
        let start_hash = state.hash();
        for step in &steps {
            kernel.replay_step(step.now, &step.commands, |_| {});
        }
        let (end_index, end_now) = steps
            .last()
            .map_or((start_index, start_now), |s| (s.index, s.now));
        Ok(json!({
            "namespace": ns,
            "from": from,
            "to": to,
            "kept": {
                "oldest": {"index": kept.0 .0, "now": kept.0 .1},
                "newest": {"index": kept.1 .0, "now": kept.1 .1},
            },
            "config": to_json(&config),
            "start": {"index": start_index, "now": start_now, "hash": hex(start_hash), "state": to_json(&state)},
            "steps": to_json(&steps),
            "end": {"index": end_index, "now": end_now, "hash": hex(kernel.export_state().hash())},
        }))
    };
    let value = tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal(format!("the export failed: {e}")))??;
    Ok(Json(value))
}

#[utoipa::path(
    get,
    path = "/v1/state/hash",
    tag = "observe",
    summary = "The kernel's state hash after a log entry (default: the last applied one)",
    params(("index" = Option<u64>, Query, description = "the log index (default: the last applied entry)")),
    responses((status = 200, description = "{index, now, hash}: hash is 16 hex digits", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn state_hash(State(api): State<Shared>, RawQuery(raw): RawQuery) -> Answer {
    let params = numbers(raw, &["index"])?;
    let Some(index) = get(&params, "index") else {
        let (index, now, hash) = api
            .engine
            .read(|m| (m.applied(), m.last_now(), m.kernel().export_state().hash()))
            .await?;
        return Ok(Json(json!({"index": index, "now": now, "hash": hex(hash)})));
    };
    // Every write this node answered is in its history first.
    api.engine.settled().await?;
    let history = Arc::clone(api.engine.history());
    let work = move || -> Result<Value, ApiError> {
        let slice = {
            let h = history.lock().expect("history lock");
            if h.capacity() == 0 {
                return Err(nothing_kept());
            }
            let kept = (h.oldest(), h.newest());
            if index > kept.1 .0 {
                return Err(ApiError::other(
                    StatusCode::NOT_FOUND,
                    "UNKNOWN_INDEX",
                    format!(
                        "entry {index} is not in the log yet (the last is {})",
                        kept.1 .0
                    ),
                ));
            }
            h.slice(index, None).ok_or_else(|| {
                not_kept(kept, format!("entry {index} is before the kept history"))
            })?
        };
        let (kernel, now, _) = slice.state_at(index).map_err(internal)?;
        let hash = kernel.export_state().hash();
        Ok(json!({"index": index, "now": now, "hash": hex(hash)}))
    };
    let value = tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| internal(format!("the replay failed: {e}")))??;
    Ok(Json(value))
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/overview",
    tag = "observe",
    summary = "The kernel's snapshot cut to the namespace: sessions, leases, tickets, stats",
    params(NamespacePath),
    responses((status = 200, description = "{namespace, index, now, log, snapshot}", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn overview(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    reach: Option<axum::Extension<Reach>>,
) -> Answer {
    // Built where the kernel lives, from `&self`: only this namespace's views are made, and
    // the kernel is neither copied nor settled (the engine's timer settles it). The kernel
    // checks the namespace (INVALID_NAMESPACE).
    let (index, now, snapshot, ns) = api
        .engine
        .read(move |m| {
            let snapshot = m.kernel().namespace_snapshot(&ns);
            (m.applied(), m.last_now(), snapshot, ns)
        })
        .await?;
    let mut snapshot = snapshot.map_err(ApiError::kernel)?;
    // The namespace's own deadline, not the kernel's (which may be another namespace's).
    snapshot.next_deadline = snapshot
        .leases
        .iter()
        .map(|l| l.expires_at)
        .chain(snapshot.tickets.iter().map(|t| t.deadline))
        .min();
    super::observe::server_wide_only_to(&mut snapshot.stats, reach.as_deref());
    // `index` counts entries of the log named `log` (a watch's `log=`; docs/SPEC.md §13.9).
    let log = api.engine.events().log();
    let value = json!({"namespace": ns, "index": index, "now": now, "log": log.as_deref(),
        "snapshot": to_json(&snapshot)});
    Ok(Json(value))
}
