//! The Raft type configuration of Klock.
//!
//! Contract: a Raft log entry's app data is a [`Proposal`], which is exactly today's log
//! record (an [`Entry`]: the command and the `now` its leader stamped it with) and is encoded
//! as that record is (its JSON, transparently), so one encoding serves the single-node log and
//! the replicated one. A proposal carries its encoding, made once: when it is made
//! ([`Proposal::new`], on the leader) or decoded (on a follower, the bytes it came in). Every
//! later encoding (the log file's record, each follower's AppendEntries) copies those bytes
//! instead of encoding the entry again, and a clone shares both (openraft clones an entry for
//! each follower it sends it to). The bytes are exactly `serde_json::to_vec` of the entry: the
//! log file and the RPCs are unchanged. The answer to a proposal is the applier's [`Reply`].
//! Nodes are [`openraft::NodeInfo`] (the Raft address and the public API address).

use klock_server::engine::Reply;
use klock_server::machine::Entry;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;
use std::sync::Arc;

/// A log record proposed to the cluster: the command with its leader-stamped time, and its
/// encoding (module contract).
#[derive(Clone)]
pub struct Proposal(Arc<Encoded>);

struct Encoded {
    entry: Entry,
    /// `serde_json::to_vec(&entry)`, or the text the entry was decoded from.
    json: Box<RawValue>,
}

impl Proposal {
    /// `entry` with its encoding.
    ///
    /// # Errors
    /// The entry cannot be encoded as JSON (it always can: its maps have string keys).
    pub fn new(entry: Entry) -> Result<Proposal, serde_json::Error> {
        let json = serde_json::value::to_raw_value(&entry)?;
        Ok(Proposal(Arc::new(Encoded { entry, json })))
    }

    /// The log record.
    pub fn entry(&self) -> &Entry {
        &self.0.entry
    }

    /// Its JSON (what is written to the log file and sent to the followers).
    pub fn json(&self) -> &str {
        self.0.json.get()
    }
}

impl PartialEq for Proposal {
    fn eq(&self, other: &Proposal) -> bool {
        self.0.entry == other.0.entry
    }
}

impl Eq for Proposal {}

impl fmt::Debug for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Proposal").field(&self.0.entry).finish()
    }
}

/// The entry's JSON, copied from the bytes kept (serde_json writes a raw value verbatim).
impl Serialize for Proposal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.json.serialize(serializer)
    }
}

/// The entry's JSON, kept as it came, then decoded. Only `serde_json` reads a raw value: the
/// log file and the RPCs are JSON.
impl<'de> Deserialize<'de> for Proposal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Proposal, D::Error> {
        let json = Box::<RawValue>::deserialize(deserializer)?;
        let entry = crate::quick::decode(json.get()).map_err(serde::de::Error::custom)?;
        Ok(Proposal(Arc::new(Encoded { entry, json })))
    }
}

/// openraft logs its entries' app data with `Display`: the kind and the time, never the
/// command's content (it carries token hashes).
impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.entry {
            Entry::Command { now, command, .. } => write!(f, "{} at {now}", command.name()),
            Entry::Recovered { now } => write!(f, "recovered at {now}"),
            Entry::LeaderChanged { now, .. } => write!(f, "leader changed at {now}"),
            Entry::Batch { now, commands, .. } => {
                write!(f, "{} commands at {now}", commands.len())
            }
        }
    }
}

openraft::declare_raft_types!(
    /// Klock's Raft types: [`Proposal`] in, the applier's [`Replies`] out.
    pub KlockRaft:
        D = Proposal,
        R = Replies,
        Node = openraft::NodeInfo,
);

/// The answer to a proposal: the applier's [`Reply`], one per command of the entry (one for
/// every entry but an [`Entry::Batch`], which has one per item).
pub type Replies = Vec<Reply>;

/// A Raft log entry of Klock (log id and payload).
pub type RaftEntry = openraft::alias::EntryOf<KlockRaft>;
/// A Raft log id of Klock (leader term and node, index).
pub type LogId = openraft::alias::LogIdOf<KlockRaft>;
/// A vote of Klock's Raft.
pub type Vote = openraft::alias::VoteOf<KlockRaft>;

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::{AcquireOptions, Command, SessionId};
    use openraft::EntryPayload;

    fn acquire() -> Entry {
        Entry::Command {
            now: 42,
            command: Command::Acquire {
                session: SessionId(7),
                intents: vec![String::from("MUTATES FILE:/a \"quoted\" \u{e9}")],
                options: AcquireOptions {
                    ttl_ms: Some(30_000),
                    wait: false,
                    wait_timeout_ms: None,
                },
            },
            key: Some(String::from("k\n1")),
            token: Some(String::from("ab12")),
            caller: None,
            resume: None,
            fingerprint: None,
        }
    }

    fn raft_entry(entry: Entry) -> RaftEntry {
        RaftEntry {
            log_id: LogId::new(
                openraft::impls::leader_id_adv::LeaderId {
                    term: 3,
                    node_id: 1,
                },
                9,
            ),
            payload: EntryPayload::Normal(Proposal::new(entry).unwrap()),
        }
    }

    /// The kept encoding is the entry's own: the log file's records and the RPCs' bodies are
    /// byte for byte what they were when each was encoded from the entry.
    #[test]
    fn a_proposal_encodes_as_its_entry_does() {
        for entry in [
            acquire(),
            Entry::Recovered { now: 5 },
            Entry::LeaderChanged {
                now: 6,
                log: String::from("x"),
            },
        ] {
            let proposal = Proposal::new(entry.clone()).unwrap();
            assert_eq!(
                serde_json::to_vec(&proposal).unwrap(),
                serde_json::to_vec(&entry).unwrap()
            );
            // Inside a Raft entry as openraft's derive lays it out.
            let wrapped = serde_json::to_value(raft_entry(entry.clone())).unwrap();
            assert_eq!(
                wrapped["payload"]["Normal"],
                serde_json::to_value(&entry).unwrap()
            );
        }
    }

    /// Decoded, a proposal is its entry again, keeps the text it came in (a follower writes
    /// it to its log as it came), and a clone shares it.
    #[test]
    fn a_decoded_proposal_keeps_its_text() {
        let sent = serde_json::to_vec(&raft_entry(acquire())).unwrap();
        let got: RaftEntry = serde_json::from_slice(&sent).unwrap();
        let EntryPayload::Normal(proposal) = &got.payload else {
            panic!("{got:?}");
        };
        assert_eq!(proposal.entry(), &acquire());
        assert_eq!(
            proposal.json().as_bytes(),
            serde_json::to_vec(&acquire()).unwrap()
        );
        assert_eq!(serde_json::to_vec(&got).unwrap(), sent);
        let clone = proposal.clone();
        assert!(std::ptr::eq(clone.json(), proposal.json()));
    }

    /// A short, garbled or foreign body is an error naming the problem, never a panic.
    #[test]
    fn a_bad_proposal_is_an_error() {
        let good = serde_json::to_string(&raft_entry(acquire())).unwrap();
        let mut bad: Vec<String> = (0..good.len())
            .step_by(7)
            .map(|n| good[..n].to_owned())
            .collect();
        bad.push(good.replace("\"op\":\"acquire\"", "\"op\":\"nope\""));
        bad.push(good.replace("\"now\":42", "\"now\":-1"));
        bad.push(good.replace("\"entry\":\"command\"", "\"entry\":\"command\",\"extra\":1"));
        bad.push(good.replace("{\"entry\"", "[{\"entry\""));
        for body in bad {
            let e =
                serde_json::from_str::<RaftEntry>(&body).expect_err(&format!("decoded {body:?}"));
            assert!(!e.to_string().is_empty());
        }
    }
}
