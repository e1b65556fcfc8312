//! Where a server is: the URL (or Unix socket) of one server or of a cluster's nodes.
//!
//! Contract: [`Endpoint::parse`] reads a server URL; [`Endpoint::parse_list`] a
//! comma-separated list of them, refusing a bad one (an empty entry included) by its position
//! and text; [`Endpoint::choose`] turns `--server URL[,URL...]` / `--socket PATH` (or
//! `KLOCK_SERVER`, several comma-separated, / `KLOCK_SOCKET`, or the default
//! `http://127.0.0.1:7300`) into the endpoints, naming where a bad URL came from.

use std::fmt;
use std::path::PathBuf;

/// Where `klock serve` listens.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `host:port` over TCP.
    Tcp(String),
    /// `host:port` over TLS; `host` is the name the certificate must carry.
    Tls { addr: String, host: String },
    /// A Unix socket (`klock serve --socket PATH`).
    Unix(PathBuf),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "http://{addr}"),
            Endpoint::Tls { addr, .. } => write!(f, "https://{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Endpoint {
    /// The endpoints from the flags, else the environment, else the default: `--server` (or
    /// `$KLOCK_SERVER`) may list a cluster's nodes, comma-separated; `--socket` is one server.
    ///
    /// # Errors
    /// Both given, or a URL of the list that is not `http(s)://HOST:PORT` (named with its
    /// position and where it came from).
    pub fn choose(
        server: Option<String>,
        socket: Option<PathBuf>,
    ) -> Result<Vec<Endpoint>, String> {
        // Flags win over the environment as a pair, so `--socket` overrides $KLOCK_SERVER.
        let (server, socket, source) = if server.is_some() || socket.is_some() {
            (server, socket, "--server")
        } else {
            (
                std::env::var("KLOCK_SERVER").ok(),
                std::env::var_os("KLOCK_SOCKET").map(PathBuf::from),
                "$KLOCK_SERVER",
            )
        };
        match (server, socket) {
            (Some(_), Some(_)) => Err(String::from(
                "give --server URL or --socket PATH, not both (or only one of $KLOCK_SERVER and $KLOCK_SOCKET)",
            )),
            (None, Some(path)) => Ok(vec![Endpoint::Unix(path)]),
            (Some(urls), None) => Endpoint::parse_list(&urls).map_err(|e| format!("{source}: {e}")),
            (None, None) => Ok(vec![Endpoint::Tcp(String::from("127.0.0.1:7300"))]),
        }
    }

    /// The endpoints of a comma-separated list of server URLs (one URL is a list of one).
    ///
    /// # Errors
    /// The first URL [`Endpoint::parse`] refuses, with its position in the list (an empty
    /// entry included: a stray comma is a mistake, not a node).
    pub fn parse_list(urls: &str) -> Result<Vec<Endpoint>, String> {
        let parts: Vec<&str> = urls.split(',').map(str::trim).collect();
        let many = parts.len() > 1;
        parts
            .iter()
            .enumerate()
            .map(|(i, url)| {
                Endpoint::parse(url).map_err(|e| match many {
                    true => format!("URL {} of {} in {urls:?}: {e}", i + 1, parts.len()),
                    false => e,
                })
            })
            .collect()
    }

    /// The endpoint of a server URL: `http://HOST:PORT` or `https://HOST:PORT` (a trailing
    /// `/` is allowed; a bare `HOST:PORT` is taken as `http://`).
    ///
    /// # Errors
    /// Anything else (a path, no port, an empty host); the message shows the URL.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = match url.strip_prefix("https://") {
            Some(rest) => (true, rest),
            None => (false, url.strip_prefix("http://").unwrap_or(url)),
        };
        let addr = rest.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
            return Err(format!(
                "a server URL is http://HOST:PORT or https://HOST:PORT (like http://127.0.0.1:7300), got {url:?}"
            ));
        }
        if !tls {
            return Ok(Endpoint::Tcp(addr.to_owned()));
        }
        let host = addr[..addr.rfind(':').unwrap_or(addr.len())]
            .trim_start_matches('[')
            .trim_end_matches(']');
        Ok(Endpoint::Tls {
            addr: addr.to_owned(),
            host: host.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let tcp = Endpoint::parse("http://127.0.0.1:9/").unwrap();
        assert_eq!(tcp.to_string(), "http://127.0.0.1:9");
        let tls = Endpoint::parse("https://localhost:9/").unwrap();
        assert_eq!(tls.to_string(), "https://localhost:9");
        assert!(matches!(&tls, Endpoint::Tls { host, .. } if host == "localhost"));
        assert!(Endpoint::parse("http://x/v1")
            .unwrap_err()
            .contains("HOST:PORT"));
        assert!(Endpoint::parse("localhost")
            .unwrap_err()
            .contains("HOST:PORT"));
    }

    #[test]
    fn a_list_of_urls_is_checked_url_by_url() {
        let nodes = Endpoint::parse_list("http://127.0.0.1:1, 127.0.0.1:2,https://h:3").unwrap();
        let shown: Vec<String> = nodes.iter().map(Endpoint::to_string).collect();
        assert_eq!(
            shown,
            ["http://127.0.0.1:1", "http://127.0.0.1:2", "https://h:3"]
        );
        let bad = Endpoint::parse_list("http://a:1,http://b/v1,http://c:3").unwrap_err();
        assert!(
            bad.contains("URL 2 of 3") && bad.contains("\"http://b/v1\""),
            "{bad}"
        );
        let stray = Endpoint::parse_list("http://a:1,").unwrap_err();
        assert!(stray.contains("URL 2 of 2"), "{stray}");
        let flag = Endpoint::choose(Some(String::from("http://a:1,nope")), None).unwrap_err();
        assert!(flag.starts_with("--server: URL 2 of 2"), "{flag}");
    }
}
