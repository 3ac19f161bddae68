//! The no-proxy list (`no_grpc_proxy`, `no_proxy`): the targets that connect directly although a proxy is
//! set. A comma-separated list; each entry, trimmed, is one of:
//!
//! * `*`: every target;
//! * a host name, `example.com`, `.example.com` or `*.example.com`: that name and every name under it
//!   (`api.example.com`),
//!   compared without regard to case or a trailing dot (curl's reading; C-core and Go differ on whether
//!   `.example.com` matches `example.com` itself, and this list says yes);
//! * an IP address (`10.1.2.3`, `::1` or `[::1]`): that address, when the target names it (a `dns:` name
//!   is never resolved to be compared: the proxy resolves it);
//! * a CIDR block (`10.0.0.0/8`, `::1/128`, `[fd00::]/8`): every address in it;
//! * any of the above but `*` and a CIDR block followed by `:port`: only targets on that port.
//!
//! An entry that is none of these is ignored (and says so in a `debug` tracing event), as the other stacks
//! do: a typo in a shared variable must not break every program that reads it.

use std::net::IpAddr;

/// One entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    All,
    /// A lower-case name without leading or trailing dots.
    Name(String, Option<u16>),
    Ip(IpAddr, Option<u16>),
    Cidr(IpAddr, u8),
}

/// The targets exempt from the proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NoProxy {
    rules: Vec<Rule>,
}

impl NoProxy {
    /// Parses a comma-separated list (see the module docs).
    pub(crate) fn parse(list: &str) -> NoProxy {
        let rules = list
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .filter_map(|entry| {
                let rule = parse_rule(entry);
                if rule.is_none() {
                    tracing::debug!(
                        entry,
                        "ignoring a no-proxy entry that is not a name, an address or a CIDR block"
                    );
                }
                rule
            })
            .collect();
        NoProxy { rules }
    }

    /// Whether the list exempts the target `host` (a name or an IP literal) on `port`.
    pub(crate) fn matches_host(&self, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.matches_ip(ip, port);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.rules.iter().any(|rule| match rule {
            Rule::All => true,
            Rule::Name(name, p) => {
                p.is_none_or(|p| p == port)
                    && (host == *name
                        || host
                            .strip_suffix(name.as_str())
                            .is_some_and(|prefix| prefix.ends_with('.')))
            }
            Rule::Ip(..) | Rule::Cidr(..) => false,
        })
    }

    /// Whether the list exempts the address `ip` on `port`.
    pub(crate) fn matches_ip(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.rules.iter().any(|rule| match rule {
            Rule::All => true,
            Rule::Ip(entry, p) => *entry == ip && p.is_none_or(|p| p == port),
            Rule::Cidr(net, bits) => in_block(ip, *net, *bits),
            Rule::Name(..) => false,
        })
    }

    /// Whether the list is empty.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn parse_rule(entry: &str) -> Option<Rule> {
    if entry == "*" {
        return Some(Rule::All);
    }
    if let Some((net, bits)) = entry.split_once('/') {
        let net = net.trim_start_matches('[').trim_end_matches(']');
        let net = canonical(net.parse::<IpAddr>().ok()?);
        let bits: u8 = bits.parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        return (bits <= max).then_some(Rule::Cidr(net, bits));
    }
    // A bare IPv6 address (several colons, no brackets) has no port.
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(Rule::Ip(canonical(ip), None));
    }
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (host, port)
    } else {
        match entry.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse::<u16>().ok()?)),
            None => (entry, None),
        }
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(Rule::Ip(canonical(ip), port));
    }
    // `*.example.com` is read as `.example.com`, as Go reads it.
    let name = host
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    valid.then_some(Rule::Name(name, port))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn in_block(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn np(list: &str) -> NoProxy {
        NoProxy::parse(list)
    }

    #[test]
    fn names_match_themselves_and_their_subdomains_with_or_without_a_leading_dot() {
        for list in [
            "example.com",
            ".example.com",
            "EXAMPLE.com.",
            " other.org , example.com ",
        ] {
            let n = np(list);
            assert!(n.matches_host("example.com", 443), "{list}");
            assert!(n.matches_host("api.Example.com", 443), "{list}");
            assert!(n.matches_host("a.b.example.com.", 443), "{list}");
            assert!(!n.matches_host("badexample.com", 443), "{list}");
            assert!(!n.matches_host("example.com.evil", 443), "{list}");
        }
    }

    #[test]
    fn ports_restrict_an_entry() {
        let n = np("example.com:8443,10.0.0.1:50051,[::1]:7");
        assert!(n.matches_host("api.example.com", 8443));
        assert!(!n.matches_host("api.example.com", 443));
        assert!(n.matches_ip("10.0.0.1".parse().expect("ip"), 50051));
        assert!(!n.matches_ip("10.0.0.1".parse().expect("ip"), 50052));
        assert!(n.matches_host("::1", 7));
        assert!(!n.matches_host("[::1]", 8));
    }

    #[test]
    fn addresses_and_cidr_blocks() {
        let n = np("127.0.0.1,10.0.0.0/8,::1/128,[fd00::]/8,2001:db8::5");
        let yes = [
            "127.0.0.1",
            "10.200.3.4",
            "::1",
            "fd12::1",
            "2001:db8::5",
            "::ffff:10.1.1.1",
        ];
        for ip in yes {
            assert!(n.matches_ip(ip.parse().expect("ip"), 443), "{ip}");
            assert!(n.matches_host(ip, 443), "{ip} as a target host");
        }
        for ip in ["127.0.0.2", "11.0.0.1", "::2", "fe00::1"] {
            assert!(!n.matches_ip(ip.parse().expect("ip"), 443), "{ip}");
        }
        assert!(
            !n.matches_host("localhost", 443),
            "a name is not an address"
        );
        assert!(np("0.0.0.0/0").matches_ip("8.8.8.8".parse().expect("ip"), 1));
        assert!(np("::/0").matches_ip("2001:db8::1".parse().expect("ip"), 1));
    }

    #[test]
    fn star_matches_everything_and_junk_is_ignored() {
        let n = np("*");
        assert!(n.matches_host("anything.example", 1));
        assert!(n.matches_ip("192.0.2.1".parse().expect("ip"), 1));
        let junk = np("10.0.0.0/33,exa mple.com,host:notaport,[::1,,/8, ,");
        assert!(junk.is_empty(), "{junk:?}");
        assert!(np("").is_empty());
    }
}
