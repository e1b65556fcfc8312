//! Every `klock` subcommand answers `--help` with its usage and at least one example, and an
//! unknown flag is refused (exit 2) with a pointer to that help; `klock token-hash` prints
//! the digest the test kit puts in token files.

use std::process::Command;

fn klock(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(args)
        .output()
        .expect("klock runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SUBCOMMANDS: [&str; 8] = [
    "serve",
    "cluster",
    "exec",
    "elect",
    "mcp",
    "status",
    "reconcile",
    "token-hash",
];

#[test]
fn every_subcommand_has_help_with_an_example() {
    let (code, top, _) = klock(&["--help"]);
    assert_eq!(code, 0);
    for sub in SUBCOMMANDS {
        assert!(
            top.contains(&format!("\n  {sub} ")),
            "klock --help lists {sub}:\n{top}"
        );
        let (code, text, err) = klock(&[sub, "--help"]);
        assert_eq!(code, 0, "klock {sub} --help: {err}");
        assert!(
            text.starts_with(&format!("usage: klock {sub}")),
            "klock {sub} --help:\n{text}"
        );
        assert!(
            text.to_lowercase().contains("example"),
            "klock {sub} --help has no example:\n{text}"
        );
    }
}

#[test]
fn an_unknown_flag_is_refused_and_names_the_help() {
    for sub in [
        "serve",
        "exec",
        "elect",
        "mcp",
        "status",
        "reconcile",
        "cluster",
    ] {
        let (code, _, err) = klock(&[sub, "--no-such-flag"]);
        assert_eq!(code, 2, "klock {sub} --no-such-flag: {err}");
        assert!(err.contains("--no-such-flag"), "klock {sub}: {err}");
        assert!(err.contains("--help"), "klock {sub}: {err}");
    }
}

#[test]
fn token_hash_prints_the_digest_a_token_file_lists() {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .arg("token-hash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cret").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.trim(), klock_testkit::support::sha256_of("s3cret"));
}

/// `klock --help | head -0`: a reader that is gone before the first write is no crash.
#[test]
fn a_closed_standard_output_is_not_a_panic() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills both descriptors; each is owned once below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fresh descriptors from pipe(2), owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read); // every write to the pipe now fails with EPIPE
    for args in [&["--help"][..], &["exec", "--help"], &["--version"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .args(args)
            .stdout(std::process::Stdio::from(write.try_clone().unwrap()))
            .output()
            .expect("klock runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "klock {args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "klock {args:?}: {err}");
    }
}
