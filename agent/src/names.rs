//! File resources for `klock exec --root DIR`: a file-system path turned into `FILE:/path`,
//! and a check of intents that name a host path instead (docs/SPEC.md §3).
//!
//! Contract (the same as Python's `klock.file` and Node's `file`): a file's resource is
//! `FILE:` + its path under the root, `/`-separated with a leading `/`. [`Root::file`]
//! resolves a relative path against the current directory (as the file system does), resolves
//! symbolic links in every part that exists (so two agents reaching one file through different
//! links get one name; a file about to be created is named through its existing parent), and
//! refuses a path outside the root (`..` past it, an absolute path elsewhere, a link leading
//! out), one that is not UTF-8, and one holding a character the kernel refuses in resources.
//! Nothing is folded: case and Unicode form stay as on disk (the kernel compares bytes).
//! [`Root::check_intent`] refuses a `FILE:` intent whose path is the root's own absolute path
//! or under it (certainly a host path: the resource is the part below the root), and warns
//! when its path exists on this machine but not under the root (probably a host path outside
//! the root; possibly a file not created yet, so only a warning).

use std::path::{Component, Path, PathBuf};

/// A declared root (`--root DIR`, else `$KLOCK_ROOT`), resolved.
#[derive(Clone, Debug)]
pub struct Root {
    /// The root as given, made absolute (how a user may have spelled it in an intent).
    given: PathBuf,
    /// The root with its links resolved.
    real: PathBuf,
}

impl Root {
    /// The root at `dir`.
    ///
    /// # Errors
    /// `dir` is not an existing directory.
    pub fn new(dir: &Path) -> Result<Root, String> {
        let given = absolute(dir)?;
        let real =
            std::fs::canonicalize(dir).map_err(|e| format!("--root {}: {e}", dir.display()))?;
        if !real.is_dir() {
            return Err(format!("--root {}: not a directory", dir.display()));
        }
        Ok(Root { given, real })
    }

    /// The root with its links resolved (what `KLOCK_ROOT` tells the command).
    pub fn path(&self) -> &Path {
        &self.real
    }

    /// The resource of the file at `path`, e.g. `FILE:/src/auth.ts`.
    ///
    /// # Errors
    /// The path is outside the root, is not UTF-8, or holds an unprintable character.
    pub fn file(&self, path: &Path) -> Result<String, String> {
        let full = resolve(&absolute(path)?)?;
        let Ok(rel) = full.strip_prefix(&self.real) else {
            return Err(format!(
                "{} resolves to {}, outside the root {}: it has no resource name under this root",
                path.display(),
                full.display(),
                self.real.display()
            ));
        };
        let mut name = String::from("FILE:");
        for part in rel.components() {
            let Component::Normal(part) = part else {
                unreachable!("a resolved path below the root has only names")
            };
            let Some(part) = part.to_str() else {
                return Err(format!(
                    "{}: the path is not valid UTF-8, which a resource must be",
                    path.display()
                ));
            };
            name.push('/');
            name.push_str(part);
        }
        if name.len() == "FILE:".len() {
            name.push('/');
        }
        if let Some(c) = name.chars().find(|&c| klock_core::is_unprintable(c)) {
            return Err(format!(
                "{} holds the unprintable character U+{:04X}, which a resource cannot hold (docs/SPEC.md §3)",
                path.display(),
                c as u32
            ));
        }
        Ok(name)
    }

    /// Checks an intent against the root: `Err` when its `FILE:` path is the root's own
    /// absolute path or below it, `Ok(Some(warning))` when the path exists on this machine
    /// but not under the root, else `Ok(None)`.
    ///
    /// # Errors
    /// The intent names a file by its absolute host path inside the root.
    pub fn check_intent(&self, intent: &str) -> Result<Option<String>, String> {
        let Some((_, resource)) = intent.split_once(' ') else {
            return Ok(None);
        };
        let Some(path) = resource.strip_prefix("FILE:") else {
            return Ok(None);
        };
        let host = Path::new(path);
        if !host.is_absolute() {
            return Ok(None); // the kernel refuses it with its own message
        }
        for root in [&self.given, &self.real] {
            if let Ok(rel) = host.strip_prefix(root) {
                let named = self.file(&root.join(rel)).unwrap_or_else(|_| {
                    format!("FILE:/{}", rel.to_string_lossy().trim_start_matches('/'))
                });
                if root.parent().is_none() {
                    return Ok(None); // the root is `/`: host paths are the names
                }
                return Err(format!(
                    "--intent {intent:?} names the host path {path}, inside --root {}: its resource is {named} (or say --file \"PREDICATE {path}\")",
                    root.display()
                ));
            }
        }
        let under_root = self.real.join(path.trim_start_matches('/'));
        if host.exists() && !under_root.exists() {
            return Ok(Some(format!(
                "--intent {intent:?}: {path} exists on this machine but not under --root {}; if it means that host file, it is outside the root and other agents will not name it so",
                self.real.display()
            )));
        }
        Ok(None)
    }
}

/// `path` made absolute against the current directory, without touching the file system.
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `path` (absolute) with the links of its longest existing prefix resolved and the rest
/// (names not created yet) normalised as names: `.` dropped, `..` taking off the last one.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    // The parts not found yet, last first: a name, or `None` for `..`.
    let mut rest: Vec<Option<std::ffi::OsString>> = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut out) => {
                for part in rest.iter().rev() {
                    match part {
                        Some(name) => out.push(name),
                        None => {
                            out.pop();
                        }
                    }
                }
                return Ok(out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match existing.components().next_back() {
                    Some(Component::Normal(name)) => rest.push(Some(name.to_owned())),
                    Some(Component::ParentDir) => rest.push(None),
                    Some(Component::CurDir) => {}
                    _ => return Err(format!("{}: {e}", path.display())),
                }
                existing.pop();
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile_dir::Dir, Root) {
        let dir = tempfile_dir::Dir::new();
        std::fs::create_dir_all(dir.0.join("repo/src")).unwrap();
        std::fs::write(dir.0.join("repo/src/auth.ts"), "").unwrap();
        let root = Root::new(&dir.0.join("repo")).unwrap();
        (dir, root)
    }

    /// A directory removed on drop (the crate has no tempfile dependency).
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "klock-names-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn files_are_named_from_the_root() {
        let (dir, root) = tree();
        let repo = dir.0.join("repo");
        assert_eq!(
            root.file(&repo.join("src/auth.ts")),
            Ok("FILE:/src/auth.ts".into())
        );
        assert_eq!(root.file(&repo), Ok("FILE:/".into()));
        // Not created yet, with `.` and `..` in the part that does not exist.
        assert_eq!(
            root.file(&repo.join("src/new/./x/../y.ts")),
            Ok("FILE:/src/new/y.ts".into())
        );
        assert_eq!(
            root.file(&repo.join("src/../src/auth.ts")),
            Ok("FILE:/src/auth.ts".into())
        );
        // Case is kept.
        assert_eq!(
            root.file(&repo.join("src/Auth.ts")),
            Ok("FILE:/src/Auth.ts".into())
        );
        for outside in [
            repo.join(".."),
            repo.join("src/../../x"),
            PathBuf::from("/etc/passwd"),
        ] {
            assert!(
                root.file(&outside)
                    .unwrap_err()
                    .contains("outside the root"),
                "{outside:?}"
            );
        }
        assert!(root
            .file(&repo.join("a\u{200b}b"))
            .unwrap_err()
            .contains("U+200B"));
    }

    #[test]
    fn links_resolve_to_one_name() {
        let (dir, root) = tree();
        let repo = dir.0.join("repo");
        std::os::unix::fs::symlink(repo.join("src"), dir.0.join("elsewhere")).unwrap();
        assert_eq!(
            root.file(&dir.0.join("elsewhere/auth.ts")),
            Ok("FILE:/src/auth.ts".into())
        );
        // A root reached through a link names the same files.
        std::os::unix::fs::symlink(&repo, dir.0.join("link-to-repo")).unwrap();
        let linked = Root::new(&dir.0.join("link-to-repo")).unwrap();
        assert_eq!(
            linked.file(&repo.join("src/auth.ts")),
            Ok("FILE:/src/auth.ts".into())
        );
        // A link inside the root leading out names a file outside it.
        std::os::unix::fs::symlink("/etc", repo.join("out")).unwrap();
        assert!(root.file(&repo.join("out/passwd")).is_err());
    }

    #[test]
    fn host_paths_in_intents_are_caught() {
        let (dir, root) = tree();
        let repo = dir.0.join("repo");
        let inside = format!("MUTATES FILE:{}", repo.join("src/auth.ts").display());
        let err = root.check_intent(&inside).unwrap_err();
        assert!(err.contains("its resource is FILE:/src/auth.ts"), "{err}");
        let outside = format!("MUTATES FILE:{}", dir.0.display());
        assert!(root
            .check_intent(&outside)
            .unwrap()
            .unwrap()
            .contains("not under --root"));
        assert_eq!(root.check_intent("MUTATES FILE:/src/auth.ts"), Ok(None));
        assert_eq!(root.check_intent("MUTATES FILE:/src/not-yet.ts"), Ok(None));
        assert_eq!(root.check_intent("MUTATES DB:/etc"), Ok(None));
        assert!(Root::new(&repo.join("src/auth.ts")).is_err());
        assert!(Root::new(&dir.0.join("missing")).is_err());
    }
}
