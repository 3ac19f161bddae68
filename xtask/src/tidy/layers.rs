//! The layer check of a crate whose top-level folders are layers (the tables are `LAYERED` in
//! `tidy/mod.rs`): which layer a module is in (by the folder of its file), the uses of a higher layer, the
//! modules in a folder of no layer, the folders of the table that do not exist, and the table printed with
//! each layer's modules. It does not read sources or build the module graph (that is [`super::graph`]).

use std::collections::BTreeSet;
use std::path::Path;

use super::graph::{display, Graph};
use super::source::list_dir;

/// A layer of a crate: the top-level folders of its `src/` whose modules it holds ("" for the files at the
/// root, the crate root included) and what it is.
pub(crate) struct Layer {
    pub(crate) name: &'static str,
    pub(crate) folders: &'static [&'static str],
    pub(crate) what: &'static str,
}

/// The directories right under `src` (a crate's top-level folders).
pub(super) fn top_level_dirs(src: &Path) -> Result<BTreeSet<String>, String> {
    Ok(list_dir(src)?
        .into_iter()
        .filter(|p| p.is_dir())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect())
}

/// The top-level folder of `src/` a module's file is in: its first segment if that is a directory ("call"
/// for `call`, `call::attempt`), "" for the crate root and the modules of the files at the root.
fn folder_of<'a>(module: &'a str, dirs: &BTreeSet<String>) -> &'a str {
    let first = module.split("::").next().unwrap_or("");
    if dirs.contains(first) {
        first
    } else {
        ""
    }
}

/// The index in `layers` of a module's layer.
fn layer_of(module: &str, layers: &[Layer], dirs: &BTreeSet<String>) -> Option<usize> {
    let folder = folder_of(module, dirs);
    layers.iter().position(|l| l.folders.contains(&folder))
}

/// Every use of a module of a higher layer (with the path that made it), every module in a folder of no
/// layer, and every folder of the table that does not exist.
pub(crate) fn layer_violations(
    graph: &Graph,
    layers: &[Layer],
    dirs: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for layer in layers {
        for folder in layer.folders {
            if !folder.is_empty() && !dirs.contains(*folder) {
                out.push(format!(
                    "layer {}: there is no folder {folder}/",
                    layer.name
                ));
            }
        }
    }
    for (module, used) in graph {
        let Some(from) = layer_of(module, layers, dirs) else {
            out.push(format!(
                "{} is in {}/, a folder of no layer (add it to the table)",
                display(module),
                folder_of(module, dirs)
            ));
            continue;
        };
        for (to, via) in used {
            let Some(to_layer) = layer_of(to, layers, dirs) else {
                continue;
            };
            if to_layer > from {
                out.push(format!(
                    "{} ({}) uses {} ({}): `{via}`",
                    display(module),
                    layers[from].name,
                    display(to),
                    layers[to_layer].name
                ));
            }
        }
    }
    out
}

/// The layer table, lowest layer first, with each layer's modules; then every module's uses.
pub(super) fn render_layers(graph: &Graph, layers: &[Layer], dirs: &BTreeSet<String>) -> String {
    let mut out = String::from("layer     folders         what (modules)\n");
    for (i, layer) in layers.iter().enumerate() {
        let folders: Vec<String> = layer
            .folders
            .iter()
            .map(|f| match *f {
                "" => "src/*.rs".to_owned(),
                f => format!("{f}/"),
            })
            .collect();
        let modules: Vec<&str> = graph
            .keys()
            .filter(|m| layer_of(m, layers, dirs) == Some(i))
            .map(|m| display(m))
            .collect();
        out.push_str(&format!(
            "{}. {:<7} {:<15} {}\n   ({})\n",
            i + 1,
            layer.name,
            folders.join(" "),
            layer.what,
            modules.join(" ")
        ));
    }
    out.push('\n');
    for (m, used) in graph {
        let used: Vec<&str> = used.keys().map(|u| display(u)).collect();
        out.push_str(format!("{}: {}", display(m), used.join(" ")).trim_end());
        out.push('\n');
    }
    out
}
