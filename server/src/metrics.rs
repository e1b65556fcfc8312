//! Prometheus text metrics (`GET /metrics`).
//!
//! Contract: counters only grow; histograms are cumulative with the usual `_bucket{le=..}`,
//! `_sum` and `_count` series. Requests are counted by route template (never by raw path, so
//! ids cannot grow the label set) and status; the kernel's own counters and live totals come
//! from its `stats()` at scrape time; the log's commits (batches, entries, time per durable
//! write) are counted by the engine.

use klock_core::Stats;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A cumulative histogram of durations.
pub struct Histogram {
    /// Upper bounds in seconds.
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let n = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

const LATENCY: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// Everything the server counts itself.
pub struct Metrics {
    /// Requests by route template, then status: looked up by `&str`, so counting a request
    /// of a route already seen allocates nothing.
    requests: Mutex<BTreeMap<String, BTreeMap<u16, u64>>>,
    pub request_seconds: Histogram,
    pub commit_seconds: Histogram,
    pub commit_entries: AtomicU64,
    pub log_entries: AtomicU64,
    /// Opens refused with TOO_MANY_SESSIONS (a session cap).
    pub sessions_refused: AtomicU64,
    /// Bytes of remembered idempotency answers, as of the last scrape.
    pub idempotency_bytes: AtomicU64,
    /// Connections and requests refused before routing (`conn`, `guard`).
    pub net: std::sync::Arc<crate::conn::NetMetrics>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            request_seconds: Histogram::new(LATENCY),
            commit_seconds: Histogram::new(LATENCY),
            commit_entries: AtomicU64::new(0),
            log_entries: AtomicU64::new(0),
            sessions_refused: AtomicU64::new(0),
            idempotency_bytes: AtomicU64::new(0),
            net: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts a finished request.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        let mut requests = self.requests.lock().expect("metrics lock");
        let by_status = match requests.get_mut(route) {
            Some(by_status) => by_status,
            None => requests.entry(route.to_owned()).or_default(),
        };
        *by_status.entry(status).or_insert(0) += 1;
        drop(requests);
        self.request_seconds.observe(took);
    }

    /// The text exposition, with the kernel's `stats`.
    pub fn render(&self, stats: &Stats) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP klock_requests_total HTTP requests by route and status.\n# TYPE klock_requests_total counter"
        );
        for (route, by_status) in self.requests.lock().expect("metrics lock").iter() {
            for (status, n) in by_status {
                let _ = writeln!(
                    out,
                    "klock_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        self.request_seconds
            .render(&mut out, "klock_request_seconds", "HTTP request latency.");
        let c = &stats.counters;
        let _ = writeln!(
            out,
            "# HELP klock_outcomes_total Kernel outcomes since start (restored with the state).\n# TYPE klock_outcomes_total counter"
        );
        for (name, n) in [
            ("granted", c.granted),
            ("waited", c.waited),
            ("died", c.died),
            ("timed_out", c.timed_out),
            ("expired", c.expired),
            ("wounded", c.wounded),
            ("released", c.released),
            ("cancelled", c.cancelled),
            ("idle_closed", c.idle_closed),
        ] {
            let _ = writeln!(out, "klock_outcomes_total{{outcome=\"{name}\"}} {n}");
        }
        for (name, help, n) in [
            (
                "klock_active_sessions",
                "Open sessions.",
                stats.active_sessions,
            ),
            ("klock_active_leases", "Active leases.", stats.active_leases),
            (
                "klock_waiting_tickets",
                "Waiting tickets.",
                stats.waiting_tickets,
            ),
            (
                "klock_log_entries",
                "Entries in the log after the last snapshot.",
                self.log_entries.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {n}");
        }
        let committed = self.commit_entries.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP klock_committed_entries_total Log entries made durable.\n# TYPE klock_committed_entries_total counter\nklock_committed_entries_total {committed}"
        );
        self.commit_seconds.render(
            &mut out,
            "klock_commit_seconds",
            "Time of one durable log write (one fsync per batch).",
        );
        let refused = self.sessions_refused.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP klock_sessions_refused_total Opens refused with TOO_MANY_SESSIONS (a session cap).\n# TYPE klock_sessions_refused_total counter\nklock_sessions_refused_total {refused}"
        );
        let bytes = self.idempotency_bytes.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP klock_idempotency_answer_bytes Bytes of remembered idempotency answers (budget: --idempotency-bytes).\n# TYPE klock_idempotency_answer_bytes gauge\nklock_idempotency_answer_bytes {bytes}"
        );
        self.net.render(&mut out);
        out
    }
}
