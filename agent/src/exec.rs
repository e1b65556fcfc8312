//! `klock exec`: run a command while holding leases, the way `flock(1)` runs one while
//! holding a file lock, but across machines, with deadlock freedom and fencing.
//!
//! Contract: one session (opened, or resumed from `--digest FILE`), the whole manifest asked
//! for in one request, asked again as the core decides ([`klock_client::acquire`]: a DIE is
//! slept off (`retry_after_ms`) and retried, since nothing is held meanwhile); when `--wait`
//! runs out, or the kernel's backoff would end after it, the run gives up with exit 75 naming
//! the holders. The command runs
//! with `KLOCK_SESSION`, `KLOCK_LEASES` (the leases as JSON) and `KLOCK_FENCE` (the largest
//! fence of the grant) in its environment, in its own process group; SIGTERM, SIGINT, SIGHUP,
//! SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to that group; the [`Keeper`] renews the leases. When a lease is lost (the
//! server says so, or no renewal arrived before the local deadline, measured from the send time
//! of the request that granted or renewed it), the command gets SIGTERM, SIGKILL after
//! `--kill-after`, the StateDigest is written to `--digest FILE` (the session is suspended
//! rather than closed, so a rerun keeps its priority; with the server down, the digest of the
//! session as opened, which a restarted server accepts) and the exit status is 107. Otherwise
//! the leases are released, the session closed, the digest file removed (the unit of work is
//! done) and the exit status is the command's own (128 + N for a signal N). SIGINT, SIGTERM
//! or SIGHUP while waiting withdraws the request (its queued ticket is cancelled, and a grant
//! that raced the signal is released, so a session kept for `--digest` holds and waits for
//! nothing) and exits 128 + N.

use super::args::{duration, show, Connection, Flags, CONNECTION_HELP};
use super::child;
use super::names::Root;
use klock_client::acquire::{Acquire, Stopped};
use klock_client::describe::{describe_blockers, describe_leases};
use klock_client::keeper::Keeper;
use klock_client::routes::{Saved, Session};
use klock_client::transport::{Failure, Transport};
use klock_client::Error;
use klock_core::client::Acquisition;
use klock_core::{Blocker, DigestIdentity, DigestRecovery, Lease, StateDigest, DIGEST_VERSION};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Child;

/// The server could not be reached, or refused the session.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// `--wait` ran out before the leases were granted (`flock -E`'s EX_TEMPFAIL).
pub const EXIT_CONFLICT: u8 = 75;
/// A lease was lost while the command ran; the command was stopped (KLIS-8).
pub const EXIT_LOST: u8 = 107;
/// Bad flags or intents.
pub const EXIT_USAGE: u8 = 2;

pub const HELP: &str = "\
usage: klock exec [connection flags] --intent \"PREDICATE TYPE:/path\"... [--root DIR]
                  [--file \"PREDICATE PATH\"]... [--ttl 60s] [--wait 30s] [--kill-after 10s]
                  [--digest FILE] [-v] -- COMMAND [ARGS...]

Runs COMMAND while holding every intent as a lease, renewed in the background. Like
flock(1), but shared through a Klock server, deadlock-free, with a fencing token.

  --intent I       what the command will do, e.g. \"MUTATES FILE:/src/app.py\"; repeat it.
                   Predicates: PROVIDES CONSUMES MUTATES DELETES DEPENDS_ON RENAMES.
                   All intents are granted together or not at all.
  --root DIR       the directory the agents share (the repository's top; default
                   $KLOCK_ROOT): files are named FILE:/ + their path under it. An --intent
                   naming FILE:/ + an absolute path inside DIR is refused (the name is
                   the part below DIR); one whose path exists on this machine but not under
                   DIR gets a warning. COMMAND sees KLOCK_ROOT (DIR, links resolved).
  --file \"P PATH\"  an intent on the file at PATH (relative to the current directory, or
                   absolute; links resolved; it must be inside --root), e.g.
                   --file \"MUTATES src/app.py\" is --intent \"MUTATES FILE:/src/app.py\"
  --ttl D          lease TTL (default 60s); renewed every TTL/3 while COMMAND runs
  --wait D         give up after waiting this long for other holders (default 30s; 0: don't
                   wait): exit 75, naming who holds what
  --kill-after D   after a lost lease, SIGTERM COMMAND, then SIGKILL this much later
                   (default 10s)
  --digest FILE    keep the session's StateDigest here when a run gives up or loses its
                   lease, and resume from it on the next run: a retried job keeps its age, so
                   it is not starved by younger ones. Removed after a successful run.
  -v, --verbose    say on stderr which session holds which leases
CONNECTION_FLAGS

COMMAND runs in its own process group (as with timeout(1)): forwarded signals and the stop
after a lost lease reach every process it started; it cannot read from the terminal.
COMMAND sees KLOCK_SESSION (the session id), KLOCK_LEASES (the leases as JSON: lease_id,
resource, predicate, fence, expires_at, ttl_ms) and KLOCK_FENCE (the largest fence of the
grant: a store that remembers the largest fence it saw can refuse a stale writer), and
KLOCK_SERVER (or KLOCK_SOCKET), KLOCK_NAMESPACE and KLOCK_TOKEN (if any): the Python and
Node clients read them, so a program COMMAND starts reaches the same server.

Exit status: COMMAND's own (128+N if killed by signal N); 75 --wait ran out; 107 a lease was
lost while COMMAND ran (it was stopped); 128+N interrupted by signal N (INT, TERM, HUP) while
waiting; 69 the server is unreachable or refused; 2 bad usage; 126/127 COMMAND could not be run.

Examples:
  klock exec --root . --file \"MUTATES Cargo.lock\" -- cargo update
  klock exec --ns ci --wait 5m --intent \"MUTATES DB:/staging\" -- ./migrate.sh
  klock exec --digest .klock/deploy.json --intent \"MUTATES SERVICE:/api\" -- ./deploy.sh";

/// The help with the connection flags filled in.
pub fn help() -> String {
    HELP.replace("CONNECTION_FLAGS", CONNECTION_HELP)
}

/// What `klock exec` (or `klock elect`, the same run for one election's lease) was asked to do.
#[derive(Debug)]
pub struct ExecArgs {
    connection: Connection,
    pub(crate) intents: Vec<String>,
    /// `klock elect`'s election: the run campaigns for `LEADER:/NAME`, and the command also
    /// sees `KLOCK_TERM` and `KLOCK_ELECTION`. `None` for `klock exec`.
    pub(crate) election: Option<String>,
    /// `--root DIR` (else `$KLOCK_ROOT`), as given.
    root: Option<PathBuf>,
    /// `--file "PREDICATE PATH"`, as given: made into intents once the root is known.
    files: Vec<String>,
    pub(crate) ttl: Duration,
    /// How long to wait for the grant; `None`: as long as it takes (`klock elect`'s default).
    pub(crate) wait: Option<Duration>,
    kill_after: Duration,
    digest: Option<PathBuf>,
    verbose: bool,
    command: Vec<String>,
}

/// Reads the flags up to `--` and the command after it.
///
/// # Errors
/// A flag this tool does not know, a missing value, no intent or no command.
pub fn parse(args: &[String]) -> Result<ExecArgs, String> {
    parse_as(args, Tool::Exec)
}

/// Which tool's command line [`parse_as`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    Exec,
    /// `klock elect`: one positional NAME (checked by [`super::elect::canonical`]) instead of
    /// `--intent`, a 15 s TTL and no time limit on the campaign unless the flags say otherwise.
    Elect,
}

/// [`parse`] for either tool.
pub(crate) fn parse_as(args: &[String], tool: Tool) -> Result<ExecArgs, String> {
    let (ttl, wait) = match tool {
        Tool::Exec => (Duration::from_secs(60), Some(Duration::from_secs(30))),
        Tool::Elect => (super::elect::DEFAULT_TTL, None),
    };
    let mut out = ExecArgs {
        connection: Connection::default(),
        intents: Vec::new(),
        election: None,
        root: None,
        files: Vec::new(),
        ttl,
        wait,
        kill_after: Duration::from_secs(10),
        digest: None,
        verbose: false,
        command: Vec::new(),
    };
    let mut flags = Flags::new(args);
    while let Some((flag, inline)) = flags.next_flag() {
        if out.connection.take(&mut flags, flag, inline)? {
            continue;
        }
        match flag {
            "--" => {
                out.command = flags.rest().to_vec();
                break;
            }
            "--intent" if tool == Tool::Exec => {
                out.intents.push(flags.value(flag, inline)?.to_owned());
            }
            "--root" if tool == Tool::Exec => {
                out.root = Some(PathBuf::from(flags.value(flag, inline)?));
            }
            "--file" if tool == Tool::Exec => out.files.push(flags.value(flag, inline)?.to_owned()),
            "--ttl" => out.ttl = duration(flag, flags.value(flag, inline)?)?,
            "--wait" => out.wait = Some(duration(flag, flags.value(flag, inline)?)?),
            "--kill-after" => out.kill_after = duration(flag, flags.value(flag, inline)?)?,
            "--digest" => out.digest = Some(PathBuf::from(flags.value(flag, inline)?)),
            "-v" | "--verbose" => out.verbose = true,
            name if tool == Tool::Elect && out.election.is_none() && !name.starts_with('-') => {
                let name = super::elect::canonical(name)?;
                out.intents.push(format!("MUTATES LEADER:/{name}"));
                out.election = Some(name);
            }
            other if tool == Tool::Elect => {
                return Err(format!(
                    "unknown argument {other:?} (the command goes after --: klock elect NAME ... -- COMMAND)"
                ))
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (the command goes after --: klock exec --intent ... -- COMMAND)"
                ))
            }
        }
    }
    if tool == Tool::Elect && out.election.is_none() {
        return Err(String::from(
            "name the election: klock elect [flags] NAME -- COMMAND",
        ));
    }
    if out.intents.is_empty() && out.files.is_empty() {
        return Err(String::from(
            "name at least one --intent, like --intent \"MUTATES FILE:/path\" (or --file \"MUTATES PATH\")",
        ));
    }
    if out.command.is_empty() {
        return Err(format!(
            "name the command after --, like: {} ... -- make deploy",
            out.tool()
        ));
    }
    if out.ttl < Duration::from_millis(3) {
        return Err(String::from(
            "--ttl must be at least 3ms (it is renewed every third)",
        ));
    }
    Ok(out)
}

impl ExecArgs {
    /// The command's name in messages: `klock exec` or `klock elect`.
    fn tool(&self) -> &'static str {
        if self.election.is_some() {
            "klock elect"
        } else {
            "klock exec"
        }
    }
}

/// Runs `klock exec` (or `klock elect`) and returns its exit status.
pub async fn run(args: ExecArgs) -> u8 {
    match run_inner(&args).await {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("{}: {message}", args.tool());
            code
        }
    }
}

type Stop = (u8, String);

fn refused(failure: Failure) -> Stop {
    match &failure {
        Failure::Refused { status: 400, .. } => (EXIT_USAGE, failure.to_string()),
        _ => (EXIT_UNAVAILABLE, failure.to_string()),
    }
}

/// The intents to ask for: the `--intent`s, checked against the root, then the `--file`s
/// named from it; and what the command's environment says about the root.
fn intents(args: &ExecArgs) -> Result<(Vec<String>, Option<Root>), String> {
    let root = match &args.root {
        Some(dir) => Some(Root::new(dir)?),
        None => match std::env::var_os("KLOCK_ROOT").filter(|v| !v.is_empty()) {
            Some(dir) => Some(Root::new(Path::new(&dir)).map_err(|e| format!("$KLOCK_ROOT: {e}"))?),
            None => None,
        },
    };
    let mut out = args.intents.clone();
    if let Some(root) = &root {
        for intent in &args.intents {
            if let Some(warning) = root.check_intent(intent)? {
                eprintln!("klock exec: warning: {warning}");
            }
        }
    }
    for file in &args.files {
        let Some((predicate, path)) = file.split_once(' ') else {
            return Err(format!(
                "--file takes \"PREDICATE PATH\", like --file \"MUTATES src/app.py\"; got {file:?}"
            ));
        };
        let Some(root) = &root else {
            return Err(String::from(
                "--file needs the root the agents share: give --root DIR or set $KLOCK_ROOT",
            ));
        };
        out.push(format!("{predicate} {}", root.file(Path::new(path))?));
    }
    Ok((out, root))
}

async fn run_inner(args: &ExecArgs) -> Result<u8, Stop> {
    let (intents, root) = intents(args).map_err(|e| (EXIT_USAGE, e))?;
    let mut env = args.connection.child_env().map_err(|e| (EXIT_USAGE, e))?;
    if let Some(root) = &root {
        env.push(("KLOCK_ROOT", root.path().display().to_string()));
    }
    let client = args.connection.client().map_err(|e| (EXIT_USAGE, e))?;
    let (session, resumed) = start(args, client).await?;
    let (keeper, mut losses) = Keeper::start(session.clone());
    // Listening from before the first request: a signal during a request is kept for the
    // next wait, which then withdraws what the request queued.
    let mut signals = child::Interrupts::new();
    let mut acquired = acquire(args, &intents, &session, &keeper, &mut signals).await;
    if let (Ok(_), Some(sig)) = (&acquired, signals.pending()) {
        // Granted, but interrupted meanwhile: the command must not start.
        let _ = session.release(None).await;
        acquired = Err(interrupted(sig));
    }
    drop(signals); // from here on the command's supervisor handles them
    let leases = match acquired {
        Ok(leases) => leases,
        Err(stop) => {
            drop(keeper);
            keep_or_close(args, &session, "IDLE").await;
            return Err(stop);
        }
    };
    if args.verbose {
        let how = if resumed { "resumed" } else { "opened" };
        let info = &session.info;
        eprintln!(
            "{}: session {} (agent {:?}, priority {}, {how}) holds {}",
            args.tool(),
            info.session_id,
            info.agent_id,
            info.priority,
            describe_leases(&leases)
        );
    }
    let mut child = match spawn(args, &env, &session, &leases) {
        Ok(child) => child,
        Err(stop) => {
            drop(keeper);
            finish(args, &session).await;
            return Err(stop);
        }
    };
    let ended = child::supervise(&mut child, &mut losses).await;
    drop(keeper);
    match ended {
        child::Ended::Exited(status) => {
            finish(args, &session).await;
            Ok(child::exit_code(status))
        }
        child::Ended::Lost(loss) => {
            child::stop(&mut child, args.kill_after).await;
            let kept = if loss.reason == "UNAUTHORIZED" {
                // Resumed by another process, whose session it is now: not ours to suspend,
                // close or save over its digest.
                String::from("; the session is another process's now, left as it is")
            } else {
                // Best effort: the lease is lost, most likely with the server; the command
                // stopped, the tool ends now rather than after a reconnect budget.
                keep_or_close(args, &session.best_effort(), "HOLDING").await
            };
            Err((
                EXIT_LOST,
                format!(
                    "lost {} ({}); stopped the command{kept}",
                    describe_leases(&loss.leases),
                    loss.why()
                ),
            ))
        }
    }
}

/// Opens a session, or resumes the one `--digest FILE` names; `true` when resumed.
async fn start(args: &ExecArgs, client: Transport) -> Result<(Session, bool), Stop> {
    let ns = args.connection.ns().map_err(|e| (EXIT_USAGE, e))?;
    let agent = args.connection.agent();
    if let Some(saved) = read_digest(args.digest.as_deref())? {
        match Session::resume(client.clone(), &saved.digest, &saved.resume_secret).await {
            Ok(session) => {
                // The resume replaced the file's secret: keep the file current, so that a rerun
                // after this run is killed (SIGKILL leaves no time to save) still resumes it.
                let path = args.digest.as_deref().unwrap_or(Path::new(""));
                if let Err(e) = write_digest(path, &saved.digest, session.resume_secret()) {
                    eprintln!(
                        "{}: warning: {e}; a rerun cannot resume this session",
                        args.tool()
                    );
                }
                return Ok((session, true));
            }
            // RESUME_SECRET_REFUSED: the file's resume secret is not the session's (a file saved before
            // resume secrets, or a session resumed by another run since).
            Err(Failure::Refused { name, .. })
                if name == "UNKNOWN_SESSION"
                    || name == "INVALID_DIGEST"
                    || name == "RESUME_SECRET_REFUSED" =>
            {
                eprintln!(
                    "{}: the session saved in {} is gone ({name}); opening a new one, whose priority starts over",
                    args.tool(),
                    args.digest.as_deref().unwrap_or(Path::new("")).display()
                );
            }
            Err(failure) => return Err(refused(failure)),
        }
    }
    let session = Session::open(client, &ns, &agent).await.map_err(refused)?;
    Ok((session, false))
}

fn read_digest(path: Option<&Path>) -> Result<Option<Saved>, Stop> {
    let Some(path) = path else { return Ok(None) };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err((
                EXIT_USAGE,
                format!("cannot read --digest {}: {e}", path.display()),
            ))
        }
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        (
            EXIT_USAGE,
            format!(
                "{} is not a StateDigest ({e}); delete it to start with a new session",
                path.display()
            ),
        )
    })
}

/// Exit 128 + N for a signal N that interrupted the wait.
fn interrupted(sig: i32) -> Stop {
    (
        128u8.saturating_add(sig as u8),
        format!("interrupted by signal {sig} while waiting; the request was withdrawn"),
    )
}

/// Withdraws a queued ticket after a signal, and gives back what a grant racing the
/// withdrawal left held: a suspended session (`--digest`) must not be granted it later and
/// block the resource for TTL + grace.
async fn withdraw(session: &Session, ticket: Option<u64>, sig: i32) -> Stop {
    if let Some(ticket) = ticket {
        if session.cancel(ticket).await.is_err() {
            // Already resolved (granted at that moment), or unreachable: hold nothing.
            let _ = session.release(None).await;
        }
    }
    interrupted(sig)
}

/// Asks until granted, as the core decides ([`klock_client::acquire`]); the keeper holds the
/// leases from then on. A signal while waiting (for a ticket or after a DIE) withdraws the
/// request and ends the run.
async fn acquire(
    args: &ExecArgs,
    intents: &[String],
    session: &Session,
    keeper: &Keeper,
    signals: &mut child::Interrupts,
) -> Result<Vec<Lease>, Stop> {
    // No --wait (`klock elect`'s default): one wait the kernel never times out.
    let wait_ms = args.wait.map(|wait| wait.as_millis() as u64);
    let ttl_ms = args.ttl.as_millis() as u64;
    let budget = Acquisition::new(0, wait_ms);
    let attempt = Acquire::with_budget(session, keeper, intents, ttl_ms, budget);
    match attempt.run_or(signals.next()).await {
        Ok(leases) => Ok(leases),
        Err(Stopped::Interrupted(sig)) => Err(withdraw(session, attempt.ticket(), sig).await),
        Err(Stopped::Error(Error::Timeout { blockers, .. })) => Err(gave_up(args, &blockers)),
        Err(Stopped::Error(e)) => Err(refused(Failure::from(e))),
    }
}

fn gave_up(args: &ExecArgs, blockers: &[Blocker]) -> Stop {
    let who = if blockers.is_empty() {
        String::from("other sessions held them")
    } else {
        format!("held by {}", describe_blockers(blockers))
    };
    (
        EXIT_CONFLICT,
        format!(
            "gave up after --wait {}: {who}. Try again later, or wait longer with --wait",
            show(args.wait.unwrap_or_default())
        ),
    )
}

fn spawn(
    args: &ExecArgs,
    connection_env: &[(&'static str, String)],
    session: &Session,
    leases: &[Lease],
) -> Result<Child, Stop> {
    let fence = leases.iter().map(|l| l.fence).max().unwrap_or_default();
    let mut env = connection_env.to_vec();
    env.extend([
        ("KLOCK_SESSION", session.info.session_id.to_string()),
        (
            "KLOCK_LEASES",
            serde_json::to_string(leases).expect("leases serialize"),
        ),
        ("KLOCK_FENCE", fence.to_string()),
    ]);
    if let Some(name) = &args.election {
        // The term is the election lease's fence: it grows with every new leader, so a store
        // that remembers the largest term it saw refuses a deposed one.
        env.push(("KLOCK_TERM", fence.to_string()));
        env.push(("KLOCK_ELECTION", name.clone()));
    }
    child::spawn(&args.command, &env).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        (code, format!("cannot run {:?}: {e}", args.command[0]))
    })
}

/// After a run that did not finish its work: with `--digest`, save the digest and suspend the
/// session so a rerun resumes it with its priority; without, close it. Says what it did.
/// `phase` is what the run was doing, for a digest written without the server.
async fn keep_or_close(args: &ExecArgs, session: &Session, phase: &str) -> String {
    let Some(path) = &args.digest else {
        let _ = session.close().await;
        return String::new();
    };
    let digest = match session.digest().await {
        Ok(digest) => digest,
        // The server is down (it may be restarting from its log, where the session still is):
        // what this run knows of the session is a digest a resume accepts, so save that.
        Err(Failure::Unreachable(_)) => local_digest(session, phase),
        Err(e) => {
            let _ = session.close().await;
            return format!("; could not save the session to {} ({e})", path.display());
        }
    };
    if let Err(e) = write_digest(path, &digest, session.resume_secret()) {
        let _ = session.close().await;
        return format!("; could not save the session to {} ({e})", path.display());
    }
    // Unsuspended (an unreachable server), the session keeps its idle time and its leases
    // their TTL, or the grace a restarted server gives every session.
    let _ = session.suspend().await;
    format!(
        "; saved the session to {}: rerun with --digest {0} to keep its priority",
        path.display()
    )
}

/// The session's digest as of its open or resume: the kernel accepts a digest older than its
/// own record (same session, a priority it had, an epoch not newer), and a run changes
/// neither before it is over.
fn local_digest(session: &Session, phase: &str) -> StateDigest {
    let info = &session.info;
    StateDigest {
        version: DIGEST_VERSION,
        identity: DigestIdentity {
            agent_id: info.agent_id.clone(),
            namespace: info.namespace.clone(),
            session_id: info.session_id,
            priority_timestamp: info.priority,
            epoch: info.epoch,
        },
        recovery: DigestRecovery {
            last_phase: phase.to_owned(),
            pending_intents: Vec::new(),
        },
    }
}

/// Writes a StateDigest and the session's resume secret to `path`, whole or not at all,
/// readable by its owner only (0600): the secret lets whoever holds it take the session over.
///
/// # Errors
/// The file cannot be written; the message names it.
pub fn write_digest(path: &Path, digest: &StateDigest, resume_secret: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let saved = Saved {
        digest: digest.clone(),
        resume_secret: resume_secret.to_owned(),
    };
    let text = serde_json::to_string_pretty(&saved).expect("digests serialize");
    // Write beside it, then rename: a crash never leaves half a digest. The partial file is
    // made anew, so its mode is the one asked for (an old one may have been readable).
    let partial = path.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| f.write_all((text + "\n").as_bytes()))
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// After the command ended on its own: release everything, close, forget the digest.
async fn finish(args: &ExecArgs, session: &Session) {
    if let Err(e) = session.close().await {
        eprintln!(
            "{}: could not close the session ({e}); its leases end at their TTL",
            args.tool()
        );
    }
    if let Some(path) = &args.digest {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_needs_intents_and_a_command() {
        assert!(parse(&args(&["--", "true"]))
            .unwrap_err()
            .contains("--intent"));
        assert!(parse(&args(&["--intent", "MUTATES FILE:/x"]))
            .unwrap_err()
            .contains("--"));
        assert!(parse(&args(&["--bogus"])).unwrap_err().contains("--bogus"));
        assert!(parse(&args(&["--ttl", "1ms", "--intent", "x", "--", "true"])).is_err());
        let ok = parse(&args(&[
            "--intent=MUTATES FILE:/x",
            "--wait",
            "0",
            "--",
            "echo",
            "--intent",
        ]))
        .unwrap();
        assert_eq!(ok.command, ["echo", "--intent"]);
        assert_eq!(ok.wait, Some(Duration::ZERO));
    }
}
