//! The process metrics Prometheus's own clients export (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from /proc at scrape time.
//!
//! Contract: Linux only; a value that cannot be read (another system, a /proc without the
//! file) is left out of the exposition rather than shown as 0. Reading costs a scrape a few
//! small file reads and nothing to the requests.

use std::fmt::Write as _;

/// The fields of /proc/self/stat after the command name (which may hold spaces): field 3
/// (state) is index 0.
fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Seconds since the epoch the system booted (`btime` of /proc/stat).
fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf reads a system constant.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok().filter(|v| *v > 0)
}

fn gauge(out: &mut String, name: &str, kind: &str, help: &str, value: Option<f64>) {
    if let Some(v) = value {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
}

/// Appends the process metrics (module contract).
pub fn render(out: &mut String) {
    let fields = stat_fields();
    let field = |i: usize| -> Option<u64> { fields.as_ref()?.get(i)?.parse().ok() };
    let ticks = sysconf(libc::_SC_CLK_TCK);
    let page = sysconf(libc::_SC_PAGESIZE);
    // Fields 14 and 15 (utime, stime), 22 (starttime), 23 (vsize), 24 (rss): indexes - 3.
    let cpu = (|| Some((field(11)? + field(12)?) as f64 / ticks? as f64))();
    gauge(
        out,
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        cpu,
    );
    let rss = (|| Some((field(21)? * page?) as f64))();
    gauge(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        rss,
    );
    gauge(
        out,
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        field(20).map(|v| v as f64),
    );
    let fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    gauge(
        out,
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        fds,
    );
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct given.
    let max = (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0)
        .then_some(limit.rlim_cur as f64);
    gauge(
        out,
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        max,
    );
    let start = (|| Some(boot_time()? as f64 + field(19)? as f64 / ticks? as f64))();
    gauge(
        out,
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        start,
    );
}
