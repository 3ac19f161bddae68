//! A37's aggregate cluster graph, flattened ([`flatten`]): the aggregate's clusters walked depth first
//! into an ordered list of leaf clusters (EDS and LOGICAL_DNS), whose priorities, in that order, are the
//! aggregate's (`shared/spec/turn4.md` §4.2). Pure: the caller says what each cluster is ([`Node`]).
//!
//! Rules: a cluster reached twice keeps its first position (a later visit adds nothing, so loops end);
//! the graph is at most [`MAX_DEPTH`] clusters deep, the root included (C-core's count; deeper is the
//! error "aggregate cluster graph exceeds max depth (16)"); no leaf at all is the error "aggregate cluster
//! graph has no leaf clusters"; a cluster not received yet makes the graph not ready (the walk goes on, so
//! every cluster reached gets watched at once); a child that does not exist (or was never valid) is
//! skipped, as A74 says (A37 failed the whole aggregate). At most [`MAX_CLUSTERS`] clusters in one graph,
//! the root included (a control plane's fan-out and depth are bounded by it): more is an error.
//!
//! Not here: watching the clusters, and what a leaf's priorities are (`resolver.rs`).

use std::collections::BTreeSet;

/// The most clusters deep an aggregate graph may be, the root included (A37, C-core's and grpc-go's 16).
pub(crate) const MAX_DEPTH: usize = 16;

/// The most clusters one aggregate graph may reach, the root included.
pub(crate) const MAX_CLUSTERS: usize = 1024;

/// What a cluster of the graph is, as the watches say now.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    /// Not received yet.
    NotReceived,
    /// Does not exist, or was never valid (A74: skipped).
    Missing,
    /// An EDS or LOGICAL_DNS cluster.
    Leaf,
    /// An aggregate of these clusters, best first.
    Aggregate(Vec<String>),
}

/// The result of a walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    /// Every cluster the walk reached (to keep watched), the root included.
    pub(crate) reached: BTreeSet<String>,
    /// The leaves in priority order, or why the graph is unusable; `Ok(None)` while a cluster is not
    /// received yet.
    pub(crate) leaves: Result<Option<Vec<String>>, String>,
}

struct Walker<'f> {
    node: &'f dyn Fn(&str) -> Node,
    reached: BTreeSet<String>,
    leaves: Vec<String>,
    pending: bool,
}

impl Walker<'_> {
    fn visit(&mut self, name: &str, depth: usize) -> Result<(), String> {
        if self.reached.contains(name) {
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            return Err(format!(
                "aggregate cluster graph exceeds max depth ({MAX_DEPTH})"
            ));
        }
        if self.reached.len() >= MAX_CLUSTERS {
            return Err(format!(
                "aggregate cluster graph has more than {MAX_CLUSTERS} clusters"
            ));
        }
        self.reached.insert(name.to_owned());
        match (self.node)(name) {
            Node::NotReceived => self.pending = true,
            Node::Missing => {}
            Node::Leaf => self.leaves.push(name.to_owned()),
            Node::Aggregate(children) => {
                for child in &children {
                    self.visit(child, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

/// Walks the graph from the aggregate `root` (see the module docs).
pub(crate) fn flatten(root: &str, node: &dyn Fn(&str) -> Node) -> Walk {
    let mut walker = Walker {
        node,
        reached: BTreeSet::new(),
        leaves: Vec::new(),
        pending: false,
    };
    let outcome = walker.visit(root, 0);
    let leaves = match outcome {
        Err(e) => Err(e),
        Ok(()) if walker.pending => Ok(None),
        Ok(()) if walker.leaves.is_empty() => {
            Err("aggregate cluster graph has no leaf clusters".to_owned())
        }
        Ok(()) => Ok(Some(walker.leaves)),
    };
    Walk {
        reached: walker.reached,
        leaves,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A graph: `name → Some(children)` is an aggregate, `name → None` a leaf; absent names are not
    /// received, names starting with `gone` do not exist.
    fn walk(graph: &BTreeMap<String, Option<Vec<String>>>, root: &str) -> Walk {
        let node = |name: &str| -> Node {
            if name.starts_with("gone") {
                return Node::Missing;
            }
            match graph.get(name) {
                None => Node::NotReceived,
                Some(None) => Node::Leaf,
                Some(Some(children)) => Node::Aggregate(children.clone()),
            }
        };
        flatten(root, &node)
    }

    fn graph(edges: &[(&str, Option<&[&str]>)]) -> BTreeMap<String, Option<Vec<String>>> {
        edges
            .iter()
            .map(|(name, children)| {
                (
                    (*name).to_owned(),
                    children.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
                )
            })
            .collect()
    }

    fn leaves(w: &Walk) -> Vec<&str> {
        w.leaves
            .as_ref()
            .expect("no error")
            .as_ref()
            .expect("ready")
            .iter()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn depth_first_and_a_cluster_seen_twice_keeps_its_first_place() {
        // A37's example: A→[B,C], C→[D,E] ⇒ [B,D,E].
        let g = graph(&[
            ("A", Some(&["B", "C"])),
            ("B", None),
            ("C", Some(&["D", "E"])),
            ("D", None),
            ("E", None),
        ]);
        assert_eq!(leaves(&walk(&g, "A")), ["B", "D", "E"]);
        // E reached through two paths: first position only.
        let g = graph(&[
            ("A", Some(&["X", "E", "Y"])),
            ("X", Some(&["E", "B"])),
            ("Y", Some(&["B", "F"])),
            ("B", None),
            ("E", None),
            ("F", None),
        ]);
        let w = walk(&g, "A");
        assert_eq!(leaves(&w), ["E", "B", "F"]);
        assert_eq!(w.reached.len(), 6);
    }

    #[test]
    fn loops_end_and_a_graph_of_loops_has_no_leaves() {
        let g = graph(&[("A", Some(&["B", "L"])), ("B", Some(&["A"])), ("L", None)]);
        assert_eq!(leaves(&walk(&g, "A")), ["L"]);
        let g = graph(&[("A", Some(&["B"])), ("B", Some(&["A", "B"]))]);
        assert_eq!(
            walk(&g, "A").leaves,
            Err("aggregate cluster graph has no leaf clusters".to_owned())
        );
    }

    #[test]
    fn a_missing_child_is_skipped_and_an_unreceived_one_waits() {
        let g = graph(&[("A", Some(&["gone1", "B"])), ("B", None)]);
        assert_eq!(leaves(&walk(&g, "A")), ["B"]);
        // Only missing children: no leaves.
        let g = graph(&[("A", Some(&["gone1"]))]);
        assert!(walk(&g, "A").leaves.is_err());
        // "later" is not received: not ready, but the walk reached every cluster to watch.
        let g = graph(&[
            ("A", Some(&["later", "C"])),
            ("C", Some(&["D"])),
            ("D", None),
        ]);
        let w = walk(&g, "A");
        assert_eq!(w.leaves, Ok(None));
        assert_eq!(
            w.reached.iter().map(String::as_str).collect::<Vec<_>>(),
            ["A", "C", "D", "later"]
        );
    }

    /// A chain c0 → c1 → … → c{n-1}, the last a leaf.
    fn chain(n: usize) -> BTreeMap<String, Option<Vec<String>>> {
        (0..n)
            .map(|i| {
                let children = (i + 1 < n).then(|| vec![format!("c{}", i + 1)]);
                (format!("c{i}"), children)
            })
            .collect()
    }

    #[test]
    fn sixteen_clusters_deep_is_the_limit() {
        assert_eq!(leaves(&walk(&chain(MAX_DEPTH), "c0")), ["c15"]);
        assert_eq!(
            walk(&chain(MAX_DEPTH + 1), "c0").leaves,
            Err("aggregate cluster graph exceeds max depth (16)".to_owned())
        );
    }

    #[test]
    fn a_graph_of_1024_clusters_is_the_limit() {
        let fan_out = |n: usize| {
            let mut g: BTreeMap<String, Option<Vec<String>>> =
                (0..n).map(|i| (format!("l{i}"), None)).collect();
            g.insert(
                "root".to_owned(),
                Some((0..n).map(|i| format!("l{i}")).collect()),
            );
            g
        };
        assert_eq!(
            leaves(&walk(&fan_out(MAX_CLUSTERS - 1), "root")).len(),
            MAX_CLUSTERS - 1
        );
        let w = walk(&fan_out(MAX_CLUSTERS), "root");
        assert_eq!(
            w.leaves,
            Err("aggregate cluster graph has more than 1024 clusters".to_owned())
        );
        assert!(w.reached.len() <= MAX_CLUSTERS);
    }
}
