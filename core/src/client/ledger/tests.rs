use super::*;
use alloc::string::String;
use alloc::vec;

fn lease(id: u64, session: u64, expires_at: u64, ttl_ms: u64) -> Lease {
    Lease {
        lease_id: LeaseId(id),
        session_id: SessionId(session),
        agent_id: String::from("a"),
        resource: alloc::format!("FILE:/{id}"),
        predicate: crate::Predicate::Mutates,
        fence: id,
        acquired_at: 0,
        expires_at,
        ttl_ms,
    }
}

const S: SessionId = SessionId(1);

/// Block ids, as a host gives them.
trait NewBlock {
    fn new_block(&mut self) -> BlockId;
}

impl NewBlock for Ledger {
    fn new_block(&mut self) -> BlockId {
        static NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
        BlockId(NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed))
    }
}

#[test]
fn renews_a_third_of_the_way_through_the_ttl() {
    assert_eq!(renew_at(30_000, 30_000), 10_000);
    assert_eq!(renew_at(u64::MAX, 30_000), u64::MAX);
    assert_eq!(renew_at(5, u64::MAX), 0); // saturates, never wraps
    assert_eq!(
        renew_at(u64::MAX - 1, u64::MAX),
        u64::MAX - 1 - (u64::MAX / 3 * 2)
    );
}

#[test]
fn a_lone_block_holds_schedules_and_releases_its_leases() {
    let mut l = Ledger::new();
    let b = l.new_block();
    let due = l.grant(b, (), S, [lease(7, 1, 30_000, 30_000)], None, 0);
    assert_eq!(due, 10_000);
    assert!(l.is_held(b) && l.holds_leases(S) && l.is_scheduled(b));
    assert_eq!(l.next_heartbeat(), Some(10_000));
    assert_eq!(l.releasable(b).as_slice(), [LeaseId(7)]);
    let (_, leases) = l.finish(b).unwrap();
    assert_eq!(leases[0].lease.lease_id, LeaseId(7));
    assert!(!l.is_held(b) && !l.holds_leases(S));
    assert_eq!(l.next_heartbeat(), None);
    assert!(l.session_leases(S).is_empty());
}

#[test]
fn a_block_carries_its_hosts_handle_until_it_finishes() {
    let mut l: Ledger<&str> = Ledger::new();
    let (a, b) = (BlockId(1), BlockId(2));
    l.grant(a, "outer", S, [lease(1, 1, 3_000, 3_000)], None, 0);
    l.grant(b, "inner", S, [lease(1, 1, 3_000, 3_000)], None, 0);
    assert_eq!((l.handle(a), l.handle(b)), (Some(&"outer"), Some(&"inner")));
    let mut all: Vec<&str> = l.handles().copied().collect();
    all.sort_unstable();
    assert_eq!(all, ["inner", "outer"]);
    let (handle, leases) = l.finish(b).unwrap();
    assert_eq!((handle, leases.len()), ("inner", 1));
    assert_eq!(l.handle(b), None);
    assert!(l.finish(b).is_none(), "once");
}

#[test]
fn a_due_time_in_the_past_is_now() {
    let mut l = Ledger::new();
    let b = l.new_block();
    assert_eq!(l.grant(b, (), S, [lease(1, 1, 100, 90)], None, 80), 80);
}

#[test]
fn nested_blocks_share_a_lease_until_the_last_ends_and_follow_its_renewal() {
    let mut l = Ledger::new();
    let (outer, inner) = (l.new_block(), l.new_block());
    l.grant(outer, (), S, [lease(1, 1, 3_000, 3_000)], None, 0);
    // The inner block reuses lease 1 (renewed with a longer TTL) and gets lease 2.
    l.grant(
        inner,
        (),
        S,
        [lease(1, 1, 9_500, 9_000), lease(2, 1, 9_500, 9_000)],
        None,
        500,
    );
    assert_eq!(
        l.leases(outer)[0].lease.expires_at,
        9_500,
        "the outer block follows"
    );
    assert_eq!(l.renew_due(outer), 3_500);
    assert_eq!(l.releasable(inner).as_slice(), [LeaseId(2)]);
    assert!(l.releasable(outer).is_empty());
    l.finish(inner);
    assert_eq!(l.releasable(outer).as_slice(), [LeaseId(1)]);
    assert_eq!(l.session_leases(S), vec![LeaseId(1)]);
}

#[test]
fn a_lost_lease_reaches_every_holder_and_is_not_released_or_renewed() {
    let mut l = Ledger::new();
    let (outer, inner) = (l.new_block(), l.new_block());
    l.grant(outer, (), S, [lease(1, 1, 3_000, 3_000)], None, 0);
    l.grant(
        inner,
        (),
        S,
        [lease(1, 1, 3_000, 3_000), lease(2, 1, 3_000, 3_000)],
        None,
        0,
    );
    assert_eq!(l.lose(LeaseId(1)).as_slice(), [outer, inner]);
    assert!(l.lose(LeaseId(1)).is_empty(), "once");
    assert!(!l.is_scheduled(outer) && !l.is_scheduled(inner));
    assert_eq!(l.releasable(inner).as_slice(), [LeaseId(2)]);
    assert!(l.releasable(outer).is_empty());
    assert_eq!(l.session_leases(S), vec![LeaseId(2)]);
    assert_eq!(
        l.leases(outer).len(),
        1,
        "a lost lease stays reported until the block ends"
    );
    l.finish(inner);
    l.finish(outer);
    assert!(!l.holds_leases(S));
    assert!(l.held_per_session.is_empty() && l.holders.is_empty() && l.blocks.is_empty());
}

#[test]
fn due_blocks_come_in_time_order_and_a_renewed_one_moves() {
    let mut l = Ledger::new();
    let (a, b) = (l.new_block(), l.new_block());
    l.grant(a, (), S, [lease(1, 1, 3_000, 3_000)], None, 0); // due 1000
    l.grant(b, (), SessionId(2), [lease(2, 2, 3_300, 3_000)], None, 300); // due 1300
    assert_eq!(l.pop_due(999), None);
    // Lease 1 was renewed by someone else meanwhile: due at 2000 now.
    l.renewed(LeaseId(1), 4_000, None, None);
    assert_eq!(l.pop_due(1_500), Some((b, SessionId(2), vec![LeaseId(2)])));
    assert!(!l.is_scheduled(b));
    assert_eq!(l.next_heartbeat(), Some(2_000), "moved, not returned");
    l.schedule(b, 2_300);
    assert_eq!(l.pop_due(2_000), Some((a, S, vec![LeaseId(1)])));
    assert_eq!(l.pop_due(2_000), None);
    assert_eq!(l.scheduled_blocks(), vec![b]);
}

#[test]
fn a_host_due_time_overrides_the_kernels_figures() {
    let mut l = Ledger::new();
    let b = l.new_block();
    assert_eq!(
        l.grant(b, (), S, [lease(1, 1, 30_000, 30_000)], Some(&[0]), 50),
        50
    );
    l.renewed(LeaseId(1), 60_000, Some(30_000), Some(40_000));
    assert_eq!(l.renew_due(b), 40_000);
}

#[test]
fn a_lease_that_never_expires_is_never_scheduled() {
    let mut l = Ledger::new();
    let b = l.new_block();
    assert_eq!(
        l.grant(b, (), S, [lease(1, 1, u64::MAX, 30_000)], None, 0),
        u64::MAX
    );
    assert!(!l.is_scheduled(b));
    assert_eq!(l.next_heartbeat(), None);
}

/// Against a naive model (lists, recomputed from scratch): random grants (nested reuse
/// included), finishes, losses and heartbeat pops, everything observable compared after
/// every step.
#[test]
fn agrees_with_a_naive_model() {
    struct ModelBlock {
        id: BlockId,
        session: SessionId,
        leases: Vec<u64>,
        lost: Vec<u64>,
        scheduled: Option<u64>,
    }
    let mut seed: u64 = 0x005e_ed1e_d9e4;
    let mut rand = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut l = Ledger::new();
    let mut model: Vec<ModelBlock> = Vec::new();
    let mut next_lease = 1u64;
    let mut now = 0u64;
    for _ in 0..5_000 {
        now += rand(50);
        match rand(4) {
            0 | 1 => {
                let session = SessionId(1 + rand(3));
                let block = l.new_block();
                let mut ids = Vec::new();
                // Reuse a lease a held block of the session holds (nesting), or a new one.
                for _ in 0..1 + rand(2) {
                    let reusable: Vec<u64> = model
                        .iter()
                        .filter(|m| m.session == session)
                        .flat_map(|m| m.leases.iter().filter(|i| !m.lost.contains(i)))
                        .copied()
                        .collect();
                    let id = if !reusable.is_empty() && rand(2) == 0 {
                        reusable[rand(reusable.len() as u64) as usize]
                    } else {
                        next_lease += 1;
                        next_lease
                    };
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                let ttl = 300 + rand(3) * 300;
                let due = l.grant(
                    block,
                    (),
                    session,
                    ids.iter().map(|&id| lease(id, session.0, now + ttl, ttl)),
                    None,
                    now,
                );
                assert_eq!(due, (now + ttl - ttl * 2 / 3).max(now));
                model.push(ModelBlock {
                    id: block,
                    session,
                    leases: ids,
                    lost: Vec::new(),
                    scheduled: Some(due),
                });
            }
            2 if !model.is_empty() => {
                let m = model.remove(rand(model.len() as u64) as usize);
                let expect: Vec<LeaseId> = m
                    .leases
                    .iter()
                    .filter(|id| !m.lost.contains(id))
                    .filter(|id| {
                        !model
                            .iter()
                            .any(|o| o.leases.contains(id) && !o.lost.contains(id))
                    })
                    .map(|&id| LeaseId(id))
                    .collect();
                assert_eq!(l.releasable(m.id).as_slice(), expect.as_slice());
                l.finish(m.id);
            }
            3 if !model.is_empty() => {
                let m = &model[rand(model.len() as u64) as usize];
                let id = m.leases[rand(m.leases.len() as u64) as usize];
                let mut expect: Vec<BlockId> = model
                    .iter()
                    .filter(|o| o.leases.contains(&id) && !o.lost.contains(&id))
                    .map(|o| o.id)
                    .collect();
                let mut got = l.lose(LeaseId(id)).to_vec();
                expect.sort();
                got.sort();
                assert_eq!(got, expect);
                for o in model.iter_mut().filter(|o| o.leases.contains(&id)) {
                    if !o.lost.contains(&id) {
                        o.lost.push(id);
                        o.scheduled = None;
                    }
                }
            }
            _ => {
                while let Some((block, session, ids)) = l.pop_due(now) {
                    let m = model.iter_mut().find(|m| m.id == block).unwrap();
                    assert_eq!(m.session, session);
                    let live: Vec<LeaseId> = m
                        .leases
                        .iter()
                        .filter(|id| !m.lost.contains(id))
                        .map(|&id| LeaseId(id))
                        .collect();
                    assert_eq!(ids, live);
                    // Renew every lease by a fixed TTL, as a heartbeat would.
                    for id in &ids {
                        l.renewed(*id, now + 600, Some(600), None);
                    }
                    let due = l.renew_due(block).max(now + 1);
                    l.schedule(block, due);
                    m.scheduled = Some(due);
                }
            }
        }
        // Observables.
        for session in 1..=3 {
            let session = SessionId(session);
            let mut expect: Vec<LeaseId> = model
                .iter()
                .filter(|m| m.session == session)
                .flat_map(|m| m.leases.iter().filter(|i| !m.lost.contains(i)))
                .map(|&id| LeaseId(id))
                .collect();
            expect.sort();
            expect.dedup();
            assert_eq!(l.session_leases(session), expect);
            assert_eq!(l.holds_leases(session), !expect.is_empty());
        }
        for m in &model {
            assert!(l.is_held(m.id));
            assert_eq!(l.is_scheduled(m.id), m.scheduled.is_some());
        }
        let live_blocks = model.iter().filter(|m| m.scheduled.is_some()).count();
        assert_eq!(l.scheduled_blocks().len(), live_blocks);
    }
}
