//! An entry decoded without serde's buffer: what a follower does with every entry it is sent.
//!
//! Contract: [`decode`] gives exactly what `serde_json::from_str::<Entry>` gives (the same
//! entry, or an error), most of the time without its cost. `Entry` and the `Command` inside it
//! (one, or one per item of a batch) are internally tagged enums, which serde decodes by first
//! copying the whole value into a generic buffer (every key and string allocated once more) to
//! find its tag: a batch entry of a thousand commands is decoded twice over. Here each is a
//! plain struct of every variant's fields, decoded straight from the text; a value whose fields
//! are exactly its variant's becomes that variant, and anything else (an error, a field of
//! another variant, a null where the derived decoding would refuse one) makes the whole entry
//! decode the derived way, which decides. The fields keep the derived types, so every value is
//! read by the same code either way.

use klock_core::{AcquireOptions, Command, LeaseId, SessionId, StateDigest, TicketId};
use klock_server::machine::{Caller, Entry, Item};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The entry in `json`, as `serde_json::from_str::<Entry>` decodes it (the same entries, the
/// same errors), most of the time without its cost: `Entry` is an internally tagged enum, which
/// serde decodes by first copying the whole entry into a generic buffer (every key and string
/// allocated once more) to find its tag. [`Fields`] is a plain struct of every variant's
/// fields, decoded straight from the text; an entry whose fields are exactly its variant's
/// becomes that variant, and anything else (an error, a field of another variant, a null
/// where the entry would refuse one) is decoded the derived way, which decides.
pub(crate) fn decode(json: &str) -> Result<Entry, serde_json::Error> {
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
    command: Option<QuickCommand>,
    #[serde(default, deserialize_with = "present")]
    key: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    token: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    caller: Option<Option<Caller>>,
    #[serde(default, deserialize_with = "present")]
    resume: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    fingerprint: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    log: Option<String>,
    #[serde(default, deserialize_with = "present")]
    commands: Option<Vec<QuickItem>>,
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
        if let Kind::Batch = entry {
            // A batch's fields: `now`, `commands` and an optional `caller`.
            let single = key.is_some() || token.is_some() || resume.is_some();
            if command.is_some() || single || fingerprint.is_some() || log.is_some() {
                return None;
            }
            let commands = commands?.into_iter().map(Item::from).collect();
            return Some(Entry::Batch {
                now,
                caller: caller.flatten(),
                commands,
            });
        }
        if commands.is_some() {
            return None;
        }
        let command_only = key.is_some() || token.is_some() || caller.is_some() || resume.is_some();
        match entry {
            Kind::Command if log.is_none() => Some(Entry::Command {
                now,
                command: command?.0,
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

/// A command decoded from [`CommandFields`]: a field that is not exactly its variant's fails
/// the decoding (and so the quick decoding of the entry it is in, see [`decode`]).
struct QuickCommand(Command);

impl<'de> Deserialize<'de> for QuickCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<QuickCommand, D::Error> {
        CommandFields::deserialize(deserializer)?
            .command()
            .map(QuickCommand)
            .ok_or_else(|| D::Error::custom("not exactly a command's fields"))
    }
}

/// A command's `op`, as the derived decoding names the variants.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Open,
    Close,
    Suspend,
    Digest,
    Resume,
    Acquire,
    Heartbeat,
    Release,
    ReleaseAll,
    Reconcile,
    CancelWait,
    Advance,
    ResourceState,
    NextDeadline,
}

/// Every field a command may have, as [`Fields`] is for an entry: `None` where absent; the one
/// optional field (a heartbeat's `leases`) present as `null` is `Some(None)`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandFields {
    op: Op,
    #[serde(default, deserialize_with = "present")]
    agent_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    namespace: Option<String>,
    #[serde(default, deserialize_with = "present")]
    session: Option<SessionId>,
    #[serde(default, deserialize_with = "present")]
    digest: Option<Box<StateDigest>>,
    #[serde(default, deserialize_with = "present")]
    intents: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    options: Option<AcquireOptions>,
    #[serde(default, deserialize_with = "present")]
    leases: Option<Option<Vec<LeaseId>>>,
    #[serde(default, deserialize_with = "present")]
    lease: Option<LeaseId>,
    #[serde(default, deserialize_with = "present")]
    ticket: Option<TicketId>,
    #[serde(default, deserialize_with = "present")]
    resource: Option<String>,
}

impl CommandFields {
    /// The command, if these are exactly the fields of the variant `op` names (a heartbeat's
    /// `leases` may be absent).
    fn command(self) -> Option<Command> {
        let given = [
            self.agent_id.is_some(),
            self.namespace.is_some(),
            self.session.is_some(),
            self.digest.is_some(),
            self.intents.is_some(),
            self.options.is_some(),
            self.leases.is_some(),
            self.lease.is_some(),
            self.ticket.is_some(),
            self.resource.is_some(),
        ]
        .into_iter()
        .filter(|&g| g)
        .count();
        let CommandFields {
            op,
            agent_id,
            namespace,
            session,
            digest,
            intents,
            options,
            leases,
            lease,
            ticket,
            resource,
        } = self;
        // Each arm takes its variant's fields; `given` then says whether there were others.
        let (command, fields) = match op {
            Op::Open => (
                Command::Open {
                    agent_id: agent_id?,
                    namespace: namespace?,
                },
                2,
            ),
            Op::Close => (Command::Close { session: session? }, 1),
            Op::Suspend => (Command::Suspend { session: session? }, 1),
            Op::Digest => (Command::Digest { session: session? }, 1),
            Op::Resume => (Command::Resume { digest: digest? }, 1),
            Op::Acquire => (
                Command::Acquire {
                    session: session?,
                    intents: intents?,
                    options: options?,
                },
                3,
            ),
            Op::Heartbeat => {
                let fields = 1 + usize::from(leases.is_some());
                let leases = leases.flatten();
                (
                    Command::Heartbeat {
                        session: session?,
                        leases,
                    },
                    fields,
                )
            }
            Op::Release => (
                Command::Release {
                    session: session?,
                    lease: lease?,
                },
                2,
            ),
            Op::ReleaseAll => (Command::ReleaseAll { session: session? }, 1),
            Op::Reconcile => (
                Command::Reconcile {
                    session: session?,
                    leases: leases??,
                },
                2,
            ),
            Op::CancelWait => (
                Command::CancelWait {
                    session: session?,
                    ticket: ticket?,
                },
                2,
            ),
            Op::Advance => (Command::Advance, 0),
            Op::ResourceState => (
                Command::ResourceState {
                    resource: resource?,
                    namespace: namespace?,
                },
                2,
            ),
            Op::NextDeadline => (Command::NextDeadline, 0),
        };
        (given == fields).then_some(command)
    }
}

/// An [`Item`] of a batch with its command decoded the quick way: the same fields, the same
/// defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuickItem {
    command: QuickCommand,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    caller: Option<Caller>,
    #[serde(default)]
    resume: Option<String>,
    #[serde(default)]
    fingerprint: Option<String>,
}

impl From<QuickItem> for Item {
    fn from(quick: QuickItem) -> Item {
        Item {
            command: quick.command.0,
            key: quick.key,
            token: quick.token,
            caller: quick.caller,
            resume: quick.resume,
            fingerprint: quick.fingerprint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick decoding decides as the derived one: the same entry or an error, over the
    /// entries a leader writes and over near misses; and the entries a leader writes take the
    /// quick way.
    #[test]
    fn the_quick_decoding_decides_as_the_derived_one() {
        let written = [
            r#"{"entry":"command","now":42,"command":{"op":"acquire","session":7,"intents":["MUTATES FILE:/a \"quoted\" \u00e9"],"options":{"ttl_ms":30000,"wait":false,"wait_timeout_ms":null}},"key":"k\n1","token":"ab12"}"#.to_owned(),
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

#[cfg(test)]
mod command_tests {
    use super::*;
    use klock_core::{Config, Kernel};

    /// One command of every kind, as a leader writes it.
    fn every_command() -> Vec<Command> {
        let mut kernel = Kernel::new(Config::default()).unwrap();
        let session = kernel.open_session("a", "n", 1).unwrap().session_id;
        let digest = Box::new(kernel.digest(session, 2).unwrap());
        vec![
            Command::Open {
                agent_id: String::from("a \"b\""),
                namespace: String::from("n"),
            },
            Command::Close {
                session: SessionId(1),
            },
            Command::Suspend {
                session: SessionId(2),
            },
            Command::Digest {
                session: SessionId(3),
            },
            Command::Resume { digest },
            Command::Acquire {
                session: SessionId(4),
                intents: vec![String::from("MUTATES FILE:/x"), String::from("READS DB:/t")],
                options: AcquireOptions {
                    ttl_ms: Some(5),
                    wait: true,
                    wait_timeout_ms: None,
                },
            },
            Command::Heartbeat {
                session: SessionId(5),
                leases: None,
            },
            Command::Heartbeat {
                session: SessionId(5),
                leases: Some(vec![LeaseId(1), LeaseId(2)]),
            },
            Command::Release {
                session: SessionId(6),
                lease: LeaseId(3),
            },
            Command::ReleaseAll {
                session: SessionId(7),
            },
            Command::Reconcile {
                session: SessionId(8),
                leases: vec![LeaseId(4)],
            },
            Command::CancelWait {
                session: SessionId(9),
                ticket: TicketId(10),
            },
            Command::Advance,
            Command::ResourceState {
                resource: String::from("FILE:/x"),
                namespace: String::from("n"),
            },
            Command::NextDeadline,
        ]
    }

    fn quick(json: &str) -> Option<Entry> {
        serde_json::from_str::<Fields>(json)
            .ok()
            .and_then(Fields::entry)
    }

    /// Every kind of command, alone and in a batch with a token and a key, takes the quick way
    /// and comes out as the derived decoding gives it.
    #[test]
    fn every_command_is_decoded_the_quick_way() {
        for command in every_command() {
            let alone = Entry::Command {
                now: 1,
                command: command.clone(),
                key: None,
                token: Some(String::from("t")),
                caller: None,
                resume: None,
                fingerprint: None,
            };
            let batch = Entry::Batch {
                now: 2,
                caller: None,
                commands: vec![
                    Item {
                        command: command.clone(),
                        key: Some(String::from("k")),
                        token: Some(String::from("t")),
                        caller: Some(Caller {
                            namespace: String::from("n"),
                            ..Caller::default()
                        }),
                        resume: None,
                        fingerprint: Some(String::from("f")),
                    },
                    Item {
                        command: Command::Advance,
                        key: None,
                        token: None,
                        caller: None,
                        resume: None,
                        fingerprint: None,
                    },
                ],
            };
            // Three callers, two the same: the batch names that one once.
            let caller = |namespace: &str| {
                Some(Caller {
                    namespace: namespace.to_owned(),
                    token: Some(String::from("ab12")),
                    ..Caller::default()
                })
            };
            let shared = Entry::batch(
                3,
                [caller("n"), caller("m"), caller("n")]
                    .into_iter()
                    .map(|caller| Item {
                        command: command.clone(),
                        key: None,
                        token: None,
                        caller,
                        resume: None,
                        fingerprint: None,
                    })
                    .collect(),
            );
            assert!(matches!(
                &shared,
                Entry::Batch {
                    caller: Some(_),
                    ..
                }
            ));
            for entry in [alone, batch, shared] {
                let json = serde_json::to_string(&entry).unwrap();
                assert_eq!(quick(&json).as_ref(), Some(&entry), "{json}");
                assert_eq!(decode(&json).unwrap(), entry, "{json}");
            }
        }
    }

    /// Commands that are not exactly a variant's fields are decoded (or refused) as the derived
    /// decoding does, in an entry and in a batch's item.
    #[test]
    fn a_near_miss_command_decides_as_the_derived_one() {
        let near = [
            // Accepted by both.
            r#"{"op":"heartbeat","session":1,"leases":null}"#,
            r#"{"session":1,"op":"release","lease":2}"#,
            // Refused by both, or accepted by the derived decoding only.
            r#"{"op":"heartbeat"}"#,
            r#"{"op":"heartbeat","session":null}"#,
            r#"{"op":"reconcile","session":1}"#,
            r#"{"op":"reconcile","session":1,"leases":null}"#,
            r#"{"op":"release","session":1}"#,
            r#"{"op":"release","session":1,"lease":2,"ticket":3}"#,
            r#"{"op":"close","session":1,"lease":2}"#,
            r#"{"op":"open","agent_id":"a"}"#,
            r#"{"op":"open","agent_id":"a","namespace":"n","session":1}"#,
            r#"{"op":"acquire","session":1,"intents":["MUTATES FILE:/x"]}"#,
            r#"{"op":"acquire","session":1,"intents":["MUTATES FILE:/x"],"options":{}}"#,
            r#"{"op":"acquire","session":1,"intents":"MUTATES FILE:/x","options":{"wait":true}}"#,
            r#"{"op":"advance","session":1}"#,
            r#"{"op":"next_deadline","x":1}"#,
            r#"{"op":"resource_state","resource":"FILE:/x"}"#,
            r#"{"op":"cancel_wait","session":1,"ticket":-1}"#,
            r#"{"op":"nope"}"#,
            r#"{"op":"close","session":1,"session":2}"#,
            r#"{"op":"close","op":"close","session":1}"#,
            r#"{"session":1}"#,
            r#"{"op":"resume","digest":{}}"#,
            r#"{"op":null}"#,
            r#"[]"#,
            r#"null"#,
        ];
        for command in near {
            for json in [
                format!(r#"{{"entry":"command","now":1,"command":{command}}}"#),
                format!(
                    r#"{{"entry":"batch","now":1,"commands":[{{"command":{command},"token":"t"}}]}}"#
                ),
            ] {
                match (decode(&json), serde_json::from_str::<Entry>(&json)) {
                    (Ok(quick), Ok(derived)) => assert_eq!(quick, derived, "{json}"),
                    (Err(_), Err(_)) => {}
                    (quick, derived) => panic!("{json}: {quick:?} but derived {derived:?}"),
                }
            }
        }
    }
}
