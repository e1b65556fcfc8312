//! The server's logs: `tracing` events written to stderr by `tracing-subscriber`, as text or
//! as JSON (one object a line), filtered by level.
//!
//! Contract:
//! - What is logged: at info the lifecycle (listening, with the address and mode; recovery,
//!   with the entries replayed; each snapshot and log compaction; a backup; shutdown), at
//!   warn what an operator should act on (a torn log tail, an accepted log loss, an open-files
//!   limit below the connection cap), at error a fail-stop; at debug one line per request
//!   (target `klock::request`: method, route template, status, duration; never a path's ids
//!   or a header, so never a token).
//! - The filter is `--log-level` (a level, or directives as `RUST_LOG` takes them:
//!   `info,klock::request=debug`), else `$RUST_LOG`, else `info`. A filter that does not
//!   parse is refused by name ([`check_filter`]).
//! - Events below the filter cost one check of a cached level (tracing's callsite cache): the
//!   request path pays nothing for a disabled request log.
//! - Only the `klock` command installs the subscriber ([`init`]): a server started as a
//!   library (the tests' in-process servers) logs nowhere unless its host installs one.
//! - `klock serve: listening on URL` on stdout is not a log line: it is what starters read.

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `TIME LEVEL target: message key=value...`
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (`message` and the
    /// event's own fields).
    Json,
}

impl LogFormat {
    /// `text` or `json`.
    ///
    /// # Errors
    /// Anything else, named.
    pub fn parse(text: &str) -> Result<LogFormat, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("--log-format is text or json, got {other:?}")),
        }
    }
}

/// How the server logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// `--log-level`; `None`: `$RUST_LOG`, else `info`.
    pub filter: Option<String>,
    pub format: LogFormat,
}

/// Checks a `--log-level` filter.
///
/// # Errors
/// It does not parse; the message says what is accepted.
pub fn check_filter(filter: &str) -> Result<(), String> {
    EnvFilter::builder().parse(filter).map(|_| ()).map_err(|e| {
        format!(
            "--log-level takes a level (error, warn, info, debug, trace) or directives like \
                 info,klock::request=debug; {filter:?}: {e}"
        )
    })
}

/// Installs the process's subscriber (module contract). Once per process.
///
/// # Errors
/// The filter does not parse, or a subscriber is already installed.
pub fn init(config: &LogConfig) -> Result<(), String> {
    let filter = match &config.filter {
        Some(f) => f.clone(),
        None => std::env::var("RUST_LOG").unwrap_or_else(|_| String::from("info")),
    };
    check_filter(&filter)?;
    let filter = EnvFilter::builder().parse_lossy(&filter);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let installed = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(false).try_init(),
    };
    installed.map_err(|e| format!("cannot install the logger: {e}"))
}
