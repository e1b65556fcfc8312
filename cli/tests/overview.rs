//! `klock status` and `klock reconcile --digest FILE` as a user runs them, against a real
//! `klock serve --memory` on a free loopback port, with leases held by real `klock exec` runs.

use klock_testkit::process::Spawned;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn klock() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_klock"))
}

fn url(server: &Spawned) -> String {
    format!("http://127.0.0.1:{}", server.port)
}

/// `klock`, without the caller's KLOCK_* settings, which would change what the tools do.
fn klock_command() -> Command {
    let mut command = Command::new(klock());
    for name in [
        "KLOCK_SERVER",
        "KLOCK_SOCKET",
        "KLOCK_TOKEN",
        "KLOCK_NS",
        "KLOCK_AGENT",
    ] {
        command.env_remove(name);
    }
    command
}

/// `klock TOOL --server URL ARGS...`.
fn run(server: &Spawned, args: &[&str]) -> Output {
    klock_command()
        .arg(args[0])
        .args(["--server", &url(server)])
        .args(&args[1..])
        .output()
        .expect("run klock")
}

fn text(out: &Output) -> (String, String) {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (s(&out.stdout), s(&out.stderr))
}

/// A `klock exec` holding `intent` until killed (on drop too), once its command started.
struct Holder(Child);

impl Holder {
    fn start(server: &Spawned, agent: &str, intent: &str, dir: &Path) -> Holder {
        let ready = dir.join(agent);
        let child = klock_command()
            .args([
                "exec",
                "--server",
                &url(server),
                "--agent",
                agent,
                "--intent",
                intent,
            ])
            .args([
                "--",
                "sh",
                "-c",
                &format!("touch {}; exec sleep 30", ready.display()),
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(
                Instant::now() < until,
                "klock exec never started its command"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Holder(child)
    }
}

impl Drop for Holder {
    /// SIGTERM, which `klock exec` passes on to its command's process group, so the command
    /// ends with it; SIGKILL if it is still there after a while.
    fn drop(&mut self) {
        // SAFETY: kill(2) on a child this test spawned and has not reaped.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn status_shows_holders_and_one_resource() {
    let server = Spawned::start(klock(), &["--memory"]).unwrap();
    let out = run(&server, &["status"]);
    assert!(out.status.success());
    assert!(
        text(&out).0.contains("nobody holds anything"),
        "{:?}",
        text(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let _a = Holder::start(
        &server,
        "builder",
        "MUTATES FILE:/repo/src/a.rs",
        dir.path(),
    );
    let _b = Holder::start(&server, "tester", "CONSUMES DB:/staging", dir.path());
    let out = run(&server, &["status", "--type", "FILE", "--type", "DB"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("holders (2):"), "{stdout}");
    assert!(
        stdout.contains("MUTATES FILE:/repo/src/a.rs held by agent \"builder\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("CONSUMES DB:/staging held by agent \"tester\""),
        "{stdout}"
    );
    // Times are relative to the server's clock: a 60 s TTL renewed moments ago.
    assert!(
        stdout.contains("fence 1), expires in 5") || stdout.contains("fence 1), expires in 60.0s"),
        "{stdout}"
    );

    let out = run(&server, &["status", "--resource", "FILE:/repo"]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("covering") && stdout.contains("\"builder\""),
        "{stdout}"
    );

    let out = run(&server, &["status", "--type", "file"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("TYPE must match"), "{:?}", text(&out));
    let out = run(&server, &["status", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("\"--bogus\""));
    let help = Command::new(klock())
        .args(["status", "--help"])
        .output()
        .unwrap();
    assert!(text(&help).0.contains("Examples:"));
}

#[test]
fn reconcile_shows_a_saved_session_and_can_give_it_up() {
    let server = Spawned::start(klock(), &["--memory"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let digest = dir.path().join("job.json");
    let digest_arg = digest.to_str().unwrap();
    let _holder = Holder::start(&server, "holder", "MUTATES FILE:/x", dir.path());
    // A run that gives up saves its session for the rerun.
    let out = run(
        &server,
        &[
            "exec",
            "--agent",
            "job",
            "--wait",
            "200ms",
            "--digest",
            digest_arg,
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{:?}", text(&out));
    assert!(digest.exists());
    let out = run(&server, &["status"]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("most contended:\n  FILE:/x: ") && stdout.contains("found it held"),
        "{stdout}"
    );

    let out = run(&server, &["reconcile", "--digest", digest_arg]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("of agent \"job\""), "{stdout}");
    assert!(stdout.contains("holds no lease"), "{stdout}");
    assert!(stdout.contains("suspended it again"), "{stdout}");

    let out = run(&server, &["reconcile", "--digest", digest_arg, "--release"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!digest.exists(), "--release removes the file");

    let out = run(&server, &["reconcile"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--digest FILE"));
    std::fs::write(&digest, "{}").unwrap();
    let out = run(&server, &["reconcile", "--digest", digest_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("is not a StateDigest"),
        "{:?}",
        text(&out)
    );
}
