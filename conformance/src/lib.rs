//! # klock-conformance
//!
//! Runs the Klock conformance vectors (`docs/VECTORS.md`) against `klock-core`, or
//! against any [`run::Host`] that exposes it (the server over HTTP).
//!
//! Contract: [`run_file`] runs one vector file and never panics — an unreadable file, invalid
//! JSON, a key or value the format does not define, and a kernel panic are all failures with a
//! message, exactly like a step that does not behave as written. [`run_paths`] runs every file
//! named and every `*.json` directly inside every directory named (sorted by file name) and
//! sums up; a run with zero vectors is not [`Summary::ok`]. Output lines are
//! `ok <file>: <name>` and `FAIL <file>: <name>: step k: <what differed>` (steps count from 1),
//! then `N passed, M failed`.
//!
//! [`resolve_paths`] does the same and writes each passing vector's resolved script, which
//! the other hosts replay; [`write_mutants`] then writes the scripts' mutants.
//!
//! Modules: [`json`] (strict JSON), [`vector`] (the format as types), [`aliases`] (alias
//! table), [`run`] (driving the kernel), [`check`] (comparing answers and events),
//! [`script`] (recording a run as a resolved script), [`mutants`] (one changed value each).

pub mod aliases;
pub mod check;
pub mod json;
pub mod mutants;
pub mod run;
pub mod script;
pub mod vector;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The outcome of one vector file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorResult {
    /// The file as named on the command line (or joined to its directory).
    pub file: String,
    /// The vector's `name`, when the file could be read that far.
    pub name: Option<String>,
    /// `None` if it passed; otherwise what went wrong.
    pub failure: Option<String>,
}

impl VectorResult {
    /// Whether the vector passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The report line: `ok <file>: <name>` or `FAIL <file>: <name>: <failure>`.
    pub fn line(&self) -> String {
        let name = self.name.as_deref().unwrap_or("(unnamed)");
        match &self.failure {
            None => format!("ok {}: {name}", self.file),
            Some(why) => format!("FAIL {}: {name}: {why}", self.file),
        }
    }
}

/// The outcomes of a run, in the order the vectors ran.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub results: Vec<VectorResult>,
}

impl Summary {
    /// How many vectors passed.
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed()).count()
    }

    /// How many vectors failed (unreadable files included).
    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }

    /// True when at least one vector ran and none failed.
    pub fn ok(&self) -> bool {
        !self.results.is_empty() && self.failed() == 0
    }

    /// `N passed, M failed`.
    pub fn final_line(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }

    /// Every vector line, then the final line.
    pub fn lines(&self) -> Vec<String> {
        self.results
            .iter()
            .map(VectorResult::line)
            .chain(std::iter::once(self.final_line()))
            .collect()
    }
}

/// Runs a vector given as text against the kernel; `file` only labels the result.
pub fn run_source(file: &str, text: &str) -> VectorResult {
    run_source_on(file, text, &mut |_, v| run::run(v))
}

/// Runs a vector given as text with `run` (which builds its host from the vector's config and
/// is told the file's label).
pub fn run_source_on(
    file: &str,
    text: &str,
    run: &mut dyn FnMut(&str, &vector::Vector) -> Result<(), String>,
) -> VectorResult {
    let mut result = VectorResult {
        file: file.to_owned(),
        name: None,
        failure: None,
    };
    let value = match json::parse(text) {
        Ok(v) => v,
        Err(e) => {
            result.failure = Some(e);
            return result;
        }
    };
    result.name = vector::name_of(&value);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        vector::parse(&value).and_then(|v| run(file, &v))
    }));
    result.failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| String::from("(no message)"));
            Some(format!(
                "the kernel panicked (docs/SPEC.md §11: bad input never panics): {msg}"
            ))
        }
    };
    result
}

/// Runs one vector file against the kernel.
pub fn run_file(path: impl AsRef<Path>) -> VectorResult {
    run_file_on(path, &mut |_, v| run::run(v))
}

/// Runs one vector file with `run`.
pub fn run_file_on(
    path: impl AsRef<Path>,
    run: &mut dyn FnMut(&str, &vector::Vector) -> Result<(), String>,
) -> VectorResult {
    let path = path.as_ref();
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => run_source_on(&file, &text, run),
        Err(e) => VectorResult {
            file,
            name: None,
            failure: Some(format!("cannot read the file: {e}")),
        },
    }
}

/// Checks every vector the paths stand for against the kernel and writes each one's resolved
/// script ([`script`]) into `out_dir` under the vector's file name; a vector that fails gets
/// no script. The directory is created if needed.
pub fn resolve_paths<P: AsRef<Path>>(paths: &[P], out_dir: &Path) -> Summary {
    if let Err(e) = std::fs::create_dir_all(out_dir) {
        return Summary {
            results: vec![VectorResult {
                file: out_dir.display().to_string(),
                name: None,
                failure: Some(format!("cannot create the script directory: {e}")),
            }],
        };
    }
    run_paths_on(paths, &mut |file, v| {
        let script = script::resolve(file, v)?;
        let name = Path::new(file)
            .file_name()
            .ok_or_else(|| String::from("the vector path has no file name"))?;
        let text = serde_json::to_string(&script).map_err(|e| e.to_string())?;
        std::fs::write(out_dir.join(name), text + "\n")
            .map_err(|e| format!("cannot write the script: {e}"))
    })
}

/// Writes the [`mutants`] of the resolved scripts in `scripts_dir` (taken in file-name order)
/// into `out_dir`, as `NNNN.json`; returns how many. The directory is emptied first.
///
/// # Errors
/// A script cannot be read or parsed, or a mutant cannot be written.
pub fn write_mutants(scripts_dir: &Path, out_dir: &Path) -> Result<usize, String> {
    let mut scripts = Vec::new();
    for file in expand(scripts_dir)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let script = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a script: {e}", file.display()))?;
        scripts.push(script);
    }
    let _ = std::fs::remove_dir_all(out_dir);
    std::fs::create_dir_all(out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let all = mutants::mutants(&scripts);
    for m in &all {
        let text = serde_json::to_string(&m.script).map_err(|e| e.to_string())?;
        std::fs::write(out_dir.join(format!("{}.json", m.name)), text + "\n")
            .map_err(|e| format!("cannot write a mutant: {e}"))?;
    }
    Ok(all.len())
}

/// The vector files a path stands for: itself, or the `*.json` files in it sorted by name.
fn expand(path: &Path) -> Result<Vec<PathBuf>, String> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot list the directory: {e}"))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list the directory: {e}"))?;
        let p = entry.path();
        if p.extension().is_some_and(|x| x == "json") && !p.is_dir() {
            files.push(p);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Runs every vector the paths stand for (files, or directories of `*.json`) on the kernel.
pub fn run_paths<P: AsRef<Path>>(paths: &[P]) -> Summary {
    run_paths_on(paths, &mut |_, v| run::run(v))
}

/// Runs every vector the paths stand for with `run`.
pub fn run_paths_on<P: AsRef<Path>>(
    paths: &[P],
    run: &mut dyn FnMut(&str, &vector::Vector) -> Result<(), String>,
) -> Summary {
    let mut summary = Summary::default();
    for path in paths {
        let path = path.as_ref();
        match expand(path) {
            Ok(files) => summary
                .results
                .extend(files.iter().map(|f| run_file_on(f, run))),
            Err(e) => summary.results.push(VectorResult {
                file: path.display().to_string(),
                name: None,
                failure: Some(e),
            }),
        }
    }
    summary
}
