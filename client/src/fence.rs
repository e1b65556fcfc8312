//! The protected side of a fence: [`fenced_write`] refuses a write whose fence is older than
//! one the file has already accepted.
//!
//! A lease alone is not mutual exclusion: a holder paused past its expiry (GC, swap, a stopped
//! VM) can wake up and write after another agent was granted the resource. Every grant carries
//! a fence that strictly increases; the resource must remember the largest it accepted and
//! refuse smaller ones. For a file the protocol is the Python client's `klock.fenced_write`
//! and the Node client's `fencedWrite`, so agents in all three languages protect one file
//! together:
//! - `<path>.fence` beside the file holds the largest fence accepted for it (ASCII decimal;
//!   missing or empty: none yet).
//! - Under an exclusive `flock(2)` on `<path>.fence` (created with mode 0644 if missing): read
//!   the stored fence; if `fence < stored`, unlock and refuse ([`Error::StaleFence`], naming the
//!   path, the fence given and the one stored). Otherwise write the new fence into
//!   `<path>.fence` (truncate, write, fsync) first, then the data to a temporary file in the
//!   same directory, fsync it and rename it over `<path>` (readers see the old content or the
//!   new, never a torn file), fsync the directory, then unlock. Equal fences are accepted (one
//!   holder may write twice).
//! - `flock` is released by the OS when a process dies, so a killed writer never blocks the
//!   others; one killed after storing the fence but before the rename leaves the old content
//!   whole, and a smaller fence is still refused.
//! - A `<path>.fence` that holds anything but digits is refused ([`Error::Io`] naming it),
//!   never read as "no fence".

use crate::error::Error;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The file beside `path` that holds its largest accepted fence.
fn fence_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".fence");
    PathBuf::from(name)
}

fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        message: format!("{what}: {e}"),
    }
}

/// Takes `flock(2)` on `file` (exclusive or shared); the lock goes with the file's close.
fn lock(file: &File, path: &Path, exclusive: bool) -> Result<(), Error> {
    let how = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    loop {
        // SAFETY: flock(2) on a descriptor `file` owns for the whole call.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(io(path, "cannot lock it", e));
        }
    }
}

/// The fence stored in the (locked) fence file; `None`: none yet.
fn read_fence(file: &mut File, path: &Path) -> Result<Option<u64>, Error> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
        .map_err(|e| io(path, "cannot read it", e))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<u64>() {
        Ok(fence) if text.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(fence)),
        _ => Err(Error::Io {
            path: path.to_owned(),
            message: format!(
                "holds {:?}, not a fence (ASCII decimal)",
                text.chars().take(40).collect::<String>()
            ),
        }),
    }
}

/// The largest fence `path` has accepted (`None`: none yet), read under the lock.
///
/// # Errors
/// [`Error::Io`]: the fence file cannot be read, or is not a fence.
pub fn stored_fence(path: impl AsRef<Path>) -> Result<Option<u64>, Error> {
    let fence_path = fence_path(path.as_ref());
    let mut file = match File::open(&fence_path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&fence_path, "cannot open it", e)),
    };
    lock(&file, &fence_path, false)?;
    read_fence(&mut file, &fence_path)
}

/// Writes `data` to `path` atomically, unless `path` has accepted a larger fence: then
/// [`Error::StaleFence`] and the file is unchanged (module contract).
///
/// # Errors
/// [`Error::StaleFence`]; [`Error::Io`] naming the file that could not be read or written.
pub fn fenced_write(path: impl AsRef<Path>, data: &[u8], fence: u64) -> Result<(), Error> {
    let target = path.as_ref();
    let fence_path = fence_path(target);
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut fence_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&fence_path)
        .map_err(|e| io(&fence_path, "cannot open it", e))?;
    lock(&fence_file, &fence_path, true)?;
    if let Some(stored) = read_fence(&mut fence_file, &fence_path)? {
        if fence < stored {
            return Err(Error::StaleFence {
                path: target.to_owned(),
                fence,
                stored,
            });
        }
    }
    // The fence first: once it is durable, no older holder can write, even if this one dies
    // before its data lands.
    fence_file
        .set_len(0)
        .and_then(|()| fence_file.seek(SeekFrom::Start(0)))
        .and_then(|_| fence_file.write_all(fence.to_string().as_bytes()))
        .and_then(|()| fence_file.sync_all())
        .map_err(|e| io(&fence_path, "cannot write it", e))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, target)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(target, "cannot write it", e));
    }
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(&dir, "cannot sync the directory", e))
    // `fence_file` closes here, releasing the flock.
}
