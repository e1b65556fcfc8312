//! The batch endpoint: up to [`MAX_BATCH`] lease commands of several sessions in one
//! request, applied in order in one durable batch, each answered as its own route would.

use super::*;
use crate::relay;
use axum::http::Uri;

/// Most operations one batch request may carry.
pub const MAX_BATCH: usize = 1000;

/// One operation of a batch: a lease command on a session, with that session's token.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum BatchOp {
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
    /// The lease ids and intents it names: its share of the engine's work.
    fn items(&self) -> usize {
        match self {
            BatchOp::Acquire { intents, .. } => intents.len(),
            BatchOp::Heartbeat { lease_ids, .. } => lease_ids.as_ref().map_or(0, Vec::len),
            BatchOp::Reconcile { lease_ids, .. } => lease_ids.len(),
            BatchOp::Release { .. } | BatchOp::ReleaseAll { .. } | BatchOp::CancelWait { .. } => 1,
        }
    }

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
pub(super) struct BatchBody {
    operations: Vec<BatchOp>,
}

/// Several lease commands in one request, applied in order in one durable batch; each gets
/// the answer its own route would give (`{"ok": ...}` or `{"error": ...}`). A cluster
/// follower relays the request to its leader as it came and answers with the leader's answer
/// ([`crate::relay`]), neither decoding nor encoding its operations and answers.
#[utoipa::path(
    post,
    path = "/v1/ns/{ns}/batch",
    tag = "leases",
    summary = "Up to 1,000 lease commands, in order, in one durable batch",
    params(NamespacePath, CommandHeaders),
    request_body = BatchBody,
    responses((status = 200, description = "Up to 1,000 lease commands, in order, in one durable batch", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn batch(
    State(api): State<Shared>,
    Path(ns): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let relayed = relay::is_relayed(&headers);
    if !relayed {
        let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
        if let Some(answer) = api.engine.relay(path, &headers, &raw) {
            return match answer.await {
                Ok(answer) => answer.into_response(),
                Err(e) => ApiError::from(e).into_response(),
            };
        }
    }
    match answer(&api, &ns, &headers, &raw, relayed).await {
        Ok(answer) => answer,
        Err(e) => e.into_response(),
    }
}

/// This node's own answer to a batch (`relayed`: another node relayed it here, so it is
/// proposed only if this node leads).
async fn answer(
    api: &Api,
    ns: &str,
    headers: &HeaderMap,
    raw: &Bytes,
    relayed: bool,
) -> Result<Response, ApiError> {
    let b: BatchBody = body(raw)?;
    if b.operations.is_empty() || b.operations.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "a batch carries 1 to {MAX_BATCH} operations, got {}",
            b.operations.len()
        )));
    }
    // Each operation is bounded as its own route bounds it, and the whole batch too.
    let mut items = 0usize;
    for op in &b.operations {
        if let BatchOp::Heartbeat {
            lease_ids: Some(ids),
            ..
        }
        | BatchOp::Reconcile { lease_ids: ids, .. } = op
        {
            WorkLimits::check(
                api,
                ids.len(),
                api.work.max_ids,
                "a batch's heartbeat or reconcile",
            )?;
        }
        items += op.items();
    }
    WorkLimits::check(api, items, api.work.max_batch_items, "the batch")?;
    let now = now_of(headers)?;
    let mut submissions = Vec::with_capacity(b.operations.len());
    for (i, op) in b.operations.into_iter().enumerate() {
        let (command, token) = op.into_command();
        // Each operation's key is scoped to its own session too: a key never answers one
        // session with another's lease.
        let scope = Scope {
            ns,
            session: Some(command.session().map_or(0, |s| s.0)),
            what: "batch",
            item: Some(&i),
        };
        let mut submission = Submission::new(command, now);
        keyed(&mut submission, headers, scope)?;
        submission.caller = Some(Caller {
            namespace: ns.to_owned(),
            token: Some(digest_of(&token)),
            ..Caller::default()
        });
        submissions.push(submission);
    }
    let replies = if relayed {
        api.engine.submit_many_here(submissions).await?
    } else {
        api.engine.submit_many(submissions).await?
    };
    // The answer names its last entry (`Klock-Index`, `Klock-Now`), as every command's does.
    if let Some(last) = replies.iter().flatten().max_by_key(|r| r.index) {
        access::note_index(last.index, last.now);
    }
    let results = replies
        .into_iter()
        .map(
            |reply| match reply.map_err(ApiError::from).and_then(output) {
                Ok(out) => BatchResult::Ok(Rendered(out)),
                Err(e) => BatchResult::Error(e.into_fields()),
            },
        )
        .collect();
    Ok(Json(BatchAnswer { results }).into_response())
}

/// The answer of a batch: one result per operation, in order.
#[derive(Serialize)]
pub(super) struct BatchAnswer {
    results: Vec<BatchResult>,
}

/// `{"ok": answer}` or `{"error": {code, name, message}}`.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum BatchResult {
    Ok(Rendered),
    Error(ErrorFields),
}
