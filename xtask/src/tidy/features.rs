//! The feature check of `cargo xtask tidy`: every cargo feature a library crate of the workspace declares is
//! named in that crate's root documentation (the leading `//!` lines of its `lib.rs`), in backticks, so
//! docs.rs's front page of each crate tells a user every switch it has. A feature is named when `` `name` ``
//! appears in those lines. `default` and features whose name starts with `_` (private plumbing) are left out.
//!
//! Cargo.toml is read line by line (the `[features]` table up to the next table header, and the optional
//! dependencies of the dependencies tables, whose implicit features count unless a feature names them with
//! `dep:`); xtask has no TOML parser, and the workspace's manifests keep one feature or dependency per line.
//! Not here: checking what the docs say about each feature (a reader's job), or features of binaries.

use std::path::{Path, PathBuf};

/// The feature names a manifest declares, in order, `default` and `_`-prefixed ones left out: those of its
/// `[features]` table, then the implicit feature of every optional dependency that no feature names with
/// `dep:` (cargo makes one of each, `--features name` turns it on).
pub(super) fn declared_features(manifest: &str) -> Vec<String> {
    let mut table = "";
    let mut out: Vec<String> = Vec::new();
    let mut optional = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            // A header may carry a comment: `[features] # the crate's switches`.
            table = line.split('#').next().unwrap_or("").trim();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        if table == "[features]" {
            if key != "default" && !key.starts_with('_') && !key.is_empty() {
                out.push(key.to_owned());
            }
        } else if let Some(name) = optional_dependency(table, key, value) {
            optional.push(name);
        }
    }
    for name in optional {
        let explicit = manifest.contains(&format!("\"dep:{name}\""));
        if !explicit && !name.starts_with('_') && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The name of the optional dependency a line of `table` declares, if it does: `name = { ..., optional =
/// true }` in a dependencies table, or `optional = true` in a `[dependencies.name]` table.
fn optional_dependency(table: &str, key: &str, value: &str) -> Option<String> {
    let is_optional = |text: &str| {
        text.split([',', '{', '}'])
            .filter_map(|part| part.split_once('='))
            .any(|(k, v)| k.trim() == "optional" && v.trim() == "true")
    };
    let header = table.trim_start_matches('[').trim_end_matches(']');
    let dependencies = |t: &str| t.ends_with("dependencies") && !t.ends_with("dev-dependencies");
    if dependencies(header) {
        return is_optional(value).then(|| key.to_owned());
    }
    let (parent, name) = header.rsplit_once('.')?;
    (dependencies(parent) && key == "optional" && value.trim() == "true")
        .then(|| name.trim_matches('"').to_owned())
}

/// The crate-level documentation of a crate root: its leading block of `//!` lines (and `#![doc = "..."]`
/// lines) joined, up to the first item. Blank lines, `//` comments and other inner attributes may come
/// between; an inline module's inner docs further down are not the crate's.
pub(super) fn root_docs(source: &str) -> String {
    let mut docs = Vec::new();
    for line in source.lines().map(str::trim_start) {
        if let Some(doc) = line
            .strip_prefix("//!")
            .or_else(|| line.strip_prefix("#![doc = "))
        {
            docs.push(doc);
        } else if !(line.is_empty() || line.starts_with("//") || line.starts_with("#!")) {
            break;
        }
    }
    docs.join("\n")
}

/// The features of `manifest` that `docs` does not name in backticks.
pub(super) fn undocumented(manifest: &str, docs: &str) -> Vec<String> {
    declared_features(manifest)
        .into_iter()
        .filter(|name| !docs.contains(&format!("`{name}`")))
        .collect()
}

/// One line per undocumented feature of every library crate among `roots` (crate root files).
pub(super) fn feature_violations(root: &Path, roots: &[PathBuf]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for lib in roots.iter().filter(|r| r.ends_with("src/lib.rs")) {
        let Some(dir) = lib.parent().and_then(Path::parent) else {
            continue;
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
            .map_err(|e| format!("reading {}: {e}", dir.join("Cargo.toml").display()))?;
        let source =
            std::fs::read_to_string(lib).map_err(|e| format!("reading {}: {e}", lib.display()))?;
        let name = lib.strip_prefix(root).unwrap_or(lib).display().to_string();
        for feature in undocumented(&manifest, &root_docs(&source)) {
            out.push(format!(
                "{name}: the crate's documentation does not name its cargo feature `{feature}` (write it in \
                 backticks in the `//!` docs)"
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
[package]
name = "x"

[features]
# a comment = not a feature
default = ["tower"]
tower = ["dep:tower-service"]
"metrics" = []
__private = []
xds = ["dep:grpc-xds", "dep:envoy-types"]

[dev-dependencies]
serde = "1"
"#;

    #[test]
    fn the_features_table_is_read_up_to_the_next_table() {
        assert_eq!(declared_features(MANIFEST), ["tower", "metrics", "xds"]);
        assert!(declared_features("[package]\nname = \"x\"\n").is_empty());
    }

    #[test]
    fn a_feature_counts_as_named_only_in_backticks_in_the_root_docs() {
        let source = "//! With the `tower` feature, ...\n//! metrics and `xds`.\n// `metrics` in a plain comment\nfn f() {}\n";
        assert_eq!(undocumented(MANIFEST, &root_docs(source)), ["metrics"]);
        let all = "//! `tower`, `metrics`, `xds`\n";
        assert!(undocumented(MANIFEST, &root_docs(all)).is_empty());
    }

    /// TOML allows a comment after a table header; cargo reads `[features] # switches` as the features
    /// table. `declared_features` compares the whole trimmed line with `[features]`, so a manifest whose
    /// header carries a comment declares, for the check, no feature at all and passes with none documented.
    #[test]
    fn a_features_header_with_a_comment_still_opens_the_table() {
        let manifest = "[package]\nname = \"x\"\n\n[features] # the crate's switches\nxds = []\n";
        assert_eq!(declared_features(manifest), ["xds"]);
    }

    /// Cargo makes every optional dependency that no feature names with `dep:` a feature of its own
    /// (`--features foo` turns it on, docs.rs lists it). The check reads only the `[features]` table, so
    /// such a feature is never required in the crate root's docs.
    #[test]
    fn an_optional_dependency_not_named_with_dep_is_a_feature_too() {
        let manifest =
            "[package]\nname = \"x\"\n\n[dependencies]\nmetrics = { version = \"0.24\", optional = true }\n";
        assert_eq!(declared_features(manifest), ["metrics"]);
    }

    /// The module docs say a feature counts when it is named in the crate root's documentation, its
    /// leading `//!` lines. `root_docs` keeps every `//!` line of the file, so an inline module's inner
    /// docs (or a `//!` line inside a test's string) satisfy the check while docs.rs's front page of the
    /// crate never names the feature.
    #[test]
    fn a_feature_named_only_in_an_inline_modules_docs_is_undocumented() {
        let manifest = "[features]\nxds = []\n";
        let source = "//! A crate.\n\npub mod inner {\n    //! Turned on by `xds`.\n}\n";
        assert_eq!(undocumented(manifest, &root_docs(source)), ["xds"]);
    }

    #[test]
    fn every_library_crate_of_the_workspace_names_its_features() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace");
        let roots = super::super::source::crate_roots(root).expect("crate roots");
        let violations = feature_violations(root, &roots).expect("read");
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }
}
