//! The README's quickstart, `examples/quickstart.rs`, run against a real `klock serve`: the
//! README shows that file as it is, and the file does what the README says.

mod support;

#[allow(dead_code)] // its `main` is the example's
#[path = "../examples/quickstart.rs"]
mod quickstart;

use support::{server, url};

#[test]
fn the_readme_shows_the_quickstart_example_as_it_is() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/quickstart.rs");
    assert!(
        readme.contains(&format!("```rust,no_run\n{example}```")),
        "client/README.md's quickstart is not examples/quickstart.rs: copy the file into it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_runs() {
    let server = server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let url = url(&server);
    let run = quickstart::run(&url, &path);
    let fence = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the quickstart ran past 30 s")
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"written under the lease\n");
    assert_eq!(
        klock_client::fence::stored_fence(&path).unwrap(),
        Some(fence)
    );
}
