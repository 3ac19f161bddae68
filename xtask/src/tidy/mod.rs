//! `cargo xtask tidy [--verbose]`: checks over the sources that no compiler or linter makes (rust-analyzer's
//! `xtask tidy` is the model), on one reader of the module graph: **no module cycle in any crate**, and
//! **layers by folder** in the crates of [`LAYERED`] (grpc-channel: wire < request < conn < control < call
//! < api, the files at the root and `xds/`): a module uses only modules of its own layer or of lower ones,
//! every module is in a folder of the table, and every folder of the table exists; and **every cargo feature
//! of a library crate named in its root docs** ([`features`]). `--verbose` prints each layered crate's table
//! with each layer's modules, and every module's uses.
//!
//! Every crate of the workspace (each `lib.rs`, `main.rs` and `src/bin/*.rs` of the members in `Cargo.toml`)
//! is read from its root, following `mod` declarations (to `name.rs`, `name/mod.rs` or the file of a
//! `#[path = "file"]`); test modules (`#[cfg(test)]` items, inline or not, and only them) are left out, and
//! comments and literals are stripped first. A module *uses* another when its code names it or an item
//! defined in it: `crate::a::B` paths, `use crate::{a, b::C}` groups, `super::` and `self::` paths (also
//! `super::{Type, ..}` groups: an item of the parent module makes the parent a dependency), and a parent's
//! paths into its own submodules (`child::Item`). A name is followed through the imports of the module that
//! holds it, glob imports (`pub(crate) use self::y::*`) included, so `super::Type` where the parent only
//! imports `Type` from a sibling is a use of that sibling, and `crate::Status` through the crate root's
//! `pub use status::Status` is a use of `status`. Declaring a module (`mod a;`) and re-exporting from it
//! (`pub use a::B;`, any `pub(..)` but `pub(self)`, which is private) are not uses: that is what a facade
//! does; but a re-exported name that the module names in its own code (`pub(crate) use crate::b::Thing;`,
//! then `Thing`) is a use too. The crate root is a module like any other: an item defined in `lib.rs` is a
//! use of the root.
//!
//! The check fails, printing each cycle with the path that made each of its edges, and each use of a
//! higher layer with its path, if there is one. `xtask`'s unit tests run the same check over the workspace,
//! so `cargo test --workspace` catches them too.
//!
//! This module holds the command, the table of layered crates ([`LAYERED`]) and the report; it reads and parses
//! no code itself: the reading of a crate is in [`source`] (on the scanning helpers of [`lex`]), the paths a
//! module uses in [`refs`], the module graph and its cycles in [`graph`], the layer check in [`layers`].

mod features;
mod graph;
mod layers;
mod lex;
mod refs;
mod source;

use std::collections::BTreeMap;
use std::path::Path;

use graph::{collapse, find_cycles, module_graph, render_cycle};
use layers::{layer_violations, render_layers, top_level_dirs, Layer};
use source::{crate_roots, read_crate};

/// The crates whose folders are layers: crate root → its layers, lowest first. A module may use only
/// modules of its own layer or of the layers before it, and every module must be in a folder of the table.
const LAYERED: &[(&str, &[Layer])] = &[("crates/channel/src/lib.rs", CHANNEL_LAYERS)];

/// grpc-channel's layers, lowest first.
const CHANNEL_LAYERS: &[Layer] = &[
    Layer {
        name: "wire",
        folders: &["wire"],
        what: "gRPC over HTTP/2 as bytes and headers: framing, codecs, compression, metadata, status, \
               grpc-timeout, size limits, method URIs; no I/O",
    },
    Layer {
        name: "request",
        folders: &["request"],
        what: "what a call carries: Request, Response, CallOptions, interceptors (the health Watch runs \
               them too)",
    },
    Layer {
        name: "conn",
        folders: &["conn"],
        what: "one HTTP/2 connection: connect, TLS, HTTP CONNECT proxies, GOAWAY sniffing, keepalive, \
               build errors",
    },
    Layer {
        name: "control",
        folders: &["control"],
        what: "the control plane: event loop, subchannel tasks, name resolution, policy choice, health \
               watches, outlier counts, picks",
    },
    Layer {
        name: "call",
        folders: &["call"],
        what: "one call: the retry driver and its attempts, the call's two halves, exactly-once ids, \
               telemetry",
    },
    Layer {
        name: "api",
        folders: &["", "xds"],
        what: "the API at the crate root (Channel, ChannelBuilder, tower, retry, ...) and xDS, whose ADS \
               stream runs on a Channel",
    },
];

/// `cargo xtask tidy [--verbose]`.
pub(crate) fn tidy(root: &Path, args: &[String]) -> Result<bool, String> {
    let mut verbose = false;
    for arg in args {
        match arg.as_str() {
            "--verbose" | "-v" => verbose = true,
            _ => return Err(format!("tidy takes only --verbose (got {arg:?})")),
        }
    }
    let report = module_cycles(root)?;
    println!("{}", report.summary);
    if verbose {
        for table in &report.tables {
            println!("\n{table}");
        }
    }
    for violation in &report.layers {
        eprintln!("{violation}");
    }
    if !report.layers.is_empty() {
        eprintln!(
            "tidy: {} layer violation(s) (the layers: LAYERED in xtask/src/tidy/mod.rs; \
             `cargo xtask tidy --verbose` prints them)",
            report.layers.len()
        );
    }
    for cycle in &report.cycles {
        eprintln!("{cycle}");
    }
    if !report.cycles.is_empty() {
        eprintln!("tidy: {} module cycle(s)", report.cycles.len());
    }
    let undocumented = features::feature_violations(root, &crate_roots(root)?)?;
    for line in &undocumented {
        eprintln!("{line}");
    }
    let clean = report.layers.is_empty() && report.cycles.is_empty() && undocumented.is_empty();
    if clean {
        println!(
            "tidy: no module cycle in any crate, every layered crate in its layers, every cargo feature \
             named in its crate's docs"
        );
    }
    Ok(clean)
}

/// What the cycle check found over a workspace.
pub(crate) struct CycleReport {
    /// One line per crate read: its root and how many modules and edges it has.
    pub(crate) summary: String,
    /// Each cycle, printed: the crate, then one line per edge with the path that made it.
    pub(crate) cycles: Vec<String>,
    /// Each use of a higher layer, and each module in a folder of no layer, in the crates of [`LAYERED`].
    pub(crate) layers: Vec<String>,
    /// The layer table of each crate of [`LAYERED`], with each layer's modules, then every module's uses.
    pub(crate) tables: Vec<String>,
}

/// Reads every crate root of the workspace at `root` and finds the module cycles in each.
pub(crate) fn module_cycles(root: &Path) -> Result<CycleReport, String> {
    let mut summary = Vec::new();
    let mut cycles = Vec::new();
    let mut layers = Vec::new();
    let mut tables = Vec::new();
    let mut layered_found = 0;
    for crate_root in crate_roots(root)? {
        let modules = read_crate(&crate_root)?;
        let graph = module_graph(&modules);
        let edges: usize = graph.values().map(BTreeMap::len).sum();
        let name = crate_root
            .strip_prefix(root)
            .unwrap_or(&crate_root)
            .display()
            .to_string();
        summary.push(format!("{name}: {} modules, {edges} edges", modules.len()));
        if let Some((_, table)) = LAYERED
            .iter()
            .find(|(path, _)| Path::new(path) == Path::new(&name))
        {
            layered_found += 1;
            let dirs = top_level_dirs(crate_root.parent().unwrap_or(Path::new(".")))?;
            layers.extend(
                layer_violations(&graph, table, &dirs)
                    .into_iter()
                    .map(|v| format!("{name}: {v}")),
            );
            tables.push(format!(
                "{name}: layers, lowest first\n{}",
                render_layers(&graph, table, &dirs)
            ));
        }
        for parent in modules.keys() {
            let level = collapse(&graph, parent);
            for (knot, cycle) in find_cycles(&level) {
                cycles.push(render_cycle(&name, parent, &level, &knot, &cycle));
            }
        }
    }
    if layered_found != LAYERED.len() {
        layers
            .push("a crate of LAYERED in xtask/src/tidy/mod.rs is not in the workspace".to_owned());
    }
    Ok(CycleReport {
        summary: summary.join("\n"),
        cycles,
        layers,
        tables,
    })
}

#[cfg(test)]
mod tests;
