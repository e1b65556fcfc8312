//! A log of `(Command, now)` is a complete record of a kernel (the contract of
//! `klock_core::Command`): replaying it into a fresh kernel with the same config gives the same
//! outputs, the same events and the same state hash, under every policy, whatever the
//! commands (valid or not) and however time jumps; so does `Kernel::replay_step`.

use klock_core::{
    AcquireOptions, Command, Config, Event, Kernel, LeaseId, Output, Policy, Replayed, SessionId,
    TicketId,
};
use proptest::prelude::*;

const RESOURCES: [&str; 5] = ["FILE:/a", "FILE:/a/b", "FILE:/c", "FILE:/", "SYMBOL:/a/f"];
const PREDICATES: [&str; 4] = ["MUTATES", "CONSUMES", "DELETES", "PROVIDES"];

fn command() -> impl Strategy<Value = Command> {
    let session = (1u64..6).prop_map(SessionId);
    let lease = (1u64..12).prop_map(LeaseId);
    prop_oneof![
        3 => (0usize..3, 0usize..2).prop_map(|(a, n)| Command::Open {
            agent_id: ["ann", "bob", "cy"][a].into(),
            namespace: ["default", "other"][n].into(),
        }),
        1 => session.clone().prop_map(|session| Command::Close { session }),
        1 => session.clone().prop_map(|session| Command::Suspend { session }),
        8 => (
            session.clone(),
            prop::collection::vec((0usize..4, 0usize..5), 1..3),
            prop::option::of(1u64..400),
            any::<bool>(),
            prop::option::of(0u64..300),
        )
            .prop_map(|(session, picks, ttl_ms, wait, wait_timeout_ms)| Command::Acquire {
                session,
                intents: picks
                    .into_iter()
                    .map(|(p, r)| format!("{} {}", PREDICATES[p], RESOURCES[r]))
                    .collect(),
                options: AcquireOptions {
                    ttl_ms,
                    wait,
                    wait_timeout_ms,
                },
            }),
        2 => (session.clone(), prop::option::of(prop::collection::vec(lease.clone(), 0..3)))
            .prop_map(|(session, leases)| Command::Heartbeat { session, leases }),
        3 => (session.clone(), lease.clone()).prop_map(|(session, lease)| Command::Release { session, lease }),
        2 => session.clone().prop_map(|session| Command::ReleaseAll { session }),
        1 => (session.clone(), prop::collection::vec(lease, 0..3))
            .prop_map(|(session, leases)| Command::Reconcile { session, leases }),
        1 => (session, 1u64..6).prop_map(|(session, t)| Command::CancelWait { session, ticket: TicketId(t) }),
        2 => Just(Command::Advance),
        1 => (0usize..5).prop_map(|r| Command::ResourceState {
            resource: RESOURCES[r].into(),
            namespace: "default".into(),
        }),
    ]
}

type Answer = (Result<Output, String>, Vec<Event>);

fn run(config: &Config, log: &[(Command, u64)]) -> (Vec<Answer>, Kernel) {
    let mut k = Kernel::new(config.clone()).unwrap();
    let answers = log
        .iter()
        .map(|(command, now)| {
            let out = k.apply(command, *now).map_err(|e| e.to_string());
            (out, std::iter::from_fn(|| k.poll_event()).collect())
        })
        .collect();
    (answers, k)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn replaying_a_command_log_reproduces_everything(
        policy in prop::sample::select(Policy::ALL.to_vec()),
        seed in any::<u64>(),
        steps in prop::collection::vec((command(), 0u64..150), 1..60),
    ) {
        let config = Config { policy, seed, backoff_base_ms: 10, grace_ms: 100, session_idle_ms: 500, ..Config::default() };
        let mut now = 0;
        let log: Vec<(Command, u64)> = steps
            .into_iter()
            .map(|(c, dt)| {
                now += dt;
                (c, now)
            })
            .collect();
        let (first, original) = run(&config, &log);
        let (again, replayed) = run(&config, &log);
        prop_assert_eq!(&first, &again);
        prop_assert_eq!(original.export_state().hash(), replayed.export_state().hash());
        // Replaying only a suffix on top of a restored snapshot gives the same state too.
        let cut = log.len() / 2;
        let (_, prefix) = run(&config, &log[..cut]);
        let mut resumed = Kernel::import_state(&prefix.export_state()).unwrap();
        for (command, now) in &log[cut..] {
            let _ = resumed.apply(command, *now);
            while resumed.poll_event().is_some() {}
        }
        prop_assert_eq!(resumed.export_state(), original.export_state());
        // Kernel::replay_step, one step per command (as a server's history holds them), gives
        // the same answers, the same events in the same order, and the same state.
        let mut stepped = Kernel::new(config.clone()).unwrap();
        let (mut answers, mut events) = (Vec::new(), Vec::new());
        for (command, now) in &log {
            stepped.replay_step(*now, std::slice::from_ref(command), |part| match part {
                Replayed::Answer(_, out) => answers.push(out.map_err(|e| e.to_string())),
                Replayed::Settled(event) | Replayed::Emitted(event) => events.push(event),
            });
        }
        let expected_answers: Vec<_> = again.iter().map(|(out, _)| out.clone()).collect();
        let expected_events: Vec<Event> = again.iter().flat_map(|(_, e)| e.clone()).collect();
        prop_assert_eq!(answers, expected_answers);
        prop_assert_eq!(events, expected_events);
        prop_assert_eq!(stepped.export_state(), original.export_state());
    }
}

#[test]
fn every_command_has_a_distinct_name() {
    let s = SessionId(1);
    let names: Vec<&str> = [
        Command::Open {
            agent_id: "a".into(),
            namespace: "n".into(),
        },
        Command::Close { session: s },
        Command::Suspend { session: s },
        Command::Digest { session: s },
        Command::Acquire {
            session: s,
            intents: vec![],
            options: AcquireOptions::default(),
        },
        Command::Heartbeat {
            session: s,
            leases: None,
        },
        Command::Release {
            session: s,
            lease: LeaseId(1),
        },
        Command::ReleaseAll { session: s },
        Command::Reconcile {
            session: s,
            leases: vec![],
        },
        Command::CancelWait {
            session: s,
            ticket: TicketId(1),
        },
        Command::Advance,
        Command::ResourceState {
            resource: "FILE:/".into(),
            namespace: "n".into(),
        },
        Command::NextDeadline,
    ]
    .iter()
    .map(Command::name)
    .collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}
