//! # klock-c
//!
//! The C API of the Klock kernel (`klock-core`): an `extern "C"` library built as
//! `libklock.so` and `libklock.a`, whose header `include/klock.h` is generated from these
//! sources with a pinned cbindgen and committed (the test in `header.rs` fails when it is
//! stale). The header's preamble states the conventions
//! every function follows (results, messages, strings, ownership, time, threads, panics).
//!
//! Contract: translation only. Every rule about leases, queues or time is the kernel's; this
//! crate converts arguments, maps errors to [`status::klock_status`] codes, owns the handles
//! and the memory of results, and keeps panics from crossing into C.
//!
//! Modules: [`status`] (result codes, the per-thread message, the panic boundary),
//! [`convert`] (C strings and arrays in and out), [`digest_json`] (a digest's JSON text, read
//! strictly), [`types`] (the C structs and their `_free` functions), [`names`] (the enums'
//! names and numbering, from the core's lists), [`api`] (the operations of SPEC.md on a
//! `klock_kernel` handle), [`remote`] (the blocking client of a `klock serve`, over the
//! `klock-client` crate).

// C names on purpose: what is written here is what C sees.
#![allow(non_camel_case_types)]

pub mod api;
pub mod convert;
pub mod digest_json;
#[cfg(test)]
mod header;
pub mod names;
pub mod remote;
pub mod status;
pub mod types;
