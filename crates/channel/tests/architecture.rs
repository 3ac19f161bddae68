//! The crate's architecture, read from its sources and checked, so a change that breaks it fails here:
//! * **layers by folder**: every module belongs to the layer of its folder under `src/` ([`LAYERS`]; the
//!   files at the root are the API), and a module uses only modules of its own layer or of lower ones;
//! * **no import cycle** among the modules (each can be read after the ones it uses);
//! * no source file in `crates/*/src` is over [`MAX_LINES`] lines.
//!
//! A module uses another when its code names it: `crate::a::b` paths, `use crate::{a, b::{c, D}}` groups,
//! `super::` and `self::` paths and their groups (`use super::{Type, sibling::Other}`: a child that uses its
//! parent's items uses its parent), and paths through a child module (`child::item`). A path through a
//! re-export (`crate::Status`, `crate::control::ActiveCallGuard`) counts for the module that defines the item,
//! and a re-export (`pub use`, `pub(crate) use`) is not a use of its own. Comments, inline test modules and
//! test-only module files are left out.
//!
//! `cargo test -p grpc-channel --test architecture -- --nocapture` prints the layer table with each
//! layer's modules, and every module's uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_LINES: usize = 800;

/// A layer: the folders of `src/` whose modules it holds ("" for the files at the root) and what it is.
struct Layer {
    name: &'static str,
    folders: &'static [&'static str],
    what: &'static str,
}

/// The layers, lowest first: a module may use only modules of its own layer or of the layers before it.
const LAYERS: &[Layer] = &[
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

/// The module a file defines (`call::shared`), or `crate` for lib.rs.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return "crate".to_owned();
    }
    parts.join("::")
}

/// The folder of `src/` a file is in ("" at the root): its layer's key.
fn folder_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    match rel.iter().count() {
        1 => String::new(),
        _ => rel
            .iter()
            .next()
            .expect("a folder")
            .to_string_lossy()
            .into_owned(),
    }
}

/// The segments of a module path (`crate` is the empty path).
fn segs_of(module: &str) -> Vec<String> {
    match module {
        "crate" => Vec::new(),
        m => m.split("::").map(str::to_owned).collect(),
    }
}

fn module_name(segs: &[String]) -> String {
    match segs {
        [] => "crate".to_owned(),
        s => s.join("::"),
    }
}

/// The code of a file without comments and inline test modules (`#[cfg(test)] mod name {`).
fn code(text: &str) -> String {
    let text: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut end = text.len();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if let Some(decl) = rest.strip_prefix("mod ") {
            let name_end = decl.find(|c: char| !is_ident(c)).unwrap_or(decl.len());
            if decl[name_end..].trim_start().starts_with('{') {
                end = at;
                break;
            }
        }
        from = at + 1;
    }
    text[..end].to_owned()
}

/// The modules a file declares as test-only (`#[cfg(test)] mod name;`).
fn test_only_children(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        rest = &rest[i + "#[cfg(test)]".len()..];
        if let Some(decl) = rest.trim_start().strip_prefix("mod ") {
            let name_end = decl.find(|c: char| !is_ident(c)).unwrap_or(decl.len());
            if decl[name_end..].trim_start().starts_with(';') {
                out.push(decl[..name_end].to_owned());
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A path as written, and the name it is bound to when it is a re-exported `use` item.
#[derive(Debug, PartialEq)]
struct Written {
    segs: Vec<String>,
    reexport_as: Option<String>,
}

/// Every path in `code`: each `a::b::c` (or `use` tree, groups expanded) that starts where no path
/// goes on (not after `::` or inside an identifier). Paths in a `pub use` / `pub(..) use` item are marked
/// as re-exports, with the name they bind.
fn paths_in(code: &str) -> Vec<Written> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let c = code[i..].chars().next().expect("a char");
        if !(c.is_ascii_alphabetic() || c == '_') {
            i += c.len_utf8();
            continue;
        }
        let start = i;
        let prev = code[..start].trim_end();
        // `pub use` and `pub(crate) use` items re-export.
        let word_end = code[start..]
            .find(|c: char| !is_ident(c))
            .map_or(code.len(), |e| start + e);
        if &code[start..word_end] == "use" {
            let reexport = is_pub_before(prev);
            let stmt_end = code[word_end..]
                .find(';')
                .map_or(code.len(), |e| word_end + e);
            let mut trees = Vec::new();
            use_tree(code[word_end..stmt_end].trim(), &mut Vec::new(), &mut trees);
            for (segs, name) in trees {
                out.push(Written {
                    segs,
                    reexport_as: reexport.then_some(name),
                });
            }
            i = stmt_end;
            continue;
        }
        if prev.ends_with("::") {
            i = word_end;
            continue;
        }
        // A path `a::b::...` (with a group at its end), outside `use` items.
        let mut trees = Vec::new();
        let len = path_len(&code[start..]);
        if code[start..start + len].contains("::") {
            use_tree(&code[start..start + len], &mut Vec::new(), &mut trees);
            out.extend(trees.into_iter().map(|(segs, _)| Written {
                segs,
                reexport_as: None,
            }));
        }
        i = start + len.max(1);
    }
    out
}

/// Whether the text before `use` ends with a `pub` visibility (`pub`, `pub(crate)`, `pub(super)`, ...).
fn is_pub_before(prev: &str) -> bool {
    if let Some(before) = prev.strip_suffix("pub") {
        return before.chars().last().is_none_or(|c| !is_ident(c));
    }
    match prev.rfind("pub(") {
        Some(i) => {
            let vis = &prev[i..];
            vis.ends_with(')') && !vis[4..vis.len() - 1].contains(['(', ')', ';', '{', '}'])
        }
        None => false,
    }
}

/// The length of the path at the start of `s`: identifiers joined by `::`, maybe ending in a `{..}` group.
fn path_len(s: &str) -> usize {
    let mut i = 0;
    loop {
        let end = s[i..]
            .find(|c: char| !is_ident(c))
            .map_or(s.len(), |e| i + e);
        if end == i {
            return i;
        }
        i = end;
        let rest = &s[i..];
        let trimmed = rest.trim_start();
        if !trimmed.starts_with("::") {
            return i;
        }
        i += rest.len() - trimmed.len() + 2;
        let rest = &s[i..];
        let trimmed = rest.trim_start();
        if trimmed.starts_with('{') {
            let open = i + rest.len() - trimmed.len();
            return open + group_len(&s[open..]);
        }
        i += rest.len() - trimmed.len();
    }
}

/// The length of the `{..}` group at the start of `s`, braces included.
fn group_len(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// Expands a use tree (`a::b::{C, d::{e, F as G}}`, or a plain path) into its paths, each with the name it
/// binds (its last segment, or its `as` name).
fn use_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if let Some(group) = tree.strip_prefix('{') {
        let inner = group.strip_suffix('}').unwrap_or(group);
        let mut depth = 0;
        let mut item = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_tree(&item, prefix, out);
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        use_tree(&item, prefix, out);
        return;
    }
    match tree.split_once("::") {
        Some((first, rest)) => {
            let first = first.trim();
            if first.is_empty() {
                return;
            }
            prefix.push(first.to_owned());
            use_tree(rest, prefix, out);
            prefix.pop();
        }
        None => {
            let (last, alias) = match tree.split_once(" as ") {
                Some((l, a)) => (l.trim(), Some(a.trim().to_owned())),
                None => (tree.trim(), None),
            };
            if last.is_empty() {
                return;
            }
            let mut segs = prefix.clone();
            let name = match last {
                // `use a::b::{self}` binds `b`; `*` binds nothing of its own.
                "self" => prefix.last().cloned().unwrap_or_default(),
                "*" => String::new(),
                l => {
                    segs.push(l.to_owned());
                    l.to_owned()
                }
            };
            let name = alias.unwrap_or(name);
            if !segs.is_empty() {
                out.push((segs, name));
            }
        }
    }
}

/// The crate's modules, their code, and their folders.
struct Sources {
    /// Module → its code (comments and inline test modules left out).
    code: BTreeMap<String, String>,
    /// Module → the folder of `src/` its file is in.
    folder: BTreeMap<String, String>,
}

fn read_sources() -> Sources {
    let src = crate_dir().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut code_of = BTreeMap::new();
    let mut folder = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for f in &files {
        let module = module_of(&src, f);
        let text = std::fs::read_to_string(f).expect("read");
        for child in test_only_children(&text) {
            let mut segs = segs_of(&module);
            segs.push(child);
            test_only.insert(module_name(&segs));
        }
        folder.insert(module.clone(), folder_of(&src, f));
        code_of.insert(module, code(&text));
    }
    for m in &test_only {
        code_of.remove(m);
        folder.remove(m);
    }
    Sources {
        code: code_of,
        folder,
    }
}

/// Turns a path written in `module` into an absolute one (segments from the crate root), or `None` for a
/// path that does not start in this crate (std, other crates, local names). A path may start with a child
/// module or with a name the module re-exports (`reexported`).
fn absolute(
    module: &str,
    segs: &[String],
    modules: &BTreeMap<String, String>,
    reexported: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let here = segs_of(module);
    let (first, rest) = segs.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            let mut base = here.clone();
            base.pop();
            base
        }
        child => {
            let mut base = here.clone();
            base.push(child.to_owned());
            if !modules.contains_key(&module_name(&base)) && !reexported.contains(child) {
                return None;
            }
            base
        }
    };
    let mut rest = rest;
    while let Some((s, r)) = rest.split_first() {
        if s != "super" {
            break;
        }
        base.pop();
        rest = r;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Module → the modules it uses, `LAYERS` aside.
fn module_graph(sources: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let modules = &sources.code;
    // Each module's re-exports: name → the absolute path it stands for.
    let mut reexports: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut uses: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let written: BTreeMap<&String, Vec<Written>> = modules
        .iter()
        .map(|(m, code)| (m, paths_in(code)))
        .collect();
    for (module, written) in written {
        let reexported: BTreeSet<String> = written
            .iter()
            .filter_map(|w| w.reexport_as.clone())
            .filter(|name| !name.is_empty())
            .collect();
        for written in written {
            let Some(path) = absolute(module, &written.segs, modules, &reexported) else {
                continue;
            };
            match written.reexport_as {
                Some(name) if !name.is_empty() => {
                    reexports
                        .entry(module.clone())
                        .or_default()
                        .insert(name, path);
                }
                Some(_) => {}
                None => uses.entry(module.clone()).or_default().push(path),
            }
        }
    }
    // The module that defines what a path names: its longest prefix that is a module, followed through
    // re-exports.
    let resolve = |path: &[String]| -> String {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let k = (0..=path.len())
                .rev()
                .find(|&k| modules.contains_key(&module_name(&path[..k])))
                .unwrap_or(0);
            let module = module_name(&path[..k]);
            let through = path
                .get(k)
                .and_then(|name| reexports.get(&module).and_then(|r| r.get(name)));
            match through {
                Some(target) => {
                    let mut next = target.clone();
                    next.extend(path[k + 1..].iter().cloned());
                    path = next;
                }
                None => return module,
            }
        }
        module_name(&path)
    };
    let mut graph = BTreeMap::new();
    for module in modules.keys() {
        let mut used = BTreeSet::new();
        for path in uses.get(module).into_iter().flatten() {
            let target = resolve(path);
            if &target != module {
                used.insert(target);
            }
        }
        graph.insert(module.clone(), used);
    }
    graph
}

/// The index in `LAYERS` of a folder's layer.
fn layer_of(folder: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.folders.contains(&folder))
}

/// Every use of a module of a higher layer: `(module, used)`, with their layers.
fn layer_violations(
    graph: &BTreeMap<String, BTreeSet<String>>,
    layer: &dyn Fn(&str) -> usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (module, used) in graph {
        for u in used {
            if layer(u) > layer(module) {
                out.push(format!(
                    "{module} ({}) uses {u} ({})",
                    LAYERS[layer(module)].name,
                    LAYERS[layer(u)].name
                ));
            }
        }
    }
    out
}

/// A cycle in the graph, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|s| s == m).unwrap_or(0);
                let mut cycle = stack[start..].to_vec();
                cycle.push(m.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(m.to_owned(), Mark::Open);
        stack.push(m.to_owned());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(m.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

/// The layer table, lowest layer first, with each layer's modules; then every module's uses.
fn render(sources: &Sources, graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut out = String::from("layer     folders         what (modules)\n");
    for (i, layer) in LAYERS.iter().enumerate() {
        let folders: Vec<String> = layer
            .folders
            .iter()
            .map(|f| match *f {
                "" => "src/*.rs".to_owned(),
                f => format!("{f}/"),
            })
            .collect();
        let modules: Vec<&str> = sources
            .folder
            .iter()
            .filter(|(_, f)| layer_of(f) == Some(i))
            .map(|(m, _)| m.as_str())
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
        let used: Vec<&str> = used.iter().map(String::as_str).collect();
        out.push_str(format!("{m}: {}", used.join(" ")).trim_end());
        out.push('\n');
    }
    out
}

#[test]
fn every_module_uses_only_its_own_layer_or_lower_ones() {
    let sources = read_sources();
    let graph = module_graph(&sources);
    println!("{}", render(&sources, &graph));
    assert!(graph.len() > 40, "the graph was read: {graph:?}");
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(edges > 100, "the uses were read: {graph:?}");
    let unplaced: Vec<String> = sources
        .folder
        .iter()
        .filter(|(_, f)| layer_of(f).is_none())
        .map(|(m, f)| format!("{m} (in {f}/)"))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in a folder that has no layer (add the folder to LAYERS): {unplaced:?}"
    );
    let layer = |m: &str| layer_of(&sources.folder[m]).expect("placed");
    let violations = layer_violations(&graph, &layer);
    assert!(
        violations.is_empty(),
        "modules that use a higher layer: {violations:#?}"
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = module_graph(&read_sources());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_checker_finds_layer_violations_and_cycles() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("wire::a", vec![]),
        ("conn::b", vec!["wire::a"]),
        ("call::c", vec!["conn::b", "wire::a"]),
    ]
    .into_iter()
    .map(|(m, u)| (m.to_owned(), u.into_iter().map(str::to_owned).collect()))
    .collect();
    let layer = |m: &str| {
        let folder = m.split("::").next().expect("a folder");
        layer_of(folder).expect("placed")
    };
    assert!(layer_violations(&graph, &layer).is_empty());
    assert_eq!(find_cycle(&graph), None);

    // The wire layer using a call: a violation, and (through conn::b) a cycle.
    let mut bad = graph.clone();
    bad.get_mut("wire::a")
        .expect("a")
        .insert("call::c".to_owned());
    assert_eq!(
        layer_violations(&bad, &layer),
        vec!["wire::a (wire) uses call::c (call)".to_owned()]
    );
    assert_eq!(
        find_cycle(&bad),
        Some(vec![
            "call::c".into(),
            "conn::b".into(),
            "wire::a".into(),
            "call::c".into()
        ])
    );
    // A cycle within one layer is no layer violation, and is still found.
    let mut within = graph.clone();
    within
        .get_mut("wire::a")
        .expect("a")
        .insert("wire::d".to_owned());
    within.insert("wire::d".into(), ["wire::a".to_owned()].into());
    assert!(layer_violations(&within, &layer).is_empty());
    assert_eq!(
        find_cycle(&within),
        Some(vec!["wire::a".into(), "wire::d".into(), "wire::a".into()])
    );
}

#[test]
fn the_reader_sees_every_kind_of_use() {
    let text = "use super::{Conn, event::Event};\n\
                use crate::{a::{b, C}, D};\n\
                pub(crate) use child::Item as Other;\n\
                pub use crate::a::b;\n\
                fn f() { let x = crate::e::f::G; child::run(); y.child::<u8>(); }";
    let written = paths_in(text);
    let paths: Vec<(Vec<&str>, Option<&str>)> = written
        .iter()
        .map(|w| {
            (
                w.segs.iter().map(String::as_str).collect(),
                w.reexport_as.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        vec![
            (vec!["super", "Conn"], None),
            (vec!["super", "event", "Event"], None),
            (vec!["crate", "a", "b"], None),
            (vec!["crate", "a", "C"], None),
            (vec!["crate", "D"], None),
            (vec!["child", "Item"], Some("Other")),
            (vec!["crate", "a", "b"], Some("b")),
            (vec!["crate", "e", "f", "G"], None),
            (vec!["child", "run"], None),
        ]
    );

    // A child that uses its parent's items through `super::{..}` uses its parent; a path through a
    // re-export counts for the module that defines the item.
    let sources = Sources {
        code: [
            (
                "crate",
                "mod p; pub use p::{event, Api}; pub use event::Event;",
            ),
            (
                "p",
                "mod child; mod event; pub(crate) use event::Event; fn start() { child::run(); }",
            ),
            ("p::child", "use super::{Conn, Event};"),
            ("p::event", ""),
            ("q", "use crate::Api; use crate::p::Event;"),
            ("r", "fn f() { crate::Event::new(); }"),
        ]
        .into_iter()
        .map(|(m, c)| (m.to_owned(), code(c)))
        .collect(),
        folder: BTreeMap::new(),
    };
    let graph = module_graph(&sources);
    let uses = |m: &str| graph[m].iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(uses("crate"), Vec::<&str>::new(), "re-exports are no uses");
    assert_eq!(uses("p"), vec!["p::child"]);
    assert_eq!(uses("p::child"), vec!["p", "p::event"]);
    assert_eq!(uses("q"), vec!["p", "p::event"]);
    assert_eq!(uses("r"), vec!["p::event"], "through two re-exports");
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["p".into(), "p::child".into(), "p".into()])
    );
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

// Review findings: each reader gap below let an upward import through (shown by a temporary edit of
// `wire/`); run with `--ignored`.

#[test]
#[ignore = "review: code after an inline `#[cfg(test)] mod tests {}` is dropped"]
fn review_code_after_an_inline_test_module_is_read() {
    assert!(
        code("#[cfg(test)]\nmod tests {}\nfn f() { crate::call::x(); }").contains("crate::call")
    );
}

#[test]
#[ignore = "review: `//` inside a string literal cuts the rest of the line"]
fn review_a_string_with_slashes_does_not_hide_code() {
    assert!(code("let s = \"http://x\"; crate::call::x();").contains("crate::call"));
}

#[test]
#[ignore = "review: a `pub(crate) use` the module itself uses is not counted as a use"]
fn review_a_reexport_the_module_uses_is_a_use() {
    let written = paths_in("pub(crate) use crate::call::RequestSender as S;\nfn f(_: &S<()>) {}");
    assert!(written
        .iter()
        .any(|w| w.reexport_as.is_none() && w.segs.join("::") == "crate::call::RequestSender"));
}
