//! Reading a crate: the crate roots of the workspace members, each crate's modules from its root file
//! (following `mod` declarations to `name.rs`, `name/mod.rs` or the file of a `#[path]`, inline modules
//! cut out into modules of their own), and each module's code with comments and literals stripped and its
//! `#[cfg(test)]` items left out. It does not look at the paths a module uses (that is [`super::refs`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lex::{ident_at, is_ident, matching, skip_ws, word_at};

/// The crate roots of the workspace members listed in `Cargo.toml` (`crates/*` expanded).
pub(super) fn crate_roots(root: &Path) -> Result<Vec<PathBuf>, String> {
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

pub(super) fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
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
pub(super) fn read_crate(root_file: &Path) -> Result<Modules, String> {
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
pub(super) fn add_module(
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

pub(super) fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}::{name}")
    }
}

pub(super) fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rsplit_once("::").map_or("", |(p, _)| p))
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
