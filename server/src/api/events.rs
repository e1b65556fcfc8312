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
    State(api): State<Api>,
    Path(ns): Path<String>,
    Query(q): Query<WaitQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    follow(api, Stream::Namespace(ns), &q, &headers).await
}
