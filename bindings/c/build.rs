//! Writes the C header `include/klock.h` from this crate's sources with the pinned cbindgen.
//!
//! The header is committed. It is rewritten only when its text changes (so an up-to-date
//! header keeps its timestamp), and a copy always goes to `$OUT_DIR/klock.h`. The test script
//! (`scripts/test-c.sh`) keeps the checked-out header aside, builds, and diffs: a header that
//! does not match the sources fails the tests.

use std::path::PathBuf;
use std::{env, fs};

fn main() {
    let crate_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/klock.h");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // An edited or deleted header is regenerated (and then shows up in the staleness diff).
    println!("cargo:rerun-if-changed={}", header.display());

    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("bindings/c/cbindgen.toml is valid");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen can read the klock-c sources");
    let mut text = Vec::new();
    bindings.write(&mut text);

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out_dir.join("klock.h"), &text).expect("write $OUT_DIR/klock.h");
    if fs::read(&header).ok().as_deref() != Some(text.as_slice()) {
        fs::create_dir_all(header.parent().expect("include/")).expect("create include/");
        fs::write(&header, &text).expect("write include/klock.h");
    }
}
