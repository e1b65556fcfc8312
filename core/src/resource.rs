//! Resource names: `TYPE:/path`, validated and normalised (docs/SPEC.md §3).
//!
//! Contract: [`ResourceName::parse`] either returns the canonical form or `INVALID_RESOURCE`
//! with the reason; it never guesses. The canonical form has no repeated `/`, no `.` segment
//! and no trailing `/` (except the root `TYPE:/`). [`ResourceName::parent`] walks the tree
//! segment-wise: the parent of `FILE:/src/a.ts` is `FILE:/src`, whose parent is `FILE:/`.
//! [`canonical`] is the same check for the kernel's own use: it borrows a text that is already
//! canonical instead of copying it (the common case, and an allocation per intent otherwise).

use crate::error::{Error, ErrorCode};
use crate::kernel::sessions::is_unprintable;
use alloc::{borrow::Cow, format, string::String};

/// Longest accepted resource text, in bytes, as given (before normalisation).
pub const MAX_RESOURCE_BYTES: usize = 4096;
/// Longest accepted TYPE.
pub const MAX_TYPE_BYTES: usize = 32;

/// A validated, normalised resource name such as `FILE:/src/a.ts`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceName {
    text: String,
    /// Byte length of `TYPE` (the `:` follows it).
    type_len: usize,
}

fn invalid(text: &str, why: &str) -> Error {
    let shown: String = text.chars().take(80).collect();
    let ellipsis = if shown.len() < text.len() { "…" } else { "" };
    Error::new(
        ErrorCode::InvalidResource,
        format!("invalid resource {shown:?}{ellipsis}: {why} (expected TYPE:/path, e.g. FILE:/src/a.ts)"),
    )
}

impl ResourceName {
    /// Validates and normalises `text`.
    ///
    /// # Errors
    /// `INVALID_RESOURCE` naming the problem: length over 4096 bytes, an unprintable character
    /// (Unicode Cc, Cf, Zl or Zp, as for ids), a TYPE outside `[A-Z][A-Z0-9_]{0,31}`, a path not starting with `/`, or a `..` segment.
    pub fn parse(text: &str) -> Result<ResourceName, Error> {
        let text = canonical(text)?.into_owned();
        let type_len = text.find(':').expect("canonical text has a ':'");
        Ok(ResourceName { text, type_len })
    }

    /// The canonical text, e.g. `FILE:/src/a.ts`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The canonical text, owned.
    pub fn into_string(self) -> String {
        self.text
    }

    /// Whether this is the root of its TYPE (`TYPE:/`).
    pub fn is_root(&self) -> bool {
        self.text.len() == self.type_len + 2
    }

    /// The canonical text of the parent node, or `None` for the root.
    pub fn parent_str(&self) -> Option<&str> {
        parent_of(&self.text)
    }
}

/// Validates `text` like [`ResourceName::parse`] and returns its canonical form, borrowed when
/// `text` already is canonical.
///
/// # Errors
/// As [`ResourceName::parse`].
pub(crate) fn canonical(text: &str) -> Result<Cow<'_, str>, Error> {
    if text.len() > MAX_RESOURCE_BYTES {
        return Err(invalid(text, "longer than 4096 bytes"));
    }
    // Only text with a candidate byte pays for decoding characters: ASCII text without a
    // control byte (nearly every path) is checked eight bytes at a time.
    if may_hold_unprintable(text.as_bytes()) {
        if let Some(c) = text
            .chars()
            .find(|&c| may_be_unprintable(c) && is_unprintable(c))
        {
            let why = format!(
                "contains the unprintable character U+{:04X} (a control, format or separator character: it would make the name shown differ from the name compared)",
                c as u32
            );
            return Err(invalid(text, &why));
        }
    }
    let Some(colon) = text.bytes().position(|b| b == b':') else {
        return Err(invalid(text, "missing ':' between TYPE and path"));
    };
    let (kind, path) = (&text[..colon], &text[colon + 1..]);
    let kind_ok = !kind.is_empty()
        && kind.len() <= MAX_TYPE_BYTES
        && kind.as_bytes()[0].is_ascii_uppercase()
        && kind
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !kind_ok {
        return Err(invalid(text, "TYPE must match [A-Z][A-Z0-9_]{0,31}"));
    }
    if path.is_empty() {
        return Err(invalid(text, "empty path"));
    }
    if !path.starts_with('/') {
        return Err(invalid(text, "path must start with '/'"));
    }
    // Already canonical (every segment but the root's is a name, not "" or "."): borrow.
    let mut copy = false;
    if path != "/" {
        let mut rest = &path.as_bytes()[1..];
        loop {
            let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
            match &rest[..end] {
                b"" | b"." => copy = true,
                b".." => return Err(invalid(text, "'..' segments are not allowed")),
                _ => {}
            }
            if end == rest.len() {
                break;
            }
            rest = &rest[end + 1..];
        }
    }
    if !copy {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(kind);
    out.push(':');
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(invalid(text, "'..' segments are not allowed")),
            s => {
                out.push('/');
                out.push_str(s);
            }
        }
    }
    if out.len() == kind.len() + 1 {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// Whether `bytes` may hold an unprintable character (Cc, Cf, Zl, Zp): a C0 byte, DEL, or any
/// non-ASCII byte (every C1 control, format and separator character is outside ASCII). Eight
/// bytes at a time; it never misses one, and the caller decodes characters to confirm.
fn may_hold_unprintable(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `x` is below `n` (n <= 128), and whether one equals `b`.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH != 0;
    let equal = |x: u64, b: u8| below(x ^ (ONES * u64::from(b)), 1);
    let candidate = |word: &[u8]| {
        let x = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        below(x, 0x20) || equal(x, 0x7f) || x & HIGH != 0
    };
    if bytes.len() < 8 {
        return (bytes.iter()).any(|&b| b < 0x20 || b == 0x7f || b >= 0x80);
    }
    // Whole words, then the last 8 bytes (overlapping the last whole word: the check is the
    // same for a byte seen twice).
    bytes.chunks_exact(8).any(candidate) || candidate(&bytes[bytes.len() - 8..])
}

/// Whether `c` may be unprintable: a superset of the code points of categories Cc, Cf, Zl and
/// Zp that costs a comparison or two, so that letters (CJK, accented Latin, ...) skip the
/// category lookup, a search of the Unicode tables (about 8× the parse of a short name without
/// it). `the_prefilter_covers_every_unprintable_character` holds it to the tables.
fn may_be_unprintable(c: char) -> bool {
    matches!(
        c as u32,
        0..=0x1F
            | 0x7F..=0xAD
            | 0x600..=0x8FF
            | 0x180E
            | 0x2000..=0x206F
            | 0xFEFF
            | 0xFFF0..=0xFFFF
            | 0x1_0000..
    )
}

/// The parent of a canonical resource text, or `None` for a root (`TYPE:/`).
pub(crate) fn parent_of(canonical: &str) -> Option<&str> {
    // Byte scans: both separators are ASCII, and names are short (a `str` pattern search
    // costs more than the whole scan here).
    let colon = canonical.bytes().position(|b| b == b':')?;
    let path = &canonical.as_bytes()[colon + 1..];
    if path == b"/" {
        return None;
    }
    let cut = path.iter().rposition(|&b| b == b'/')?;
    if cut == 0 {
        Some(&canonical[..colon + 2])
    } else {
        Some(&canonical[..colon + 1 + cut])
    }
}

impl core::fmt::Display for ResourceName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn norm(t: &str) -> String {
        ResourceName::parse(t).unwrap().to_string()
    }

    #[test]
    fn normalises() {
        assert_eq!(norm("FILE:/a//b/./c/"), "FILE:/a/b/c");
        assert_eq!(norm("FILE:/"), "FILE:/");
        assert_eq!(norm("FILE://./"), "FILE:/");
        assert_eq!(norm("X_1:/a b/ü"), "X_1:/a b/ü");
        // Printable non-ASCII is ordinary, compared as bytes: no case folding, no Unicode
        // normalisation (a precomposed é and e + U+0301 are two names).
        assert_eq!(norm("FILE:/a\u{a0}b/漢字/🤖"), "FILE:/a\u{a0}b/漢字/🤖");
        assert_ne!(norm("FILE:/caf\u{e9}"), norm("FILE:/cafe\u{301}"));
        assert_ne!(norm("FILE:/A"), norm("FILE:/a"));
    }

    #[test]
    fn rejects() {
        let long = alloc::format!("FILE:/{}", "a".repeat(4091));
        for bad in [
            "",
            "FILE",
            "FILE:",
            "file:/x",
            "FILE:x",
            "FILE:/a/../b",
            "FILE:/a/..",
            "1F:/x",
            "FILE:/a\0b",
            "FILE:/a\u{7f}",
            "FILE:/a\u{85}b",
            "FILE:/a\u{200b}b",
            "FILE:/evil\u{202e}st.ts",
            "FILE:/a\u{ad}b",
            "FILE:/a\u{2028}b",
            "FILE:/a\u{feff}",
            "FILE:/long/enough/to/scan/words/\u{200d}",
            ":/x",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG:/x",
            long.as_str(),
        ] {
            assert_eq!(
                ResourceName::parse(bad).unwrap_err().code,
                ErrorCode::InvalidResource,
                "{bad:?}"
            );
        }
        let at_limit = alloc::format!("FILE:/{}", "a".repeat(4090));
        assert!(ResourceName::parse(&at_limit).is_ok());
    }

    #[test]
    fn canonical_borrows_only_canonical_text() {
        for text in [
            "FILE:/",
            "FILE:/a",
            "FILE:/a/b.c",
            "X_1:/a b/ü",
            "FILE:/.../..a/.b",
        ] {
            assert!(matches!(canonical(text).unwrap(), Cow::Borrowed(t) if t == text));
        }
        for (text, canon) in [
            ("FILE://", "FILE:/"),
            ("FILE:/a/", "FILE:/a"),
            ("FILE:/./a", "FILE:/a"),
            ("FILE:/a/.", "FILE:/a"),
            ("FILE:/a//b", "FILE:/a/b"),
            ("FILE:/a/./b", "FILE:/a/b"),
        ] {
            assert!(matches!(canonical(text).unwrap(), Cow::Owned(t) if t == canon));
        }
    }

    /// The word-at-a-time scan against the byte-wise rule, at every position of a word and
    /// in the remainder, for every byte value.
    #[test]
    fn the_unprintable_scan_finds_every_candidate_byte_and_nothing_else() {
        for len in 1..=19 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut bytes = alloc::vec![b'a'; len];
                    bytes[at] = b;
                    let expected = b < 0x20 || b == 0x7f || b >= 0x80;
                    assert_eq!(
                        may_hold_unprintable(&bytes),
                        expected,
                        "byte {b:#x} at {at} of {len}"
                    );
                }
            }
        }
    }

    /// Every character the kernel refuses passes the prefilter (checked against the Unicode
    /// tables of the crate in use, so a new Unicode version cannot slip one past it).
    #[test]
    fn the_prefilter_covers_every_unprintable_character() {
        for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
            if is_unprintable(c) {
                assert!(may_be_unprintable(c), "U+{:04X}", c as u32);
            }
        }
    }

    #[test]
    fn parents_are_segment_wise() {
        assert_eq!(parent_of("FILE:/src/a.ts"), Some("FILE:/src"));
        assert_eq!(parent_of("FILE:/src"), Some("FILE:/"));
        assert_eq!(parent_of("FILE:/"), None);
        assert!(ResourceName::parse("FILE:/").unwrap().is_root());
    }
}
