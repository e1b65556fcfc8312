//! Session routes: open, resume, close, suspend, digest. Open and resume hand out the
//! session's secret token and its resume secret, bound in the log as their SHA-256.
//!
//! Contract: a resume carries the `resume_secret` the open or the last resume of the session
//! answered (a StateDigest is public data: agent, session and priority are in `/overview`),
//! else it is 401 and the session is untouched. Each resume hands out a new resume secret and
//! the previous one stops working, as the previous session token does. Opens count against
//! the session caps of their bearer token and namespace (429 `TOO_MANY_SESSIONS`).

use super::*;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OpenBody {
    agent_id: String,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions",
    tag = "sessions",
    summary = "Open a session: its id, priority, token and the server time",
    params(NamespacePath, CommandHeaders),
    request_body = OpenBody,
    responses((status = 200, description = "Open a session: its id, priority, token and the server time", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn open(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: OpenBody = body(&raw)?;
    let command = Command::Open {
        agent_id: b.agent_id,
        namespace: ns.clone(),
    };
    let owner = ASKER
        .try_with(|a| a.who.as_deref().map(str::to_owned))
        .ok()
        .flatten();
    let caller = Caller {
        namespace: ns.clone(),
        owner,
        caps: Some(api.caps),
        ..Caller::default()
    };
    let answer = start_session(&api, &headers, &ns, "open", command, Some(caller)).await;
    if let Err(ApiError {
        name: "TOO_MANY_SESSIONS",
        ..
    }) = &answer
    {
        let refused = &api.engine.metrics().sessions_refused;
        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    answer
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeBody {
    /// A StateDigest (version, identity, recovery) as `digest` answered it.
    #[schema(value_type = Object)]
    digest: StateDigest,
    /// The resume secret the session's open (or its last resume) answered.
    resume_secret: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/resume",
    tag = "sessions",
    summary = "Resume a session from its StateDigest, with a new token",
    params(NamespacePath, CommandHeaders),
    request_body = ResumeBody,
    responses((status = 200, description = "Resume a session from its StateDigest, with a new token", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn resume(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    raw: Bytes,
) -> Answer {
    let b: ResumeBody = body(&raw)?;
    let Some(secret) = b.resume_secret.filter(|s| !s.is_empty()) else {
        return Err(ApiError::resume_refused(
            "a resume needs the session's resume_secret (answered by its open or its last \
             resume, beside session_token): a digest alone is public data",
        ));
    };
    let command = Command::Resume {
        digest: Box::new(b.digest),
    };
    // The session must live in the path's namespace and the secret must be its resume
    // secret (the machine checks both with the command); the digest's own fields are the
    // kernel's to check.
    let caller = Caller {
        namespace: ns.clone(),
        resume: Some(digest_of(&secret)),
        ..Caller::default()
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
    let resume_secret = new_token()?;
    let mut submission = Submission::new(command, now_of(headers)?);
    keyed(&mut submission, headers, Scope::of(ns, what))?;
    submission.token = Some(digest_of(&token));
    submission.resume = Some(digest_of(&resume_secret));
    submission.caller = caller;
    let reply = api.engine.submit(submission).await?;
    access::note_index(reply.index, reply.now);
    let now = reply.now;
    match output(reply)? {
        Output::Session { session } => {
            let mut v = to_json(&session);
            v["session_token"] = json!(token);
            v["resume_secret"] = json!(resume_secret);
            v["server_now"] = json!(now);
            // The log its `Klock-Index` counts entries of: the watch's `log=` for a stream
            // that starts at the session's entry.
            if let Some(log) = api.engine.events().log() {
                v["log"] = json!(&*log);
            }
            Ok(Json(v))
        }
        other => Err(unexpected(what, &other)),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/ns/{ns}/sessions/{sid}",
    tag = "sessions",
    summary = "Close a session: release every lease, cancel every wait",
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "Close a session: release every lease, cancel every wait", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn close(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
    let session = session_id(&path.1)?;
    on_session(&api, &headers, &path, "close", None, |session| {
        Command::Close { session }
    })
    .await?;
    // Forgotten once the close is applied here (a proxied one may be answered before): its
    // events would otherwise make the stream anew.
    api.engine.settled().await?;
    api.engine.events().forget(session);
    Ok(Json(json!({"closed": true})))
}

#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/sessions/{sid}/suspend",
    tag = "sessions",
    summary = "Mark a session as restarting: its leases keep the grace",
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "Mark a session as restarting: its leases keep the grace", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn suspend(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
    on_session(&api, &headers, &path, "suspend", None, |session| {
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
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "The session's StateDigest", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn digest(
    State(api): State<Shared>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
    let make = |session| Command::Digest { session };
    match on_session(&api, &headers, &path, "digest", None, make)
        .await?
        .1
    {
        Output::Digest { digest } => Ok(Json(to_json(&digest))),
        other => Err(unexpected("digest", &other)),
    }
}
