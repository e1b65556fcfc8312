//! `klock cluster init|status|add|remove`: a cluster's membership, through one node's
//! `/raft/*` routes with the cluster secret.
//!
//! Contract: [`run`] sends one request to the node `--node URL` and prints its JSON answer;
//! `init` makes the nodes of that node's `--cluster-peers` the first voters; `add --id N --url
//! URL` adds a learner (it catches up, by snapshot if it must), then `voters --ids 1,2,3`
//! makes exactly those nodes the voters (`remove --id N` is `voters` without N, computed from
//! the node's status). Run `add`, `voters` and `remove` against the leader. Any refusal is an
//! error carrying the node's message.

use klock_raft::peer::Peer;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

pub const HELP: &str = "\
usage: klock cluster init   --node URL --cluster-secret-file FILE
       klock cluster status --node URL --cluster-secret-file FILE
       klock cluster add    --node URL --cluster-secret-file FILE --id N --url URL
       klock cluster voters --node URL --cluster-secret-file FILE --ids N,N,...
       klock cluster remove --node URL --cluster-secret-file FILE --id N

Manages a cluster of `klock serve --node-id` nodes through the node at URL (its /raft routes,
with the cluster secret). init: the nodes of its --cluster-peers become the first voters (once,
on one node). status: its Raft state, leader, term, indexes and members. add: a learner
(against the leader); voters: exactly these nodes vote (against the leader); remove: the voters
without N.
";

/// How long one request may take (a learner's catch-up is part of `add`).
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `klock cluster ARGS` and returns what to print.
///
/// # Errors
/// Bad arguments (the message says which), an unreadable secret file, or the node's refusal.
pub async fn run(args: &[String]) -> Result<String, String> {
    let action = args.first().map(String::as_str).unwrap_or("");
    let (mut node, mut secret_file, mut id, mut url, mut ids) = (None, None, None, None, None);
    let mut i = 1;
    while i < args.len() {
        let value = args
            .get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{} needs a value", args[i]))?;
        match args[i].as_str() {
            "--node" => node = Some(value),
            "--cluster-secret-file" => secret_file = Some(value),
            "--id" => id = Some(node_id(&value)?),
            "--url" => url = Some(value),
            "--ids" => {
                ids = Some(
                    value
                        .split(',')
                        .map(node_id)
                        .collect::<Result<BTreeSet<u64>, String>>()?,
                )
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        i += 2;
    }
    let node = node.ok_or("--node URL is needed")?;
    let secret_file = secret_file.ok_or("--cluster-secret-file FILE is needed")?;
    let secret = std::fs::read_to_string(&secret_file)
        .map_err(|e| format!("cannot read the cluster secret file {secret_file}: {e}"))?;
    let peer = Peer::new(&node, Arc::from(secret.trim()))?;
    let answer = match action {
        "init" => peer.post("/raft/init", None, b"{}".to_vec(), TIMEOUT).await,
        "status" => peer.get("/raft/status", TIMEOUT).await,
        "add" => {
            let (id, url) = (
                id.ok_or("add needs --id N")?,
                url.ok_or("add needs --url URL")?,
            );
            let body = serde_json::json!({"id": id, "url": url}).to_string();
            peer.post("/raft/add-learner", None, body.into_bytes(), TIMEOUT)
                .await
        }
        "voters" | "remove" => {
            let voters = if action == "voters" {
                ids.ok_or("voters needs --ids N,N,...")?
            } else {
                let gone = id.ok_or("remove needs --id N")?;
                let (_, status) = peer.get("/raft/status", TIMEOUT).await?;
                let status: serde_json::Value = serde_json::from_slice(&status)
                    .map_err(|e| format!("the node's status does not decode: {e}"))?;
                let voters: BTreeSet<u64> = serde_json::from_value(status["voters"].clone())
                    .map_err(|e| format!("the node's status has no voters: {e}"))?;
                voters.into_iter().filter(|v| *v != gone).collect()
            };
            let body = serde_json::json!({"voters": voters}).to_string();
            peer.post("/raft/change-membership", None, body.into_bytes(), TIMEOUT)
                .await
        }
        other => {
            return Err(format!(
                "unknown action {other:?} (init, status, add, voters, remove)"
            ))
        }
    }?;
    let (status, body) = answer;
    let text = String::from_utf8_lossy(&body).into_owned();
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("{node} answered {status}: {text}"))
    }
}

fn node_id(v: &str) -> Result<u64, String> {
    v.trim()
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{v:?} is not a node id above 0"))
}
