//! Prometheus text metrics (`GET /metrics`), named as Prometheus asks: the unit in the name
//! (`_seconds`, `_bytes`), `_total` on counters, base units only.
//!
//! Contract: counters only grow; histograms are cumulative with the usual `_bucket{le=..}`,
//! `_sum` and `_count` series. Requests are counted by route template (never by raw path, so
//! ids cannot grow the label set) and status, and timed per route
//! (`klock_http_request_duration_seconds{route}`): the route table is built once when the
//! server starts and only read afterwards, so counting a request is a hash lookup and a few
//! relaxed atomic adds, with no lock shared by requests. The kernel's own counters and live
//! totals come from its `stats()` at scrape time; the log's commits (batches, entries, time per
//! durable write) are counted by the engine; `klock_build_info` says which build answers, and
//! the `process_*` series (Linux, from /proc) are the ones Prometheus's own clients export.

use klock_core::Stats;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A cumulative histogram of durations. One observation is one add to its bucket (the
/// buckets are summed when rendered), one to the sum.
pub struct Histogram {
    /// Upper bounds in seconds.
    bounds: &'static [f64],
    /// Observations per bucket, not cumulative; the last one is above every bound.
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let bucket = self.bounds.partition_point(|bound| *bound < secs);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The `_bucket`, `_sum` and `_count` lines, with `labels` (`route="..."`, or empty).
    fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[self.bounds.len()].load(Ordering::Relaxed);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            out,
            "{name}_sum{braced} {sum}\n{name}_count{braced} {cumulative}"
        );
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, "");
    }

    fn observed(&self) -> bool {
        self.counts.iter().any(|c| c.load(Ordering::Relaxed) > 0)
    }
}

const LATENCY: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// HTTP status codes 100..=599, one counter each.
const STATUSES: usize = 500;

/// One route's requests: by status, and their durations.
struct RouteStats {
    by_status: Box<[AtomicU64]>,
    seconds: Histogram,
}

impl RouteStats {
    fn new() -> RouteStats {
        RouteStats {
            by_status: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            seconds: Histogram::new(LATENCY),
        }
    }
}

/// The route a request is counted under when its template is not in the table (it is
/// built from the router's own list, so only a route added outside it lands here).
pub const OTHER_ROUTE: &str = "other";

/// Everything the server counts itself.
pub struct Metrics {
    /// Requests by route template: filled once ([`Metrics::new`]), then only read.
    routes: HashMap<String, RouteStats>,
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
    /// The metrics of a server with the API's routes ([`crate::api::route_templates`]).
    fn default() -> Metrics {
        Metrics::new(crate::api::route_templates())
    }
}

impl Metrics {
    /// Metrics counting requests of `routes` (templates, as the router matches them), and of
    /// [`OTHER_ROUTE`].
    pub fn new(routes: impl IntoIterator<Item = String>) -> Metrics {
        let mut table: HashMap<String, RouteStats> = routes
            .into_iter()
            .map(|route| (route, RouteStats::new()))
            .collect();
        table.insert(String::from(OTHER_ROUTE), RouteStats::new());
        Metrics {
            routes: table,
            commit_seconds: Histogram::new(LATENCY),
            commit_entries: AtomicU64::new(0),
            log_entries: AtomicU64::new(0),
            sessions_refused: AtomicU64::new(0),
            idempotency_bytes: AtomicU64::new(0),
            net: Default::default(),
        }
    }

    /// Counts a finished request (no lock: see the module contract).
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        let stats = match self.routes.get(route) {
            Some(stats) => stats,
            None => &self.routes[OTHER_ROUTE],
        };
        let slot = usize::from(status).saturating_sub(100).min(STATUSES - 1);
        stats.by_status[slot].fetch_add(1, Ordering::Relaxed);
        stats.seconds.observe(took);
    }

    /// The text exposition, with the kernel's `stats`.
    pub fn render(&self, stats: &Stats) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP klock_build_info The build answering: its version and git commit (empty if unknown).\n# TYPE klock_build_info gauge\nklock_build_info{{version=\"{}\",commit=\"{}\"}} 1",
            crate::about::VERSION,
            crate::about::commit().unwrap_or("")
        );
        let mut routes: Vec<(&String, &RouteStats)> = self.routes.iter().collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        let _ = writeln!(
            out,
            "# HELP klock_http_requests_total HTTP requests by route template and status.\n# TYPE klock_http_requests_total counter"
        );
        for (route, route_stats) in &routes {
            for (slot, n) in route_stats.by_status.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let status = slot + 100;
                    let _ = writeln!(
                        out,
                        "klock_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        let name = "klock_http_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} HTTP request latency by route template (routes with requests only).\n# TYPE {name} histogram"
        );
        for (route, route_stats) in &routes {
            if route_stats.seconds.observed() {
                let labels = format!("route=\"{route}\"");
                route_stats.seconds.render_series(&mut out, name, &labels);
            }
        }
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
        crate::process::render(&mut out);
        out
    }
}
