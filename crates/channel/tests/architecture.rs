//! What of the architecture needs no module graph: no source file in `crates/*/src` is over [`MAX_LINES`]
//! lines.
//!
//! The module graph's rules are checked by `cargo xtask tidy` (`xtask/src/tidy/`), with one reader of the
//! sources for every crate: no module cycle in any crate, and grpc-channel's **layers by folder** (every
//! module belongs to the layer of its folder under `src/`: wire < request < conn < control < call < api,
//! the files at the root and `xds/`; a module uses only modules of its own layer or of lower ones, and every
//! folder is in the table). xtask's unit tests run the same check, so `cargo test --workspace` fails on a
//! cycle or an upward import too; `cargo xtask tidy --verbose` prints the layer table with each layer's
//! modules, and every module's uses.

use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_LINES: usize = 800;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("source directory")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let crates = crate_dir().join("..");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates") {
        let src = entry.expect("entry").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).expect("read").lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:#?}");
}
