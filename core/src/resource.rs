//! Resource names: `TYPE:/path`, validated and normalised (docs/SPEC.md §3).
//!
//! Contract: [`ResourceName::parse`] either returns the canonical form or `INVALID_RESOURCE`
//! with the reason; it never guesses. The canonical form has no repeated `/`, no `.` segment
//! and no trailing `/` (except the root `TYPE:/`). [`ResourceName::parent`] walks the tree
//! segment-wise: the parent of `FILE:/src/a.ts` is `FILE:/src`, whose parent is `FILE:/`.

use crate::error::{Error, ErrorCode};
use alloc::{format, string::String};

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
    /// `INVALID_RESOURCE` naming the problem: length over 4096 bytes, a control character, a
    /// TYPE outside `[A-Z][A-Z0-9_]{0,31}`, a path not starting with `/`, or a `..` segment.
    pub fn parse(text: &str) -> Result<ResourceName, Error> {
        if text.len() > MAX_RESOURCE_BYTES {
            return Err(invalid(text, "longer than 4096 bytes"));
        }
        if text.chars().any(char::is_control) {
            return Err(invalid(text, "contains a control character"));
        }
        let Some((kind, path)) = text.split_once(':') else {
            return Err(invalid(text, "missing ':' between TYPE and path"));
        };
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
        Ok(ResourceName {
            text: out,
            type_len: kind.len(),
        })
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

/// The parent of a canonical resource text, or `None` for a root (`TYPE:/`).
pub(crate) fn parent_of(canonical: &str) -> Option<&str> {
    let colon = canonical.find(':')?;
    let path = &canonical[colon + 1..];
    if path == "/" {
        return None;
    }
    let cut = path.rfind('/')?;
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
            "1F:/x",
            "FILE:/a\0b",
            "FILE:/a\u{7f}",
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
    fn parents_are_segment_wise() {
        assert_eq!(parent_of("FILE:/src/a.ts"), Some("FILE:/src"));
        assert_eq!(parent_of("FILE:/src"), Some("FILE:/"));
        assert_eq!(parent_of("FILE:/"), None);
        assert!(ResourceName::parse("FILE:/").unwrap().is_root());
    }
}
