//! Which server a remote client asks, and when it gives up: the attempts of one call over the
//! nodes of a cluster (or over one server, a cluster of one).
//!
//! Contract (docs/SPEC.md §13.7, "Clients that fail over"):
//! - [`Servers`] is a client's list of server URLs, by position (the host keeps the URLs), and
//!   the node it prefers: the last one that answered. A call starts there. Any node serves any
//!   request (a follower proxies writes to the leader, and a session's token is valid on every
//!   node), so the client remembers the node that works rather than who leads.
//! - [`Attempts`] is one call's attempts, bounded by a budget counted from its start
//!   ([`Servers::call`]). [`Attempts::after`] answers each attempt's [`Outcome`] with [`Next`]:
//!   - answered: [`Next::Done`], and that node is preferred from now on;
//!   - unreachable, or a 503 (a node without a leader, or stopping): the next node at once,
//!     until every node was tried in this round; then a pause (the server's `Retry-After` when
//!     a 503 sent one, else the backoff: 50 ms, doubling to 1 s) and a new round from the node
//!     after;
//!   - a 429 (the node refused before doing anything: rate or wait limits): the same node
//!     after its `Retry-After`, else the backoff (another node would count against the same
//!     token's limits, and proxy to the same leader);
//!   - a pause that would end past the budget gives up ([`Next::GiveUp`]), saying whether the
//!     servers were out of reach or busy; nothing ever waits past the budget.
//! - *The leader, once named*: a follower's answer names the cluster's leader
//!   ([`LEADER_HEADER`], the leader's API URL as the cluster knows it). When that URL is one of
//!   the client's ([`Servers::led_by`]: the same but for a trailing `/` and the case of its
//!   scheme and host), the leader is preferred from then on: a follower passes every write on
//!   to the leader, so a client that stayed with it would pay two nodes' work and a second
//!   hop for each. A URL the client was not given is ignored (the cluster may know its nodes by
//!   addresses the client cannot reach); the failover rules above still decide when that node
//!   stops answering.
//! - *Every call its own budget*: a call made with [`Servers::call_once`] (a best-effort call:
//!   a close, a cancel) tries each node once, without pauses; every other call gets its whole
//!   budget, whatever the calls before it met. A server that restarts is back within seconds:
//!   a call that gave up before (a best-effort close during the restart) must not shorten the
//!   next one, or a client fails a call its budget would have carried through.
//! - It reads no clock and does no I/O: every time is the host's monotonic `now` in
//!   milliseconds. The host sends the requests, bounds each attempt
//!   ([`Attempts::attempt_limit_ms`]) and words the errors.

/// The response header in which a node that does not lead names the node that does (its API
/// URL), for [`Servers::led_by`].
pub const LEADER_HEADER: &str = "klock-leader";

/// The first pause after a round of failed attempts; it doubles up to [`BACKOFF_MAX_MS`].
pub const BACKOFF_FIRST_MS: u64 = 50;
/// The longest pause the backoff reaches.
pub const BACKOFF_MAX_MS: u64 = 1_000;
/// The least time an attempt is given, even at the end of its budget (a request cannot be
/// answered in no time).
pub const ATTEMPT_FLOOR_MS: u64 = 50;

/// A client's servers (module contract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Servers {
    count: usize,
    preferred: usize,
}

/// Why a list of servers cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoServers;

impl Servers {
    /// A client of `count` servers, preferring the first.
    ///
    /// # Errors
    /// [`NoServers`] for an empty list.
    pub fn new(count: usize) -> Result<Servers, NoServers> {
        if count == 0 {
            return Err(NoServers);
        }
        Ok(Servers {
            count,
            preferred: 0,
        })
    }

    /// How many servers.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The node a call starts with: the last that answered.
    pub fn preferred(&self) -> usize {
        self.preferred
    }

    /// An answer named `leader` (its [`LEADER_HEADER`]) as the cluster's leader: when it is
    /// one of the client's `urls` (in the order the servers were given), that node is
    /// preferred from now on, and returned; else nothing changes (module contract).
    pub fn led_by<'a>(
        &mut self,
        leader: &str,
        urls: impl IntoIterator<Item = &'a str>,
    ) -> Option<usize> {
        let node = urls
            .into_iter()
            .take(self.count)
            .position(|url| same_url(url, leader))?;
        self.preferred = node;
        Some(node)
    }

    /// A call started at `now_ms` with `budget_ms` to get an answer.
    pub fn call(&self, now_ms: u64, budget_ms: u64) -> Attempts {
        self.attempts(now_ms, budget_ms, false)
    }

    /// A best-effort call: every node once, without pauses, within `budget_ms`.
    pub fn call_once(&self, now_ms: u64, budget_ms: u64) -> Attempts {
        self.attempts(now_ms, budget_ms, true)
    }

    fn attempts(&self, now_ms: u64, budget_ms: u64, one_round: bool) -> Attempts {
        Attempts {
            node: self.preferred,
            ends_ms: now_ms.saturating_add(budget_ms),
            pause_ms: BACKOFF_FIRST_MS,
            failed_in_round: 0,
            one_round,
        }
    }
}

/// Whether two URLs name the same server: equal but for trailing `/`s and the ASCII case of
/// their scheme and authority (a path keeps its case).
fn same_url(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_end_matches('/'), b.trim_end_matches('/'));
    let (a_origin, a_path) = origin_and_path(a);
    let (b_origin, b_path) = origin_and_path(b);
    a_origin.eq_ignore_ascii_case(b_origin) && a_path == b_path
}

/// A URL's scheme and authority, and the rest (from the first `/` after `://`).
fn origin_and_path(url: &str) -> (&str, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find('/') {
        Some(i) => url.split_at(start + i),
        None => (url, ""),
    }
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The node answered (any answer but 429 and 503: a refusal is an answer).
    Answered,
    /// No answer: nothing listens, the connection broke, or the attempt's time ran out.
    Unreachable,
    /// A 503: the node has no leader, or is stopping; `retry_after_ms` from its `Retry-After`.
    Unavailable {
        /// The server's `Retry-After`, in milliseconds, if it sent one.
        retry_after_ms: Option<u64>,
    },
    /// A 429: the node refused before it did anything.
    Busy {
        /// The server's `Retry-After`, in milliseconds, if it sent one.
        retry_after_ms: Option<u64>,
    },
}

/// What the host does after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The call is answered.
    Done,
    /// Send the request again, to node `node`, after `after_ms` (0: at once).
    Retry {
        /// The node's position in the client's list.
        node: usize,
        /// How long to wait first, on the host's clock.
        after_ms: u64,
    },
    /// Stop: the budget cannot cover another attempt.
    GiveUp(GaveUp),
}

/// Why a call gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaveUp {
    /// The last attempt found no node that could answer (unreachable, or 503).
    Unreachable,
    /// The last attempt was refused with a 429: the host raises the server's own error.
    Busy,
}

/// One call's attempts (module contract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempts {
    node: usize,
    ends_ms: u64,
    pause_ms: u64,
    /// Nodes that failed since the round began (a round: every node once).
    failed_in_round: usize,
    /// Give up after one round, without pauses.
    one_round: bool,
}

impl Attempts {
    /// The node the next attempt goes to.
    pub fn node(&self) -> usize {
        self.node
    }

    /// When the budget ends, on the host's clock.
    pub fn ends_ms(&self) -> u64 {
        self.ends_ms
    }

    /// How long the attempt sent at `now_ms` may take: the host's own per-request limit, cut
    /// to what is left of the budget (but never below [`ATTEMPT_FLOOR_MS`]).
    pub fn attempt_limit_ms(&self, now_ms: u64, request_limit_ms: u64) -> u64 {
        let left = self.ends_ms.saturating_sub(now_ms).max(ATTEMPT_FLOOR_MS);
        left.min(request_limit_ms)
    }

    /// What to do after the attempt to [`Attempts::node`] ended with `outcome` at `now_ms`.
    pub fn after(&mut self, servers: &mut Servers, outcome: Outcome, now_ms: u64) -> Next {
        let (server_pause, gave_up) = match outcome {
            Outcome::Answered => {
                servers.preferred = self.node;
                return Next::Done;
            }
            Outcome::Busy { retry_after_ms } => {
                // The same node again: the pause is the whole answer to a busy node.
                return self.pause(retry_after_ms, now_ms, GaveUp::Busy);
            }
            Outcome::Unreachable => (None, GaveUp::Unreachable),
            Outcome::Unavailable { retry_after_ms } => (retry_after_ms, GaveUp::Unreachable),
        };
        self.failed_in_round += 1;
        self.node = (self.node + 1) % servers.count;
        if self.failed_in_round < servers.count {
            // An untried node of this round: at once, while the budget lasts.
            if now_ms >= self.ends_ms {
                return Next::GiveUp(gave_up);
            }
            return Next::Retry {
                node: self.node,
                after_ms: 0,
            };
        }
        self.failed_in_round = 0;
        self.pause(server_pause, now_ms, gave_up)
    }

    /// A pause before the next attempt (the server's, else the backoff), if the budget
    /// covers it.
    fn pause(&mut self, server_pause: Option<u64>, now_ms: u64, gave_up: GaveUp) -> Next {
        let pause = server_pause.unwrap_or(self.pause_ms);
        if self.one_round || now_ms.saturating_add(pause) > self.ends_ms {
            return Next::GiveUp(gave_up);
        }
        self.pause_ms = (self.pause_ms * 2).min(BACKOFF_MAX_MS);
        Next::Retry {
            node: self.node,
            after_ms: pause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const UNAVAILABLE: Outcome = Outcome::Unavailable {
        retry_after_ms: None,
    };

    fn retry(node: usize, after_ms: u64) -> Next {
        Next::Retry { node, after_ms }
    }

    /// An answer naming the leader moves the client there when it is one of its URLs (the
    /// same but for trailing `/`s and the case of scheme and host), and nowhere otherwise.
    #[test]
    fn the_leader_named_by_an_answer_is_preferred_when_it_is_a_known_url() {
        let urls = [
            "http://10.0.0.1:7000",
            "HTTPS://Node-B.example:7000/",
            "http://10.0.0.3:7000/klock",
        ];
        let mut servers = Servers::new(3).unwrap();
        assert_eq!(servers.led_by("https://node-b.EXAMPLE:7000", urls), Some(1));
        assert_eq!(servers.preferred(), 1);
        assert_eq!(servers.call(0, 1_000).node(), 1);
        assert_eq!(servers.led_by("http://10.0.0.3:7000/klock/", urls), Some(2));
        assert_eq!(servers.preferred(), 2);
        for unknown in [
            "http://10.0.0.9:7000",
            "http://10.0.0.3:7000/KLOCK",
            "http://10.0.0.1:7001",
            "",
        ] {
            assert_eq!(servers.led_by(unknown, urls), None, "{unknown}");
            assert_eq!(servers.preferred(), 2, "{unknown}");
        }
        // Only the client's own servers count, however many URLs are passed.
        let mut two = Servers::new(2).unwrap();
        assert_eq!(two.led_by("http://10.0.0.3:7000/klock", urls), None);
        assert_eq!(two.preferred(), 0);
    }

    #[test]
    fn an_empty_list_is_refused() {
        assert_eq!(Servers::new(0), Err(NoServers));
    }

    #[test]
    fn a_call_starts_at_the_node_that_last_answered() {
        let mut servers = Servers::new(3).unwrap();
        let mut call = servers.call(0, 10_000);
        assert_eq!(call.node(), 0);
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 1),
            retry(1, 0)
        );
        assert_eq!(call.after(&mut servers, Outcome::Answered, 2), Next::Done);
        assert_eq!(servers.preferred(), 1);
        assert_eq!(servers.call(3, 10_000).node(), 1);
    }

    #[test]
    fn every_node_is_tried_at_once_then_the_backoff_doubles_to_its_cap() {
        let mut servers = Servers::new(3).unwrap();
        let mut call = servers.call(0, 60_000);
        let mut pauses = Vec::new();
        for _ in 0..24 {
            match call.after(&mut servers, Outcome::Unreachable, 0) {
                Next::Retry { after_ms: 0, .. } => {}
                Next::Retry { after_ms, .. } => pauses.push(after_ms),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1_000, 1_000, 1_000]);
    }

    #[test]
    fn a_round_after_a_pause_starts_at_the_next_node() {
        let mut servers = Servers::new(2).unwrap();
        let mut call = servers.call(0, 60_000);
        assert_eq!(call.after(&mut servers, UNAVAILABLE, 0), retry(1, 0));
        assert_eq!(call.after(&mut servers, UNAVAILABLE, 0), retry(0, 50));
        assert_eq!(call.after(&mut servers, UNAVAILABLE, 50), retry(1, 0));
    }

    #[test]
    fn a_503_retry_after_sets_the_pause_after_a_round() {
        let mut servers = Servers::new(1).unwrap();
        let mut call = servers.call(0, 60_000);
        let no_leader = Outcome::Unavailable {
            retry_after_ms: Some(1_000),
        };
        assert_eq!(call.after(&mut servers, no_leader, 0), retry(0, 1_000));
    }

    #[test]
    fn a_429_stays_on_its_node_and_gives_up_busy() {
        let mut servers = Servers::new(3).unwrap();
        let mut call = servers.call(0, 1_500);
        let busy = Outcome::Busy {
            retry_after_ms: Some(1_000),
        };
        assert_eq!(call.after(&mut servers, busy, 0), retry(0, 1_000));
        assert_eq!(
            call.after(&mut servers, busy, 1_000),
            Next::GiveUp(GaveUp::Busy)
        );
        let backoff = Outcome::Busy {
            retry_after_ms: None,
        };
        let mut call = servers.call(0, 1_500);
        assert_eq!(call.after(&mut servers, backoff, 0), retry(0, 50));
    }

    #[test]
    fn nothing_waits_past_the_budget() {
        let mut servers = Servers::new(2).unwrap();
        let mut call = servers.call(100, 120);
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 110),
            retry(1, 0)
        );
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 180),
            Next::GiveUp(GaveUp::Unreachable)
        );
        // An untried node is not tried once the budget is spent.
        let mut call = servers.call_once(0, 100);
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 100),
            Next::GiveUp(GaveUp::Unreachable)
        );
    }

    #[test]
    fn a_call_that_gave_up_does_not_shorten_the_next() {
        // A server restarting: a best-effort close, and a call whose budget ran out, both
        // give up; the next call still gets its whole budget, and pauses between rounds.
        let mut servers = Servers::new(2).unwrap();
        let mut close = servers.call_once(0, 100);
        close.after(&mut servers, Outcome::Unreachable, 0);
        assert_eq!(
            close.after(&mut servers, Outcome::Unreachable, 0),
            Next::GiveUp(GaveUp::Unreachable)
        );
        let mut short = servers.call(0, 40);
        short.after(&mut servers, Outcome::Unreachable, 0);
        assert_eq!(
            short.after(&mut servers, Outcome::Unreachable, 0),
            Next::GiveUp(GaveUp::Unreachable)
        );
        let mut call = servers.call(1_000, 60_000);
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 1_000),
            retry(1, 0)
        );
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 1_000),
            retry(0, 50),
            "a new round after a pause, not a give-up"
        );
        assert_eq!(
            call.after(&mut servers, Outcome::Answered, 1_050),
            Next::Done
        );
    }

    #[test]
    fn a_best_effort_call_tries_each_node_once() {
        let mut servers = Servers::new(3).unwrap();
        let mut call = servers.call_once(0, 10_000);
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 0),
            retry(1, 0)
        );
        assert_eq!(call.after(&mut servers, UNAVAILABLE, 0), retry(2, 0));
        assert_eq!(
            call.after(&mut servers, Outcome::Unreachable, 0),
            Next::GiveUp(GaveUp::Unreachable)
        );
    }

    #[test]
    fn an_attempt_gets_what_is_left_of_the_budget_within_the_request_limit() {
        let servers = Servers::new(1).unwrap();
        let call = servers.call(1_000, 30_000);
        assert_eq!(call.ends_ms(), 31_000);
        assert_eq!(call.attempt_limit_ms(1_000, 10_000), 10_000);
        assert_eq!(call.attempt_limit_ms(25_000, 10_000), 6_000);
        assert_eq!(call.attempt_limit_ms(31_000, 10_000), ATTEMPT_FLOOR_MS);
        assert_eq!(call.attempt_limit_ms(40_000, 10_000), ATTEMPT_FLOOR_MS);
        assert_eq!(
            servers.call(u64::MAX - 5, 100).ends_ms(),
            u64::MAX,
            "no overflow"
        );
    }
}
