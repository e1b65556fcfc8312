//! The library's entry point: `serve::start` binds where it is told (port 0: a free one),
//! reports the address, serves the API there, and `shutdown` stops it.

use klock_server::serve::{self, Bound, ServeConfig};
use klock_testkit::http_client::request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_in_process_reports_its_address_serves_and_stops() {
    let server = serve::start(ServeConfig::memory()).await.unwrap();
    let addr = server.local_addr().expect("a TCP address");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    assert_eq!(
        server.bound(),
        &Bound::Tcp { addr, tls: false },
        "{}",
        server.bound()
    );
    assert_eq!(server.bound().to_string(), format!("http://{addr}"));
    let port = addr.port();
    let health = tokio::task::spawn_blocking(move || request(port, "GET", "/v1/health", &[], b""))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(health.status, 200, "{:?}", health.body);
    server.shutdown().await.unwrap();
    let after = tokio::net::TcpStream::connect(addr).await;
    assert!(after.is_err(), "still accepting after shutdown");
}
