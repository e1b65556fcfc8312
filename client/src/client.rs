//! The friendly client: where the server is, the token to show it, and the namespace its
//! sessions open in.
//!
//! Contract: [`Client::connect`] (or [`Connect::connect`], for a CA bundle, a namespace or a
//! reconnect timeout) takes a server URL or a cluster's, comma-separated, and checks each
//! before anything is sent ([`Error::BadUrl`] names a bad one), then makes one authenticated
//! read (`GET /v1/version`), so an unreachable server or a refused token fails there and not
//! at the first lease. Every call then goes to the node that last answered, and fails over to
//! the others as the core's `failover` rules say (crate::transport), within the reconnect
//! timeout. A client is cheap to clone (its clones share the kept-alive connections and the
//! node they prefer) and is used within the tokio runtime it was connected in.

use crate::error::Error;
use crate::session::Session;
use crate::transport::{Endpoint, Transport, DEFAULT_RECONNECT_TIMEOUT};
use std::path::PathBuf;
use std::time::Duration;

/// A connection to `klock serve`.
#[derive(Clone, Debug)]
pub struct Client {
    transport: Transport,
    namespace: String,
}

/// How to connect: [`Client::options`], then [`Connect::connect`].
#[derive(Clone, Debug)]
pub struct Connect {
    url: String,
    token: Option<String>,
    ca: Option<PathBuf>,
    namespace: String,
    reconnect_timeout: Duration,
}

impl Connect {
    /// The bearer token (else `$KLOCK_TOKEN`, if set).
    pub fn token(mut self, token: impl Into<String>) -> Connect {
        self.token = Some(token.into());
        self
    }

    /// The PEM certificates to trust for an `https://` server (else `$KLOCK_CA`): this client
    /// carries no system trust store.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Connect {
        self.ca = Some(path.into());
        self
    }

    /// The namespace sessions open in (default `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Connect {
        self.namespace = namespace.into();
        self
    }

    /// Every call's budget (default 30 s, as Python's `reconnect_timeout` and Node's
    /// `reconnectTimeoutMs`): how long it tries the servers, pauses included, before it fails
    /// [`Error::Unreachable`]; a call that asks the server to hold it (a wait) has that
    /// long more.
    pub fn reconnect_timeout(mut self, budget: Duration) -> Connect {
        self.reconnect_timeout = budget;
        self
    }

    /// Connects (module contract).
    ///
    /// # Errors
    /// [`Error::BadUrl`]; [`Error::InvalidInput`] for a CA bundle that cannot be used;
    /// [`Error::Unreachable`]; [`Error::Refused`] (`UNAUTHORIZED`: a missing or wrong token).
    pub async fn connect(self) -> Result<Client, Error> {
        let endpoints = Endpoint::parse_list(&self.url).map_err(Error::BadUrl)?;
        let transport = Transport::nodes(endpoints, self.token)
            .map_err(Error::BadUrl)?
            .with_reconnect_timeout(self.reconnect_timeout)
            .with_ca(self.ca)
            .map_err(Error::InvalidInput)?;
        transport
            .call("GET", "/v1/version", None, None, Duration::ZERO)
            .await?;
        Ok(Client {
            transport,
            namespace: self.namespace,
        })
    }
}

impl Client {
    /// Connects to the server at `url` (`http://HOST:PORT`, or `https://` with `$KLOCK_CA`;
    /// a cluster's nodes comma-separated)
    /// with a bearer `token` (`None`: `$KLOCK_TOKEN` if set, else none).
    ///
    /// # Errors
    /// As [`Connect::connect`].
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Client, Error> {
        let mut options = Client::options(url);
        options.token = token.map(str::to_owned);
        options.connect().await
    }

    /// The options to connect to `url` with.
    pub fn options(url: &str) -> Connect {
        Connect {
            url: url.to_owned(),
            token: None,
            ca: None,
            namespace: String::from("default"),
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
        }
    }

    /// The namespace this client's sessions open in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The same client (its kept-alive connections shared) opening its sessions in
    /// `namespace`: one client serves several namespaces. A bad namespace is refused by the
    /// server when a session opens (`INVALID_NAMESPACE`).
    pub fn in_namespace(&self, namespace: &str) -> Client {
        Client {
            transport: self.transport.clone(),
            namespace: namespace.to_owned(),
        }
    }

    /// The transport under it, for the typed routes ([`crate::routes`]).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Opens a session for `agent_id` in the client's namespace: sessions are the unit of
    /// priority (Wait-Die: an older session waits, a younger one dies).
    ///
    /// # Errors
    /// A bad agent id ([`Error::Refused`] with the server's name), or unreachable.
    pub async fn session(&self, agent_id: &str) -> Result<Session, Error> {
        Session::open(self.transport.clone(), &self.namespace, agent_id).await
    }
}
