//! `cargo xtask tidy [--verbose]`: checks over the sources that no compiler or linter makes (rust-analyzer's
//! `xtask tidy` is the model), on one reader of the module graph: **no module cycle in any crate**, and
//! **layers by folder** in the crates of [`LAYERED`] (grpc-channel: wire < request < conn < control < call
//! < api, the files at the root and `xds/`): a module uses only modules of its own layer or of lower ones,
//! every module is in a folder of the table, and every folder of the table exists. `--verbose` prints each
//! layered crate's table with each layer's modules, and every module's uses.
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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crate roots whose cycles are being removed by work in flight, with why: their cycles are printed but do
/// not fail the check. An entry whose crate has no cycle left fails it, so that the entry goes too.
const ALLOWED: &[(&str, &str)] = &[];

/// A layer of a crate: the top-level folders of its `src/` whose modules it holds ("" for the files at the
/// root, the crate root included) and what it is.
pub(crate) struct Layer {
    pub(crate) name: &'static str,
    pub(crate) folders: &'static [&'static str],
    pub(crate) what: &'static str,
}

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

/// Module → the modules it uses, each with the first path (as written) that made the edge.
pub(crate) type Graph = BTreeMap<String, BTreeMap<String, String>>;

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
    for allowed in &report.allowed {
        println!("warning (allowed for now): {allowed}");
    }
    if !report.layers.is_empty() {
        for violation in &report.layers {
            eprintln!("{violation}");
        }
        eprintln!(
            "tidy: {} layer violation(s) (the layers: LAYERED in xtask/src/tidy.rs; \
             `cargo xtask tidy --verbose` prints them)",
            report.layers.len()
        );
        if report.cycles.is_empty() {
            return Ok(false);
        }
    }
    if report.cycles.is_empty() {
        match report.allowed.len() {
            0 => println!("tidy: no module cycle in any crate, every layered crate in its layers"),
            n => {
                println!("tidy: no module cycle in any crate but the {n} allowed for now (ALLOWED)")
            }
        }
        Ok(true)
    } else {
        for cycle in &report.cycles {
            eprintln!("{cycle}");
        }
        eprintln!("tidy: {} module cycle(s)", report.cycles.len());
        Ok(false)
    }
}

/// What the cycle check found over a workspace.
pub(crate) struct CycleReport {
    /// One line per crate read: its root and how many modules and edges it has.
    pub(crate) summary: String,
    /// Each cycle, printed: the crate, then one line per edge with the path that made it (and each entry
    /// of [`ALLOWED`] whose crate has no cycle left).
    pub(crate) cycles: Vec<String>,
    /// The cycles of the crates in [`ALLOWED`], printed the same way, with the reason.
    pub(crate) allowed: Vec<String>,
    /// Each use of a higher layer, and each module in a folder of no layer, in the crates of [`LAYERED`].
    pub(crate) layers: Vec<String>,
    /// The layer table of each crate of [`LAYERED`], with each layer's modules, then every module's uses.
    pub(crate) tables: Vec<String>,
}

/// Reads every crate root of the workspace at `root` and finds the module cycles in each.
pub(crate) fn module_cycles(root: &Path) -> Result<CycleReport, String> {
    let mut summary = Vec::new();
    let mut cycles = Vec::new();
    let mut allowed = Vec::new();
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
        let mut found = Vec::new();
        for parent in modules.keys() {
            let level = collapse(&graph, parent);
            for (knot, cycle) in find_cycles(&level) {
                found.push(render_cycle(&name, parent, &level, &knot, &cycle));
            }
        }
        match ALLOWED
            .iter()
            .find(|(path, _)| Path::new(path) == Path::new(&name))
        {
            None => cycles.extend(found),
            Some((_, why)) if found.is_empty() => cycles.push(format!(
                "{name} has no module cycle any more: remove its entry from ALLOWED in \
                 xtask/src/tidy.rs ({why})"
            )),
            Some((_, why)) => allowed.extend(found.into_iter().map(|c| format!("{c}\n  ({why})"))),
        }
    }
    if layered_found != LAYERED.len() {
        layers.push("a crate of LAYERED in xtask/src/tidy.rs is not in the workspace".to_owned());
    }
    Ok(CycleReport {
        summary: summary.join("\n"),
        cycles,
        allowed,
        layers,
        tables,
    })
}

/// The directories right under `src` (a crate's top-level folders).
fn top_level_dirs(src: &Path) -> Result<BTreeSet<String>, String> {
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
fn render_layers(graph: &Graph, layers: &[Layer], dirs: &BTreeSet<String>) -> String {
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

/// The graph among `parent` and its submodules, each submodule standing for itself and everything below
/// it: an edge `a::x → b::y` between two of `parent`'s subtrees is an edge `a → b`. The value of each edge
/// says which module's path made it (`a::x: crate::b::y::Item`). A cycle of the module graph shows up in
/// this graph of its modules' deepest common ancestor, and only there; a cycle here that the module graph
/// does not have is a knot between folders (`call → app_policy → call::attempt`): as bad for a reader.
pub(crate) fn collapse(graph: &Graph, parent: &str) -> Graph {
    let key = |m: &str| -> Option<String> {
        if m == parent {
            return Some(m.to_owned());
        }
        let rest = if parent.is_empty() {
            m
        } else {
            m.strip_prefix(parent)?.strip_prefix("::")?
        };
        let child = rest.split("::").next()?;
        Some(join(parent, child))
    };
    let mut level = Graph::new();
    for (from, uses) in graph {
        let Some(a) = key(from) else { continue };
        level.entry(a.clone()).or_default();
        for (to, via) in uses {
            let Some(b) = key(to) else { continue };
            if a != b {
                let edge = if &a == from && &b == to {
                    format!("`{via}`")
                } else {
                    format!("{} → {}: `{via}`", display(from), display(to))
                };
                level.entry(a.clone()).or_default().entry(b).or_insert(edge);
            }
        }
    }
    level
}

/// A cycle `[a, b, a]` as lines `a → b (path)`.
fn render_cycle(
    crate_name: &str,
    parent: &str,
    graph: &Graph,
    knot: &BTreeSet<String>,
    cycle: &[String],
) -> String {
    let mut out = format!(
        "module cycle in {crate_name}, among `{}` and its submodules:",
        display(parent)
    );
    for pair in cycle.windows(2) {
        let via = graph
            .get(&pair[0])
            .and_then(|uses| uses.get(&pair[1]))
            .map(String::as_str)
            .unwrap_or("?");
        out.push_str(&format!(
            "\n  {} → {}  ({via})",
            display(&pair[0]),
            display(&pair[1])
        ));
    }
    if knot.len() + 1 > cycle.len() {
        let all: Vec<&str> = knot.iter().map(|m| display(m)).collect();
        out.push_str(&format!(
            "\n  (one cycle of {} tangled modules: {})",
            knot.len(),
            all.join(", ")
        ));
    }
    out
}

fn display(module: &str) -> &str {
    if module.is_empty() {
        "crate"
    } else {
        module
    }
}

/// The crate roots of the workspace members listed in `Cargo.toml` (`crates/*` expanded).
fn crate_roots(root: &Path) -> Result<Vec<PathBuf>, String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("reading Cargo.toml: {e}"))?;
    let members = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .ok_or("Cargo.toml has no workspace members")?;
    let mut dirs = Vec::new();
    for member in members.split(',') {
        let member = member.trim().trim_matches('"');
        if member.is_empty() {
            continue;
        }
        match member.strip_suffix("/*") {
            Some(parent) => {
                let mut found = list_dir(&root.join(parent))?;
                found.retain(|p| p.is_dir());
                dirs.extend(found);
            }
            None => dirs.push(root.join(member)),
        }
    }
    let mut roots = Vec::new();
    for dir in dirs {
        let src = dir.join("src");
        for file in ["lib.rs", "main.rs"] {
            if src.join(file).is_file() {
                roots.push(src.join(file));
            }
        }
        let bin = src.join("bin");
        if bin.is_dir() {
            for path in list_dir(&bin)? {
                if path.extension().is_some_and(|e| e == "rs") {
                    roots.push(path);
                } else if path.join("main.rs").is_file() {
                    roots.push(path.join("main.rs"));
                }
            }
        }
    }
    roots.sort();
    roots.dedup();
    Ok(roots)
}

fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("reading {}: {e}", dir.display()))?;
    out.sort();
    Ok(out)
}

/// One module of a crate: its code (comments, literals and test items stripped, its inline submodules cut
/// out) and the names of its submodules.
#[derive(Debug, Default)]
pub(crate) struct Module {
    pub(crate) code: String,
    pub(crate) children: BTreeSet<String>,
}

/// Module path (`a::b`, "" for the root) → module.
pub(crate) type Modules = BTreeMap<String, Module>;

/// Reads a crate from its root file, following `mod name;` to `name.rs` or `name/mod.rs` (or to the file of
/// its `#[path = "file"]`).
fn read_crate(root_file: &Path) -> Result<Modules, String> {
    let mut modules = Modules::new();
    let dir = root_file.parent().unwrap_or(Path::new(".")).to_path_buf();
    read_file(root_file, String::new(), dir, &mut modules)?;
    Ok(modules)
}

/// Reads the module `path` from `file`, whose `mod name;` declarations live in `dir`.
fn read_file(file: &Path, path: String, dir: PathBuf, modules: &mut Modules) -> Result<(), String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let code = strip_test_items(&strip_comments_and_literals(&text));
    let mut declared = Vec::new();
    add_module(&code, path, &dir, modules, &mut declared);
    for d in declared {
        let Declared {
            module: path,
            dir: decl_dir,
            name,
            path_attribute,
        } = d;
        if let Some(attr) = path_attribute {
            // Relative to the file's directory (to the inline module's directory inside one); the
            // file's own `mod` declarations are looked for next to it, as in a `mod.rs`.
            let base = if decl_dir == dir {
                file.parent().unwrap_or(Path::new(".")).to_path_buf()
            } else {
                decl_dir
            };
            let found = base.join(&attr);
            if !found.is_file() {
                return Err(format!(
                    "{}: #[path = {attr:?}] mod {name}: {} does not exist",
                    file.display(),
                    found.display()
                ));
            }
            let sub_dir = found.parent().unwrap_or(Path::new(".")).to_path_buf();
            read_file(&found, path, sub_dir, modules)?;
            continue;
        }
        let dir = decl_dir;
        let candidates = [
            dir.join(format!("{name}.rs")),
            dir.join(&name).join("mod.rs"),
        ];
        let Some(found) = candidates.iter().find(|c| c.is_file()) else {
            return Err(format!(
                "{}: mod {name}: neither {} nor {} exists",
                file.display(),
                candidates[0].display(),
                candidates[1].display()
            ));
        };
        let sub_dir = dir.join(&name);
        read_file(found, path, sub_dir, modules)?;
    }
    Ok(())
}

/// A `mod name;` declaration.
pub(crate) struct Declared {
    /// The module's path.
    module: String,
    /// The directory its file is looked for in (`name.rs`, `name/mod.rs`).
    dir: PathBuf,
    name: String,
    /// Its `#[path = "file"]`, if it has one.
    path_attribute: Option<String>,
}

/// Adds the module `path` with this (stripped) code, cutting its inline modules out into modules of their
/// own, and lists its `mod name;` declarations.
fn add_module(
    code: &str,
    path: String,
    dir: &Path,
    modules: &mut Modules,
    declared: &mut Vec<Declared>,
) {
    let chars: Vec<char> = code.chars().collect();
    let mut own = String::new();
    let mut children = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some((name, after_name)) = mod_keyword(&chars, i) {
            let mut j = skip_ws(&chars, after_name);
            let child = join(&path, &name);
            if chars.get(j) == Some(&';') {
                children.insert(name.clone());
                // The item's attributes: its text since the end of the item before it.
                let item_start = own.rfind([';', '{', '}']).map_or(0, |k| k + 1);
                let file = path_attribute(&own[item_start..]);
                declared.push(Declared {
                    module: child,
                    dir: dir.to_path_buf(),
                    name,
                    path_attribute: file,
                });
                own.extend(&chars[i..=j]);
                i = j + 1;
                continue;
            }
            if chars.get(j) == Some(&'{') {
                let end = matching(&chars, j);
                let body: String = chars[j + 1..end.min(chars.len())].iter().collect();
                children.insert(name.clone());
                add_module(&body, child, &dir.join(&name), modules, declared);
                own.push_str("mod ");
                own.push_str(&name);
                own.push(';');
                j = end + 1;
                i = j;
                continue;
            }
        }
        own.push(chars[i]);
        i += 1;
    }
    modules.insert(
        path,
        Module {
            code: own,
            children,
        },
    );
}

/// At `i`, the keyword `mod` and the module's name: (name, the index after it).
fn mod_keyword(chars: &[char], i: usize) -> Option<(String, usize)> {
    if !word_at(chars, i, "mod") {
        return None;
    }
    let start = skip_ws(chars, i + 3);
    if start == i + 3 {
        return None;
    }
    let (name, end) = ident_at(chars, start)?;
    Some((name, end))
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}::{name}")
    }
}

fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rsplit_once("::").map_or("", |(p, _)| p))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// Whether the word `word` stands at `i` (not inside a longer identifier).
fn word_at(chars: &[char], i: usize, word: &str) -> bool {
    let w: Vec<char> = word.chars().collect();
    chars.get(i..i + w.len()) == Some(&w[..])
        && (i == 0 || !is_ident(chars[i - 1]))
        && !chars.get(i + w.len()).copied().is_some_and(is_ident)
}

fn ident_at(chars: &[char], i: usize) -> Option<(String, usize)> {
    let first = *chars.get(i)?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    let mut end = i;
    while chars.get(end).copied().is_some_and(is_ident) {
        end += 1;
    }
    let mut name: String = chars[i..end].iter().collect();
    if let Some(raw) = name.strip_prefix("r#") {
        name = raw.to_owned();
    }
    Some((name, end))
}

/// The index of the bracket closing the one at `open` (or the end).
fn matching(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

/// The source with comments removed and every string, byte string and char literal emptied (`""`, `' '`),
/// so that what is left are the tokens. Line breaks are kept.
pub(crate) fn strip_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"..", r#".."#, br#".."#: up to the quote followed by as many hashes.
            let mut k = i;
            while c[k] != '"' {
                k += 1;
            }
            k += 1;
            while k < c.len() {
                if c[k] == '"' && (0..hashes).all(|h| c.get(k + 1 + h) == Some(&'#')) {
                    k += 1 + hashes;
                    break;
                }
                if c[k] == '\n' {
                    out.push('\n');
                }
                k += 1;
            }
            out.push_str("\"\"");
            i = k;
        } else if c[i] == '"' && in_path_attribute(&out) {
            // `#[path = "x.rs"]` keeps its file name, for `read_file`.
            let start = i;
            i += 1;
            while i < c.len() && c[i] != '"' && c[i] != '\n' {
                i += 1;
            }
            i += 1;
            out.extend(&c[start..i.min(c.len())]);
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if c.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{..}': the quote, the backslash and the escaped character, then up to the quote.
            i += 3;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Whether the stripped code so far ends in `#[path =`: the string that follows is a module's file.
fn in_path_attribute(out: &str) -> bool {
    out.trim_end()
        .strip_suffix('=')
        .and_then(|t| t.trim_end().strip_suffix("path"))
        .is_some_and(|t| t.trim_end().ends_with("#["))
}

/// The file a `#[path = "x.rs"]` among the attributes in `prefix` (the item's text before `mod`) names.
fn path_attribute(prefix: &str) -> Option<String> {
    let at = prefix.find("#[path")?;
    let rest = &prefix[at..];
    let open = rest.find('"')?;
    let len = rest[open + 1..].find('"')?;
    Some(rest[open + 1..open + 1 + len].to_owned())
}

/// At `i`, the start of a raw string (`r"`, `r#"`, `br"`, `cr#"`...): the number of its hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && is_ident(c[i - 1]) {
        return None;
    }
    let mut k = i;
    if matches!(c.get(k), Some('b' | 'c')) {
        k += 1;
    }
    if c.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let mut hashes = 0;
    while c.get(k) == Some(&'#') {
        hashes += 1;
        k += 1;
    }
    (c.get(k) == Some(&'"')).then_some(hashes)
}

/// Stripped code without the items under `#[cfg(test)]` (test modules, test-only imports and helpers).
pub(crate) fn strip_test_items(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i..].starts_with(&marker) {
            let mut k = skip_ws(&chars, i + marker.len());
            // Further attributes of the same item.
            while chars.get(k) == Some(&'#') {
                k = skip_ws(&chars, matching(&chars, k + 1) + 1);
            }
            let end = item_end(&chars, k);
            out.extend(chars[i..end].iter().filter(|&&c| c == '\n'));
            i = end;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The index after the item starting at `i`: its `;` or its closing brace (and a `;` after it).
fn item_end(chars: &[char], i: usize) -> usize {
    let mut k = i;
    while k < chars.len() {
        match chars[k] {
            ';' => return k + 1,
            '{' => {
                let close = matching(chars, k);
                let after = skip_ws(chars, close + 1);
                return if chars.get(after) == Some(&';') {
                    after + 1
                } else {
                    (close + 1).min(chars.len())
                };
            }
            '(' | '[' => k = matching(chars, k) + 1,
            _ => k += 1,
        }
    }
    chars.len()
}

/// A path as written from its first segment (`crate`, `super`, `self` or a submodule's name), with the name
/// it binds when it comes from a `use` (its alias or last segment).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PathRef {
    pub(crate) segments: Vec<String>,
    pub(crate) binds: Option<String>,
}

impl PathRef {
    fn text(&self) -> String {
        self.segments.join("::")
    }
}

/// What one module's code says: the paths it uses and the names it imports (`use`, re-exports included).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ModuleRefs {
    /// Paths that are uses: every path outside a `use`, and those of private `use`s.
    pub(crate) uses: Vec<PathRef>,
    /// Name → path, for every `use` (private and `pub`) that binds a name from inside the crate.
    pub(crate) imports: BTreeMap<String, Vec<String>>,
    /// The paths of its glob imports (`use self::y::*`, re-exports included), without the `*`.
    pub(crate) globs: Vec<Vec<String>>,
    /// The names of the items it defines (`struct`, `enum`, `fn`, `trait`, `type`, `const`, ...).
    pub(crate) defines: BTreeSet<String>,
}

/// The crate-internal paths of one module's stripped code. `children` are its submodules' names, which
/// start relative paths (`child::Item`).
pub(crate) fn module_refs(code: &str, children: &BTreeSet<String>) -> ModuleRefs {
    let chars: Vec<char> = code.chars().collect();
    let mut refs = ModuleRefs::default();
    // The paths of `pub` uses, and the words the code names outside `use` items: a re-exported name
    // that the module names itself is a use of it too.
    let mut reexports = Vec::new();
    let mut words = BTreeSet::new();
    let variants = enum_variants(&chars);
    let mut i = 0;
    while i < chars.len() {
        if word_at(&chars, i, "use") && !preceded_by_path_sep(&chars, i) {
            let public = is_pub_before(&chars, i);
            let mut paths = Vec::new();
            let mut k = skip_ws(&chars, i + 3);
            if chars.get(k) == Some(&':') {
                // `use ::ext::..`: an extern crate.
                k += 2;
            }
            let end = parse_tree(&chars, &mut k, Vec::new(), &mut paths);
            for path in paths {
                let Some(first) = path.segments.first() else {
                    continue;
                };
                let internal = matches!(first.as_str(), "crate" | "super" | "self")
                    || children.contains(first)
                    || refs.imports.contains_key(first);
                if !internal {
                    continue;
                }
                if let Some(name) = &path.binds {
                    refs.imports.insert(name.clone(), path.segments.clone());
                }
                if let Some((last, glob)) = path.segments.split_last() {
                    if last == "*" {
                        refs.globs.push(glob.to_vec());
                    }
                }
                if public {
                    reexports.push(path);
                } else {
                    refs.uses.push(path);
                }
            }
            i = end.max(i + 3);
            continue;
        }
        if let Some((word, after)) =
            ident_at(&chars, i).filter(|_| i == 0 || !is_ident(chars[i - 1]))
        {
            let starts_path =
                matches!(word.as_str(), "crate" | "super" | "self") || children.contains(&word);
            let path_sep = chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':');
            let macro_crate = i > 0 && chars[i - 1] == '$';
            if starts_path && path_sep && !macro_crate && !preceded_by_path_sep(&chars, i) {
                let mut paths = Vec::new();
                let mut k = i;
                parse_tree(&chars, &mut k, Vec::new(), &mut paths);
                refs.uses.extend(paths);
                i = k.max(after);
                continue;
            }
            if DEFINING.contains(&word.as_str()) {
                if let Some((name, _)) = ident_at(&chars, skip_ws(&chars, after)) {
                    refs.defines.insert(name);
                }
            }
            if !preceded_by_path_sep(&chars, i) && !variants.contains(&i) {
                words.insert(word);
            }
            i = after;
            continue;
        }
        i += 1;
    }
    for path in reexports {
        if path.binds.as_ref().is_some_and(|name| words.contains(name)) {
            refs.uses.push(path);
        }
    }
    refs
}

/// Where the names of enum variants stand (`enum E { Cluster, B(T) }`: `Cluster` and `B`, not `T`): a variant
/// that shares its name with an imported item does not name it.
fn enum_variants(chars: &[char]) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if !word_at(chars, i, "enum") {
            i += 1;
            continue;
        }
        let Some(open) = (i..chars.len())
            .take_while(|&k| chars[k] != ';')
            .find(|&k| chars[k] == '{')
        else {
            i += 4;
            continue;
        };
        let close = matching(chars, open);
        let mut k = open;
        while k < close {
            // At `{` or a `,` between variants: skip their attributes, then the variant's name.
            let mut v = skip_ws(chars, k + 1);
            while chars.get(v) == Some(&'#') {
                v = skip_ws(chars, matching(chars, v + 1) + 1);
            }
            if ident_at(chars, v).is_some() {
                out.insert(v);
            }
            // The next `,` at the body's depth.
            k = v;
            while k < close && chars[k] != ',' {
                if matches!(chars[k], '(' | '[' | '{') {
                    k = matching(chars, k);
                }
                k += 1;
            }
        }
        i = close.max(i + 4);
    }
    out
}

/// The keywords before the name of an item they define.
const DEFINING: &[&str] = &[
    "struct",
    "enum",
    "union",
    "fn",
    "trait",
    "type",
    "const",
    "static",
    "macro_rules",
];

/// Whether `::` (or a `.`) stands right before `i`: the word is not the start of a path.
fn preceded_by_path_sep(chars: &[char], i: usize) -> bool {
    let mut k = i;
    while k > 0 && chars[k - 1].is_whitespace() {
        k -= 1;
    }
    k >= 1 && (chars[k - 1] == '.' || (k >= 2 && chars[k - 1] == ':' && chars[k - 2] == ':'))
}

/// Whether the `use` at `i` is `pub` or `pub(..)`.
fn is_pub_before(chars: &[char], i: usize) -> bool {
    let mut k = i;
    while k > 0 && chars[k - 1].is_whitespace() {
        k -= 1;
    }
    if k > 0 && chars[k - 1] == ')' {
        // pub(crate), pub(super), pub(in path); `pub(self)` (`pub(in self)`) is private.
        let close = k - 1;
        let mut depth = 0;
        while k > 0 {
            k -= 1;
            match chars[k] {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        let vis: String = chars[(k + 1).min(close)..close].iter().collect();
        if matches!(
            vis.split_whitespace().collect::<Vec<_>>()[..],
            ["self"] | ["in", "self"]
        ) {
            return false;
        }
        while k > 0 && chars[k - 1].is_whitespace() {
            k -= 1;
        }
    }
    k >= 3 && word_at(chars, k - 3, "pub")
}

/// Parses a use tree (or an expression path) at `k`: `a::b::{c, d::E as F, *}`. Pushes each leaf path,
/// prefixed with `prefix`, and returns the index where the tree ends.
fn parse_tree(chars: &[char], k: &mut usize, prefix: Vec<String>, out: &mut Vec<PathRef>) -> usize {
    *k = skip_ws(chars, *k);
    match chars.get(*k) {
        Some('{') => {
            *k += 1;
            loop {
                *k = skip_ws(chars, *k);
                match chars.get(*k) {
                    None => break,
                    Some('}') => {
                        *k += 1;
                        break;
                    }
                    Some(',') => *k += 1,
                    Some(_) => {
                        let before = *k;
                        parse_tree(chars, k, prefix.clone(), out);
                        if *k == before {
                            // Not a tree: skip the character.
                            *k += 1;
                        }
                    }
                }
            }
            *k
        }
        Some('*') => {
            *k += 1;
            let mut segments = prefix;
            segments.push("*".to_owned());
            out.push(PathRef {
                segments,
                binds: None,
            });
            *k
        }
        _ => {
            let mut segments = prefix;
            while let Some((seg, end)) = ident_at(chars, *k) {
                segments.push(seg);
                *k = end;
                let after = skip_ws(chars, *k);
                if chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':') {
                    let next = skip_ws(chars, after + 2);
                    match chars.get(next) {
                        Some('{') | Some('*') => {
                            *k = next;
                            return parse_tree(chars, k, segments, out);
                        }
                        _ if ident_at(chars, next).is_some() => *k = next,
                        // `::<T>` (turbofish): the path ends here.
                        _ => break,
                    }
                } else {
                    break;
                }
            }
            if segments.is_empty() {
                return *k;
            }
            let mut binds = match segments.last().map(String::as_str) {
                Some("self") if segments.len() >= 2 => Some(segments[segments.len() - 2].clone()),
                Some(last) => Some(last.to_owned()),
                None => None,
            };
            if segments.last().is_some_and(|s| s == "self") {
                segments.pop();
            }
            let after = skip_ws(chars, *k);
            if word_at(chars, after, "as") {
                let alias_at = skip_ws(chars, after + 2);
                if let Some((alias, end)) = ident_at(chars, alias_at) {
                    binds = (alias != "_").then_some(alias);
                    *k = end;
                }
            }
            out.push(PathRef { segments, binds });
            *k
        }
    }
}

/// Where a path leads: a module of the crate, or outside it.
#[derive(Debug, PartialEq)]
enum Target {
    Module(String),
    Outside,
}

/// Resolves `path`, written in module `from`, to the module that defines what it names (following imports).
fn resolve(
    modules: &Modules,
    refs: &BTreeMap<String, ModuleRefs>,
    from: &str,
    path: &[String],
    depth: u32,
) -> Target {
    let Some(first) = path.first() else {
        return Target::Outside;
    };
    let (mut cur, rest) = match first.as_str() {
        "crate" => (String::new(), &path[1..]),
        "self" => (from.to_owned(), &path[1..]),
        "super" => (from.to_owned(), path),
        _ => (from.to_owned(), path),
    };
    for (n, seg) in rest.iter().enumerate() {
        let Some(module) = modules.get(&cur) else {
            return Target::Outside;
        };
        match seg.as_str() {
            "super" => match parent(&cur) {
                Some(p) => cur = p.to_owned(),
                None => return Target::Outside,
            },
            "self" => {}
            "*" => return Target::Module(cur),
            _ if module.children.contains(seg) => cur = join(&cur, seg),
            item => {
                // An item of `cur`, unless `cur` imports it from elsewhere.
                if depth < 16 {
                    let Some(r) = refs.get(&cur) else {
                        return Target::Module(cur);
                    };
                    if let Some(import) = r.imports.get(item) {
                        let mut next = import.clone();
                        next.extend(rest[n + 1..].iter().cloned());
                        return resolve(modules, refs, &cur, &next, depth + 1);
                    }
                    // Not its own: maybe an item of a module it imports by glob.
                    if !r.defines.contains(item) {
                        for glob in &r.globs {
                            let Target::Module(from_glob) =
                                resolve(modules, refs, &cur, glob, depth + 1)
                            else {
                                continue;
                            };
                            if from_glob != cur && provides(modules, refs, &from_glob, item) {
                                let mut next = vec!["crate".to_owned()];
                                next.extend(
                                    from_glob
                                        .split("::")
                                        .filter(|s| !s.is_empty())
                                        .map(str::to_owned),
                                );
                                next.extend(rest[n..].iter().cloned());
                                return resolve(modules, refs, &cur, &next, depth + 1);
                            }
                        }
                    }
                }
                return Target::Module(cur);
            }
        }
    }
    Target::Module(cur)
}

/// Whether `module` defines, imports or declares `name` (so a glob import of it brings `name`).
fn provides(
    modules: &Modules,
    refs: &BTreeMap<String, ModuleRefs>,
    module: &str,
    name: &str,
) -> bool {
    modules
        .get(module)
        .is_some_and(|m| m.children.contains(name))
        || refs
            .get(module)
            .is_some_and(|r| r.defines.contains(name) || r.imports.contains_key(name))
}

/// The module graph of a crate.
pub(crate) fn module_graph(modules: &Modules) -> Graph {
    let refs: BTreeMap<String, ModuleRefs> = modules
        .iter()
        .map(|(path, m)| (path.clone(), module_refs(&m.code, &m.children)))
        .collect();
    let mut graph = Graph::new();
    for (module, r) in &refs {
        let uses = graph.entry(module.clone()).or_default();
        for path in &r.uses {
            if let Target::Module(target) = resolve(modules, &refs, module, &path.segments, 0) {
                if &target != module {
                    uses.entry(target).or_insert_with(|| path.text());
                }
            }
        }
    }
    graph
}

/// Each strongly connected component of more than one module, with one of its shortest cycles through
/// its first module, as `[a, b, .., a]`.
pub(crate) fn find_cycles(graph: &Graph) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let mut cycles = Vec::new();
    for component in components(graph) {
        if component.len() < 2 {
            continue;
        }
        // A shortest cycle through the component's first module (breadth-first inside the component).
        let start = component.iter().next().cloned().unwrap_or_default();
        let mut came_from: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut closing = None;
        while let Some(m) = queue.pop_front() {
            for next in graph.get(&m).into_iter().flat_map(BTreeMap::keys) {
                if !component.contains(next) {
                    continue;
                }
                if next == &start {
                    closing = Some(m.clone());
                    break;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
            if closing.is_some() {
                break;
            }
        }
        let Some(mut m) = closing else { continue };
        let mut cycle = vec![start.clone()];
        while m != start {
            cycle.push(m.clone());
            m = came_from.get(&m).cloned().unwrap_or_else(|| start.clone());
        }
        cycle.push(start);
        cycle.reverse();
        cycles.push((component, cycle));
    }
    cycles
}

/// The strongly connected components (Tarjan).
fn components(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, m: &'a str) {
        let n = s.index.len();
        s.index.insert(m, n);
        s.low.insert(m, n);
        s.stack.push(m);
        s.on_stack.insert(m);
        let graph = s.graph;
        for next in graph.get(m).into_iter().flat_map(BTreeMap::keys) {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[m].min(s.low[next]);
                s.low.insert(m, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[m].min(s.index[next]);
                s.low.insert(m, low);
            }
        }
        if s.low[m] == s.index[m] {
            let mut component = BTreeSet::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.insert(top.to_owned());
                if top == m {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for m in graph.keys() {
        if !s.index.contains_key(m.as_str()) {
            visit(&mut s, m);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate from inline sources: (module path, source).
    fn modules(files: &[(&str, &str)]) -> Modules {
        let mut out = Modules::new();
        for (path, text) in files {
            let code = strip_test_items(&strip_comments_and_literals(text));
            let mut declared = Vec::new();
            add_module(
                &code,
                (*path).to_owned(),
                Path::new("."),
                &mut out,
                &mut declared,
            );
        }
        out
    }

    /// The cycles found at every level, as (parent, cycle).
    fn cycles(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        let modules = modules(files);
        let graph = module_graph(&modules);
        modules
            .keys()
            .flat_map(|parent| find_cycles(&collapse(&graph, parent)))
            .map(|(_, cycle)| cycle)
            .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_workspace_has_no_module_cycle_and_keeps_its_layers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lies in the workspace");
        let report = module_cycles(root).expect("the workspace's sources are readable");
        println!("{}", report.summary);
        for allowed in &report.allowed {
            println!("allowed for now: {allowed}");
        }
        assert!(
            report.summary.lines().count() > 10,
            "every crate was read: {}",
            report.summary
        );
        assert!(
            report.cycles.is_empty(),
            "module cycles:\n{}",
            report.cycles.join("\n")
        );
        for table in &report.tables {
            println!("\n{table}");
        }
        assert_eq!(
            report.tables.len(),
            LAYERED.len(),
            "every layered crate was read"
        );
        assert!(
            report.tables[0].lines().count() > 40,
            "grpc-channel's modules were read: {}",
            report.tables[0]
        );
        assert!(
            report.layers.is_empty(),
            "modules that use a higher layer, or in a folder of no layer:\n{}",
            report.layers.join("\n")
        );
    }

    /// grpc-channel's folders.
    const DIRS: &[&str] = &["wire", "request", "conn", "control", "call", "xds"];

    /// The layer check over a crate from inline sources, with grpc-channel's layers; `dirs` are the folders.
    fn layer_check(files: &[(&str, &str)], dirs: &[&str]) -> Vec<String> {
        let dirs: BTreeSet<String> = dirs.iter().map(|d| (*d).to_owned()).collect();
        layer_violations(&module_graph(&modules(files)), CHANNEL_LAYERS, &dirs)
    }

    #[test]
    fn the_layer_check_finds_uses_of_higher_layers_and_unplaced_folders() {
        let base = [
            ("", "mod wire;\nmod conn;\nmod call;\npub use call::Call;"),
            ("wire", "pub struct Status;"),
            (
                "conn",
                "use crate::wire::Status;\npub fn connect() -> Status { Status }",
            ),
            (
                "call",
                "pub struct Call;\nfn f() { crate::conn::connect(); crate::wire::Status; }",
            ),
        ];
        let dirs = DIRS;
        assert!(layer_check(&base, dirs).is_empty());
        // The wire layer using a call (through the root's re-export): a violation.
        let mut bad = base;
        bad[1] = (
            "wire",
            "pub struct Status;\nfn f() -> crate::Call { todo!() }",
        );
        assert_eq!(
            layer_check(&bad, dirs),
            ["wire (wire) uses call (call): `crate::Call`"]
        );
        // A folder that is in no layer, and a layer's folder that does not exist.
        let mut dirs_plus = dirs.to_vec();
        dirs_plus.retain(|d| *d != "xds");
        dirs_plus.push("extra");
        let mut files = base.to_vec();
        files[0] = ("", "mod wire;\nmod conn;\nmod call;\nmod extra;");
        files.push(("extra", ""));
        assert_eq!(
            layer_check(&files, &dirs_plus),
            [
                "layer api: there is no folder xds/",
                "extra is in extra/, a folder of no layer (add it to the table)"
            ]
        );
    }

    // The review's findings against grpc-channel's former layer check (its own reader): each let an
    // upward import through; the tidy's reader sees them.

    #[test]
    fn code_after_an_inline_test_module_is_checked() {
        let found = layer_check(
            &[
                ("", "mod wire;\nmod call;"),
                (
                    "wire",
                    "#[cfg(test)]\nmod tests {}\nfn f() { crate::call::x(); }",
                ),
                ("call", "pub fn x() {}"),
            ],
            DIRS,
        );
        assert_eq!(found, ["wire (wire) uses call (call): `crate::call::x`"]);
    }

    #[test]
    fn a_string_with_slashes_does_not_hide_code() {
        let found = layer_check(
            &[
                ("", "mod wire;\nmod call;"),
                ("wire", "fn f() { let s = \"http://x\"; crate::call::x(); }"),
                ("call", "pub fn x() {}"),
            ],
            DIRS,
        );
        assert_eq!(found, ["wire (wire) uses call (call): `crate::call::x`"]);
    }

    #[test]
    fn a_reexport_the_module_names_is_a_use() {
        let files = [
            ("", "mod wire;\nmod call;"),
            (
                "wire",
                "pub(crate) use crate::call::RequestSender as S;\nfn f(_: &S<()>) {}",
            ),
            ("call", "pub struct RequestSender<T>(T);"),
        ];
        assert_eq!(
            layer_check(&files, DIRS),
            ["wire (wire) uses call (call): `crate::call::RequestSender`"]
        );
        // A re-export the module does not name itself is no use (a facade), and an enum variant of the
        // same name does not name it.
        let mut facade = files;
        facade[1] = (
            "wire",
            "pub(crate) use crate::call::RequestSender as S;\nenum E { S, T(u8) }",
        );
        assert!(layer_check(&facade, DIRS).is_empty());
    }

    #[test]
    fn a_path_attribute_names_the_module_file() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-path-{}", std::process::id()));
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("elsewhere")).expect("temp dir");
        std::fs::write(
            src.join("lib.rs"),
            "#[path = \"elsewhere/b_impl.rs\"]\npub(crate) mod b;\nmod a;",
        )
        .expect("write");
        std::fs::write(src.join("a.rs"), "pub fn f() { crate::b::g(); }").expect("write");
        std::fs::write(src.join("elsewhere/b_impl.rs"), "mod c;\npub fn g() {}").expect("write");
        std::fs::write(src.join("elsewhere/c.rs"), "fn h() { crate::a::f(); }").expect("write");
        let read = read_crate(&src.join("lib.rs"));
        std::fs::remove_dir_all(&dir).ok();
        let modules = read.expect("the #[path] file is found");
        let names: Vec<&str> = modules.keys().map(String::as_str).collect();
        assert_eq!(names, ["", "a", "b", "b::c"]);
        let graph = module_graph(&modules);
        let found: Vec<Vec<String>> = find_cycles(&collapse(&graph, ""))
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        assert_eq!(found, vec![strings(&["a", "b", "a"])]);
    }

    #[test]
    fn a_path_through_a_reexport_counts_for_the_module_that_defines_the_item() {
        // A child that uses its parent's items through `super::{..}` uses its parent; a path through a
        // re-export counts for the module that defines the item, also through two re-exports.
        let graph = module_graph(&modules(&[
            (
                "",
                "mod p;\nmod q;\nmod r;\npub use p::{event, Api};\npub use event::Event;",
            ),
            (
                "p",
                "mod child;\npub mod event;\npub(crate) use event::Event;\npub struct Api;\n\
                 fn start() { child::run(); }",
            ),
            ("p::child", "use super::{Api, Event};\npub fn run() {}"),
            ("p::event", "pub struct Event;"),
            ("q", "use crate::Api;\nuse crate::p::Event;"),
            ("r", "fn f() { crate::Event::new(); }"),
        ]));
        let uses = |m: &str| graph[m].keys().map(String::as_str).collect::<Vec<_>>();
        assert_eq!(uses(""), Vec::<&str>::new(), "re-exports are no uses");
        assert_eq!(uses("p"), ["p::child"]);
        assert_eq!(uses("p::child"), ["p", "p::event"]);
        assert_eq!(uses("q"), ["p", "p::event"]);
        assert_eq!(uses("r"), ["p::event"], "through two re-exports");
        let found: Vec<Vec<String>> = find_cycles(&collapse(&graph, "p"))
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        assert_eq!(found, vec![strings(&["p", "p::child", "p"])]);
    }

    #[test]
    fn a_cycle_through_a_super_group_is_found() {
        let found = cycles(&[
            ("", "mod control;"),
            (
                "control",
                "mod event_loop;\npub(crate) struct Conn;\nfn run() { event_loop::Loop::new(); }",
            ),
            (
                "control::event_loop",
                "use super::{Conn, Event};\npub(crate) struct Loop;",
            ),
        ]);
        assert_eq!(
            found,
            vec![strings(&["control", "control::event_loop", "control"])]
        );
    }

    #[test]
    fn a_name_the_parent_only_imports_or_reexports_is_not_a_use_of_the_parent() {
        // call.rs re-exports `Action` from its child and imports `Phase` from another; children name
        // both through `super::`, and the parent's own type. No cycle: call → phase, action → phase.
        let found = cycles(&[
            ("", "mod call;\npub use call::{Action, RetryCall};"),
            (
                "call",
                "mod action;\nmod phase;\npub use action::Action;\nuse phase::Phase;\n\
                 pub struct RetryCall { phase: Phase }",
            ),
            (
                "call::action",
                "use super::Phase;\npub enum Action { A(Phase) }",
            ),
            ("call::phase", "pub enum Phase { Driving }"),
        ]);
        assert!(found.is_empty(), "{found:?}");
        let graph = module_graph(&modules(&[
            ("", "mod call;"),
            ("call", "mod action;\nmod phase;\nuse phase::Phase;"),
            ("call::action", "use super::{Phase, RetryCall};"),
            ("call::phase", ""),
        ]));
        let uses: Vec<&String> = graph["call::action"].keys().collect();
        assert_eq!(uses, ["call", "call::phase"]);
    }

    #[test]
    fn crate_paths_groups_and_the_root_facade() {
        // lib.rs re-exports from `status` (not a use); `a` names `crate::Status`, a use of `status`; `status`
        // names `crate::a::f` in an expression: a cycle a ↔ status through the facade.
        let found = cycles(&[
            ("", "mod a;\nmod status;\npub use status::Status;"),
            ("a", "use crate::{Status, status::{self}};\npub fn f() {}"),
            ("status", "pub struct Status;\nfn g() { crate::a::f(); }"),
        ]);
        assert_eq!(found, vec![strings(&["a", "status", "a"])]);
        // An item defined in the root is a use of the root.
        let found = cycles(&[
            ("", "mod a;\nfn seed() -> u64 { a::f() }"),
            ("a", "pub fn f() -> u64 { crate::seed() }"),
        ]);
        assert_eq!(found, vec![strings(&["", "a", ""])]);
    }

    #[test]
    fn test_modules_comments_and_literals_are_left_out() {
        let found = cycles(&[
            ("", "mod a;\nmod b;"),
            ("a", "pub fn f() { crate::b::g(); }"),
            (
                "b",
                "// crate::a::f\n/* crate::a::f */\nconst S: &str = \"crate::a::f\";\n\
                 const R: &str = r#\"crate::a::f\"#;\npub fn g() {}\n\
                 #[cfg(test)]\nmod tests {\n    use crate::a::f;\n}\n\
                 #[cfg(test)]\nuse crate::a::f;",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn the_parser_reads_nested_groups_aliases_and_relative_paths() {
        let children: BTreeSet<String> = ["child".to_owned()].into();
        let refs = module_refs(
            "use crate::{a::{B, c::D as E}, f};\npub(crate) use super::G;\n\
             use std::fmt;\nfn x() { child::run::<u8>(); let _ = other::child::y; }",
            &children,
        );
        let uses: Vec<String> = refs.uses.iter().map(PathRef::text).collect();
        assert_eq!(
            uses,
            ["crate::a::B", "crate::a::c::D", "crate::f", "child::run"]
        );
        let imports: Vec<(&str, String)> = refs
            .imports
            .iter()
            .map(|(k, v)| (k.as_str(), v.join("::")))
            .collect();
        assert_eq!(
            imports,
            [
                ("B", "crate::a::B".to_owned()),
                ("E", "crate::a::c::D".to_owned()),
                ("G", "super::G".to_owned()),
                ("f", "crate::f".to_owned()),
            ]
        );
    }

    #[test]
    fn the_cycle_finder_reports_one_cycle_per_component() {
        let mut graph = Graph::new();
        let edge = |g: &mut Graph, a: &str, b: &str| {
            g.entry(a.to_owned())
                .or_default()
                .insert(b.to_owned(), String::new());
            g.entry(b.to_owned()).or_default();
        };
        edge(&mut graph, "a", "b");
        edge(&mut graph, "b", "c");
        assert!(find_cycles(&graph).is_empty());
        edge(&mut graph, "c", "a");
        edge(&mut graph, "x", "y");
        edge(&mut graph, "y", "x");
        let found: Vec<Vec<String>> = find_cycles(&graph).into_iter().map(|(_, c)| c).collect();
        assert_eq!(
            found,
            vec![strings(&["a", "b", "c", "a"]), strings(&["x", "y", "x"])]
        );
    }

    #[test]
    fn a_knot_between_folders_is_a_cycle() {
        // app_policy uses call::attempt's `FailurePlace` through call's re-export; call uses app_policy:
        // no cycle between single modules, but the folder `call` and `app_policy` use each other.
        let found = cycles(&[
            ("", "mod app_policy;\nmod call;"),
            ("app_policy", "use crate::call::FailurePlace;"),
            (
                "call",
                "mod attempt;\npub use attempt::FailurePlace;\nuse crate::app_policy::AppPolicy;",
            ),
            ("call::attempt", "pub enum FailurePlace {}"),
        ]);
        assert_eq!(found, vec![strings(&["app_policy", "call", "app_policy"])]);
        let graph = module_graph(&modules(&[
            ("", "mod app_policy;\nmod call;"),
            ("app_policy", "use crate::call::FailurePlace;"),
            ("call", "mod attempt;\npub use attempt::FailurePlace;"),
            ("call::attempt", ""),
        ]));
        assert_eq!(
            collapse(&graph, "")["app_policy"]["call"],
            "app_policy → call::attempt: `crate::call::FailurePlace`"
        );
    }

    // Review findings: each was a real cycle the check missed, or a cycle that is not there.

    #[test]
    fn review_a_pub_crate_use_that_the_module_itself_uses_is_a_use() {
        // `a` imports `Thing` with `pub(crate) use` and uses it; `b` calls `a::f`: a ↔ b.
        let found = cycles(&[
            ("", "mod a;\nmod b;"),
            (
                "a",
                "pub(crate) use crate::b::Thing;\npub fn f() -> Thing { Thing }",
            ),
            ("b", "pub struct Thing;\nfn g() { crate::a::f(); }"),
        ]);
        assert_eq!(found, vec![strings(&["a", "b", "a"])]);
    }

    #[test]
    fn review_pub_self_use_is_private() {
        let found = cycles(&[
            ("", "mod a;\nmod b;"),
            (
                "a",
                "pub(self) use crate::b::Thing;\npub fn f() -> Thing { Thing }",
            ),
            ("b", "pub struct Thing;\nfn g() { crate::a::f(); }"),
        ]);
        assert_eq!(found, vec![strings(&["a", "b", "a"])]);
    }

    #[test]
    fn review_a_name_through_a_glob_reexport_is_followed() {
        // `a` re-exports y's items by glob; x names `super::Thing` (y's), y calls x: x ↔ y.
        let found = cycles(&[
            ("", "mod a;"),
            ("a", "mod x;\nmod y;\npub(crate) use self::y::*;"),
            ("a::x", "use super::Thing;\npub fn f() {}"),
            ("a::y", "pub struct Thing;\nfn g() { super::x::f(); }"),
        ]);
        assert_eq!(found, vec![strings(&["a::x", "a::y", "a::x"])]);
    }

    #[test]
    fn review_no_false_cycle_through_a_glob_reexport() {
        // a → x → y only; the checker sees x → a (the glob's items are taken for a's own).
        let found = cycles(&[
            ("", "mod a;"),
            (
                "a",
                "mod x;\nmod y;\npub(crate) use self::y::*;\nfn h() { x::f(); }",
            ),
            ("a::x", "use super::Thing;\npub fn f() {}"),
            ("a::y", "pub struct Thing;"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }
}
