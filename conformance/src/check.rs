//! Comparing a call's answer and events with a step's `expect`.
//!
//! Contract: only the fields written are checked, and every field written is checked against
//! the answer it belongs to — asking for a field the answer does not have (e.g. `ticket` when
//! the verdict is GRANTED) fails. Lists are compared exactly in length: `leases` and `waiting`
//! and `events` in order, `holders` and `covering` as multisets (a perfect matching of the
//! patterns to the actual entries), `held_by`, `lost_leases`, `lost_tickets`, RELEASED's `leases` as sets. Keys of
//! `results` and `status` must name leases the call asked about. Lease objects bind their `as`
//! as they are matched, in order, so a later object (or event) may refer to an earlier one.
//! Messages say what was expected and what came back, with ids labelled by their aliases.

use crate::aliases::Aliases;
use crate::vector::{EventExpect, Expect, HolderExpect, LeaseExpect};
use klock_core::{Event, Holder, Lease, LeaseId, LeaseStatus, Output, SessionId, Verdict};
use std::collections::BTreeMap;

type Check = Result<(), String>;

fn mismatch<T: std::fmt::Debug>(what: &str, expected: T, got: T) -> String {
    format!("{what}: expected {expected:?}, got {got:?}")
}

/// Compares `expected` with `got` when something is expected.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, expected: Option<T>, got: T) -> Check {
    match expected {
        Some(e) if e != got => Err(mismatch(what, e, got)),
        _ => Ok(()),
    }
}

fn forbid(present: bool, key: &str, answer: &str) -> Check {
    if present {
        Err(format!("`{key}` is expected, but the answer is {answer}"))
    } else {
        Ok(())
    }
}

/// Checks the direct answer of a successful call (the events are checked by [`events`]).
pub fn output(
    expect: &Expect,
    request: &Option<Vec<LeaseId>>,
    output: &Output,
    aliases: &mut Aliases,
    priorities: &BTreeMap<SessionId, u64>,
) -> Check {
    match output {
        Output::Session { session: info } => {
            same("epoch", expect.epoch, info.epoch)?;
            if let Some(alias) = &expect.priority_lt {
                let other = aliases.session(alias)?;
                let Some(&theirs) = priorities.get(&other) else {
                    return Err(format!(
                        "priority_lt: alias {alias:?} names no session opened in this vector"
                    ));
                };
                if info.priority >= theirs {
                    return Err(format!(
                        "priority_lt: the new session's priority {} is not smaller than {alias}'s {theirs}",
                        info.priority
                    ));
                }
            }
            Ok(())
        }
        Output::Verdict { verdict: v } => verdict(expect, v, aliases),
        Output::Heartbeat { results } => {
            let Some(expected) = &expect.results else {
                return Ok(());
            };
            for (alias, exp) in expected {
                let id = aliases.lease(alias)?;
                if request.as_ref().is_some_and(|asked| !asked.contains(&id)) {
                    return Err(format!(
                        "results names {alias:?}, which the heartbeat did not ask about"
                    ));
                }
                let found: Vec<_> = results.iter().filter(|(l, _)| *l == id).collect();
                if found.is_empty() {
                    return Err(format!(
                        "results: no outcome for {alias} (got {})",
                        results
                            .iter()
                            .map(|(l, o)| format!("{}: {o:?}", aliases.lease_label(*l)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                for (_, outcome) in found {
                    let got_status = outcome.map(|_| ()).map_err(|c| c.name());
                    if let Some(status) = exp.status {
                        let want = status.map_err(|c| c.name());
                        if want != got_status {
                            return Err(mismatch(
                                &format!("results[{alias}]"),
                                name_of_outcome(want),
                                name_of_outcome(got_status),
                            ));
                        }
                    }
                    if let Some(at) = exp.expires_at {
                        match outcome {
                            Ok(got) if *got == at => {}
                            Ok(got) => {
                                return Err(mismatch(
                                    &format!("results[{alias}].expires_at"),
                                    at,
                                    *got,
                                ))
                            }
                            Err(c) => {
                                return Err(format!(
                                    "results[{alias}]: expected OK with expires_at {at}, got {}",
                                    c.name()
                                ))
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        Output::Released { released } => same("released", expect.released, *released),
        Output::Reconcile { statuses } => {
            let Some(expected) = &expect.status else {
                return Ok(());
            };
            for (alias, exp) in expected {
                let id = aliases.lease(alias)?;
                if request.as_ref().is_some_and(|asked| !asked.contains(&id)) {
                    return Err(format!(
                        "status names {alias:?}, which the reconcile did not ask about"
                    ));
                }
                let Some((_, got)) = statuses.iter().find(|(l, _)| *l == id) else {
                    return Err(format!("status: no answer for {alias}"));
                };
                same(
                    &format!("status[{alias}]"),
                    exp.status.as_deref(),
                    got.name(),
                )?;
                if let Some(at) = exp.expires_at {
                    match got {
                        LeaseStatus::Active { expires_at, .. } => same(
                            &format!("status[{alias}].expires_at"),
                            Some(at),
                            *expires_at,
                        )?,
                        other => {
                            return Err(format!(
                                "status[{alias}]: expected ACTIVE with expires_at {at}, got {}",
                                other.name()
                            ))
                        }
                    }
                }
            }
            Ok(())
        }
        Output::ResourceState { state } => {
            if let Some(exp) = &expect.holders {
                holders("holders", exp, &state.holders, aliases)?;
            }
            if let Some(exp) = &expect.covering {
                holders("covering", exp, &state.covering, aliases)?;
            }
            if let Some(exp) = &expect.waiting {
                let got: Vec<String> = state
                    .waiting
                    .iter()
                    .map(|w| {
                        format!(
                            "{} {}",
                            aliases.session_label(w.session_id),
                            aliases.ticket_label(w.ticket)
                        )
                    })
                    .collect();
                if exp.len() != got.len() {
                    return Err(format!(
                        "waiting: expected {} entries, got {} [{}]",
                        exp.len(),
                        got.len(),
                        got.join(", ")
                    ));
                }
                for (i, (e, w)) in exp.iter().zip(&state.waiting).enumerate() {
                    if let Some(s) = &e.session {
                        if aliases.session(s)? != w.session_id {
                            return Err(format!(
                                "waiting[{i}].session: expected {s}, got {} (queue: [{}])",
                                got[i],
                                got.join(", ")
                            ));
                        }
                    }
                    if let Some(t) = &e.ticket {
                        if aliases.ticket(t)? != w.ticket {
                            return Err(format!(
                                "waiting[{i}].ticket: expected {t}, got {} (queue: [{}])",
                                got[i],
                                got.join(", ")
                            ));
                        }
                    }
                }
            }
            Ok(())
        }
        Output::NextDeadline { deadline: d } => same("deadline", expect.deadline, *d),
        // Done, a digest and a count have no field a vector names; the hosts' replay of the
        // resolved script checks them in full.
        _ => Ok(()),
    }
}

fn name_of_outcome(o: Result<(), &'static str>) -> &'static str {
    match o {
        Ok(()) => "OK",
        Err(name) => name,
    }
}

fn verdict(expect: &Expect, v: &Verdict, aliases: &mut Aliases) -> Check {
    let (name, held) = match v {
        Verdict::Granted { .. } => ("GRANTED", None),
        Verdict::Wait { held_by, .. } => ("WAIT", Some(held_by)),
        Verdict::Die { held_by, .. } => ("DIE", Some(held_by)),
    };
    if let Some(want) = &expect.verdict {
        if want != name {
            return Err(format!(
                "verdict: expected {want}, got {}",
                describe_verdict(v, aliases)
            ));
        }
    }
    let answer = describe_verdict(v, aliases);
    match v {
        Verdict::Granted { leases: got } => {
            forbid(expect.ticket.is_some(), "ticket", &answer)?;
            forbid(expect.held_by.is_some(), "held_by", &answer)?;
            forbid(expect.retry_after_ms.is_some(), "retry_after_ms", &answer)?;
            forbid(expect.cycle.is_some(), "cycle", &answer)?;
            if let Some(exp) = &expect.leases {
                match_leases("leases", exp, got, aliases)?;
            }
        }
        Verdict::Wait { ticket, .. } => {
            forbid(expect.leases.is_some(), "leases", &answer)?;
            forbid(expect.retry_after_ms.is_some(), "retry_after_ms", &answer)?;
            forbid(expect.cycle.is_some(), "cycle", &answer)?;
            if let Some(alias) = &expect.ticket {
                aliases.bind_ticket(alias, *ticket)?;
            }
        }
        Verdict::Die {
            retry_after_ms,
            cycle,
            ..
        } => {
            forbid(expect.leases.is_some(), "leases", &answer)?;
            forbid(expect.ticket.is_some(), "ticket", &answer)?;
            if let Some(exp) = &expect.cycle {
                session_list("cycle", exp, cycle, aliases)?;
            }
            if let Some((lo, hi)) = expect.retry_after_ms {
                if !(lo..=hi).contains(retry_after_ms) {
                    return Err(format!(
                        "retry_after_ms: expected in [{lo}, {hi}], got {retry_after_ms}"
                    ));
                }
            }
        }
    }
    if let (Some(exp), Some(held)) = (&expect.held_by, held) {
        let got: Vec<SessionId> = held.iter().map(|b| b.session_id).collect();
        session_set("held_by", exp, &got, aliases)?;
    }
    Ok(())
}

/// Compares a list of session aliases, in order, with the sessions that came back.
fn session_list(
    what: &str,
    expected: &[String],
    got: &[SessionId],
    aliases: &mut Aliases,
) -> Check {
    let want = expected
        .iter()
        .map(|a| aliases.session(a))
        .collect::<Result<Vec<_>, _>>()?;
    if want != got {
        return Err(format!(
            "{what}: expected [{}], got [{}]",
            labels(aliases, &want),
            labels(aliases, got)
        ));
    }
    Ok(())
}

/// The sessions' labels (alias and id), comma-separated.
fn labels(aliases: &Aliases, ids: &[SessionId]) -> String {
    ids.iter()
        .map(|s| aliases.session_label(*s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares a set of session aliases with the sessions that came back.
fn session_set(what: &str, expected: &[String], got: &[SessionId], aliases: &mut Aliases) -> Check {
    let mut want = expected
        .iter()
        .map(|a| aliases.session(a))
        .collect::<Result<Vec<_>, _>>()?;
    want.sort_unstable();
    let n = want.len();
    want.dedup();
    if want.len() != n {
        return Err(format!(
            "{what}: the expected set {expected:?} names a session twice"
        ));
    }
    let mut have = got.to_vec();
    have.sort_unstable();
    if want != have {
        return Err(format!(
            "{what}: expected {{{}}}, got {{{}}}",
            labels(aliases, &want),
            labels(aliases, &have)
        ));
    }
    Ok(())
}

/// Compares a set of lease or ticket aliases (as raw ids) with what came back.
fn id_set(what: &str, expected: &[u64], got: &[u64], labels: impl Fn(u64) -> String) -> Check {
    let mut want = expected.to_vec();
    want.sort_unstable();
    let mut have = got.to_vec();
    have.sort_unstable();
    if want != have {
        let show = |ids: &[u64]| {
            ids.iter()
                .map(|i| labels(*i))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "{what}: expected {{{}}}, got {{{}}}",
            show(&want),
            show(&have)
        ));
    }
    Ok(())
}

/// Matches lease objects against leases in order, binding `as`.
fn match_leases(
    what: &str,
    expected: &[LeaseExpect],
    got: &[Lease],
    aliases: &mut Aliases,
) -> Check {
    if expected.len() != got.len() {
        return Err(format!(
            "{what}: expected {} leases, got {}: {}",
            expected.len(),
            got.len(),
            describe_leases(got, aliases)
        ));
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        let at = format!("{what}[{i}]");
        same(
            &format!("{at}.resource"),
            e.resource.as_deref(),
            g.resource.as_str(),
        )?;
        same(&format!("{at}.predicate"), e.predicate, g.predicate)?;
        same(&format!("{at}.expires_at"), e.expires_at, g.expires_at)?;
        same(&format!("{at}.ttl_ms"), e.ttl_ms, g.ttl_ms)?;
        if let Some(alias) = &e.fence_gt {
            let (_, fence) = aliases
                .bound_lease(alias)
                .map_err(|m| format!("{at}.fence_gt: {m}"))?;
            if g.fence <= fence {
                return Err(format!(
                    "{at}.fence_gt: expected a fence greater than {alias}'s {fence}, got {}",
                    g.fence
                ));
            }
        }
        if let Some(alias) = &e.same_as {
            let (id, _) = aliases
                .bound_lease(alias)
                .map_err(|m| format!("{at}.same_as: {m}"))?;
            if g.lease_id != id {
                return Err(format!(
                    "{at}.same_as: expected lease {}, got {}",
                    aliases.lease_label(id),
                    aliases.lease_label(g.lease_id)
                ));
            }
        }
        if let Some(alias) = &e.bind {
            aliases
                .bind_lease(alias, g.lease_id, g.fence)
                .map_err(|m| format!("{at}.as: {m}"))?;
        }
    }
    Ok(())
}

fn holder_matches(e: &HolderExpect, h: &Holder, aliases: &mut Aliases) -> Result<bool, String> {
    if let Some(s) = &e.session {
        if aliases.session(s)? != h.session_id {
            return Ok(false);
        }
    }
    let predicate_ok = !matches!(e.predicate, Some(p) if p != h.predicate);
    let resource_ok = !matches!(&e.resource, Some(r) if *r != h.resource);
    Ok(predicate_ok && resource_ok)
}

/// Order-free: every pattern must match a distinct holder, and the counts must be equal.
fn holders(what: &str, expected: &[HolderExpect], got: &[Holder], aliases: &mut Aliases) -> Check {
    let shown = |aliases: &Aliases| {
        got.iter()
            .map(|h| {
                format!(
                    "{} {} {}",
                    aliases.session_label(h.session_id),
                    h.predicate.name(),
                    h.resource
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if expected.len() != got.len() {
        return Err(format!(
            "{what}: expected {} entries, got {} [{}]",
            expected.len(),
            got.len(),
            shown(aliases)
        ));
    }
    let mut fits = vec![vec![false; got.len()]; expected.len()];
    for (i, e) in expected.iter().enumerate() {
        for (j, h) in got.iter().enumerate() {
            fits[i][j] = holder_matches(e, h, aliases)?;
        }
    }
    if !perfect_matching(&fits) {
        let want: Vec<String> = expected
            .iter()
            .map(|e| {
                [
                    e.session.clone(),
                    e.predicate.map(|p| p.name().to_owned()),
                    e.resource.clone(),
                ]
                .into_iter()
                .map(|f| f.unwrap_or_else(|| String::from("*")))
                .collect::<Vec<_>>()
                .join(" ")
            })
            .collect();
        return Err(format!(
            "{what}: expected [{}] (any order, * = any), got [{}]",
            want.join(", "),
            shown(aliases)
        ));
    }
    Ok(())
}

/// Whether every row can take a distinct column it fits (augmenting paths; small inputs).
fn perfect_matching(fits: &[Vec<bool>]) -> bool {
    fn augment(
        row: usize,
        fits: &[Vec<bool>],
        seen: &mut [bool],
        owner: &mut [Option<usize>],
    ) -> bool {
        for col in 0..seen.len() {
            if fits[row][col] && !seen[col] {
                seen[col] = true;
                let free = match owner[col] {
                    None => true,
                    Some(other) => augment(other, fits, seen, owner),
                };
                if free {
                    owner[col] = Some(row);
                    return true;
                }
            }
        }
        false
    }
    let cols = fits.first().map_or(0, Vec::len);
    let mut owner = vec![None; cols];
    (0..fits.len()).all(|row| augment(row, fits, &mut vec![false; cols], &mut owner))
}

/// Checks every drained event against `expect.events`, in order, nothing missing or extra.
pub fn events(expected: &[EventExpect], got: &[Event], aliases: &mut Aliases) -> Check {
    if expected.len() != got.len() {
        return Err(format!(
            "events: expected {}, got {}: {}",
            expected.len(),
            got.len(),
            describe_events(got, aliases)
        ));
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        event(e, g, aliases).map_err(|m| {
            format!(
                "events[{i}]: {m} (all events: {})",
                describe_events(got, aliases)
            )
        })?;
    }
    Ok(())
}

fn event(e: &EventExpect, g: &Event, aliases: &mut Aliases) -> Check {
    same("event", e.event.as_deref(), g.name())?;
    let mut cycle = None;
    let mut released = None;
    let (ticket, lease, by, leases, retry, lost) = match g {
        Event::Granted { ticket, leases, .. } => {
            (Some(*ticket), None, None, Some(leases), None, None)
        }
        Event::Acquired { leases, .. } => (None, None, None, Some(leases), None, None),
        Event::Released { leases, .. } => {
            released = Some(leases);
            (None, None, None, None, None, None)
        }
        Event::WaitTimeout { ticket, .. } => (Some(*ticket), None, None, None, None, None),
        Event::Died {
            ticket,
            retry_after_ms,
            cycle: members,
            ..
        } => {
            cycle = Some(members);
            (Some(*ticket), None, None, None, Some(*retry_after_ms), None)
        }
        Event::LeaseExpired { lease, .. } => (None, Some(*lease), None, None, None, None),
        Event::Wounded {
            by,
            lost_leases,
            lost_tickets,
            retry_after_ms,
            ..
        } => (
            None,
            None,
            Some(*by),
            None,
            Some(*retry_after_ms),
            Some((lost_leases, lost_tickets)),
        ),
        Event::SessionClosed { .. } => (None, None, None, None, None, None),
    };
    let absent = |key: &str| format!("`{key}` is expected, but a {} event has none", g.name());
    if let Some(alias) = &e.session {
        let want = aliases.session(alias)?;
        if want != g.session() {
            return Err(format!(
                "session: expected {alias}, got {}",
                aliases.session_label(g.session())
            ));
        }
    }
    if let Some(alias) = &e.ticket {
        let got = ticket.ok_or_else(|| absent("ticket"))?;
        if aliases.ticket(alias)? != got {
            return Err(format!(
                "ticket: expected {alias}, got {}",
                aliases.ticket_label(got)
            ));
        }
    }
    if let Some(alias) = &e.lease {
        let got = lease.ok_or_else(|| absent("lease"))?;
        if aliases.lease(alias)? != got {
            return Err(format!(
                "lease: expected {alias}, got {}",
                aliases.lease_label(got)
            ));
        }
    }
    if let Some(alias) = &e.by {
        let got = by.ok_or_else(|| absent("by"))?;
        if aliases.session(alias)? != got {
            return Err(format!(
                "by: expected {alias}, got {}",
                aliases.session_label(got)
            ));
        }
    }
    if let Some(exp) = &e.leases {
        match_leases(
            "leases",
            exp,
            leases.ok_or_else(|| absent("leases"))?,
            aliases,
        )?;
    }
    if let Some((lo, hi)) = e.retry_after_ms {
        let got = retry.ok_or_else(|| absent("retry_after_ms"))?;
        if !(lo..=hi).contains(&got) {
            return Err(format!(
                "retry_after_ms: expected in [{lo}, {hi}], got {got}"
            ));
        }
    }
    if let Some(exp) = &e.lost_leases {
        let (got, _) = lost.ok_or_else(|| absent("lost_leases"))?;
        let want = exp
            .iter()
            .map(|a| aliases.lease(a).map(|l| l.0))
            .collect::<Result<Vec<_>, _>>()?;
        let got: Vec<u64> = got.iter().map(|l| l.0).collect();
        id_set("lost_leases", &want, &got, |i| {
            aliases.lease_label(LeaseId(i))
        })?;
    }
    if let Some(exp) = &e.released {
        let got = released.ok_or_else(|| absent("leases"))?;
        let want = exp
            .iter()
            .map(|a| aliases.lease(a).map(|l| l.0))
            .collect::<Result<Vec<_>, _>>()?;
        let got: Vec<u64> = got.iter().map(|l| l.0).collect();
        id_set("leases", &want, &got, |i| aliases.lease_label(LeaseId(i)))?;
    }
    if let Some(exp) = &e.lost_tickets {
        let (_, got) = lost.ok_or_else(|| absent("lost_tickets"))?;
        let want = exp
            .iter()
            .map(|a| aliases.ticket(a).map(|t| t.0))
            .collect::<Result<Vec<_>, _>>()?;
        let got: Vec<u64> = got.iter().map(|t| t.0).collect();
        id_set("lost_tickets", &want, &got, |i| {
            aliases.ticket_label(klock_core::TicketId(i))
        })?;
    }
    if let Some(exp) = &e.cycle {
        session_list("cycle", exp, cycle.ok_or_else(|| absent("cycle"))?, aliases)?;
    }
    Ok(())
}

/// One lease as `L1(#3) MUTATES FILE:/x fence=3 exp=60010 ttl=60000`.
fn describe_lease(l: &Lease, aliases: &Aliases) -> String {
    format!(
        "{} {} {} fence={} exp={} ttl={}",
        aliases.lease_label(l.lease_id),
        l.predicate.name(),
        l.resource,
        l.fence,
        l.expires_at,
        l.ttl_ms
    )
}

fn describe_leases(leases: &[Lease], aliases: &Aliases) -> String {
    format!(
        "[{}]",
        leases
            .iter()
            .map(|l| describe_lease(l, aliases))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

fn describe_verdict(v: &Verdict, aliases: &Aliases) -> String {
    let blockers = |held: &[klock_core::Blocker]| {
        held.iter()
            .map(|b| aliases.session_label(b.session_id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match v {
        Verdict::Granted { leases } => format!("GRANTED {}", describe_leases(leases, aliases)),
        Verdict::Wait { ticket, held_by } => {
            format!(
                "WAIT ticket={} held_by={{{}}}",
                aliases.ticket_label(*ticket),
                blockers(held_by)
            )
        }
        Verdict::Die {
            retry_after_ms,
            held_by,
            cycle,
        } => format!(
            "DIE retry_after_ms={retry_after_ms} held_by={{{}}}{}",
            blockers(held_by),
            describe_cycle(cycle, aliases)
        ),
    }
}

/// ` cycle=[A, B]` for a detect victim's members, nothing when there are none.
fn describe_cycle(cycle: &[SessionId], aliases: &Aliases) -> String {
    if cycle.is_empty() {
        return String::new();
    }
    let members: Vec<String> = cycle.iter().map(|s| aliases.session_label(*s)).collect();
    format!(" cycle=[{}]", members.join(", "))
}

/// A successful answer, for "expected an error" messages.
pub fn describe_output(output: &Output, aliases: &Aliases) -> String {
    match output {
        Output::Verdict { verdict: v } => describe_verdict(v, aliases),
        Output::Session { session: info } => format!(
            "session {} epoch {}",
            aliases.session_label(info.session_id),
            info.epoch
        ),
        other => format!("{other:?}"),
    }
}

fn describe_event(e: &Event, aliases: &Aliases) -> String {
    let s = aliases.session_label(e.session());
    match e {
        Event::Granted { ticket, leases, .. } => {
            format!(
                "GRANTED{{ticket={} session={s} leases={}}}",
                aliases.ticket_label(*ticket),
                describe_leases(leases, aliases)
            )
        }
        Event::Acquired { leases, .. } => format!(
            "ACQUIRED{{session={s} leases={}}}",
            describe_leases(leases, aliases)
        ),
        Event::Released { leases, .. } => format!(
            "RELEASED{{session={s} leases=[{}]}}",
            leases
                .iter()
                .map(|l| aliases.lease_label(*l))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::WaitTimeout { ticket, .. } => format!(
            "WAIT_TIMEOUT{{ticket={} session={s}}}",
            aliases.ticket_label(*ticket)
        ),
        Event::Died {
            ticket,
            retry_after_ms,
            cycle,
            ..
        } => {
            format!(
                "DIED{{ticket={} session={s} retry_after_ms={retry_after_ms}{}}}",
                aliases.ticket_label(*ticket),
                describe_cycle(cycle, aliases)
            )
        }
        Event::LeaseExpired { lease, .. } => format!(
            "LEASE_EXPIRED{{lease={} session={s}}}",
            aliases.lease_label(*lease)
        ),
        Event::Wounded {
            by,
            lost_leases,
            lost_tickets,
            retry_after_ms,
            ..
        } => format!(
            "WOUNDED{{session={s} by={} lost_leases=[{}] lost_tickets=[{}] retry_after_ms={retry_after_ms}}}",
            aliases.session_label(*by),
            lost_leases
                .iter()
                .map(|l| aliases.lease_label(*l))
                .collect::<Vec<_>>()
                .join(", "),
            lost_tickets
                .iter()
                .map(|t| aliases.ticket_label(*t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Event::SessionClosed { reason, .. } => {
            format!("SESSION_CLOSED{{session={s} reason={}}}", reason.name())
        }
    }
}

/// `[EVENT{...}, ...]`.
pub fn describe_events(events: &[Event], aliases: &Aliases) -> String {
    format!(
        "[{}]",
        events
            .iter()
            .map(|e| describe_event(e, aliases))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// ` (events: [...])` when there were events, for context in failure messages.
pub fn events_note(events: &[Event], aliases: &Aliases) -> String {
    if events.is_empty() {
        String::new()
    } else {
        format!(" (events: {})", describe_events(events, aliases))
    }
}
