//! C strings and arrays, in and out.
//!
//! Contract: inputs are borrowed only for the call and checked (NULL → `KLOCK_NULL_POINTER`,
//! not UTF-8 → `KLOCK_INVALID_UTF8`); outputs are allocated here and handed to C as raw
//! pointers that only the matching `free_*` function below may take back. Empty arrays are
//! handed out as NULL with length 0.

use crate::status::{klock_status, Failure, Outcome};
use std::ffi::{c_char, CStr, CString};
use std::ptr;

/// Borrows a required NUL-terminated UTF-8 string.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that outlives the call.
pub unsafe fn text<'a>(p: *const c_char, what: &str) -> Outcome<&'a str> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(p) };
    bytes.to_str().map_err(|e| {
        Failure::new(
            klock_status::KLOCK_INVALID_UTF8,
            format!(
                "{what} is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// Borrows an optional string: NULL is `None`.
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_text<'a>(p: *const c_char, what: &str) -> Outcome<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded contract.
        unsafe { text(p, what) }.map(Some)
    }
}

/// Borrows `len` items at `p`; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `p` must be NULL or point to `len` initialised items that outlive the call.
pub unsafe fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Outcome<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(&format!("{what} (with a length of {len})")));
    }
    // SAFETY: non-NULL and `len` items long by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A required out-pointer as a reference.
///
/// # Safety
/// `p` must be NULL or valid for writes of a `T`.
pub unsafe fn out<'a, T>(p: *mut T, what: &str) -> Outcome<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::null(what))
}

/// Sets a pointer out-parameter to NULL (when it can be written), so that a failing call
/// leaves something the caller may always free.
///
/// # Safety
/// `p` must be NULL or valid for writes of a pointer.
pub unsafe fn clear_out<T>(p: *mut *mut T) {
    // SAFETY: the caller's contract.
    if let Some(slot) = unsafe { p.as_mut() } {
        *slot = ptr::null_mut();
    }
}

/// Hands a string to C (freed by [`free_string`]). Kernel strings never hold NUL (agent ids,
/// namespaces and resources reject control characters); should one appear, it is cut there.
pub fn string(s: &str) -> *mut c_char {
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end])
        .expect("no NUL before `end`")
        .into_raw()
}

/// Takes back a string made by [`string`]; NULL is a no-op.
///
/// # Safety
/// `p` must be NULL or come from [`string`] and not have been freed.
pub unsafe fn free_string(p: *mut c_char) {
    if !p.is_null() {
        // SAFETY: made by CString::into_raw in `string`.
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Hands an array to C as (pointer, length) (freed by [`free_array`]); empty is (NULL, 0).
pub fn array<T>(items: Vec<T>) -> (*mut T, usize) {
    if items.is_empty() {
        return (ptr::null_mut(), 0);
    }
    let len = items.len();
    (Box::into_raw(items.into_boxed_slice()).cast::<T>(), len)
}

/// Takes back an array made by [`array`], dropping its items; NULL is a no-op.
///
/// # Safety
/// `(p, len)` must be NULL or exactly a pair returned by [`array`], not freed before.
pub unsafe fn free_array<T>(p: *mut T, len: usize) {
    if !p.is_null() {
        // SAFETY: made by Box::into_raw of a boxed slice of `len` items in `array`.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, len)) });
    }
}

/// Hands one value to C (freed by [`free_boxed`]).
pub fn boxed<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Takes back a value made by [`boxed`]; NULL is a no-op.
///
/// # Safety
/// `p` must be NULL or come from [`boxed`] and not have been freed.
pub unsafe fn free_boxed<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: made by Box::into_raw in `boxed`.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Copies `text` into the caller's buffer: at most `buffer_len - 1` bytes, cut at a UTF-8
/// character boundary, then NUL. Reports the full size (NUL included) in `required`.
///
/// # Safety
/// `buffer` must be NULL or valid for `buffer_len` bytes; `required` NULL or writable.
pub unsafe fn write_text(
    text: &str,
    buffer: *mut c_char,
    buffer_len: usize,
    required: *mut usize,
) -> klock_status {
    let needed = text.len() + 1;
    // SAFETY: the caller's contract.
    if let Some(slot) = unsafe { required.as_mut() } {
        *slot = needed;
    }
    if buffer_len == 0 {
        return klock_status::KLOCK_BUFFER_TOO_SMALL;
    }
    if buffer.is_null() {
        return klock_status::KLOCK_NULL_POINTER;
    }
    let mut n = text.len().min(buffer_len - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `buffer` holds `buffer_len > n` bytes; the source is `n` bytes of `text`.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, n);
        *buffer.add(n) = 0;
    }
    if n == text.len() {
        klock_status::KLOCK_OK
    } else {
        klock_status::KLOCK_BUFFER_TOO_SMALL
    }
}
