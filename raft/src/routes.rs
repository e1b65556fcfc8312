//! A cluster node's `/raft/*` routes, served by `klock serve` beside the client API.
//!
//! Contract:
//! - Every route needs the cluster secret in the `Klock-Cluster-Secret` header, compared as
//!   SHA-256 digests in constant time; without it, or with another, the answer is
//!   `401 CLUSTER_SECRET_REFUSED` and nothing is read or changed. Client tokens never open
//!   these routes, and the cluster secret opens nothing else.
//! - Bodies are bounded: [`MAX_RPC_BYTES`] for the RPCs, [`MAX_SNAPSHOT_BYTES`] for a
//!   snapshot (413 beyond). A body that does not decode is 400, before Raft sees it.
//! - The Raft RPCs (`append`, `vote`, `pre-vote`, `transfer-leader`, `snapshot`) answer 200 with the JSON of the
//!   local Raft's `Result`. A vote request passes this node's leader lease when its leader's
//!   port refuses connections ([`crate::gone`]). `propose` takes a follower's submissions: stamped and written only
//!   if this node is the anchored leader ([`crate::node::Replicator::propose_as_leader`]),
//!   never forwarded again. `read-index` answers the leader's read index (`{"index": N}`,
//!   once a quorum confirmed it leads) or 503. `init` makes the configured peers the first voters; `status` is
//!   the Raft metrics; `add-learner` and `change-membership` change the membership: a
//!   follower passes either to the leader it knows, once (a request passed on carries
//!   [`PASSED_ON_HEADER`] and is never passed on again), and returns the leader's answer; with
//!   no leader known it is refused (409 `MEMBERSHIP_REFUSED`, "forward to the leader").

use crate::network::{SnapshotHead, SNAPSHOT_HEADER};
use crate::node::{ClusterConfig, RaftNode, Replicator};
use crate::peer::SECRET_HEADER;
use crate::types::KlockRaft;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use klock_server::auth::{constant_time_eq, digest};
use klock_server::engine::Submission;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use openraft::rt::WatchReceiver as _;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::Arc;

/// The header of a membership change a follower passed on to its leader.
pub const PASSED_ON_HEADER: &str = "klock-passed-on";

/// The largest body of an RPC: a batch of appended entries, a vote, submissions.
pub const MAX_RPC_BYTES: usize = 64 << 20;
/// The largest snapshot a node takes (the kernel's exported state, as JSON).
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

#[derive(Clone)]
struct Node {
    raft: RaftNode,
    replicator: Arc<Replicator>,
    peers: Arc<BTreeMap<u64, String>>,
}

/// The routes of a node (module contract).
pub fn router(
    raft: RaftNode,
    replicator: Arc<Replicator>,
    secret: &str,
    peers: BTreeMap<u64, String>,
) -> Router {
    let node = Node {
        raft,
        replicator,
        peers: Arc::new(peers),
    };
    let secret = Arc::new(digest(secret));
    let rpc = Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/pre-vote", post(pre_vote))
        .route("/raft/transfer-leader", post(transfer_leader))
        .route("/raft/propose", post(propose))
        .route("/raft/read-index", post(read_index))
        .route("/raft/init", post(init))
        .route("/raft/add-learner", post(add_learner))
        .route("/raft/change-membership", post(change_membership))
        .route("/raft/status", get(status))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES));
    let snapshot = Router::new()
        .route("/raft/snapshot", post(snapshot))
        .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES));
    rpc.merge(snapshot)
        .with_state(node)
        .layer(middleware::from_fn_with_state(secret, check_secret))
}

/// Refuses a request without the cluster secret (module contract).
async fn check_secret(
    State(secret): State<Arc<[u8; 32]>>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(digest);
    match given {
        Some(given) if constant_time_eq(&given, &secret[..]) => next.run(request).await,
        _ => error(
            StatusCode::UNAUTHORIZED,
            "CLUSTER_SECRET_REFUSED",
            "the /raft routes need this cluster's secret in Klock-Cluster-Secret".into(),
        ),
    }
}

fn error(status: StatusCode, name: &str, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": 0, "name": name, "message": message}})),
    )
        .into_response()
}

/// The body as `T`, or why not (for [`bad_request`]).
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("the body does not decode: {e}"))
}

/// A 400 naming the problem.
fn bad_request(message: String) -> Response {
    error(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
}

async fn append(State(node): State<Node>, body: Bytes) -> Response {
    match decode::<AppendEntriesRequest<KlockRaft>>(&body) {
        Ok(rpc) => {
            node.replicator.gone().heard();
            Json(node.raft.append_entries(rpc).await).into_response()
        }
        Err(e) => bad_request(e),
    }
}

async fn vote(State(node): State<Node>, body: Bytes) -> Response {
    match decode::<VoteRequest<KlockRaft>>(&body) {
        Ok(mut rpc) => {
            // A leader whose port refuses holds no lease (crate::gone).
            let candidate = rpc.vote.leader_id().node_id;
            if !rpc.leadership_transfer
                && node
                    .replicator
                    .gone()
                    .lease_void(&node.raft, candidate)
                    .await
            {
                rpc.leadership_transfer = true;
            }
            Json(node.raft.vote(rpc).await).into_response()
        }
        Err(e) => bad_request(e),
    }
}

async fn pre_vote(State(node): State<Node>, body: Bytes) -> Response {
    match decode::<VoteRequest<KlockRaft>>(&body) {
        Ok(rpc) => Json(node.raft.pre_vote(rpc).await).into_response(),
        Err(e) => bad_request(e),
    }
}

async fn read_index(State(node): State<Node>) -> Response {
    match node.replicator.leader_read_index().await {
        Ok(index) => Json(json!({"index": index})).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "NO_LEADER", e),
    }
}

async fn transfer_leader(State(node): State<Node>, body: Bytes) -> Response {
    match decode::<TransferLeaderRequest<KlockRaft>>(&body) {
        Ok(rpc) => Json(node.raft.handle_transfer_leader(rpc).await).into_response(),
        Err(e) => bad_request(e),
    }
}

async fn snapshot(State(node): State<Node>, headers: HeaderMap, body: Bytes) -> Response {
    let head = headers
        .get(SNAPSHOT_HEADER)
        .map(|v| decode::<SnapshotHead>(v.as_bytes()));
    let head = match head {
        Some(Ok(head)) => head,
        Some(Err(e)) => return bad_request(e),
        None => {
            return error(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                format!("a snapshot needs its {SNAPSHOT_HEADER} header"),
            )
        }
    };
    let snapshot = crate::state_machine::Snapshot {
        meta: head.meta,
        snapshot: Cursor::new(body.to_vec()),
    };
    Json(node.raft.install_full_snapshot(head.vote, snapshot).await).into_response()
}

async fn propose(State(node): State<Node>, body: Bytes) -> Response {
    match decode::<Vec<Submission>>(&body) {
        Ok(submissions) => {
            Json(node.replicator.propose_forwarded(submissions).await).into_response()
        }
        Err(e) => bad_request(e),
    }
}

async fn init(State(node): State<Node>) -> Response {
    let members: BTreeMap<u64, openraft::NodeInfo> = node
        .peers
        .iter()
        .map(|(id, url)| (*id, ClusterConfig::node(url)))
        .collect();
    match node.raft.initialize(members).await {
        Ok(()) => Json(json!({"initialized": true})).into_response(),
        Err(e) => error(StatusCode::CONFLICT, "CLUSTER_INIT_REFUSED", e.to_string()),
    }
}

async fn status(State(node): State<Node>) -> Response {
    let metrics = node.raft.metrics().borrow_watched().clone();
    Json(json!({
        "id": metrics.id,
        "state": format!("{:?}", metrics.state),
        "term": metrics.current_term,
        "leader": metrics.current_leader,
        "last_log_index": metrics.last_log_index,
        "applied_index": metrics.last_applied.map(|id| id.index),
        "snapshot_index": metrics.snapshot.map(|id| id.index),
        "purged_index": metrics.purged.map(|id| id.index),
        "voters": metrics.membership_config.membership().voter_ids().collect::<Vec<_>>(),
        "learners": metrics.membership_config.membership().learner_ids().collect::<Vec<_>>(),
    }))
    .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Learner {
    id: u64,
    url: String,
}

async fn add_learner(State(node): State<Node>, headers: HeaderMap, body: Bytes) -> Response {
    let learner = match decode::<Learner>(&body) {
        Ok(learner) => learner,
        Err(e) => return bad_request(e),
    };
    let written = node
        .raft
        .add_learner(learner.id, ClusterConfig::node(&learner.url), true)
        .await;
    membership_answer(&node, &headers, "/raft/add-learner", body, written).await
}

/// The answer to a membership change: its log index, or (a follower that knows its leader,
/// for a request not passed on already) the leader's answer to the same request, or the
/// refusal (module contract).
async fn membership_answer<E>(
    node: &Node,
    headers: &HeaderMap,
    path: &str,
    body: Bytes,
    written: Result<
        openraft::raft::ClientWriteResponse<KlockRaft>,
        openraft::error::RaftError<KlockRaft, E>,
    >,
) -> Response
where
    E: std::fmt::Debug
        + std::fmt::Display
        + openraft::TryAsRef<openraft::error::ForwardToLeader<KlockRaft>>,
{
    let e = match written {
        Ok(written) => return Json(json!({"log_index": written.log_id.index})).into_response(),
        Err(e) => e,
    };
    let leader = e.forward_to_leader().and_then(|f| f.leader_id);
    match leader {
        Some(leader) if !headers.contains_key(PASSED_ON_HEADER) => {
            match node.replicator.pass_on(leader, path, body).await {
                Ok((status, answer)) => (
                    status,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    answer,
                )
                    .into_response(),
                Err(why) => error(StatusCode::SERVICE_UNAVAILABLE, "MEMBERSHIP_REFUSED", why),
            }
        }
        _ => error(StatusCode::CONFLICT, "MEMBERSHIP_REFUSED", e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Voters {
    voters: BTreeSet<u64>,
}

async fn change_membership(State(node): State<Node>, headers: HeaderMap, body: Bytes) -> Response {
    let voters = match decode::<Voters>(&body) {
        Ok(voters) => voters.voters,
        Err(e) => return bad_request(e),
    };
    let written = node.raft.change_membership(voters, false).await;
    membership_answer(&node, &headers, "/raft/change-membership", body, written).await
}
