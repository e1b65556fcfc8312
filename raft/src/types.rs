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
        let entry = decode(json.get()).map_err(serde::de::Error::custom)?;
        Ok(Proposal(Arc::new(Encoded { entry, json })))
    }
}

/// The entry in `json`, as `serde_json::from_str::<Entry>` decodes it (the same entries, the
/// same errors), most of the time without its cost: `Entry` is an internally tagged enum, which
/// serde decodes by first copying the whole entry into a generic buffer (every key and string
/// allocated once more) to find its tag. [`Fields`] is a plain struct of every variant's
/// fields, decoded straight from the text; an entry whose fields are exactly its variant's
/// becomes that variant, and anything else (an error, a field of another variant, a null
/// where the entry would refuse one) is decoded the derived way, which decides.
fn decode(json: &str) -> Result<Entry, serde_json::Error> {
    match serde_json::from_str::<Fields>(json)
        .ok()
        .and_then(Fields::entry)
    {
        Some(entry) => Ok(entry),
        None => serde_json::from_str(json),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Command,
    Recovered,
    LeaderChanged,
    Batch,
}

/// Every field an entry may have: `None` where absent; an optional field present as `null`
/// is `Some(None)`, a required one may not be null (see [`decode`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    entry: Kind,
    #[serde(default, deserialize_with = "present")]
    now: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    command: Option<klock_core::Command>,
    #[serde(default, deserialize_with = "present")]
    key: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    token: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    caller: Option<Option<klock_server::machine::Caller>>,
    #[serde(default, deserialize_with = "present")]
    resume: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    fingerprint: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    log: Option<String>,
    #[serde(default, deserialize_with = "present")]
    commands: Option<Vec<klock_server::machine::Item>>,
}

/// A field that is there (`default` makes an absent one `None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl Fields {
    /// The entry, if these are exactly the fields of the variant the tag names.
    fn entry(self) -> Option<Entry> {
        let Fields {
            entry,
            now,
            command,
            key,
            token,
            caller,
            resume,
            fingerprint,
            log,
            commands,
        } = self;
        let now = now?;
        let command_only = key.is_some() || token.is_some() || caller.is_some() || resume.is_some();
        if let Kind::Batch = entry {
            let alone = command.is_none() && !command_only && fingerprint.is_none();
            return (alone && log.is_none()).then_some(Entry::Batch {
                now,
                commands: commands?,
            });
        }
        if commands.is_some() {
            return None;
        }
        match entry {
            Kind::Command if log.is_none() => Some(Entry::Command {
                now,
                command: command?,
                key: key.flatten(),
                token: token.flatten(),
                caller: caller.flatten(),
                resume: resume.flatten(),
                fingerprint: fingerprint.flatten(),
            }),
            Kind::Recovered if command.is_none() && !command_only && fingerprint.is_none() => {
                log.is_none().then_some(Entry::Recovered { now })
            }
            Kind::LeaderChanged if command.is_none() && !command_only && fingerprint.is_none() => {
                Some(Entry::LeaderChanged { now, log: log? })
            }
            _ => None,
        }
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
            Entry::Batch { now, commands } => write!(f, "{} commands at {now}", commands.len()),
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

    /// The quick decoding decides as the derived one: the same entry or an error, over the
    /// entries a leader writes and over near misses; and the entries a leader writes take the
    /// quick way.
    #[test]
    fn the_quick_decoding_decides_as_the_derived_one() {
        let written = [
            serde_json::to_string(&acquire()).unwrap(),
            r#"{"entry":"command","now":1,"command":{"op":"advance"}}"#.to_owned(),
            r#"{"entry":"command","now":2,"command":{"op":"open","agent_id":"a","namespace":"n"},"caller":{"namespace":"n","owner":"o"},"resume":"ff"}"#.to_owned(),
            r#"{"entry":"command","now":3,"command":{"op":"heartbeat","session":4},"token":"t","fingerprint":"f"}"#.to_owned(),
            r#"{"entry":"recovered","now":5}"#.to_owned(),
            r#"{"entry":"leader_changed","now":6,"log":"abc"}"#.to_owned(),
            r#"{"entry":"batch","now":9,"commands":[{"command":{"op":"advance"}},{"command":{"op":"heartbeat","session":4},"token":"t","key":"k"}]}"#.to_owned(),
            r#"{"entry":"batch","now":9,"commands":[]}"#.to_owned(),
            // The tag need not come first.
            r#"{"now":7,"entry":"recovered"}"#.to_owned(),
            r#"{"command":{"op":"advance"},"now":8,"entry":"command"}"#.to_owned(),
        ];
        for json in &written {
            let derived: Entry = serde_json::from_str(json).unwrap();
            assert_eq!(decode(json).unwrap(), derived, "{json}");
            let quick = serde_json::from_str::<Fields>(json)
                .ok()
                .and_then(Fields::entry);
            assert_eq!(
                quick.as_ref(),
                Some(&derived),
                "{json}: not decoded the quick way"
            );
        }
        let near = [
            // Accepted by both: an optional field given as null.
            r#"{"entry":"command","now":1,"command":{"op":"advance"},"key":null,"caller":null}"#,
            // Refused by both.
            r#"{"entry":"recovered","now":1,"key":null}"#,
            r#"{"entry":"recovered","now":1,"fingerprint":"f"}"#,
            r#"{"entry":"recovered","now":1,"log":"x"}"#,
            r#"{"entry":"recovered","now":1,"command":{"op":"advance"}}"#,
            r#"{"entry":"leader_changed","now":1}"#,
            r#"{"entry":"leader_changed","now":1,"log":null}"#,
            r#"{"entry":"leader_changed","now":1,"log":"x","token":"t"}"#,
            r#"{"entry":"command","now":1}"#,
            r#"{"entry":"command","now":1,"command":null}"#,
            r#"{"entry":"command","now":null,"command":{"op":"advance"}}"#,
            r#"{"entry":"command","command":{"op":"advance"}}"#,
            r#"{"entry":"command","now":1,"command":{"op":"advance"},"log":"x"}"#,
            r#"{"entry":"command","now":1,"command":{"op":"advance"},"other":1}"#,
            r#"{"entry":"command","now":1,"command":{"op":"nope"}}"#,
            r#"{"entry":"command","now":1.5,"command":{"op":"advance"}}"#,
            r#"{"entry":"command","now":-1,"command":{"op":"advance"}}"#,
            r#"{"entry":"command","now":1,"now":2,"command":{"op":"advance"}}"#,
            r#"{"entry":"command","entry":"recovered","now":1,"command":{"op":"advance"}}"#,
            r#"{"entry":"reboot","now":1}"#,
            r#"{"entry":1,"now":1}"#,
            r#"{"now":1}"#,
            r#"{"entry":"command","now":1,"command":{"op":"advance"},"caller":{"namespace":"n","x":1}}"#,
            r#"{"entry":"batch","now":1}"#,
            r#"{"entry":"batch","now":1,"commands":null}"#,
            r#"{"entry":"batch","now":1,"commands":[],"key":"k"}"#,
            r#"{"entry":"batch","now":1,"commands":[],"command":{"op":"advance"}}"#,
            r#"{"entry":"batch","now":1,"commands":[{"command":{"op":"advance"},"now":1}]}"#,
            r#"{"entry":"command","now":1,"command":{"op":"advance"},"commands":[]}"#,
            r#"{"entry":"recovered","now":1,"commands":[]}"#,
            r#"["recovered",1]"#,
            r#"null"#,
            r#"{}"#,
        ];
        for json in near {
            let derived = serde_json::from_str::<Entry>(json);
            match (decode(json), derived) {
                (Ok(quick), Ok(derived)) => assert_eq!(quick, derived, "{json}"),
                (Err(_), Err(_)) => {}
                (quick, derived) => panic!("{json}: {quick:?} but derived {derived:?}"),
            }
        }
    }
}
