//! `klock elect NAME -- COMMAND`: run a command only while this process leads election NAME.
//!
//! Contract: an election is the resource `LEADER:/NAME`; leading is holding `MUTATES
//! LEADER:/NAME` through this run's session, and the term is that lease's fence, which grows
//! with every new leader (also across server restarts). The run is `klock exec` with that one
//! intent (same session, keeper, signals, exit statuses and `--digest`), with two differences:
//! it campaigns without a time limit unless `--wait` sets one, and the command also sees
//! `KLOCK_TERM` and `KLOCK_ELECTION`. When leadership is lost the command is stopped (SIGTERM,
//! SIGKILL after `--kill-after`) and the run exits 107; a supervisor that restarts it
//! campaigns again. When the command ends on its own, the run resigns (releases the lease) and
//! exits with the command's status. A NAME that makes no valid resource path is refused before
//! anything is sent, with the kernel's own parser's message.

use super::exec::{self, ExecArgs, Tool};
use std::time::Duration;

pub const HELP: &str = "\
usage: klock elect [connection flags] NAME [--ttl 15s] [--wait D] [--kill-after 10s]
                   [--digest FILE] [-v] -- COMMAND [ARGS...]

Campaigns for leadership of election NAME and runs COMMAND only while this process leads:
one leader at a time across every machine using the server. The leader holds the lease
MUTATES LEADER:/NAME, renewed in the background; campaigners wait in line for it.

  NAME             the election, a resource path under LEADER:/ (e.g. indexer, or
                   team/indexer). Names nest like paths: a leader of team
                   also blocks every team/... election, so give unrelated elections
                   names that are not each other's prefix
  --ttl D          the leadership lease's TTL (default 15s): how long a leader that stops
                   renewing (crashed, frozen, cut off) keeps others waiting
  --wait D         give up campaigning after this long (exit 75, naming the leader); by
                   default campaign until elected
  --kill-after D   after leadership is lost, SIGTERM COMMAND, then SIGKILL this much later
                   (default 10s)
  --digest FILE    as for klock exec: a restarted campaigner keeps its place (its priority)
  -v, --verbose    say on stderr when this process becomes leader, and its term
CONNECTION_FLAGS

COMMAND sees KLOCK_TERM (this leadership's term: the lease's fence; a store that remembers
the largest term it accepted refuses a deposed leader's late writes), KLOCK_ELECTION (NAME),
and what klock exec gives (KLOCK_SESSION, KLOCK_LEASES, KLOCK_FENCE).

Exit status: COMMAND's own, after resigning (128+N if killed by signal N); 107 leadership was
lost while COMMAND ran (it was stopped; run again to campaign again); 75 --wait ran out;
128+N interrupted by signal N while campaigning (the campaign is withdrawn); 69 the server
is unreachable or refused; 2 bad usage; 126/127 COMMAND could not be run.

Examples:
  klock elect indexer -- ./index-forever.sh
  while true; do klock elect --ttl 10s scheduler -- ./scheduler; sleep 1; done";

/// The help with the connection flags filled in.
pub fn help() -> String {
    HELP.replace("CONNECTION_FLAGS", super::args::CONNECTION_HELP)
}

/// The lease TTL of a leadership unless `--ttl` says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// Reads `[flags] NAME [flags] -- COMMAND`.
///
/// # Errors
/// No NAME, a NAME [`canonical`] refuses, or what [`exec::parse`] refuses (an unknown flag,
/// `--intent`, no command).
pub fn parse(args: &[String]) -> Result<ExecArgs, String> {
    exec::parse_as(args, Tool::Elect)
}

/// The election's canonical name (`a//b/` is `a/b`: what `KLOCK_ELECTION` shows is what was
/// campaigned for).
///
/// # Errors
/// `LEADER:/NAME` is no valid resource (the kernel's own parser's message), or it is the
/// root, which overlaps every election.
pub(crate) fn canonical(name: &str) -> Result<String, String> {
    let resource = klock_core::ResourceName::parse(&format!("LEADER:/{name}")).map_err(|e| {
        format!(
            "election {name:?} is not a valid resource path: {}",
            e.message
        )
    })?;
    if resource.is_root() {
        return Err(format!(
            "election {name:?} names no election (LEADER:/ is every election's parent)"
        ));
    }
    Ok(resource.as_str()["LEADER:/".len()..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_name_comes_first_and_must_make_a_resource() {
        assert!(parse(&args(&["--ttl", "5s", "--", "true"]))
            .unwrap_err()
            .contains("NAME"));
        assert!(parse(&args(&["a", "b", "--", "true"]))
            .unwrap_err()
            .contains("\"b\""));
        assert!(parse(&args(&[])).unwrap_err().contains("NAME"));
        let bad = parse(&args(&["a/../b", "--", "true"])).unwrap_err();
        assert!(bad.contains("a/../b") && bad.contains(".."), "{bad}");
        for root in ["/", ".", ""] {
            let bad = parse(&args(&[root, "--", "true"])).unwrap_err();
            assert!(bad.contains("names no election"), "{root:?}: {bad}");
        }
        assert!(parse(&args(&[
            "indexer",
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "true"
        ]))
        .unwrap_err()
        .contains("--intent"));
        assert!(parse(&args(&["indexer"])).unwrap_err().contains("--"));
    }

    #[test]
    fn an_election_campaigns_without_limit_by_default() {
        let parsed = parse(&args(&["team//indexer/", "--", "run"])).unwrap();
        assert_eq!(parsed.intents, ["MUTATES LEADER:/team/indexer"]);
        assert_eq!(parsed.election.as_deref(), Some("team/indexer"));
        assert_eq!((parsed.wait, parsed.ttl), (None, DEFAULT_TTL));
        let parsed = parse(&args(&["--wait", "2s", "indexer", "--ttl=3s", "--", "run"])).unwrap();
        assert_eq!(parsed.wait, Some(Duration::from_secs(2)));
        assert_eq!(parsed.ttl, Duration::from_secs(3));
    }
}
