//! openraft's network (`RaftNetworkFactory`, `RaftNetworkV2`) over the peers' `/raft/*` HTTP
//! routes ([`crate::routes`]).
//!
//! Contract:
//! - Each RPC is one POST of JSON to the target's route (`/raft/append`, `/raft/vote`,
//!   `/raft/pre-vote`, `/raft/snapshot`) on the target's keep-alive connection
//!   ([`crate::peer::Peer`]), answered with the JSON of the target Raft's `Result`. A full
//!   snapshot is sent whole: its bytes (the machine snapshot's JSON) are the body, its vote
//!   and metadata the [`SNAPSHOT_HEADER`].
//! - A peer that cannot be reached, does not answer in the RPC's soft time limit, refuses the
//!   secret, or answers something undecodable is `Unreachable` (openraft backs off and
//!   retries); a Raft error the target answers is a network error naming it.

use crate::peer::{Peer, PeerAccess};
use crate::state_machine::Snapshot;
use crate::types::{KlockRaft, RaftEntry, Vote};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{AnyError, EntryPayload, NodeInfo, OptionalSend, RaftNetworkV2};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::Cursor;
use std::time::Duration;

/// The header carrying a snapshot's vote and metadata (JSON of [`SnapshotHead`]).
pub const SNAPSHOT_HEADER: &str = "klock-raft-snapshot";

/// What travels beside a snapshot's bytes.
#[derive(Serialize, Deserialize)]
pub struct SnapshotHead {
    pub vote: Vote,
    pub meta: openraft::alias::SnapshotMetaOf<KlockRaft>,
}

/// Makes a client per target (openraft asks for one per replication stream).
pub struct Network {
    access: PeerAccess,
}

impl Network {
    /// The network of a node whose requests show and trust `access`.
    pub fn new(access: PeerAccess) -> Network {
        Network { access }
    }
}

impl RaftNetworkFactory<KlockRaft> for Network {
    type Network = PeerNetwork;

    async fn new_client(&mut self, _target: u64, node: &NodeInfo) -> PeerNetwork {
        PeerNetwork {
            peer: Peer::new(&node.raft_addr, &self.access),
        }
    }
}

/// The RPCs to one target.
pub struct PeerNetwork {
    /// The target, or why its address is unusable (every RPC fails with that).
    peer: Result<Peer, String>,
}

type Rpc<T> = Result<T, RPCError<KlockRaft>>;

fn unreachable(why: impl Into<String>) -> Unreachable<KlockRaft> {
    Unreachable::new(&AnyError::error(why.into()))
}

impl PeerNetwork {
    /// POSTs `body` to `path` and decodes the target's `Result<T, E>`.
    async fn call<T: DeserializeOwned, E: DeserializeOwned + std::fmt::Display>(
        &self,
        path: &str,
        header: Option<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        let peer = self
            .peer
            .as_ref()
            .map_err(|e| Failure::Unreachable(e.clone()))?;
        let (status, bytes) = peer
            .post(path, header, body, timeout)
            .await
            .map_err(Failure::Unreachable)?;
        if !status.is_success() {
            return Err(Failure::Unreachable(format!(
                "{path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        let answer: Result<T, E> = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::Unreachable(format!("{path}: an undecodable answer: {e}")))?;
        answer.map_err(|e| Failure::Remote(format!("{path}: {e}")))
    }

    async fn rpc<Req: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        rpc: &Req,
        capacity: usize,
        option: &RPCOption,
    ) -> Rpc<T> {
        // Sized up front: a body grown by doubling copies itself over and over, and each
        // larger allocation is fresh memory the kernel zeroes.
        let mut body = Vec::with_capacity(capacity);
        serde_json::to_writer(&mut body, rpc)
            .map_err(|e| RPCError::Unreachable(unreachable(e.to_string())))?;
        self.call::<T, openraft::error::RaftError<KlockRaft>>(path, None, body, option.soft_ttl())
            .await
            .map_err(Failure::into_rpc)
    }
}

/// The body capacity of an RPC without entries.
const SMALL: usize = 256;

/// About the size of an AppendEntries body carrying `entries` (their JSON, which each
/// proposal keeps, and each log id around it).
fn append_capacity(entries: &[RaftEntry]) -> usize {
    entries.iter().fold(SMALL, |n, e| {
        n + 96
            + match &e.payload {
                EntryPayload::Normal(proposal) => proposal.json().len(),
                EntryPayload::Blank => 0,
                EntryPayload::Membership(_) => 512,
            }
    })
}

/// Why an RPC failed.
enum Failure {
    Unreachable(String),
    Remote(String),
}

impl Failure {
    fn into_rpc(self) -> RPCError<KlockRaft> {
        match self {
            Failure::Unreachable(why) => RPCError::Unreachable(unreachable(why)),
            Failure::Remote(why) => RPCError::Network(NetworkError::new(&AnyError::error(why))),
        }
    }
}

impl RaftNetworkV2<KlockRaft> for PeerNetwork {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KlockRaft>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<KlockRaft>> {
        let capacity = append_capacity(&rpc.entries);
        self.rpc("/raft/append", &rpc, capacity, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<KlockRaft>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<KlockRaft>> {
        self.rpc("/raft/vote", &rpc, SMALL, &option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<KlockRaft>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<KlockRaft>> {
        self.rpc("/raft/pre-vote", &rpc, SMALL, &option).await
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<KlockRaft>,
        option: RPCOption,
    ) -> Rpc<TransferLeaderResponse<KlockRaft>> {
        let body = serde_json::to_vec(&rpc)
            .map_err(|e| RPCError::Unreachable(unreachable(e.to_string())))?;
        self.call::<_, openraft::error::Fatal<KlockRaft>>(
            "/raft/transfer-leader",
            None,
            body,
            option.soft_ttl(),
        )
        .await
        .map_err(Failure::into_rpc)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<KlockRaft>, StreamingError<KlockRaft>> {
        let head = SnapshotHead {
            vote,
            meta: snapshot.meta,
        };
        let head = serde_json::to_string(&head)
            .map_err(|e| StreamingError::Unreachable(unreachable(e.to_string())))?;
        let body = snapshot.snapshot.into_inner();
        let sent = self.call::<SnapshotResponse<KlockRaft>, openraft::error::Fatal<KlockRaft>>(
            "/raft/snapshot",
            Some((SNAPSHOT_HEADER, head)),
            body,
            option.hard_ttl(),
        );
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = sent => sent.map_err(|f| match f.into_rpc() {
                RPCError::Network(e) => StreamingError::Network(e),
                RPCError::Unreachable(e) => StreamingError::Unreachable(e),
                RPCError::Timeout(e) => StreamingError::Timeout(e),
                RPCError::RemoteError(e) => StreamingError::Network(NetworkError::new(&e)),
            }),
        }
    }
}
