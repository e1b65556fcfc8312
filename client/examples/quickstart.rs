//! Quickstart: hold a file's lease while writing the file through its fence.
//! Run it against a server: `cargo run -p klock-client --example quickstart -- http://127.0.0.1:7300`

use klock_client::{Client, LeaseOptions};
use std::path::Path;
use std::time::Duration;

/// Connects to `url`, holds `FILE:/notes.txt` while writing `path` through the lease's fence,
/// and gives everything back; returns the fence it wrote with.
pub async fn run(url: &str, path: &Path) -> Result<u64, klock_client::Error> {
    let client = Client::connect(url, None).await?;
    let session = client.session("quickstart").await?;
    let options = LeaseOptions::default()
        .ttl(Duration::from_secs(30)) // renewed every 10 s while the guard lives
        .timeout(Duration::from_secs(10)); // give up (Error::Timeout) after 10 s
    let guard = session.lease(["MUTATES FILE:/notes.txt"], options).await?;
    // A holder paused past its lease cannot overwrite a newer holder's work: the file
    // remembers the largest fence it accepted and refuses older ones (Error::StaleFence).
    guard
        .fenced_write(path, b"written under the lease\n")
        .await?;
    let fence = guard.fence();
    guard.release().await?; // dropping the guard releases too, in the background
    session.close().await?;
    Ok(fence)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1);
    let url = url.as_deref().unwrap_or("http://127.0.0.1:7300");
    let fence = run(url, Path::new("notes.txt")).await?;
    println!("wrote notes.txt with fence {fence}");
    Ok(())
}
