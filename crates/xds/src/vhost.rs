//! Virtual host choice (gRFC A28): which of a RouteConfiguration's virtual hosts serves the channel's
//! authority (the target name as written, e.g. `svc.example.com:443`, or the authority override).
//!
//! Domains are compared without regard to ASCII case, in four classes, best first: an exact name, a
//! suffix wildcard (`*.example.com`), a prefix wildcard (`svc.*`), the universal `*`. Within a class the
//! longest pattern wins; a tie goes to the earlier virtual host. A wildcard stands for at least one
//! character. A pattern with a `*` anywhere else (`a*b`) is invalid: [`validate_domain`] says why, for the
//! resource's NACK.
//!
//! Not here: route matching within the chosen host, resource parsing.

/// How well a pattern matches, best first when sorted descending: (class, pattern length).
type Score = (u8, usize);

/// Whether `pattern` is a valid virtual host domain: no `*`, `*` alone, or one `*` at the start or end.
pub fn validate_domain(pattern: &str) -> Result<(), String> {
    let stars = pattern.matches('*').count();
    let valid = pattern == "*"
        || stars == 0 && !pattern.is_empty()
        || stars == 1 && pattern.len() > 1 && (pattern.starts_with('*') || pattern.ends_with('*'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid virtual host domain {pattern:?}: a name, \"*\", or one '*' at its start or end"
        ))
    }
}

/// How `pattern` matches `authority` (both compared without case), if it does.
fn score(pattern: &str, authority: &str) -> Option<Score> {
    let p = pattern.to_ascii_lowercase();
    let a = authority.to_ascii_lowercase();
    if p == "*" {
        return Some((0, 1));
    }
    if let Some(suffix) = p.strip_prefix('*') {
        return (a.len() > suffix.len() && a.ends_with(suffix)).then_some((2, p.len()));
    }
    if let Some(prefix) = p.strip_suffix('*') {
        return (a.len() > prefix.len() && a.starts_with(prefix)).then_some((1, p.len()));
    }
    (p == a).then_some((3, p.len()))
}

/// The index of the virtual host (each given as its domain list, in the resource's order) that serves
/// `authority`, or `None` when none does (the channel then fails calls UNAVAILABLE).
pub fn choose_virtual_host<'a, I, D>(hosts: I, authority: &str) -> Option<usize>
where
    I: IntoIterator<Item = D>,
    D: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(Score, usize)> = None;
    for (index, domains) in hosts.into_iter().enumerate() {
        for domain in domains {
            if let Some(s) = score(domain, authority) {
                // Strictly better only: a tie keeps the earlier host.
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, index));
                }
            }
        }
    }
    best.map(|(_, index)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choose(hosts: &[&[&str]], authority: &str) -> Option<usize> {
        choose_virtual_host(hosts.iter().map(|d| d.iter().copied()), authority)
    }

    #[test]
    fn classes_rank_exact_then_suffix_then_prefix_then_any() {
        let hosts: &[&[&str]] = &[&["*"], &["svc.*"], &["*.example.com"], &["svc.example.com"]];
        assert_eq!(choose(hosts, "svc.example.com"), Some(3));
        assert_eq!(choose(hosts, "api.example.com"), Some(2));
        assert_eq!(choose(hosts, "svc.other.org"), Some(1));
        assert_eq!(choose(hosts, "x"), Some(0));
        assert_eq!(choose(&hosts[1..], "x"), None, "no match without '*'");
    }

    #[test]
    fn the_longest_pattern_wins_within_a_class_and_ties_go_to_the_first_host() {
        let hosts: &[&[&str]] = &[&["*.com"], &["*.example.com"], &["*.example.com"]];
        assert_eq!(choose(hosts, "a.example.com"), Some(1));
        let hosts: &[&[&str]] = &[&["svc.*"], &["svc.ex*"]];
        assert_eq!(choose(hosts, "svc.example.com"), Some(1));
    }

    #[test]
    fn case_is_ignored_ports_are_part_of_the_name_and_wildcards_need_a_character() {
        let hosts: &[&[&str]] = &[&["SVC.Example.com:443"], &["*.example.com"]];
        assert_eq!(choose(hosts, "svc.example.COM:443"), Some(0));
        assert_eq!(
            choose(hosts, "svc.example.com"),
            Some(1),
            "the port is part of the exact name: only the suffix matches"
        );
        assert_eq!(
            choose(&[&["*.example.com"]], ".example.com"),
            None,
            "'*' is at least one character"
        );
        assert_eq!(choose(&[&["svc*"]], "svc"), None);
    }

    #[test]
    fn invalid_patterns() {
        for ok in ["*", "a.b", "*.b", "a.*", "*b", "a*"] {
            assert_eq!(validate_domain(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a*b", "**", "*a*", "a.*.b"] {
            assert!(validate_domain(bad).is_err(), "{bad}");
        }
    }
}
