//! The process's allocator, chosen by its command: mimalloc for `klock serve`, the C library's
//! for everything else (`klock exec`, `elect`, `mcp`, `status`, ...).
//!
//! mimalloc pays for the server (glibc malloc/free took about 15 % of its CPU per request,
//! issue 23), but its start is dear for a tool that lives a few milliseconds: the first
//! allocation reserves a 1 GiB arena advised `MADV_HUGEPAGE` and commits it eagerly, so the
//! kernel zeroes 2 MiB pages the tool never uses (`clear_page_erms` under
//! `do_huge_pmd_anonymous_page` was 13 % of `klock exec`'s samples, the largest item).
//! `klock exec ... -- true` against `flock FILE true` is the measure (bench/exec_flock.py,
//! docs/DECISIONS.md "Issue 27: klock exec start-up").
//!
//! The choice is made before `main`, from an `.init_array` function (glibc passes it `argc`
//! and `argv`, as it does the standard library's own), since the standard library allocates
//! before `main` runs. Until then the process is on mimalloc, and it stays there for `serve`;
//! a tool switches to the C library once, and frees a block mimalloc gave out earlier (if any
//! was) to mimalloc, which knows its own blocks ([`mi_is_in_heap_region`]). Elsewhere than
//! glibc (no `argv` for `.init_array`) every command keeps mimalloc.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's own answer to "is this block mine?" (in the library the `mimalloc` crate
    /// links; its Rust declaration sits behind a feature that pulls in another crate).
    fn mi_is_in_heap_region(p: *const c_void) -> bool;
}

/// `true` once the process is known not to be `klock serve`: new blocks come from the C
/// library. Set at most once, before `main`; never unset.
static TOOL: AtomicBool = AtomicBool::new(false);

/// Which allocator a command runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// mimalloc: the server.
    Server,
    /// The C library's malloc: a short-lived tool.
    Tool,
}

/// The allocator for the command `first` (the first argument after the program's name).
pub fn kind_for(first: Option<&[u8]>) -> Kind {
    match first {
        Some(b"serve") => Kind::Server,
        _ => Kind::Tool,
    }
}

/// The allocator this process is on.
pub fn current() -> Kind {
    if TOOL.load(Ordering::Relaxed) {
        Kind::Tool
    } else {
        Kind::Server
    }
}

/// Called by glibc before `main`, with the program's arguments.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn choose(argc: c_int, argv: *const *const c_char, _env: *const *const c_char) {
    let first = if argc > 1 && !argv.is_null() {
        // SAFETY: glibc passes `argc` valid, NUL-terminated arguments.
        let arg = unsafe { *argv.add(1) };
        (!arg.is_null()).then(|| unsafe { CStr::from_ptr(arg) }.to_bytes())
    } else {
        None
    };
    if kind_for(first) == Kind::Tool {
        TOOL.store(true, Ordering::Relaxed);
    }
}

/// Early among the constructors (the standard library's own argument capture uses the same
/// priority): nothing of Klock's runs before it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[link_section = ".init_array.00099"]
static CHOOSE: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = choose;

/// The global allocator: mimalloc or the C library's, as [`current`] says.
pub struct ByCommand;

impl ByCommand {
    /// `dealloc` for a process on `kind`.
    ///
    /// # Safety
    /// As [`GlobalAlloc::dealloc`].
    unsafe fn dealloc_as(kind: Kind, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's; a block is given back to the allocator that gave it out.
        unsafe {
            if kind == Kind::Server || mi_is_in_heap_region(ptr as *const c_void) {
                MiMalloc.dealloc(ptr, layout);
            } else {
                System.dealloc(ptr, layout);
            }
        }
    }

    /// `realloc` for a process on `kind`.
    ///
    /// # Safety
    /// As [`GlobalAlloc::realloc`].
    unsafe fn realloc_as(kind: Kind, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's; a block grows in the allocator that gave it out.
        unsafe {
            if kind == Kind::Server || mi_is_in_heap_region(ptr as *const c_void) {
                MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

// SAFETY: each call goes to one of two sound allocators; a block is always freed or grown by
// the one that gave it out (mimalloc recognises its own, see `dealloc_as`).
unsafe impl GlobalAlloc for ByCommand {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's.
        unsafe {
            match current() {
                Kind::Server => MiMalloc.alloc(layout),
                Kind::Tool => System.alloc(layout),
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's.
        unsafe {
            match current() {
                Kind::Server => MiMalloc.alloc_zeroed(layout),
                Kind::Tool => System.alloc_zeroed(layout),
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's.
        unsafe { Self::dealloc_as(current(), ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's.
        unsafe { Self::realloc_as(current(), ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_serve_runs_on_mimalloc() {
        assert_eq!(kind_for(Some(b"serve")), Kind::Server);
        for other in [
            &b"exec"[..],
            b"elect",
            b"mcp",
            b"status",
            b"backup",
            b"--version",
            b"serve2",
            b"",
        ] {
            assert_eq!(kind_for(Some(other)), Kind::Tool, "{other:?}");
        }
        assert_eq!(kind_for(None), Kind::Tool);
    }

    /// This test program's first argument is not `serve`: it is on the C library's allocator,
    /// chosen before `main` (it would be mimalloc if the constructor did not run).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_choice_is_made_before_main() {
        assert_eq!(current(), Kind::Tool);
        let boxed = Box::new([7u8; 64]);
        assert!(!unsafe { mi_is_in_heap_region(boxed.as_ptr() as *const c_void) });
    }

    /// A block mimalloc gave out before a tool switched away from it goes back to mimalloc,
    /// freed or grown (given to the C library's `free`, glibc aborts: "free(): invalid
    /// pointer").
    #[test]
    fn a_tool_gives_mimallocs_blocks_back_to_mimalloc() {
        let layout = Layout::from_size_align(48, 16).unwrap();
        unsafe {
            let early = MiMalloc.alloc(layout);
            assert!(!early.is_null());
            early.write_bytes(0xa5, 48);
            ByCommand::dealloc_as(Kind::Tool, early, layout);

            let early = MiMalloc.alloc(layout);
            early.write_bytes(0x5a, 48);
            let grown = ByCommand::realloc_as(Kind::Tool, early, layout, 4096);
            assert!(!grown.is_null());
            assert_eq!(*grown.add(47), 0x5a);
            ByCommand::dealloc_as(
                Kind::Tool,
                grown,
                Layout::from_size_align(4096, 16).unwrap(),
            );

            let own = System.alloc(layout);
            own.write_bytes(1, 48);
            let own = ByCommand::realloc_as(Kind::Tool, own, layout, 1024);
            assert_eq!(*own.add(47), 1);
            ByCommand::dealloc_as(Kind::Tool, own, Layout::from_size_align(1024, 16).unwrap());
        }
    }
}
