//! Tests of the whole check: crates from inline sources (or a temporary directory) read, parsed, put in a
//! graph and checked for cycles and layers, and the workspace itself. The parser's and the cycle finder's
//! own tests are beside them, in `refs.rs` and `graph.rs`.

use std::collections::BTreeSet;
use std::path::Path;

use super::graph::{collapse, find_cycles, module_graph};
use super::layers::layer_violations;
use super::source::{
    add_module, read_crate, strip_comments_and_literals, strip_test_items, Modules,
};
use super::{module_cycles, CHANNEL_LAYERS, LAYERED};

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
