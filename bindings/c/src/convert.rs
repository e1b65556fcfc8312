//! C strings and arrays, in and out.
//!
//! Contract: inputs are borrowed only for the call and checked (NULL → `KLOCK_NULL_POINTER`,
//! not UTF-8 → `KLOCK_INVALID_UTF8`); outputs are allocated here and handed to C as raw
//! pointers that only the matching `free_*` function below may take back. Empty arrays are
//! handed out as NULL with length 0.
//!
//! U+0000, which no C string can hold, travels as the two bytes 0xC0 0x80 (the "modified
//! UTF-8" of JNI) in both directions, so a C caller can pass any text the kernel can be given
//! (and get the kernel's exact answer to an id holding NUL) and nothing is ever cut short. No
//! other overlong form is accepted.

use crate::status::{klock_status, Failure, Outcome};
use std::borrow::Cow;
use std::ffi::{c_char, CStr, CString};
use std::ptr;

/// How U+0000 is written inside a C string.
const NUL_IN_C: [u8; 2] = [0xC0, 0x80];

/// Decodes the bytes of a C string: UTF-8, with 0xC0 0x80 standing for U+0000. Borrows
/// unless there is such a pair to replace.
fn decode<'a>(bytes: &'a [u8], what: &str) -> Outcome<Cow<'a, str>> {
    let mut text = String::new();
    // 0xC0 never starts a valid UTF-8 sequence, so every piece between two pairs must be
    // UTF-8 on its own; `start` is the offset of `rest` in `bytes`, for the message.
    let (mut rest, mut start) = (bytes, 0);
    while let Some(at) = rest.windows(2).position(|w| w == NUL_IN_C) {
        text.push_str(utf8(&rest[..at], start, what)?);
        text.push('\0');
        start += at + NUL_IN_C.len();
        rest = &rest[at + NUL_IN_C.len()..];
    }
    let last = utf8(rest, start, what)?;
    if start == 0 {
        return Ok(Cow::Borrowed(last));
    }
    text.push_str(last);
    Ok(Cow::Owned(text))
}

fn utf8<'a>(bytes: &'a [u8], offset: usize, what: &str) -> Outcome<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        Failure::new(
            klock_status::KLOCK_INVALID_UTF8,
            format!(
                "{what} is not valid UTF-8 (invalid byte at offset {})",
                offset + e.valid_up_to()
            ),
        )
    })
}

/// Borrows a required NUL-terminated string (UTF-8, 0xC0 0x80 for U+0000).
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that outlives the call.
pub unsafe fn text<'a>(p: *const c_char, what: &str) -> Outcome<Cow<'a, str>> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    decode(unsafe { CStr::from_ptr(p) }.to_bytes(), what)
}

/// Borrows an optional string: NULL is `None`.
///
/// # Safety
/// As [`text`].
pub unsafe fn opt_text<'a>(p: *const c_char, what: &str) -> Outcome<Option<Cow<'a, str>>> {
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

/// Hands a string to C (freed by [`free_string`]), U+0000 written as 0xC0 0x80 (kernel
/// names never hold it: they reject control characters).
pub fn string(s: &str) -> *mut c_char {
    let mut bytes = Vec::with_capacity(s.len() + 1);
    for &b in s.as_bytes() {
        if b == 0 {
            bytes.extend_from_slice(&NUL_IN_C);
        } else {
            bytes.push(b);
        }
    }
    CString::new(bytes)
        .expect("every NUL was rewritten")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(bytes: &[u8]) -> Outcome<String> {
        decode(bytes, "x").map(Cow::into_owned)
    }

    #[test]
    fn c0_80_is_nul_and_nothing_else_changes() {
        assert!(matches!(decode(b"alice", "x"), Ok(Cow::Borrowed("alice"))));
        assert_eq!(decoded(b"a\xC0\x80b").unwrap(), "a\0b");
        assert_eq!(decoded(b"\xC0\x80\xC0\x80").unwrap(), "\0\0");
        assert_eq!(decoded("é\u{1F600}".as_bytes()).unwrap(), "é\u{1F600}");
    }

    #[test]
    fn other_overlong_forms_and_bad_bytes_are_invalid_utf8_at_their_offset() {
        for (bytes, offset) in [
            (&b"a\xC0\xAFb"[..], 1),  // overlong '/'
            (b"\xC0", 0),             // a lone 0xC0
            (b"ab\xC0\x80c\xFF", 5),  // after a NUL pair, offsets still count bytes
            (b"\xE2\x82\xC0\x80", 0), // a sequence cut short by the pair
        ] {
            let failure = decoded(bytes).unwrap_err();
            assert_eq!(failure.status, klock_status::KLOCK_INVALID_UTF8);
            assert_eq!(
                failure.message,
                format!("x is not valid UTF-8 (invalid byte at offset {offset})")
            );
        }
    }

    #[test]
    fn strings_handed_out_write_nul_as_c0_80() {
        for text in ["plain", "a\0b", "\0"] {
            let p = string(text);
            // SAFETY: `string` returns a NUL-terminated string, freed right after.
            let back = decoded(unsafe { CStr::from_ptr(p) }.to_bytes()).unwrap();
            unsafe { free_string(p) };
            assert_eq!(back, text);
        }
    }
}
