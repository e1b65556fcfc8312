//! Event streams: a session's, or a whole namespace's (the dashboards' watch), as
//! Server-Sent Events resumed after `Last-Event-ID`, or as a JSON long-poll.

use super::*;

/// A session's events: Server-Sent Events when the request accepts `text/event-stream`
/// (resumed after `Last-Event-ID`, or `?after=`), otherwise the JSON long-poll.
#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/sessions/{sid}/events",
    tag = "events",
    summary = "The session's events: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll",
    params(SessionParams, SessionHeaders, WaitQuery),
    responses((status = 200, description = "The session's events: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn events(
    State(api): State<Shared>,
    Path((ns, sid)): SessionPath,
    Q(q): Q<WaitQuery>,
    slots: Option<axum::Extension<PollSlots>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = authorize(&api, &ns, &sid, &headers).await?;
    follow(api, Stream::Session(session), &q, slots, &headers).await
}

/// A stream of events: Server-Sent Events when the request accepts `text/event-stream`
/// (resumed after `Last-Event-ID`, or `?after=`), otherwise the JSON long-poll.
async fn follow(
    api: Shared,
    stream: Stream,
    q: &WaitQuery,
    slots: Option<axum::Extension<PollSlots>>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (mut hold, mut after, log, kinds) = q.parse()?;
    // The events of every write this node answered are in its streams before it reads them.
    api.engine.settled().await?;
    // A cursor of another log counts nothing in this one: read this log from its start, at
    // once, and say so with a gap (the events module's contract).
    let other_log = api.engine.events().other_log(log);
    let accepts = header(headers, "accept")?.unwrap_or_default();
    if !accepts.contains("text/event-stream") {
        if other_log {
            (after, hold) = (EventId::default(), Duration::ZERO);
        }
        let mut batch = api
            .engine
            .events()
            .wait_after(&stream, after, hold, kinds)
            .await;
        batch.gap |= other_log;
        return Ok(Json(to_json(&batch)).into_response());
    }
    if let Some(last) = header(headers, "last-event-id")? {
        after = EventId::parse(last).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Last-Event-ID must be an event id like 12.0, got {last:?}"
            ))
        })?;
    }
    if other_log {
        after = EventId::default();
    }
    // The stream outlives this handler: it keeps the caller's long-poll slot while it is open
    // (the access layer's own slot for this request is freed when the handler returns).
    let slot = slots.map(|axum::Extension(slots)| slots.hand_over());
    let mut response = sse(&api, stream, after, kinds, other_log, slot).into_response();
    // An SSE answer's body is its events: the log they count entries of is a header.
    if let Some(log) = api.engine.events().log() {
        if let Ok(value) = axum::http::HeaderValue::from_str(&log) {
            response.headers_mut().insert("klock-log", value);
        }
    }
    Ok(response)
}

/// An SSE stream of `stream` after `after`, until its session closes or the client goes; a
/// `gap` event (its id past what was missed) says the reader missed events, or (`other_log`)
/// that its cursor was of another log.
fn sse(
    api: &Api,
    stream: Stream,
    after: EventId,
    kinds: Kinds,
    other_log: bool,
    slot: Option<auth::LongPoll>,
) -> impl IntoResponse {
    use axum::response::sse::{Event as Sse, KeepAlive};
    type Pending = std::collections::VecDeque<Sse>;
    // Follows the stream from now on, so no event published after this answer is missed.
    let reader = api.engine.events().follow(stream);
    let start = (reader, after, Pending::new(), false, other_log, slot);
    let events = futures_util::stream::unfold(
        start,
        move |(reader, mut after, mut pending, mut ended, mut other_log, slot)| async move {
            loop {
                if let Some(next) = pending.pop_front() {
                    let state = (reader, after, pending, ended, other_log, slot);
                    return Some((Ok::<_, std::convert::Infallible>(next), state));
                }
                if ended {
                    return None;
                }
                let wait = if other_log {
                    Duration::ZERO
                } else {
                    Duration::from_secs(15)
                };
                let batch = reader.wait_after(after, wait, kinds).await;
                if batch.gap || std::mem::take(&mut other_log) {
                    let gap = Sse::default().event("gap").id(&batch.next);
                    pending.push_back(gap.data(&batch.next));
                }
                for stamped in &batch.events {
                    let data = serde_json::to_string(stamped.event()).expect("events serialize");
                    let id = stamped.id().to_string();
                    let name = stamped.event().name();
                    pending.push_back(Sse::default().id(id).event(name).data(data));
                }
                after = EventId::parse(&batch.next).unwrap_or(after);
                ended = batch.ended;
            }
        },
    );
    axum::response::sse::Sse::new(events).keep_alive(KeepAlive::default())
}

/// A namespace's events (every session's), for dashboards: `?after=&wait_ms=`.
#[utoipa::path(
    get,
    path = "/v1/ns/{ns}/watch",
    tag = "events",
    summary = "Every session's events in the namespace: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll",
    params(NamespacePath, WaitQuery),
    responses((status = 200, description = "Every session's events in the namespace: SSE with Accept text/event-stream (Last-Event-ID resumes), else a JSON long-poll", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn watch(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    Q(q): Q<WaitQuery>,
    slots: Option<axum::Extension<PollSlots>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    follow(api, Stream::Namespace(ns), &q, slots, &headers).await
}
