//! `klock cluster init|status|add|remove`: a cluster's membership, through one node's
//! `/raft/*` routes with the cluster secret.
//!
//! Contract: [`run`] sends one request to the node `--node URL` and prints its JSON answer;
//! `init` makes the nodes of that node's `--cluster-peers` the first voters; `add --id N --url
//! URL` adds a learner (it catches up, by snapshot if it must), then `voters --ids 1,2,3`
//! makes exactly those nodes the voters (`remove --id N` is `voters` without N, computed from
//! the node's status). `add`, `voters` and `remove` sent to a follower are passed on to the
//! leader it knows (with none known, refused: ask again after the election). Any refusal is an
//! error carrying the node's message.

use klock_raft::peer::{Peer, PeerAccess};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const HELP: &str = "\
usage: klock cluster init   --node URL --cluster-secret-file FILE [--ca FILE]
       klock cluster status --node URL --cluster-secret-file FILE [--ca FILE]
       klock cluster add    --node URL --cluster-secret-file FILE [--ca FILE] --id N --url URL
       klock cluster voters --node URL --cluster-secret-file FILE [--ca FILE] --ids N,N,...
       klock cluster remove --node URL --cluster-secret-file FILE [--ca FILE] --id N

Manages a cluster of `klock serve --node-id` nodes through the node at URL (its /raft routes,
with the cluster secret). init: the nodes of its --cluster-peers become the first voters (once,
on one node). status: its Raft state, leader, term, indexes and members. add: a learner;
voters: exactly these nodes vote; remove: the voters without N (a follower passes add, voters
and remove on to its leader). An https:// node's certificate is checked against --ca FILE (or $KLOCK_CA): the
CA certificates (PEM) that signed the nodes' certificates.

Example: three nodes started with --node-id 1, 2, 3 and the same --cluster-peers:
  klock cluster init --node http://127.0.0.1:7301 --cluster-secret-file cluster.secret
  klock cluster status --node http://127.0.0.1:7302 --cluster-secret-file cluster.secret
";

/// How long one request may take (a learner's catch-up is part of `add`).
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why `klock cluster` failed: its arguments (exit 2) or the request (exit 1).
#[derive(Debug)]
pub enum Failed {
    Usage(String),
    Request(String),
}

/// `klock cluster`'s arguments, checked.
struct Parsed {
    action: String,
    node: String,
    secret_file: String,
    ca: Option<String>,
    id: Option<u64>,
    url: Option<String>,
    ids: Option<BTreeSet<u64>>,
}

fn parse(args: &[String]) -> Result<Parsed, String> {
    let action = args.first().cloned().unwrap_or_default();
    if !matches!(
        action.as_str(),
        "init" | "status" | "add" | "voters" | "remove"
    ) {
        return Err(format!(
            "unknown action {action:?} (init, status, add, voters, remove)"
        ));
    }
    let (mut node, mut secret_file, mut id, mut url, mut ids) = (None, None, None, None, None);
    let mut ca = None;
    let mut i = 1;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = args
            .get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        match flag {
            "--node" => node = Some(value),
            "--cluster-secret-file" => secret_file = Some(value),
            "--ca" => ca = Some(value),
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
    let needs = |what: &str| format!("{action} needs {what}");
    match action.as_str() {
        "add" if id.is_none() || url.is_none() => return Err(needs("--id N and --url URL")),
        "voters" if ids.is_none() => return Err(needs("--ids N,N,...")),
        "remove" if id.is_none() => return Err(needs("--id N")),
        _ => {}
    }
    Ok(Parsed {
        node: node.ok_or_else(|| needs("--node URL"))?,
        secret_file: secret_file.ok_or_else(|| needs("--cluster-secret-file FILE"))?,
        ca,
        action,
        id,
        url,
        ids,
    })
}

/// Runs `klock cluster ARGS` and returns what to print.
///
/// # Errors
/// Bad arguments (the message says which), an unreadable secret file, or the node's refusal.
pub async fn run(args: &[String]) -> Result<String, Failed> {
    let parsed = parse(args).map_err(Failed::Usage)?;
    request(parsed).await.map_err(Failed::Request)
}

async fn request(parsed: Parsed) -> Result<String, String> {
    let Parsed {
        action,
        node,
        secret_file,
        ca,
        id,
        url,
        ids,
    } = parsed;
    let secret = std::fs::read_to_string(&secret_file)
        .map_err(|e| format!("cannot read the cluster secret file {secret_file}: {e}"))?;
    // $KLOCK_CA, as for the client tools, when the node is https:// and --ca is not given.
    let ca = ca.or_else(|| {
        node.starts_with("https://")
            .then(|| std::env::var("KLOCK_CA").ok())
            .flatten()
            .filter(|v| !v.is_empty())
    });
    let access = PeerAccess::new(Arc::from(secret.trim()), ca.as_deref().map(Path::new))?;
    let peer = Peer::new(&node, &access)?;
    let (status, body) = match action.as_str() {
        "init" => peer.post("/raft/init", None, b"{}".to_vec(), TIMEOUT).await,
        "status" => peer.get("/raft/status", TIMEOUT).await,
        "add" => {
            let body = serde_json::json!({"id": id, "url": url}).to_string();
            peer.post("/raft/add-learner", None, body.into_bytes(), TIMEOUT)
                .await
        }
        _ => {
            let voters = match (ids, id) {
                (Some(ids), _) => ids,
                (None, gone) => {
                    let (_, status) = peer.get("/raft/status", TIMEOUT).await?;
                    let status: serde_json::Value = serde_json::from_slice(&status)
                        .map_err(|e| format!("the node's status does not decode: {e}"))?;
                    let voters: BTreeSet<u64> = serde_json::from_value(status["voters"].clone())
                        .map_err(|e| format!("the node's status has no voters: {e}"))?;
                    voters.into_iter().filter(|v| Some(*v) != gone).collect()
                }
            };
            let body = serde_json::json!({"voters": voters}).to_string();
            peer.post("/raft/change-membership", None, body.into_bytes(), TIMEOUT)
                .await
        }
    }?;
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
