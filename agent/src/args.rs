//! The command-line pieces the agent tools share: `--flag VALUE` / `--flag=VALUE` reading,
//! durations like `60s`, and the connection flags every tool takes.
//!
//! Contract: parsing never panics; every error names the flag and what it accepts.

use klock_client::transport::{Endpoint, Transport};
use std::path::PathBuf;
use std::time::Duration;

/// Reads `args` as flags: `--name VALUE`, `--name=VALUE` or a bare `--switch`.
pub struct Flags<'a> {
    args: &'a [String],
    at: usize,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [String]) -> Flags<'a> {
        Flags { args, at: 0 }
    }

    /// The next flag and, when written `--name=VALUE`, its value; `None` at the end.
    pub fn next_flag(&mut self) -> Option<(&'a str, Option<&'a str>)> {
        let arg = self.args.get(self.at)?.as_str();
        self.at += 1;
        Some(match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (arg, None),
        })
    }

    /// The flag's value: the inline one, else the next argument.
    ///
    /// # Errors
    /// No value follows.
    pub fn value(&mut self, flag: &str, inline: Option<&'a str>) -> Result<&'a str, String> {
        if let Some(v) = inline {
            return Ok(v);
        }
        let v = self
            .args
            .get(self.at)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        self.at += 1;
        Ok(v)
    }

    /// Everything after the flags read so far.
    pub fn rest(&self) -> &'a [String] {
        &self.args[self.at.min(self.args.len())..]
    }
}

/// `500ms`, `30s`, `2m`, `1h`, or a bare number of seconds.
///
/// # Errors
/// Anything else, named with the flag.
pub fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || format!("{flag} takes a duration like 500ms, 30s, 2m or 1h, got {text:?}");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    };
    ms.map(Duration::from_millis).ok_or_else(bad)
}

/// A duration as [`duration`] reads it: `0s`, `400ms`, `90s`, `5m`, `2h`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => String::from("0s"),
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1_000) => format!("{}s", ms / 1_000),
        _ => format!("{ms}ms"),
    }
}

/// Where the server is, who we are, and in which namespace.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    server: Option<String>,
    socket: Option<PathBuf>,
    token: Option<String>,
    ns: Option<String>,
    agent: Option<String>,
    ca: Option<PathBuf>,
    reconnect_timeout: Option<Duration>,
}

/// The warning a `--token` on the command line gets (issue 22, item 7).
pub const TOKEN_ON_COMMAND_LINE: &str = "klock: warning: --token on the command line is visible to every user of this machine (ps, /proc); set KLOCK_TOKEN in the environment instead";

/// The connection flags, as shown in every tool's help.
pub const CONNECTION_HELP: &str = "  --server URL[,URL...]
                   the server, http://HOST:PORT or https://HOST:PORT, or a cluster's nodes,
                   comma-separated: each call goes to the node that last answered and fails
                   over to the others (default $KLOCK_SERVER, else http://127.0.0.1:7300)
  --reconnect-timeout D
                   how long each call tries the servers before it gives up unreachable
                   (default 30s; a wait the call asks the server for comes on top)
  --ca PATH        for an https:// server: the CA certificates (PEM) to trust (default
                   $KLOCK_CA); a certificate they do not vouch for stops the tool at once
  --socket PATH    the server's Unix socket instead (default $KLOCK_SOCKET)
  --token T        bearer token, if the server asks for one (default $KLOCK_TOKEN, which
                   `ps` does not show: prefer it)
  --ns NS          namespace (default $KLOCK_NAMESPACE, or its older name $KLOCK_NS, else
                   \"default\")
  --agent ID       agent id shown to the others (default $KLOCK_AGENT, else USER@HOST)";

impl Connection {
    /// Takes `flag` if it is a connection flag; `Ok(false)` leaves it to the caller.
    ///
    /// # Errors
    /// The flag's value is missing.
    pub fn take<'a>(
        &mut self,
        flags: &mut Flags<'a>,
        flag: &str,
        inline: Option<&'a str>,
    ) -> Result<bool, String> {
        let slot = match flag {
            "--server" => &mut self.server,
            "--token" => {
                // Every user of the machine can read a command line (`ps`): say so, once.
                eprintln!("{TOKEN_ON_COMMAND_LINE}");
                &mut self.token
            }
            "--ns" => &mut self.ns,
            "--agent" => &mut self.agent,
            "--socket" => {
                self.socket = Some(PathBuf::from(flags.value(flag, inline)?));
                return Ok(true);
            }
            "--ca" => {
                self.ca = Some(PathBuf::from(flags.value(flag, inline)?));
                return Ok(true);
            }
            "--reconnect-timeout" => {
                self.reconnect_timeout = Some(duration(flag, flags.value(flag, inline)?)?);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        *slot = Some(flags.value(flag, inline)?.to_owned());
        Ok(true)
    }

    /// The client for the chosen server (or cluster).
    ///
    /// # Errors
    /// Both a URL and a socket, or a URL this client cannot use (named).
    pub fn client(&self) -> Result<Transport, String> {
        let endpoints = Endpoint::choose(self.server.clone(), self.socket.clone())?;
        let client = Transport::nodes(endpoints, self.token.clone())?;
        let client = match self.reconnect_timeout {
            Some(budget) => client.with_reconnect_timeout(budget),
            None => client,
        };
        client.with_ca(self.ca.clone())
    }

    /// The namespace: `--ns`, else `$KLOCK_NAMESPACE` (the clients' name for it), else
    /// `$KLOCK_NS` (this tool's older name), else `default`.
    ///
    /// # Errors
    /// `$KLOCK_NAMESPACE` and `$KLOCK_NS` both set, to different namespaces.
    pub fn ns(&self) -> Result<String, String> {
        if let Some(ns) = &self.ns {
            return Ok(ns.clone());
        }
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        match (var("KLOCK_NAMESPACE"), var("KLOCK_NS")) {
            (Some(long), Some(short)) if long != short => Err(format!(
                "$KLOCK_NAMESPACE ({long:?}) and $KLOCK_NS ({short:?}) disagree: set one of them, or give --ns"
            )),
            (Some(ns), _) | (None, Some(ns)) => Ok(ns),
            (None, None) => Ok(String::from("default")),
        }
    }

    /// What a command started for this connection needs to reach the same server as the
    /// same agent: `KLOCK_SERVER` (every node of a cluster, comma-separated) or `KLOCK_SOCKET`, `KLOCK_NAMESPACE`, and `KLOCK_TOKEN` and
    /// `KLOCK_CA` when there are (the clients read them when not told otherwise).
    ///
    /// # Errors
    /// As [`Connection::client`] and [`Connection::ns`].
    pub fn child_env(&self) -> Result<Vec<(&'static str, String)>, String> {
        let client = self.client()?;
        let endpoints: Vec<&Endpoint> = client.endpoints().collect();
        let mut env = vec![match endpoints.as_slice() {
            [Endpoint::Unix(path)] => ("KLOCK_SOCKET", path.display().to_string()),
            urls => {
                let urls: Vec<String> = urls.iter().map(|e| e.to_string()).collect();
                ("KLOCK_SERVER", urls.join(","))
            }
        }];
        env.push(("KLOCK_NAMESPACE", self.ns()?));
        if let Some(token) = client.token() {
            env.push(("KLOCK_TOKEN", token.to_owned()));
        }
        if let Some(ca) = client.ca() {
            env.push(("KLOCK_CA", ca.display().to_string()));
        }
        Ok(env)
    }

    /// The agent id.
    pub fn agent(&self) -> String {
        self.agent
            .clone()
            .or_else(|| std::env::var("KLOCK_AGENT").ok())
            .unwrap_or_else(|| {
                let user = std::env::var("USER").unwrap_or_else(|_| String::from("agent"));
                let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
                match host.trim() {
                    "" => user,
                    host => format!("{user}@{host}"),
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("--ttl", "500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("--ttl", "30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("--ttl", "2m"), Ok(Duration::from_secs(120)));
        assert!(duration("--ttl", "").unwrap_err().contains("--ttl"));
        assert!(duration("--ttl", "5d").is_err());
        assert!(duration("--ttl", "-1s").is_err());
        assert!(duration("--ttl", "99999999999999999999h").is_err());
        for text in ["0s", "400ms", "90s", "5m", "2h", "1500ms"] {
            assert_eq!(show(duration("--wait", text).unwrap()), text);
        }
    }

    #[test]
    fn flags_take_inline_and_separate_values() {
        let args: Vec<String> = ["--ns=a", "--ttl", "5s", "--", "x"]
            .map(String::from)
            .into();
        let mut flags = Flags::new(&args);
        assert_eq!(flags.next_flag(), Some(("--ns", Some("a"))));
        let (flag, inline) = flags.next_flag().unwrap();
        assert_eq!(flags.value(flag, inline), Ok("5s"));
        assert_eq!(flags.next_flag(), Some(("--", None)));
        assert_eq!(flags.rest(), ["x"]);
    }
}
