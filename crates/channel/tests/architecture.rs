//! The crate's module graph, read from its sources: which module uses which (`crate::a::b` paths, `use
//! crate::{..}` groups, `super::` paths in submodules; test modules left out). Two architecture rules are
//! checked here, so a change that breaks them fails the tests:
//! * no import cycle among the modules (a module can be read after the ones it uses);
//! * ARCHITECTURE.md's module graph lists exactly these edges (it is the map a newcomer reads first);
//! * no source file in `crates/*/src` is over 800 lines.
//!
//! `cargo test -p grpc-channel --test architecture -- --nocapture` prints the graph in the form
//! ARCHITECTURE.md holds it.

use std::collections::{BTreeMap, BTreeSet};
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

/// The module a file defines (`call::shared`), or "" for lib.rs.
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
        parts.clear();
    }
    parts.join("::")
}

/// The code of a file without its test module and comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every lowercase path that follows `prefix` (`crate::` or `super::`), as its segments.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(is_ident) {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, D}`: each lowercase item is a path.
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.trim();
                if item.starts_with(|c: char| c.is_ascii_lowercase()) {
                    out.push(segments(item));
                }
            }
            continue;
        }
        out.push(segments(rest));
    }
    out
}

/// The lowercase segments at the start of `s` (`a::b::C` gives `[a, b]`).
fn segments(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let seg = &rest[..end];
        if seg.is_empty() || !seg.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        segs.push(seg.to_owned());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    segs
}

/// Module → the modules it uses.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = crate_dir().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<String, String> = files
        .iter()
        .map(|f| {
            (
                module_of(&src, f),
                std::fs::read_to_string(f).expect("read"),
            )
        })
        .collect();
    let mut graph = BTreeMap::new();
    for (module, text) in &modules {
        if module.is_empty() {
            continue;
        }
        let code = code(text);
        let parent = module.rsplit_once("::").map(|(p, _)| p.to_owned());
        let mut refs = paths_after(&code, "crate::");
        for path in paths_after(&code, "super::") {
            let mut full: Vec<String> = parent
                .iter()
                .flat_map(|p| p.split("::").map(str::to_owned))
                .collect();
            full.extend(path);
            refs.push(full);
        }
        let mut uses = BTreeSet::new();
        for path in refs {
            // The longest prefix that is a module.
            let target = (1..=path.len())
                .rev()
                .map(|k| path[..k].join("::"))
                .find(|m| modules.contains_key(m));
            if let Some(target) = target {
                let inside = module.starts_with(&format!("{target}::"));
                if &target != module && !inside {
                    uses.insert(target);
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The graph as ARCHITECTURE.md writes it: one line per module, `module: used used ...`.
fn render(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, uses)| {
            let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
            format!("{m}: {}", uses.join(" ")).trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
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

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = module_graph();
    println!("{}", render(&graph));
    assert!(graph.len() > 20, "the graph was read: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn architecture_md_draws_the_module_graph_as_it_is() {
    let graph = render(&module_graph());
    let doc = std::fs::read_to_string(crate_dir().join("../../ARCHITECTURE.md")).expect("read");
    let start = "<!-- module-graph:start -->\n```text\n";
    let end = "```\n<!-- module-graph:end -->";
    let drawn = doc
        .split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(graph, _)| graph.trim_end())
        .expect("ARCHITECTURE.md has a module-graph block");
    assert_eq!(
        drawn, graph,
        "ARCHITECTURE.md's module graph differs from the code; the code's is printed above by \
         `cargo test -p grpc-channel --test architecture -- --nocapture`"
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a".into(), ["b".to_owned()].into());
    graph.insert("b".into(), ["c".to_owned()].into());
    graph.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&graph), None);
    graph.insert("c".into(), ["a".to_owned()].into());
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        paths_after(
            "use crate::{a::B, c, D};\nlet x = crate::e::f::G;",
            "crate::"
        ),
        vec![
            vec!["a".to_owned()],
            vec!["c".to_owned()],
            vec!["e".to_owned(), "f".to_owned()]
        ]
    );
}

#[test]
fn no_source_file_is_over_800_lines() {
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
