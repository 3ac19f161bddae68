//! The module graph of a crate (module → the modules it uses, each with the path that made the edge),
//! its levels ([`collapse`]: a module and its subtrees), and the cycles in it (strongly connected
//! components, one shortest cycle each) with their rendering. It does not read sources or parse paths:
//! the modules come from [`super::source`], their uses from [`super::refs`].

use std::collections::{BTreeMap, BTreeSet};

use super::refs::{module_refs, resolve, ModuleRefs, Target};
use super::source::{join, Modules};

/// Module → the modules it uses, each with the first path (as written) that made the edge.
pub(crate) type Graph = BTreeMap<String, BTreeMap<String, String>>;

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
pub(super) fn render_cycle(
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

pub(super) fn display(module: &str) -> &str {
    if module.is_empty() {
        "crate"
    } else {
        module
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
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
}
