//! A write whose answer was lost is sent again with the same `Idempotency-Key`: the server
//! answers it as it first did and applies it once (SPEC §13.7: what makes a retry on another
//! node of a cluster safe). Against a real `klock serve --memory`, through a cuttable loopback
//! link; bounded in time.

mod support;

use klock_client::routes::{resource_state, Acquired, Outcome, Session};
use klock_client::transport::{Endpoint, Transport};
use klock_core::Verdict;
use klock_testkit::link::Link;
use std::time::Duration;
use support::{eventually, server};

const X: &str = "MUTATES FILE:/x";

fn transport(port: u16) -> Transport {
    Transport::new(Endpoint::Tcp(format!("127.0.0.1:{port}")), None)
}

/// The tickets waiting on FILE:/x.
async fn waiting(direct: &Transport) -> usize {
    let (state, _) = resource_state(direct, "default", "FILE:/x").await.unwrap();
    state.waiting.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_was_cut_is_sent_again_with_its_key_and_applied_once() {
    let server = server(&[]);
    let link = Link::open(server.port()).unwrap();
    let direct = transport(server.port());
    let body = async {
        // The waiter's session is the older, so its acquire queues a ticket (Wait-Die).
        let waiter = Session::open(transport(link.port()), "default", "waiter")
            .await
            .unwrap();
        let holder = Session::open(direct.clone(), "default", "holder")
            .await
            .unwrap();
        let intents = [X.to_owned()];
        let granted = holder
            .acquire(&intents, 60_000, Some(0), Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(
            granted,
            Acquired::Verdict(Verdict::Granted { .. })
        ));
        // A held acquire: the server queues the ticket and keeps the request open ...
        let asking = tokio::spawn(async move {
            let hold = Duration::from_secs(3);
            waiter.acquire(&intents, 60_000, Some(20_000), hold).await
        });
        assert!(
            eventually(Duration::from_secs(10), || async {
                waiting(&direct).await == 1
            })
            .await
        );
        // ... when the network goes: the answer is lost, the command was applied.
        link.cut();
        tokio::time::sleep(Duration::from_millis(300)).await;
        link.restore();
        let answer = asking
            .await
            .unwrap()
            .expect("answered once the link is back");
        // The retry got the first answer (the same ticket), and queued nothing more.
        let ticket = match answer {
            Acquired::Verdict(Verdict::Wait { ticket, .. }) => ticket.0,
            Acquired::Resolved(ticket, Outcome::Waiting) => ticket,
            other => panic!("{other:?}"),
        };
        assert_eq!(ticket, 1);
        assert_eq!(waiting(&direct).await, 1, "applied once");
    };
    tokio::time::timeout(Duration::from_secs(30), body)
        .await
        .expect("the test ran past its 30 s bound");
}
