//! `klock elect` as users run it: five real `klock elect` processes campaign for one election
//! through a real `klock serve --memory`; each leader's command writes its term to a fenced
//! register (a TCP listener in this test that accepts a write only if its term is at least
//! the largest it accepted). The leader is SIGKILLed (with its command: a crashed machine),
//! SIGSTOPped past its TTL (a frozen machine, thawed later), and resigns (SIGTERM). Checked:
//! one leader's command per term, terms strictly increasing from leader to leader, a successor
//! elected within the TTL plus the retry delay, a thawed leader's command stopped with exit
//! 107, and a resigning leader's exit after releasing. Every wait is bounded; everything
//! started is killed at the end.

use klock_testkit::process::Spawned;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);
/// A bound for a failing test, not a timing claim: TTL, then the largest retry delay a dead
/// campaigner sleeps, then scheduling on a loaded 2-core machine.
const ELECTED_WITHIN: Duration = Duration::from_secs(6);

/// One write the register saw.
#[derive(Clone, Copy, Debug)]
struct Write {
    at: Instant,
    term: u64,
    pid: i32,
    accepted: bool,
}

/// The fenced register: accepts a write whose term is at least the largest accepted.
#[derive(Default)]
struct Register {
    largest: u64,
    writes: Vec<Write>,
}

fn listen(register: Arc<Mutex<Register>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut line = String::new();
            if BufReader::new(stream).read_line(&mut line).is_err() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(term), Some(pid)) = (words.next(), words.next()) else {
                continue;
            };
            let (Ok(term), Ok(pid)) = (term.parse::<u64>(), pid.parse::<i32>()) else {
                continue;
            };
            let mut r = register.lock().unwrap();
            let accepted = term >= r.largest;
            if accepted {
                r.largest = term;
            }
            r.writes.push(Write {
                at: Instant::now(),
                term,
                pid,
                accepted,
            });
        }
    });
    port
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a process (or group, pid < 0) this test started.
    unsafe { libc::kill(pid, sig) };
}

/// A campaigner: a `klock elect` process; its command writes `TERM PID` to the register
/// every 50 ms while it runs.
struct Campaigner {
    child: Child,
}

impl Campaigner {
    fn start(klock: &Path, server: u16, register: u16, n: usize) -> Campaigner {
        let mut command = Command::new(klock);
        for name in ["KLOCK_SERVER", "KLOCK_SOCKET", "KLOCK_TOKEN", "KLOCK_NS"] {
            command.env_remove(name);
        }
        let write = format!(
            "while :; do echo \"$KLOCK_TERM $$\" > /dev/tcp/127.0.0.1/{register} || exit 1; sleep 0.05; done"
        );
        command
            .arg("elect")
            .args(["--server", &format!("http://127.0.0.1:{server}")])
            .args(["--agent", &format!("campaigner-{n}")])
            .args(["indexer", "--ttl", "1s", "--kill-after", "300ms"])
            .args(["--", "bash", "-c", &write])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Campaigner {
            child: command.spawn().expect("spawn klock elect"),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The exit status within `limit`, with stderr.
    fn exit(&mut self, limit: Duration) -> (i32, String) {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (status.code().unwrap_or(-1), err);
            }
            assert!(
                Instant::now() < until,
                "klock elect {} did not exit within {limit:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Campaigner {
    fn drop(&mut self) {
        // A failed test's leftovers: the command's loop ends by itself once the register
        // (this process) is gone.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The parent of `pid` (the `klock elect` process that runs a leader's command).
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The campaigner whose (running) command is `command`.
fn campaigner_of(campaigners: &[Campaigner], command: i32) -> usize {
    let elect = parent(command).expect("a leader's command runs");
    campaigners
        .iter()
        .position(|c| c.pid() == elect)
        .unwrap_or_else(|| panic!("command {command}'s parent {elect} is no campaigner"))
}

/// Waits for an accepted write with a term above `above`; its term and writer.
fn next_leader(register: &Mutex<Register>, above: u64, since: Instant) -> (u64, i32, Duration) {
    let until = since + ELECTED_WITHIN;
    loop {
        if let Some(w) = register
            .lock()
            .unwrap()
            .writes
            .iter()
            .find(|w| w.accepted && w.term > above)
        {
            return (w.term, w.pid, w.at.saturating_duration_since(since));
        }
        assert!(
            Instant::now() < until,
            "no leader with a term above {above} within {ELECTED_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn five_campaigners_keep_one_leader_through_a_kill_a_freeze_and_a_resignation() {
    let klock = Path::new(env!("CARGO_BIN_EXE_klock"));
    let server = Spawned::start(klock, &["--memory"]).expect("start klock serve");
    let register = Arc::new(Mutex::new(Register::default()));
    let port = listen(Arc::clone(&register));
    let mut campaigners: Vec<Campaigner> = (0..5)
        .map(|n| Campaigner::start(klock, server.port, port, n))
        .collect();

    // The first leader.
    let (first, command, _) = next_leader(&register, 0, Instant::now());
    let leader = campaigner_of(&campaigners, command);

    // A crashed machine: the campaigner and its command die at once.
    let killed = Instant::now();
    signal(campaigners[leader].pid(), libc::SIGKILL);
    signal(-command, libc::SIGKILL);
    let (second, command, took) = next_leader(&register, first, killed);
    assert!(took <= TTL + ELECTED_WITHIN, "successor after {took:?}");
    let leader = campaigner_of(&campaigners, command);

    // A frozen machine: campaigner and command stopped past the TTL, then thawed.
    let frozen = Instant::now();
    signal(campaigners[leader].pid(), libc::SIGSTOP);
    signal(-command, libc::SIGSTOP);
    let (third, next_command, _) = next_leader(&register, second, frozen);
    signal(-command, libc::SIGCONT);
    signal(campaigners[leader].pid(), libc::SIGCONT);
    let (code, err) = campaigners[leader].exit(Duration::from_secs(10));
    assert_eq!(code, 107, "a thawed deposed leader exits 107: {err}");
    assert!(err.contains("lost"), "{err}");
    let leader = campaigner_of(&campaigners, next_command);

    // A resignation: SIGTERM reaches the command, which ends; the lease is released.
    let resigned = Instant::now();
    signal(campaigners[leader].pid(), libc::SIGTERM);
    let (code, err) = campaigners[leader].exit(Duration::from_secs(10));
    assert_eq!(code, 128 + libc::SIGTERM, "{err}");
    let (fourth, _, took) = next_leader(&register, third, resigned);
    assert!(
        took < ELECTED_WITHIN,
        "successor after a resignation: {took:?}"
    );
    assert!(first < second && second < third && third < fourth);

    // The whole record: one writer per term, accepted terms never go back, and once a term
    // is superseded none of its writes is accepted.
    std::thread::sleep(Duration::from_millis(300));
    let writes = register.lock().unwrap().writes.clone();
    let mut writer_of: BTreeMap<u64, i32> = BTreeMap::new();
    let mut largest = 0;
    for w in &writes {
        let writer = *writer_of.entry(w.term).or_insert(w.pid);
        assert_eq!(writer, w.pid, "term {} written by two commands", w.term);
        assert_eq!(w.accepted, w.term >= largest, "{w:?}");
        largest = largest.max(w.term);
    }
    assert!(writer_of.len() >= 4, "{writer_of:?}");

    // The rest resign; a waiting campaigner withdraws its request and exits 128 + 15 too.
    for c in &mut campaigners {
        if c.child.try_wait().unwrap().is_none() {
            signal(c.pid(), libc::SIGTERM);
            let (code, err) = c.exit(Duration::from_secs(10));
            assert_eq!(code, 128 + libc::SIGTERM, "{err}");
        }
    }
    drop(server);
}
