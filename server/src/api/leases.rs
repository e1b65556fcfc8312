//! Lease routes of one session: acquire (with an optional hold), ticket long-poll and
//! cancel, heartbeat, release, reconcile.

use super::*;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AcquireBody {
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
    params(SessionParams, SessionHeaders, CommandHeaders),
    request_body = AcquireBody,
    responses((status = 200, description = "Ask for a manifest: GRANTED, WAIT or DIE; with hold_ms a WAIT is held for its outcome", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn acquire(
    State(api): State<Shared>,
    Path(path): SessionPath,
    slots: Option<axum::Extension<PollSlots>>,
    headers: HeaderMap,
    raw: Bytes,
) -> Result<Response, ApiError> {
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
    let (index, verdict) = match on_session(&api, &headers, &path, "acquire", None, make).await? {
        (index, Output::Verdict { verdict }) => (index, verdict),
        (_, other) => return Err(unexpected("acquire", &other)),
    };
    if let (Verdict::Wait { ticket, .. }, Some(hold)) = (&verdict, hold) {
        let (session, ticket) = (session_id(&path.1)?, *ticket);
        // A retry with the same key answers this WAIT again, though its ticket may have ended
        // since (before a restart, say): read where the ticket stands first (between the
        // engine's batches, which record their events before the next read), and hold only
        // a ticket still waiting, whose outcome can only come after this entry.
        let waiting = api
            .engine
            .read(move |m| m.kernel().ticket_waiting(session, ticket))
            .await?;
        let (after, hold) = match waiting {
            Some(true) => (EventId { index, k: 0 }, hold),
            // Ended: its outcome is in the session's stream now, if it is still kept there.
            _ => (EventId::default(), Duration::ZERO),
        };
        if let Some(resolution) = resolve_ticket(&api, session, ticket, after, hold).await {
            return Ok(Json(resolution).into_response());
        }
        // Ended, with its outcome no longer kept (folded into a snapshot before a restart):
        // the WAIT at once, and a poll of the ticket says TICKET_ENDED.
    }
    Ok(Json(verdict).into_response())
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
    let reader = api.engine.events().follow(Stream::Session(session));
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let batch = reader.wait_after(after, left, Kinds::NoHolderEvents).await;
        for stamped in &batch.events {
            let resolves = match stamped.event() {
                Event::Granted { ticket: t, .. }
                | Event::WaitTimeout { ticket: t, .. }
                | Event::Died { ticket: t, .. } => *t == ticket,
                Event::Wounded { lost_tickets, .. } => lost_tickets.contains(&ticket),
                _ => false,
            };
            if resolves {
                let mut v = to_json(stamped.event());
                v["ticket"] = json!(ticket);
                v["event_id"] = json!(stamped.id().to_string());
                return Some(v);
            }
        }
        after = EventId::parse(&batch.next).unwrap_or(after);
        // A read with nothing in it came back only at the deadline (or the session closed);
        // one that brought events or a gap may have more behind it: read on at once.
        if batch.ended || (batch.events.is_empty() && !batch.gap) {
            return None;
        }
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
    params(SessionParams, TicketPath, SessionHeaders, WaitQuery),
    responses((status = 200, description = "Long-poll a ticket's outcome", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn ticket(
    State(api): State<Shared>,
    Path((ns, sid, tid)): Path<(String, String, String)>,
    Q(q): Q<WaitQuery>,
    headers: HeaderMap,
) -> Answer {
    let session = authorize(&api, &ns, &sid, &headers).await?;
    let ticket = ticket_id(&tid)?;
    // A ticket's outcome is never a holder event: it is read without them in any case.
    let (hold, mut after, log, _) = q.parse()?;
    if api.engine.events().other_log(log) {
        after = EventId::default(); // a cursor of another log counts nothing here
    }
    // Read between the engine's batches, which record their events before the next read: a
    // ticket that has ended by now has its outcome in the stream already, so only a waiting
    // one is worth holding the request for.
    let state = move |m: &Machine| m.kernel().ticket_waiting(session, ticket);
    let mut waiting = api.engine.read(state).await?;
    if waiting.is_none() {
        // A ticket given through another node a moment ago may not be applied here yet.
        waiting = api.engine.read_caught_up(state).await?;
    }
    let hold = if waiting == Some(true) {
        hold
    } else {
        Duration::ZERO
    };
    match (
        resolve_ticket(&api, session, ticket, after, hold).await,
        waiting,
    ) {
        (Some(v), _) => Ok(Json(v)),
        (None, Some(true)) => Ok(Json(json!({"verdict": "WAIT", "ticket": ticket}))),
        (None, Some(false)) => Err(ApiError::other(
            StatusCode::GONE,
            "TICKET_ENDED",
            format!(
                "ticket {ticket} has ended, and its outcome is no longer in this session's event \
                 stream after event {after}: ask again (an acquire of the same intents reuses \
                 any lease the session already holds for them)"
            ),
        )),
        (None, None) => Err(ApiError::kernel(Error::new(
            ErrorCode::UnknownTicket,
            format!("ticket {ticket} was never this session's (or ended too long ago to be known)"),
        ))),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/ns/{ns}/sessions/{sid}/tickets/{tid}",
    tag = "leases",
    summary = "Withdraw a waiting ticket",
    params(SessionParams, TicketPath, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "Withdraw a waiting ticket", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn cancel(
    State(api): State<Shared>,
    Path((ns, sid, tid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Answer {
    let ticket = ticket_id(&tid)?;
    let make = |session| Command::CancelWait { session, ticket };
    on_session(&api, &headers, &(ns, sid), "cancel", Some(&tid), make).await?;
    Ok(Json(json!({"cancelled": true})))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LeasesBody {
    lease_ids: Option<Vec<u64>>,
    all: Option<bool>,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/heartbeat",
    tag = "leases",
    summary = "Renew the chosen leases, or all of them",
    params(SessionParams, SessionHeaders, CommandHeaders),
    request_body = LeasesBody,
    responses((status = 200, description = "Renew the chosen leases, or all of them", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn heartbeat(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer<Rendered> {
    let b: LeasesBody = body(&raw)?;
    if b.all.is_some() {
        return Err(ApiError::bad_request(
            "heartbeat takes lease_ids, or nothing for every lease",
        ));
    }
    if let Some(ids) = &b.lease_ids {
        WorkLimits::check(&api, ids.len(), api.work.max_ids, "a heartbeat")?;
    }
    let leases = b.lease_ids.map(lease_ids);
    let make = |session| Command::Heartbeat { session, leases };
    let (_, out) = on_session(&api, &headers, &path, "heartbeat", None, make).await?;
    Ok(Json(Rendered(out)))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/release",
    tag = "leases",
    summary = "Release one lease, or all of them (idempotent)",
    params(SessionParams, SessionHeaders, CommandHeaders),
    request_body = LeasesBody,
    responses((status = 200, description = "Release one lease, or all of them (idempotent)", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn release(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer<Rendered> {
    let b: LeasesBody = body(&raw)?;
    // `None`: every lease of the session.
    let lease = match (b.lease_ids.as_deref(), b.all) {
        (None, Some(true)) => None,
        (Some(&[id]), None) => Some(LeaseId(id)),
        _ => {
            return Err(ApiError::bad_request(
                "release takes {\"lease_ids\": [one id]} or {\"all\": true}",
            ))
        }
    };
    let make = |session| match lease {
        None => Command::ReleaseAll { session },
        Some(lease) => Command::Release { session, lease },
    };
    let (_, out) = on_session(&api, &headers, &path, "release", None, make).await?;
    Ok(Json(Rendered(out)))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/reconcile",
    tag = "leases",
    summary = "The kernel's truth about each lease",
    params(SessionParams, SessionHeaders, CommandHeaders),
    request_body = LeasesBody,
    responses((status = 200, description = "The kernel's truth about each lease", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn reconcile(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer<Rendered> {
    let b: LeasesBody = body(&raw)?;
    let (Some(ids), None) = (b.lease_ids, b.all) else {
        return Err(ApiError::bad_request(
            "reconcile takes {\"lease_ids\": [...]}",
        ));
    };
    WorkLimits::check(&api, ids.len(), api.work.max_ids, "a reconcile")?;
    let leases = lease_ids(ids);
    let make = |session| Command::Reconcile { session, leases };
    let (_, out) = on_session(&api, &headers, &path, "reconcile", None, make).await?;
    Ok(Json(Rendered(out)))
}
