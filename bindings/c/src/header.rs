//! The committed C header, `include/klock.h`, is what the pinned cbindgen makes of these
//! sources (a test: no build writes the header, and nothing here writes into the source tree).
//!
//! Contract: [`committed_header_is_current`] generates the header with `bindings/c/cbindgen.toml`,
//! writes it to `<target>/klock-c/klock.h` (`$CARGO_TARGET_DIR`, else the workspace's
//! `target/`), and fails naming the first differing line when the committed header differs.
//! `KLOCK_HEADER=<file>` compares another file instead: `scripts/test-c.sh` uses it to prove
//! that a stale header fails. To update the header after changing the API, run
//! `cargo test -p klock-c header` and copy the generated file over `include/klock.h`.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn generate(crate_dir: &Path) -> String {
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("bindings/c/cbindgen.toml is valid");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen can read the klock-c sources");
    let mut text = Vec::new();
    bindings.write(&mut text);
    String::from_utf8(text).expect("cbindgen writes UTF-8")
}

/// The first line where `committed` differs from `generated`, described, or `None`.
fn first_difference(generated: &str, committed: &str) -> Option<String> {
    let (mut g, mut c) = (generated.lines(), committed.lines());
    for line in 1.. {
        match (g.next(), c.next()) {
            (None, None) => {
                // Same lines; only a final newline can differ.
                return (generated != committed).then(|| "the final newline differs".into());
            }
            (want, have) if want != have => {
                let show = |l: Option<&str>| l.map_or("(end of file)".into(), |l| format!("{l:?}"));
                return Some(format!(
                    "line {line}: generated {}, committed {}",
                    show(want),
                    show(have)
                ));
            }
            _ => {}
        }
    }
    unreachable!("the loop returns at the end of both texts")
}

#[test]
fn committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists");
    let target = env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), |t| root.join(t));
    let fresh = target.join("klock-c/klock.h");
    let generated = generate(crate_dir);
    fs::create_dir_all(fresh.parent().expect("a parent")).expect("create <target>/klock-c");
    fs::write(&fresh, &generated).expect("write the generated header");

    let committed_path =
        env::var_os("KLOCK_HEADER").map_or(root.join("include/klock.h"), PathBuf::from);
    let committed = fs::read_to_string(&committed_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", committed_path.display()));
    if let Some(difference) = first_difference(&generated, &committed) {
        panic!(
            "{} is stale: it is not what the pinned cbindgen generates from bindings/c/src ({difference}).\n\
             The generated header is {}: review it and copy it over include/klock.h.",
            committed_path.display(),
            fresh.display()
        );
    }
}

#[test]
fn any_difference_is_found() {
    let header = "#ifndef KLOCK_H\nint a;\n#endif\n";
    assert_eq!(first_difference(header, header), None);
    let edited = header.replace("int a;", "int b;");
    assert_eq!(
        first_difference(header, &edited).as_deref(),
        Some("line 2: generated \"int a;\", committed \"int b;\"")
    );
    assert!(first_difference(header, "#ifndef KLOCK_H\nint a;\n")
        .unwrap()
        .starts_with("line 3: generated \"#endif\", committed (end of file)"));
    assert_eq!(
        first_difference(header, header.trim_end()).as_deref(),
        Some("the final newline differs")
    );
}
