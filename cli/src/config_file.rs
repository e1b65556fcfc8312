//! `klock serve --config FILE`: a TOML file that stands for flags.
//!
//! Contract:
//! - Each top-level key is a flag's name without its dashes (`listen`, `snapshot-every`,
//!   `tls-cert`, ...) and stands for that flag: a string or a whole number for a flag with a
//!   value, `true`/`false` for a switch (`false` is the same as leaving it out), an array of
//!   strings for a flag that repeats (`allow-origin`). The kernel settings of
//!   `--config NAME=VALUE` are the `[kernel]` table (`policy = "wound_wait"`,
//!   `default_ttl_ms = 30000`).
//! - A key no flag has, a value of the wrong type, and a value its flag refuses are errors
//!   naming the file and the key ([`load`]; the values are checked by the flags' own parser).
//! - The file's flags go before the command line's ([`beneath`]), and the command line wins:
//!   a flag given in both takes the command line's value, a repeated flag given on the command
//!   line replaces the file's list, `--memory` on the command line drops the file's `data` (and
//!   `--data` its `memory`), and `--config NAME=VALUE` overrides that one kernel setting.
//! - `--config VALUE` is a setting when VALUE is `NAME=VALUE` with NAME made of `a-z` and `_`,
//!   and a file otherwise (`./a=b` names a file called `a=b`); one file at most ([`split`]).

use std::path::{Path, PathBuf};

/// What a key's value must be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    Switch,
    List,
}

/// Every key a config file may hold (besides `[kernel]`), with its kind: the flags of
/// `klock serve --help`.
const KEYS: &[(&str, Kind)] = &[
    ("listen", Kind::Text),
    ("socket", Kind::Text),
    ("data", Kind::Text),
    ("memory", Kind::Switch),
    ("tokens", Kind::Text),
    ("tls-cert", Kind::Text),
    ("tls-key", Kind::Text),
    ("insecure", Kind::Switch),
    ("clock", Kind::Text),
    ("snapshot-every", Kind::Number),
    ("history", Kind::Number),
    ("dashboard", Kind::Switch),
    ("dashboard-pkg", Kind::Text),
    ("allow-origin", Kind::List),
    ("max-sessions-per-token", Kind::Number),
    ("max-sessions-per-namespace", Kind::Number),
    ("idempotency-bytes", Kind::Number),
    ("event-bytes", Kind::Number),
    ("max-connections", Kind::Number),
    ("max-connections-per-peer", Kind::Number),
    ("header-timeout-ms", Kind::Number),
    ("idle-timeout-ms", Kind::Number),
    ("max-requests-per-connection", Kind::Number),
    ("max-request-ids", Kind::Number),
    ("max-batch-items", Kind::Number),
    ("accept-log-loss", Kind::Switch),
    ("workers", Kind::Number),
    ("log-level", Kind::Text),
    ("log-format", Kind::Text),
];

/// The flags one key of the file stands for.
pub struct Entry {
    /// The key (`kernel.policy` for a kernel setting).
    pub key: String,
    /// The flag and its value(s), as on a command line.
    pub args: Vec<String>,
}

/// Whether `--config VALUE` is a kernel setting (`NAME=VALUE`, NAME in `[a-z_]`) rather than
/// a file.
fn is_setting(value: &str) -> bool {
    value.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    })
}

/// Takes the config file out of `args`: `(file, the other arguments)`.
///
/// # Errors
/// Two files.
pub fn split(args: &[String]) -> Result<(Option<PathBuf>, Vec<String>), String> {
    let mut file = None;
    let mut rest = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        match args.get(i + 1) {
            Some(value) if args[i] == "--config" && !is_setting(value) => {
                if let Some(first) = file.replace(PathBuf::from(value)) {
                    return Err(format!(
                        "--config FILE given twice ({} and {value}): one config file at most",
                        Path::display(&first)
                    ));
                }
                i += 2;
            }
            _ => {
                rest.push(args[i].clone());
                i += 1;
            }
        }
    }
    Ok((file, rest))
}

/// Reads the file: its keys as flags, in the file's order (module contract).
///
/// # Errors
/// The file cannot be read or is not TOML, or a key is unknown or of the wrong type; the
/// message names the file and the key.
pub fn load(path: &Path) -> Result<Vec<Entry>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {shown}: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("config file {shown} is not valid TOML: {e}"))?;
    let mut entries = Vec::new();
    for (key, value) in &table {
        if key == "kernel" {
            let toml::Value::Table(kernel) = value else {
                return Err(format!(
                    "config file {shown}: key kernel must be a table ([kernel]) of kernel settings"
                ));
            };
            for (name, setting) in kernel {
                let text = match setting {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(n) => n.to_string(),
                    other => {
                        return Err(format!(
                            "config file {shown}: key kernel.{name} must be a string or a whole \
                             number, got {}",
                            other.type_str()
                        ))
                    }
                };
                entries.push(Entry {
                    key: format!("kernel.{name}"),
                    args: vec![String::from("--config"), format!("{name}={text}")],
                });
            }
            continue;
        }
        let Some((_, kind)) = KEYS.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "config file {shown}: unknown key {key:?} (known keys: {}, and the [kernel] table)",
                known.join(", ")
            ));
        };
        let flag = format!("--{key}");
        let wrong = |expected: &str| {
            format!(
                "config file {shown}: key {key} must be {expected}, got {}",
                value.type_str()
            )
        };
        let args = match (kind, value) {
            (Kind::Text, toml::Value::String(s)) => vec![flag, s.clone()],
            (Kind::Number, toml::Value::Integer(n)) => vec![flag, n.to_string()],
            (Kind::Switch, toml::Value::Boolean(on)) => {
                if *on {
                    vec![flag]
                } else {
                    Vec::new()
                }
            }
            (Kind::List, toml::Value::Array(items)) => {
                let mut args = Vec::new();
                for item in items {
                    let toml::Value::String(s) = item else {
                        return Err(wrong("an array of strings"));
                    };
                    args.extend([flag.clone(), s.clone()]);
                }
                args
            }
            (Kind::Text, _) => return Err(wrong("a string")),
            (Kind::Number, _) => return Err(wrong("a whole number")),
            (Kind::Switch, _) => return Err(wrong("true or false")),
            (Kind::List, _) => return Err(wrong("an array of strings")),
        };
        entries.push(Entry {
            key: key.clone(),
            args,
        });
    }
    Ok(entries)
}

/// The file's flags to put before `command_line`'s, without those the command line replaces
/// (module contract): a list flag it repeats, and `data`/`memory` when it gives the other.
pub fn beneath(entries: Vec<Entry>, command_line: &[String]) -> Vec<String> {
    let given = |flag: &str| command_line.iter().any(|a| a == flag);
    entries
        .into_iter()
        .filter(|e| {
            let replaced = match e.key.as_str() {
                "allow-origin" => given("--allow-origin"),
                "data" => given("--memory"),
                "memory" => given("--data"),
                _ => false,
            };
            !replaced
        })
        .flat_map(|e| e.args)
        .collect()
}
