//! The user guide (`docs/guide/*.md`) and the README, checked: every Rust example of the guide compiles as a
//! doctest (`cargo test -p grpc-feature-tests --doc`; this crate's dev-dependencies give the examples
//! grpc-channel with `tower`, `metrics`, `xds` and `tonic`, `interop-proto`, `bytes`, `tokio` and
//! `tokio-stream`), and every relative link of the README and the guide names a file that exists and, with a `#fragment`, a
//! heading of that file (`cargo test -p grpc-feature-tests --lib`). The README's first program is checked
//! by `tests/tonic_way.rs`, which runs it.

/// One struct per chapter, documented by the chapter itself, so rustdoc collects its code blocks.
#[cfg(doctest)]
pub mod chapters {
    #[doc = include_str!("../../../docs/guide/README.md")]
    pub struct Index;
    #[doc = include_str!("../../../docs/guide/calls-and-streaming.md")]
    pub struct CallsAndStreaming;
    #[doc = include_str!("../../../docs/guide/generated-clients.md")]
    pub struct GeneratedClients;
    #[doc = include_str!("../../../docs/guide/compression.md")]
    pub struct Compression;
    #[doc = include_str!("../../../docs/guide/interceptors-and-observability.md")]
    pub struct InterceptorsAndObservability;
    #[doc = include_str!("../../../docs/guide/service-config.md")]
    pub struct ServiceConfig;
    #[doc = include_str!("../../../docs/guide/service-discovery.md")]
    pub struct ServiceDiscovery;
    #[doc = include_str!("../../../docs/guide/load-balancing.md")]
    pub struct LoadBalancing;
    #[doc = include_str!("../../../docs/guide/connections.md")]
    pub struct Connections;
    #[doc = include_str!("../../../docs/guide/health-checking.md")]
    pub struct HealthChecking;
    #[doc = include_str!("../../../docs/guide/outlier-detection.md")]
    pub struct OutlierDetection;
    #[doc = include_str!("../../../docs/guide/tls.md")]
    pub struct Tls;
    #[doc = include_str!("../../../docs/guide/proxies.md")]
    pub struct Proxies;
    #[doc = include_str!("../../../docs/guide/xds.md")]
    pub struct Xds;
    #[doc = include_str!("../../../docs/guide/retries.md")]
    pub struct Retries;
    #[doc = include_str!("../../../docs/guide/exactly-once.md")]
    pub struct ExactlyOnce;
    #[doc = include_str!("../../../docs/guide/performance.md")]
    pub struct Performance;
    #[doc = include_str!("../../../docs/guide/tooling.md")]
    pub struct Tooling;
}

#[cfg(test)]
mod links {
    use std::collections::HashSet;
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The README and every chapter of the guide.
    fn documents() -> Vec<PathBuf> {
        let guide = root().join("docs/guide");
        let mut docs: Vec<PathBuf> = std::fs::read_dir(&guide)
            .expect("docs/guide exists")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        docs.insert(0, root().join("README.md"));
        docs
    }

    /// The lines of `text` outside fenced code blocks.
    fn prose(text: &str) -> impl Iterator<Item = &str> {
        let mut fenced = false;
        text.lines().filter(move |line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
    }

    /// The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ... as on GitHub).
    fn anchors(text: &str) -> HashSet<String> {
        let mut seen = HashSet::new();
        for line in prose(text) {
            let Some(heading) = line.strip_prefix('#') else {
                continue;
            };
            let heading = heading.trim_start_matches('#');
            if !heading.starts_with(' ') {
                continue;
            }
            let base = slug(heading);
            let mut anchor = base.clone();
            let mut n = 0;
            while !seen.insert(anchor.clone()) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
        }
        seen
    }

    /// The targets of the inline links `[text](target)` in `text`'s prose, with their line numbers.
    fn links(text: &str) -> Vec<(usize, String)> {
        let mut found = Vec::new();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let end = after.find(')').unwrap_or(after.len());
                found.push((i + 1, after[..end].to_owned()));
                rest = &after[end..];
            }
        }
        found
    }

    #[test]
    fn every_relative_link_resolves() {
        let mut broken = Vec::new();
        let mut checked = 0;
        for doc in documents() {
            let text = std::fs::read_to_string(&doc).expect("readable");
            for (line, target) in links(&text) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, fragment) = match target.split_once('#') {
                    Some((file, fragment)) => (file, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    doc.clone()
                } else {
                    doc.parent().expect("a parent").join(file)
                };
                let at = format!("{}:{line}: {target}", doc.display());
                if !path.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                if let Some(fragment) = fragment {
                    let target_text = std::fs::read_to_string(&path).unwrap_or_default();
                    if !anchors(&target_text).contains(fragment) {
                        broken.push(format!("{at}: no heading with that anchor"));
                    }
                }
            }
        }
        assert!(checked > 30, "the links were found ({checked})");
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("A tonic server and this channel's client in one crate"),
            "a-tonic-server-and-this-channels-client-in-one-crate"
        );
        assert_eq!(slug("`perAttemptRecvTimeout`"), "perattemptrecvtimeout");
        assert_eq!(
            slug("Deadlines, cancellation and metadata"),
            "deadlines-cancellation-and-metadata"
        );
    }
}
