//! The stable names of the C enumerations, and their numbering, taken from the core's lists.
//!
//! Contract: every name function returns a static NUL-terminated copy, made at compile time,
//! of the core's own name (`Predicate::ALL`, `Event::KINDS`, `ErrorCode::ALL`, `Policy::name`,
//! `LeaseStatus::name`, `CloseReason::name`); and the C enums are asserted at compile time to
//! number their variants in the core's order and to be called `KLOCK_<GROUP>_<core name>`.
//! So a core list that changes breaks this crate's build instead of the C API drifting. The
//! verdict kinds, which the core names only through serde, are checked by a unit test.

use crate::status::ffi_void;
use crate::types::{
    klock_close_reason, klock_event_kind, klock_lease_status, klock_policy, klock_predicate,
    KLOCK_POLICY_DETECT, KLOCK_POLICY_LANES, KLOCK_POLICY_WAIT_DIE, KLOCK_POLICY_WOUND_WAIT,
};
use klock_core::{CloseReason, ErrorCode, Event, LeaseStatus, Policy, Predicate};
use std::ffi::c_char;

/// Room for the longest name and its NUL.
const NAME_BYTES: usize = 32;
type CName = [u8; NAME_BYTES];

/// `name` as a NUL-padded C string (a compile-time copy).
const fn c_name(name: &str) -> CName {
    let bytes = name.as_bytes();
    assert!(
        bytes.len() < NAME_BYTES,
        "a core name is too long for its C copy"
    );
    let mut out = [0; NAME_BYTES];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

const fn c_names<const N: usize>(names: [&str; N]) -> [CName; N] {
    let mut out = [[0; NAME_BYTES]; N];
    let mut i = 0;
    while i < N {
        out[i] = c_name(names[i]);
        i += 1;
    }
    out
}

/// Whether `spelled` is `prefix` followed by `name`.
pub(crate) const fn prefixed(spelled: &str, prefix: &str, name: &str) -> bool {
    let (s, p, n) = (spelled.as_bytes(), prefix.as_bytes(), name.as_bytes());
    if s.len() != p.len() + n.len() {
        return false;
    }
    let mut i = 0;
    while i < s.len() {
        let want = if i < p.len() { p[i] } else { n[i - p.len()] };
        if s[i] != want {
            return false;
        }
        i += 1;
    }
    true
}

/// The variants of C enum `$enum` in the core's order, asserting at compile time that the
/// i-th is numbered `$first + i` and spelled `$prefix` + the core's i-th name.
macro_rules! in_core_order {
    ($enum:ident, $prefix:literal, $first:literal, $names:expr, [$($variant:ident),* $(,)?]) => {{
        const VARIANTS: &[$enum] = &[$($enum::$variant),*];
        const SPELLED: &[&str] = &[$(stringify!($variant)),*];
        const _: () = {
            let names: &[&str] = &$names;
            assert!(VARIANTS.len() == names.len(), concat!(stringify!($enum), ": not one variant per name in the core"));
            let mut i = 0;
            while i < names.len() {
                assert!(VARIANTS[i] as usize == $first + i, concat!(stringify!($enum), ": numbered out of the core's order"));
                assert!(prefixed(SPELLED[i], $prefix, names[i]), concat!(stringify!($enum), ": a variant not named after the core"));
                i += 1;
            }
        };
        VARIANTS
    }};
}

const PREDICATE_NAMES: [&str; Predicate::ALL.len()] = {
    let mut names = [""; Predicate::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        // The core's discriminants are its matrix order, which is what C numbers by.
        assert!(Predicate::ALL[i] as usize == i);
        names[i] = Predicate::ALL[i].name();
        i += 1;
    }
    names
};

/// The C predicates by the core's discriminant (`Predicate as usize`).
pub(crate) const PREDICATES: &[klock_predicate] = in_core_order!(
    klock_predicate,
    "KLOCK_PREDICATE_",
    0,
    PREDICATE_NAMES,
    [
        KLOCK_PREDICATE_PROVIDES,
        KLOCK_PREDICATE_CONSUMES,
        KLOCK_PREDICATE_MUTATES,
        KLOCK_PREDICATE_DELETES,
        KLOCK_PREDICATE_DEPENDS_ON,
        KLOCK_PREDICATE_RENAMES,
    ]
);

const _: &[klock_event_kind] = in_core_order!(
    klock_event_kind,
    "KLOCK_EVENT_",
    1,
    Event::KINDS,
    [
        KLOCK_EVENT_GRANTED,
        KLOCK_EVENT_WAIT_TIMEOUT,
        KLOCK_EVENT_DIED,
        KLOCK_EVENT_LEASE_EXPIRED,
        KLOCK_EVENT_WOUNDED,
        KLOCK_EVENT_SESSION_CLOSED,
        KLOCK_EVENT_ACQUIRED,
        KLOCK_EVENT_RELEASED,
    ]
);

/// The C numbering of the reconcile statuses (the core has no list; `klock_lease_check::new`
/// matches every status, so a new one fails to compile there).
const LEASE_STATUS_NAMES: [&str; 5] = [
    LeaseStatus::Active {
        expires_at: 0,
        fence: 0,
    }
    .name(),
    LeaseStatus::Expired.name(),
    LeaseStatus::Released.name(),
    LeaseStatus::NotOwner.name(),
    LeaseStatus::Unknown.name(),
];

const _: &[klock_lease_status] = in_core_order!(
    klock_lease_status,
    "KLOCK_LEASE_STATUS_",
    1,
    LEASE_STATUS_NAMES,
    [
        KLOCK_LEASE_STATUS_ACTIVE,
        KLOCK_LEASE_STATUS_EXPIRED,
        KLOCK_LEASE_STATUS_RELEASED,
        KLOCK_LEASE_STATUS_NOT_OWNER,
        KLOCK_LEASE_STATUS_UNKNOWN,
    ]
);

const CLOSE_REASON_NAMES: [&str; 1] = [CloseReason::Idle.name()];

const _: &[klock_close_reason] = in_core_order!(
    klock_close_reason,
    "KLOCK_CLOSE_REASON_",
    1,
    CLOSE_REASON_NAMES,
    [KLOCK_CLOSE_REASON_IDLE]
);

/// The policies by their C number (`KLOCK_POLICY_*`).
pub(crate) const POLICIES: [Policy; 4] = [
    Policy::WaitDie,
    Policy::WoundWait,
    Policy::Lanes,
    Policy::Detect,
];

/// The C number of a policy (exhaustive: a new policy fails to compile here).
pub const fn policy_number(policy: Policy) -> klock_policy {
    match policy {
        Policy::WaitDie => KLOCK_POLICY_WAIT_DIE,
        Policy::WoundWait => KLOCK_POLICY_WOUND_WAIT,
        Policy::Lanes => KLOCK_POLICY_LANES,
        Policy::Detect => KLOCK_POLICY_DETECT,
    }
}

const _: () = {
    // klock_policy is a plain number (a C enum's storage cannot be typed), so its constants
    // are checked against the table both ways.
    let mut i = 0;
    while i < POLICIES.len() {
        assert!(policy_number(POLICIES[i]) as usize == i);
        i += 1;
    }
};

static PREDICATE_C_NAMES: [CName; PREDICATE_NAMES.len()] = c_names(PREDICATE_NAMES);
static EVENT_KIND_C_NAMES: [CName; Event::KINDS.len()] = c_names(Event::KINDS);
static LEASE_STATUS_C_NAMES: [CName; LEASE_STATUS_NAMES.len()] = c_names(LEASE_STATUS_NAMES);
static CLOSE_REASON_C_NAMES: [CName; CLOSE_REASON_NAMES.len()] = c_names(CLOSE_REASON_NAMES);
static POLICY_C_NAMES: [CName; POLICIES.len()] = c_names([
    POLICIES[0].name(),
    POLICIES[1].name(),
    POLICIES[2].name(),
    POLICIES[3].name(),
]);
static ERROR_C_NAMES: [CName; ErrorCode::ALL.len()] = {
    let mut names = [[0; NAME_BYTES]; ErrorCode::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = c_name(ErrorCode::ALL[i].name());
        i += 1;
    }
    names
};
/// The core names verdicts only through serde; `tests::verdict_kinds_are_the_cores` checks.
static VERDICT_KIND_C_NAMES: [CName; 3] = c_names(["GRANTED", "WAIT", "DIE"]);

/// The `index`-th name of `table`, or `fallback`.
fn pick(table: &'static [CName], index: Option<usize>, fallback: &'static [u8]) -> *const c_char {
    index
        .and_then(|i| table.get(i))
        .map_or(fallback.as_ptr(), |name| name.as_ptr())
        .cast()
}

/// `number - first` as an index, when `number >= first`.
fn from(number: u32, first: u32) -> Option<usize> {
    number.checked_sub(first).map(|i| i as usize)
}

/// The name of a kernel error code (100 ..= 499), if it is one.
pub fn error_name(code: u32) -> Option<*const c_char> {
    ErrorCode::ALL
        .iter()
        .position(|c| c.code() == code)
        .map(|i| ERROR_C_NAMES[i].as_ptr().cast())
}

/// The canonical name of a predicate ("PROVIDES", ..., "RENAMES"), or "UNKNOWN" for a number
/// that is not one. Static: never free it. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_predicate_name(predicate: u32) -> *const c_char {
    ffi_void(c"UNKNOWN".as_ptr(), || {
        pick(&PREDICATE_C_NAMES, from(predicate, 0), b"UNKNOWN\0")
    })
}

/// The name of a verdict kind ("GRANTED", "WAIT", "DIE"), or "UNKNOWN". Static: never free it.
/// Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_verdict_kind_name(kind: u32) -> *const c_char {
    ffi_void(c"UNKNOWN".as_ptr(), || {
        pick(&VERDICT_KIND_C_NAMES, from(kind, 1), b"UNKNOWN\0")
    })
}

/// The name of an event kind ("GRANTED", "WAIT_TIMEOUT", "DIED", "LEASE_EXPIRED", "WOUNDED",
/// "SESSION_CLOSED"), or "UNKNOWN". Static: never free it. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_event_kind_name(kind: u32) -> *const c_char {
    ffi_void(c"UNKNOWN".as_ptr(), || {
        pick(&EVENT_KIND_C_NAMES, from(kind, 1), b"UNKNOWN\0")
    })
}

/// The name of a reconcile status ("ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN"),
/// or "UNKNOWN" for a number that is not one. Static: never free it. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_lease_status_name(status: u32) -> *const c_char {
    ffi_void(c"UNKNOWN".as_ptr(), || {
        pick(&LEASE_STATUS_C_NAMES, from(status, 1), b"UNKNOWN\0")
    })
}

/// The name of the reason in a SESSION_CLOSED event ("IDLE"), or "UNKNOWN" for a number that
/// is not a reason (KLOCK_CLOSE_REASON_NONE included). Static: never free it. Thread-safety:
/// any thread.
#[no_mangle]
pub extern "C" fn klock_close_reason_name(reason: u32) -> *const c_char {
    ffi_void(c"UNKNOWN".as_ptr(), || {
        pick(&CLOSE_REASON_C_NAMES, from(reason, 1), b"UNKNOWN\0")
    })
}

/// The configuration name of a policy ("wait_die", "wound_wait", "lanes", "detect"), or
/// "unknown".
/// Static: never free it. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_policy_name(policy: u32) -> *const c_char {
    ffi_void(c"unknown".as_ptr(), || {
        pick(&POLICY_C_NAMES, from(policy, 0), b"unknown\0")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::{SessionId, TicketId, Verdict};
    use std::ffi::CStr;

    fn text(p: *const c_char) -> &'static str {
        // SAFETY: every name function returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn verdict_kinds_are_the_cores() {
        let verdicts = [
            Verdict::Granted { leases: vec![] },
            Verdict::Wait {
                ticket: TicketId(1),
                held_by: vec![],
            },
            Verdict::Die {
                retry_after_ms: 1,
                held_by: vec![],
                cycle: vec![],
            },
        ];
        for (kind, verdict) in (1..).zip(verdicts) {
            let json = serde_json::to_value(&verdict).unwrap();
            assert_eq!(text(klock_verdict_kind_name(kind)), json["verdict"]);
        }
        assert_eq!(text(klock_verdict_kind_name(4)), "UNKNOWN");
    }

    #[test]
    fn names_are_the_cores_and_unknown_numbers_are_named_so() {
        for (i, p) in Predicate::ALL.into_iter().enumerate() {
            assert_eq!(text(klock_predicate_name(i as u32)), p.name());
            assert_eq!(PREDICATES[p as usize] as usize, i);
        }
        let event = Event::SessionClosed {
            session: SessionId(1),
            reason: CloseReason::Idle,
        };
        assert_eq!(text(klock_event_kind_name(6)), event.name());
        assert_eq!(text(klock_close_reason_name(1)), "IDLE");
        assert_eq!(text(klock_lease_status_name(4)), "NOT_OWNER");
        assert_eq!(text(klock_policy_name(1)), "wound_wait");
        assert_eq!(text(klock_policy_name(3)), "detect");
        for code in ErrorCode::ALL {
            assert_eq!(text(error_name(code.code()).unwrap()), code.name());
        }
        assert!(error_name(0).is_none() && error_name(900).is_none());
        assert_eq!(text(klock_event_kind_name(7)), "ACQUIRED");
        assert_eq!(text(klock_event_kind_name(8)), "RELEASED");
        for unknown in [9, 99, u32::MAX] {
            assert_eq!(text(klock_event_kind_name(unknown)), "UNKNOWN");
        }
        for unknown in [7, 99, u32::MAX] {
            assert_eq!(text(klock_predicate_name(unknown)), "UNKNOWN");
            assert_eq!(text(klock_lease_status_name(unknown)), "UNKNOWN");
            assert_eq!(text(klock_close_reason_name(unknown)), "UNKNOWN");
            assert_eq!(text(klock_policy_name(unknown)), "unknown");
        }
        for zero_is_none in [klock_event_kind_name, klock_close_reason_name] {
            assert_eq!(text(zero_is_none(0)), "UNKNOWN");
        }
    }
}
