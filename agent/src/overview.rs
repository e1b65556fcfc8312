//! What is going on in a namespace, for people (`klock status`, `klock reconcile`) and for
//! models (the sidecar's `klock_who` and `klock_status`).
//!
//! Contract: [`gather`] reads, without opening a session, every lease under the roots
//! (`TYPE:/`) of the given resource types, the queues of the resources held or contended, the
//! namespace's most contended resources and the ghost agents (whose leases expired or waits
//! timed out: crashed or stuck agents; counted over all namespaces, as agent ids are). The
//! `render_*` functions turn it into plain text with times relative to the server's clock
//! ("expires in 41.2s"). The commands' flag parsing and exit codes are here too.

use super::args::{Connection, Flags, CONNECTION_HELP};
use super::exec::write_digest;
use klock_client::routes::{resource_state, stats, Saved, Session};
use klock_client::transport::{Failure, Transport};
use klock_core::{Contention, GhostAgent, Holder, ResourceState};
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::PathBuf;

/// At most this many resources get their queue read (one request each).
const MAX_QUEUES: usize = 32;
/// At most this many contended resources and ghost agents are shown.
const TOP: usize = 10;

/// A namespace at one moment.
#[derive(Clone, Debug)]
pub struct Overview {
    pub namespace: String,
    /// The server's time of the reads, in its milliseconds.
    pub now: Option<u64>,
    /// Every lease under the roots read, by resource then lease.
    pub holders: Vec<Holder>,
    /// The resources (held or contended) that have waiters.
    pub queues: Vec<ResourceState>,
    pub contended: Vec<Contention>,
    pub ghosts: Vec<GhostAgent>,
}

/// Reads the namespace's overview for these resource types.
///
/// # Errors
/// A bad type name (the server names it), or unreachable.
pub async fn gather(client: &Transport, ns: &str, types: &[String]) -> Result<Overview, Failure> {
    let mut holders = Vec::new();
    let mut now = None;
    for kind in types {
        let (root, at) = resource_state(client, ns, &format!("{kind}:/")).await?;
        now = now.or(at);
        holders.extend(root.holders);
        holders.extend(root.covering);
    }
    holders.sort_by(|a, b| (&a.resource, a.lease_id).cmp(&(&b.resource, b.lease_id)));
    holders.dedup_by_key(|h| h.lease_id);
    let stats = stats(client, ns).await?;
    let contended: Vec<Contention> = stats
        .top_contended
        .into_iter()
        .filter(|c| c.namespace == ns)
        .take(TOP)
        .collect();
    let ghosts = stats.ghost_agents.into_iter().take(TOP).collect();
    let resources: BTreeSet<&String> = holders
        .iter()
        .map(|h| &h.resource)
        .chain(contended.iter().map(|c| &c.resource))
        .collect();
    let mut queues = Vec::new();
    for resource in resources.into_iter().take(MAX_QUEUES) {
        let (state, _) = resource_state(client, ns, resource).await?;
        if !state.waiting.is_empty() {
            queues.push(state);
        }
    }
    Ok(Overview {
        namespace: ns.to_owned(),
        now,
        holders,
        queues,
        contended,
        ghosts,
    })
}

/// "in 41.2s", "expired", or "never", from the server's `now`.
pub fn until(at: u64, now: Option<u64>) -> String {
    match now {
        _ if at == u64::MAX => String::from("never"),
        Some(now) if at <= now => String::from("now (expired)"),
        Some(now) => format!("in {:.1}s", (at - now) as f64 / 1000.0),
        None => format!("at server time {at} ms"),
    }
}

fn holder_line(out: &mut String, h: &Holder, now: Option<u64>) {
    let _ = writeln!(
        out,
        "  {} {} held by agent {:?} (session {}, lease {}, fence {}), expires {}",
        h.predicate,
        h.resource,
        h.agent_id,
        h.session_id,
        h.lease_id,
        h.fence,
        until(h.expires_at, now)
    );
}

fn queue_lines(out: &mut String, state: &ResourceState, now: Option<u64>) {
    for w in &state.waiting {
        let _ = writeln!(
            out,
            "  {}. agent {:?} (session {}, ticket {}) waits to {} {}, gives up {}",
            w.position + 1,
            w.agent_id,
            w.session_id,
            w.ticket,
            w.predicate,
            state.resource,
            until(w.deadline, now)
        );
    }
}

/// The overview as text.
pub fn render(o: &Overview, types: &[String]) -> String {
    let mut out = String::new();
    let roots: Vec<String> = types.iter().map(|t| format!("{t}:/")).collect();
    let _ = writeln!(
        out,
        "namespace {:?} (resources under {})",
        o.namespace,
        roots.join(", ")
    );
    if o.holders.is_empty() {
        let _ = writeln!(out, "holders: none: nobody holds anything");
    } else {
        let _ = writeln!(out, "holders ({}):", o.holders.len());
        for h in &o.holders {
            holder_line(&mut out, h, o.now);
        }
    }
    if o.queues.is_empty() {
        let _ = writeln!(out, "queues: none: nobody waits");
    } else {
        let _ = writeln!(out, "queues:");
        for q in &o.queues {
            queue_lines(&mut out, q, o.now);
        }
    }
    if !o.contended.is_empty() {
        let _ = writeln!(out, "most contended:");
        for c in &o.contended {
            let _ = writeln!(
                out,
                "  {}: {} request(s) found it held",
                c.resource, c.blocked
            );
        }
    }
    if !o.ghosts.is_empty() {
        let _ = writeln!(
            out,
            "ghost agents (leases expired or waits timed out, all namespaces):"
        );
        for g in &o.ghosts {
            let _ = writeln!(
                out,
                "  {:?}: {} expired leases, {} wait timeouts",
                g.agent_id, g.expired_leases, g.wait_timeouts
            );
        }
    }
    out
}

/// One resource's holders, queue and covering holders as text.
pub fn render_resource(state: &ResourceState, now: Option<u64>) -> String {
    let mut out = format!("{} in namespace {:?}:\n", state.resource, state.namespace);
    if state.holders.is_empty() && state.covering.is_empty() {
        out.push_str("  free: nobody holds it or anything above or below it\n");
    }
    for h in &state.holders {
        holder_line(&mut out, h, now);
    }
    if !state.covering.is_empty() {
        out.push_str("covering (a directory above it or a path below it, which overlaps):\n");
        for h in &state.covering {
            holder_line(&mut out, h, now);
        }
    }
    if !state.waiting.is_empty() {
        out.push_str("queue:\n");
        queue_lines(&mut out, state, now);
    }
    out
}

pub const STATUS_HELP: &str = "\
usage: klock status [connection flags] [--type TYPE]... [--resource TYPE:/path]

Shows a namespace: who holds what and until when, who waits, the most contended resources
and ghost agents (crashed or stuck: their leases expired or waits timed out).

  --type TYPE      resource types to list (default FILE); repeat for more
  --resource R     show one resource instead: holders, queue, and covering holders
CONNECTION_FLAGS

Examples:
  klock status
  klock status --ns ci --type FILE --type DB
  klock status --resource FILE:/src/app.py";

pub const RECONCILE_HELP: &str = "\
usage: klock reconcile --digest FILE [connection flags] [--type TYPE]... [--release]

Re-attaches to the session a StateDigest names (as klock exec --digest saves after a lost
lease or a --wait that ran out) and shows the server's truth: its priority, what it waits
for, and each of its leases (ACTIVE with fence and time left, or gone). Then it saves the
new digest to FILE and suspends the session again, as it was, for the rerun; with
--release it gives the work up instead: every lease released, the session closed, FILE
removed.

  --digest FILE    the saved StateDigest
  --type TYPE      resource types to look for its leases under (default FILE)
  --release        release everything, close the session, remove FILE
CONNECTION_FLAGS

Examples:
  klock reconcile --digest .klock/deploy.json
  klock reconcile --digest .klock/deploy.json --release";

/// Help text with the connection flags filled in.
pub fn help(text: &str) -> String {
    text.replace("CONNECTION_FLAGS", CONNECTION_HELP)
}

/// `klock status`: prints the overview; the exit status.
pub async fn status(args: &[String]) -> Result<String, (u8, String)> {
    let mut connection = Connection::default();
    let mut types = Vec::new();
    let mut resource = None;
    let mut flags = Flags::new(args);
    while let Some((flag, inline)) = flags.next_flag() {
        if connection.take(&mut flags, flag, inline).map_err(usage)? {
            continue;
        }
        match flag {
            "--type" => types.push(flags.value(flag, inline).map_err(usage)?.to_owned()),
            "--resource" => resource = Some(flags.value(flag, inline).map_err(usage)?),
            other => return Err(usage(format!("unknown argument {other:?}"))),
        }
    }
    if types.is_empty() {
        types.push(String::from("FILE"));
    }
    let client = connection.client().map_err(usage)?;
    let ns = connection.ns().map_err(usage)?;
    if let Some(resource) = resource {
        let (state, now) = resource_state(&client, &ns, resource)
            .await
            .map_err(failed)?;
        return Ok(render_resource(&state, now));
    }
    let overview = gather(&client, &ns, &types).await.map_err(failed)?;
    Ok(render(&overview, &types))
}

/// `klock reconcile --digest FILE`.
pub async fn reconcile(args: &[String]) -> Result<String, (u8, String)> {
    let mut connection = Connection::default();
    let mut types = Vec::new();
    let mut digest_path: Option<PathBuf> = None;
    let mut release = false;
    let mut flags = Flags::new(args);
    while let Some((flag, inline)) = flags.next_flag() {
        if connection.take(&mut flags, flag, inline).map_err(usage)? {
            continue;
        }
        match flag {
            "--type" => types.push(flags.value(flag, inline).map_err(usage)?.to_owned()),
            "--digest" => {
                digest_path = Some(PathBuf::from(flags.value(flag, inline).map_err(usage)?))
            }
            "--release" => release = true,
            other => return Err(usage(format!("unknown argument {other:?}"))),
        }
    }
    let path = digest_path
        .ok_or_else(|| usage(String::from("name the saved session with --digest FILE")))?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| usage(format!("cannot read --digest {}: {e}", path.display())))?;
    let saved: Saved = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not a StateDigest ({e})", path.display())))?;
    let digest = saved.digest;
    if types.is_empty() {
        types.push(String::from("FILE"));
    }
    for intent in &digest.recovery.pending_intents {
        if let Some(kind) = intent
            .split_whitespace()
            .nth(1)
            .and_then(|r| r.split(':').next())
        {
            if !types.iter().any(|t| t == kind) {
                types.push(kind.to_owned());
            }
        }
    }
    let client = connection.client().map_err(usage)?;
    let resumed = Session::resume(client, &digest, &saved.resume_secret).await;
    let session = resumed.map_err(|e| match e.name() {
        "UNKNOWN_SESSION" => (
            1,
            format!(
                "the session in {} is closed (or the server restarted without its data): it holds nothing; delete the file",
                path.display()
            ),
        ),
        _ => failed(e),
    })?;
    let info = &session.info;
    let mut out = format!(
        "session {} of agent {:?} in namespace {:?}: priority {}, epoch {}, was {}\n",
        info.session_id,
        info.agent_id,
        info.namespace,
        info.priority,
        info.epoch,
        digest.recovery.last_phase
    );
    for intent in &digest.recovery.pending_intents {
        let _ = writeln!(out, "  waits for {intent}");
    }
    let overview = gather(&session.client, &info.namespace, &types)
        .await
        .map_err(failed)?;
    let mine: Vec<&Holder> = overview
        .holders
        .iter()
        .filter(|h| h.session_id == info.session_id)
        .collect();
    let ids: Vec<u64> = mine.iter().map(|h| h.lease_id.0).collect();
    // In request order, so one status per lease listed.
    let statuses = session.reconcile(&ids).await.map_err(failed)?;
    if mine.is_empty() {
        out.push_str("  holds no lease\n");
    }
    for (h, s) in mine.iter().zip(&statuses) {
        let state = s["status"].as_str().unwrap_or("UNKNOWN");
        let expires = s["expires_at"].as_u64().unwrap_or(h.expires_at);
        let _ = writeln!(
            out,
            "  lease {} {} {}: {state}, fence {}, expires {}",
            h.lease_id,
            h.predicate,
            h.resource,
            h.fence,
            until(expires, overview.now)
        );
    }
    if release {
        session.close().await.map_err(failed)?;
        let _ = std::fs::remove_file(&path);
        let _ = writeln!(
            out,
            "released everything, closed the session, removed {}",
            path.display()
        );
        return Ok(out);
    }
    let fresh = session.digest().await.map_err(failed)?;
    write_digest(&path, &fresh, session.resume_secret()).map_err(|e| (1, e))?;
    session.suspend().await.map_err(failed)?;
    let _ = writeln!(
        out,
        "saved the session to {} and suspended it again: rerun with --digest {0}",
        path.display()
    );
    Ok(out)
}

fn usage(message: String) -> (u8, String) {
    (2, message)
}

fn failed(failure: Failure) -> (u8, String) {
    match failure {
        Failure::Refused { status: 400, .. } => (2, failure.to_string()),
        _ => (super::exec::EXIT_UNAVAILABLE, failure.to_string()),
    }
}
