//! The paths a module uses: [`module_refs`] parses one module's stripped code into its uses, its imports
//! (re-exports included), its glob imports and the items it defines; [`resolve`] follows a path, through
//! imports and globs, to the module that defines what it names. It does not read files (that is
//! [`super::source`]) or build the graph (that is [`super::graph`]).

use std::collections::{BTreeMap, BTreeSet};

use super::lex::{ident_at, is_ident, matching, skip_ws, word_at};
use super::source::{join, parent, Modules};

/// A path as written from its first segment (`crate`, `super`, `self` or a submodule's name), with the name
/// it binds when it comes from a `use` (its alias or last segment).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PathRef {
    pub(crate) segments: Vec<String>,
    pub(crate) binds: Option<String>,
}

impl PathRef {
    pub(super) fn text(&self) -> String {
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
pub(super) enum Target {
    Module(String),
    Outside,
}

/// Resolves `path`, written in module `from`, to the module that defines what it names (following imports).
pub(super) fn resolve(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
