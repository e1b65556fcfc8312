//! Reads and server routes: health, version, resource state, stats, the next deadline,
//! metrics; settling time (admin).

use super::access::Reach;
use super::*;

#[utoipa::path(
    get,
    path = "/v1/health",
    tag = "server",
    summary = "Liveness, without any token",
    params(),
    responses((status = 200, description = "Liveness, without any token", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn health() -> Json<Value> {
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
pub(super) async fn version() -> Json<Value> {
    Json(json!({
        "server": env!("CARGO_PKG_VERSION"),
        "commit": crate::about::commit(),
        "api": "v1",
        "state_version": klock_core::STATE_VERSION,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ResourceQuery {
    resource: String,
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/resources/state",
    tag = "observe",
    summary = "Holders, waiters and covering holders of one resource",
    params(NamespacePath, ClockHeader, ResourceQuery),
    responses((status = 200, description = "Holders, waiters and covering holders of one resource", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn resource_state(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    Q(q): Q<ResourceQuery>,
    headers: HeaderMap,
) -> Answer {
    let command = Command::ResourceState {
        resource: q.resource,
        namespace: ns.clone(),
    };
    let scope = Scope::of(&ns, "resource_state");
    match output(run(&api, &headers, scope, command, None).await?)? {
        Output::ResourceState { state } => Ok(Json(to_json(&state))),
        other => Err(unexpected("resource_state", &other)),
    }
}

#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/stats",
    tag = "observe",
    summary = "Counters, live totals, top contended resources, ghost agents",
    params(NamespacePath),
    responses((status = 200, description = "Counters, live totals, top contended resources, ghost agents", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn stats(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    reach: Option<axum::Extension<Reach>>,
) -> Answer {
    let mut stats = api
        .engine
        .read(move |m| m.kernel().namespace_snapshot(&ns).map(|s| s.stats))
        .await?
        .map_err(ApiError::kernel)?;
    server_wide_only_to(&mut stats, reach.as_deref());
    Ok(Json(to_json(&stats)))
}

/// Cuts what the kernel keeps only server-wide (outcome counters and ghost agents, counted
/// over every namespace) from a namespace's stats, unless the caller may read every namespace
/// (no token file, or a token for `"*"`): zero counters and no ghost agents then, so nothing
/// of another namespace shows.
pub(super) fn server_wide_only_to(stats: &mut klock_core::Stats, reach: Option<&Reach>) {
    if reach.is_some_and(|r| r.everywhere) {
        return;
    }
    stats.counters = klock_core::Counters::default();
    stats.ghost_agents.clear();
}

/// Manual clock only: settles time at `Klock-Now`.
#[utoipa::path(
    post,
    path = "/v1/advance",
    tag = "server",
    summary = "Settle time now (admin)",
    params(ClockHeader),
    responses((status = 200, description = "Settle time now (admin)", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn advance(State(api): State<Shared>, headers: HeaderMap) -> Answer {
    let reply = run(
        &api,
        &headers,
        Scope::of("-", "advance"),
        Command::Advance,
        None,
    )
    .await?;
    let events = reply.events.clone();
    output(reply)?;
    Ok(Json(json!({"events": to_json(&events)})))
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
pub(super) async fn deadline(State(api): State<Shared>) -> Answer {
    let next = api.engine.read(|m| m.kernel().next_deadline()).await?;
    Ok(Json(json!({ "deadline": next })))
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
pub(super) async fn metrics(State(api): State<Shared>) -> Result<Response, ApiError> {
    let (stats, bytes) = api
        .engine
        .read(|m| (m.kernel().stats(), m.answer_bytes()))
        .await?;
    let metrics = api.engine.metrics();
    metrics
        .idempotency_bytes
        .store(bytes as u64, std::sync::atomic::Ordering::Relaxed);
    let mut text = metrics.render(&stats);
    api.engine.events().render_metrics(&mut text);
    let kind = [("content-type", "text/plain; version=0.0.4")];
    Ok((kind, text).into_response())
}
