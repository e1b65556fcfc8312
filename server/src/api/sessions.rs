//! Session routes: open, resume, close, suspend, digest. Open and resume hand out the
//! session's secret token, bound in the log as its SHA-256.

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
pub(super) struct ResumeBody {
    /// A StateDigest (version, identity, recovery) as `digest` answered it.
    #[schema(value_type = Object)]
    digest: StateDigest,
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

#[utoipa::path(
    delete,
    path = "/v1/ns/{ns}/sessions/{sid}",
    tag = "sessions",
    summary = "Close a session: release every lease, cancel every wait",
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "Close a session: release every lease, cancel every wait", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn close(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
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
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "Mark a session as restarting: its leases keep the grace", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn suspend(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
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
    params(SessionParams, SessionHeaders, CommandHeaders),
    responses((status = 200, description = "The session's StateDigest", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn digest(
    State(api): State<Api>,
    Path(path): SessionPath,
    headers: HeaderMap,
) -> Answer {
    let make = |session| Command::Digest { session };
    match on_session(&api, &headers, &path, "digest", make).await?.1 {
        Output::Digest { digest } => Ok(Json(to_json(&digest))),
        other => Err(unexpected("digest", &other)),
    }
}
