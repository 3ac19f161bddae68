//! Channel targets (`doc/naming.md`): `host:port`, `dns:[//dns-server-ip:port/]host[:port]`,
//! `ipv4:addr[:port],...`, `ipv6:[addr]:port,...`, `unix:path` / `unix:///absolute/path` and
//! `unix-abstract:name` (Linux's abstract namespace; the name may be empty, and is taken as written:
//! no leading NUL, no percent-decoding). A target without a scheme is a DNS name. The default port is
//! 443.
//!
//! URLs as tonic users write them are DNS names too: `http://host[:port]` (port 80 by default) and
//! `https://host[:port]` (port 443); [`url_security`] tells a channel that the first is plaintext and the
//! second TLS. A path other than `/`, a query or user information is refused.
//!
//! Schemes are case-insensitive (RFC 3986 §3.1): `DNS:///host` is `dns:///host`. A target of the form
//! `scheme://authority/endpoint` whose scheme is not one of [`SUPPORTED_SCHEMES`] is a [`Target::Custom`]:
//! the channel looks its scheme up among the resolvers registered (grpc-channel's resolver API) and refuses
//! it with a message naming the known schemes when there is none (naming.md would fall back to DNS, which
//! can only fail later with a confusing reason: `xds:///svc` is not a host name); `name:rest` without `//`
//! stays a `host:port`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

/// A target string that is not a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid target {target:?}: {reason}")]
pub struct TargetError {
    /// The target as given.
    pub target: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The schemes this crate parses itself (others are [`Target::Custom`]).
pub const SUPPORTED_SCHEMES: &[&str] = &[
    "dns",
    "ipv4",
    "ipv6",
    "unix",
    "unix-abstract",
    "http",
    "https",
    "xds",
];

/// What a target's URL scheme says about the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlSecurity {
    /// `http://`: plaintext HTTP/2.
    Plaintext,
    /// `https://`: HTTP/2 over TLS.
    Tls,
}

/// `Some` for an `http://` or `https://` target (schemes are case-insensitive), `None` for the others.
pub fn url_security(target: &str) -> Option<UrlSecurity> {
    let (scheme, rest) = target.split_once(':')?;
    if !rest.starts_with("//") {
        return None;
    }
    if scheme.eq_ignore_ascii_case("https") {
        Some(UrlSecurity::Tls)
    } else if scheme.eq_ignore_ascii_case("http") {
        Some(UrlSecurity::Plaintext)
    } else {
        None
    }
}

/// The longest name of a `unix-abstract:` target: a `sockaddr_un`'s 108 path bytes less the leading NUL.
pub const MAX_ABSTRACT_NAME: usize = 107;

/// The default port when a target names none.
pub const DEFAULT_PORT: u16 = 443;

/// Where a channel connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// A DNS name to resolve.
    Dns {
        /// The DNS server to ask (`dns://1.2.3.4:53/host`), or the system's.
        server: Option<SocketAddr>,
        /// The host name (or an IP literal, which resolves to itself).
        host: String,
        /// The port.
        port: u16,
    },
    /// A fixed list of addresses.
    Addresses(Vec<SocketAddr>),
    /// A Unix domain socket.
    Unix(PathBuf),
    /// A socket in Linux's abstract namespace (`unix-abstract:name`): the name without the leading
    /// NUL byte the kernel's address carries, at most [`MAX_ABSTRACT_NAME`] bytes.
    UnixAbstract(String),
    /// An xDS target (`xds:///name`, gRFC A27): the channel follows the management server of its
    /// bootstrap for `name`'s listener. Only the empty authority is supported (`xds://authority/name`
    /// is refused with an error saying so).
    Xds {
        /// The name after `xds:///`: the Listener's name, and the authority routes are matched against.
        name: String,
    },
    /// `scheme://authority/endpoint` with a scheme of none of the above, for a resolver registered by
    /// the application.
    Custom {
        /// The scheme, lower case.
        scheme: String,
        /// The authority (`HOST:PORT` of `etcd://HOST:PORT/NAME`), `""` if none.
        authority: String,
        /// The path without its leading `/` (`NAME`).
        endpoint: String,
    },
}

impl Target {
    /// Parses a target string.
    pub fn parse(target: &str) -> Result<Target, TargetError> {
        let err = |reason: &str| TargetError {
            target: target.to_owned(),
            reason: reason.to_owned(),
        };
        // `scheme:rest` when the text before the first ':' can be a URI scheme (RFC 3986: a letter, then
        // letters, digits, '+', '-', '.'); otherwise (`[::1]:80`, `:80`) there is no scheme.
        let (scheme, rest) = match target.split_once(':') {
            Some((s, rest))
                if s.starts_with(|c: char| c.is_ascii_alphabetic())
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
            {
                (Some(s.to_ascii_lowercase()), rest)
            }
            _ => (None, target),
        };
        if scheme.as_deref() == Some("dns") {
            let (server, host_port) = match rest.strip_prefix("//") {
                Some(with_authority) => match with_authority.split_once('/') {
                    Some(("", host_port)) => (None, host_port),
                    Some((server, host_port)) => {
                        let (ip, port) = split_host_port_default(server, 53).map_err(err)?;
                        let ip: IpAddr = ip
                            .parse()
                            .map_err(|_| err("the DNS server must be an IP address"))?;
                        (Some(SocketAddr::new(ip, port)), host_port)
                    }
                    None => return Err(err("expected dns:///host:port or dns://server/host:port")),
                },
                None => (None, rest),
            };
            let (host, port) = split_host_port(host_port).map_err(err)?;
            return Ok(Target::Dns { server, host, port });
        }
        if scheme.as_deref() == Some("xds") {
            let Some(with_authority) = rest.strip_prefix("//") else {
                return Err(err("expected xds:///name"));
            };
            return match with_authority.split_once('/') {
                Some(("", "")) | None => Err(err("expected xds:///name: the name is missing")),
                Some(("", name)) => Ok(Target::Xds {
                    name: name.to_owned(),
                }),
                Some((_, _)) => Err(err(
                    "xds://authority/name (gRFC A47 authorities) is not supported: use xds:///name",
                )),
            };
        }
        if scheme.as_deref() == Some("ipv4") {
            let addrs = rest
                .split(',')
                .map(|a| {
                    let (host, port) = split_host_port(a)?;
                    let ip: Ipv4Addr = host.parse().map_err(|_| "not an IPv4 address")?;
                    Ok(SocketAddr::new(IpAddr::V4(ip), port))
                })
                .collect::<Result<Vec<_>, &str>>()
                .map_err(err)?;
            return Ok(Target::Addresses(addrs));
        }
        if scheme.as_deref() == Some("ipv6") {
            let addrs = rest
                .split(',')
                .map(|a| {
                    let (host, port) = if a.starts_with('[') {
                        split_host_port(a)?
                    } else {
                        (a.to_owned(), DEFAULT_PORT)
                    };
                    let ip: Ipv6Addr = host.parse().map_err(|_| "not an IPv6 address")?;
                    Ok(SocketAddr::new(IpAddr::V6(ip), port))
                })
                .collect::<Result<Vec<_>, &str>>()
                .map_err(err)?;
            return Ok(Target::Addresses(addrs));
        }
        if scheme.as_deref() == Some("unix") {
            let path = match rest.strip_prefix("//") {
                Some(abs) if abs.starts_with('/') => abs,
                Some(_) => return Err(err("expected unix:///absolute/path or unix:path")),
                None => rest,
            };
            if path.is_empty() {
                return Err(err("empty unix socket path"));
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        let url_port = match scheme.as_deref() {
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        };
        if let (Some(default_port), Some(authority_path)) = (url_port, rest.strip_prefix("//")) {
            let (authority, path) = match authority_path.find(['/', '?', '#']) {
                Some(i) => authority_path.split_at(i),
                None => (authority_path, ""),
            };
            if !(path.is_empty() || path == "/") {
                return Err(err(
                    "a URL target names only a host and port: no path, query or fragment",
                ));
            }
            if authority.contains('@') {
                return Err(err("a URL target has no user information"));
            }
            let (host, port) = split_host_port_default(authority, default_port).map_err(err)?;
            return Ok(Target::Dns {
                server: None,
                host,
                port,
            });
        }
        if scheme.as_deref() == Some("unix-abstract") {
            if rest.len() > MAX_ABSTRACT_NAME {
                return Err(err(&format!(
                    "an abstract socket name is at most {MAX_ABSTRACT_NAME} bytes"
                )));
            }
            return Ok(Target::UnixAbstract(rest.to_owned()));
        }
        if let (Some(scheme), Some(with_authority)) = (scheme, rest.strip_prefix("//")) {
            let (authority, endpoint) = with_authority
                .split_once('/')
                .unwrap_or((with_authority, ""));
            return Ok(Target::Custom {
                scheme,
                authority: authority.to_owned(),
                endpoint: endpoint.to_owned(),
            });
        }
        let (host, port) = split_host_port(target).map_err(err)?;
        Ok(Target::Dns {
            server: None,
            host,
            port,
        })
    }

    /// The `:authority` for calls on this target: `host:port`.
    pub fn authority(&self) -> String {
        match self {
            Target::Dns { host, port, .. } if host.contains(':') => format!("[{host}]:{port}"),
            Target::Dns { host, port, .. } => format!("{host}:{port}"),
            Target::Addresses(addrs) => addrs.first().map(ToString::to_string).unwrap_or_default(),
            Target::Unix(_) | Target::UnixAbstract(_) => "localhost".to_owned(),
            Target::Xds { name } => name.clone(),
            Target::Custom { endpoint, .. } => endpoint.clone(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Dns { server: None, .. } => write!(f, "dns:///{}", self.authority()),
            Target::Dns {
                server: Some(s), ..
            } => write!(f, "dns://{s}/{}", self.authority()),
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
            Target::UnixAbstract(name) => write!(f, "unix-abstract:{name}"),
            Target::Xds { name } => write!(f, "xds:///{name}"),
            Target::Custom {
                scheme,
                authority,
                endpoint,
            } => write!(f, "{scheme}://{authority}/{endpoint}"),
            Target::Addresses(addrs) => {
                let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                let scheme = if addrs.first().is_some_and(SocketAddr::is_ipv6) {
                    "ipv6"
                } else {
                    "ipv4"
                };
                write!(f, "{scheme}:{}", list.join(","))
            }
        }
    }
}

/// Splits `host[:port]`, `[v6][:port]` or `:port` (host `localhost`), with port 443 by default.
fn split_host_port(s: &str) -> Result<(String, u16), &'static str> {
    split_host_port_default(s, DEFAULT_PORT)
}

fn split_host_port_default(s: &str, default_port: u16) -> Result<(String, u16), &'static str> {
    if s.is_empty() {
        return Err("empty host");
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("missing ] after an IPv6 address")?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(after.strip_prefix(':').ok_or("expected :port after ]")?),
            ),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err("IPv6 addresses need brackets: [addr]:port")
            }
            Some((h, p)) => (if h.is_empty() { "localhost" } else { h }, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty()
        || host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b'@')
    {
        return Err("invalid host");
    }
    let port = match port {
        None => default_port,
        Some("") => return Err("missing port after ':'"),
        Some(p) => p.parse().map_err(|_| "invalid port")?,
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(host: &str, port: u16) -> Target {
        Target::Dns {
            server: None,
            host: host.into(),
            port,
        }
    }

    #[test]
    fn parses_the_supported_forms() {
        let ok = [
            ("localhost:50051", dns("localhost", 50051)),
            ("example.com", dns("example.com", 443)),
            (":80", dns("localhost", 80)),
            ("[::1]:8080", dns("::1", 8080)),
            ("[::1]", dns("::1", 443)),
            ("dns:///svc.test:50051", dns("svc.test", 50051)),
            ("dns:svc.test:7", dns("svc.test", 7)),
            ("DNS:///h:1", dns("h", 1)),
            (
                "Dns://127.0.0.1/h",
                Target::Dns {
                    server: Some("127.0.0.1:53".parse().expect("addr")),
                    host: "h".into(),
                    port: 443,
                },
            ),
            ("UNIX:/tmp/sock", Target::Unix("/tmp/sock".into())),
            (
                "IPv4:127.0.0.1:1",
                Target::Addresses(vec!["127.0.0.1:1".parse().expect("addr")]),
            ),
            (
                "dns://127.0.0.1:5353/svc.test:50051",
                Target::Dns {
                    server: Some("127.0.0.1:5353".parse().expect("addr")),
                    host: "svc.test".into(),
                    port: 50051,
                },
            ),
            (
                "dns://[::1]/svc.test",
                Target::Dns {
                    server: Some("[::1]:53".parse().expect("addr")),
                    host: "svc.test".into(),
                    port: 443,
                },
            ),
            ("unix:/tmp/sock", Target::Unix("/tmp/sock".into())),
            ("unix:relative/sock", Target::Unix("relative/sock".into())),
            ("unix:///tmp/sock", Target::Unix("/tmp/sock".into())),
            (
                "ipv4:127.0.0.1:1,127.0.0.2",
                Target::Addresses(vec![
                    "127.0.0.1:1".parse().expect("addr"),
                    "127.0.0.2:443".parse().expect("addr"),
                ]),
            ),
            (
                "ipv6:[::1]:5,::2",
                Target::Addresses(vec![
                    "[::1]:5".parse().expect("addr"),
                    "[::2]:443".parse().expect("addr"),
                ]),
            ),
        ];
        for (s, want) in ok {
            assert_eq!(Target::parse(s).expect(s), want, "{s}");
        }
    }

    #[test]
    fn urls_as_tonic_users_write_them() {
        let ok = [
            (
                "http://localhost:50051",
                dns("localhost", 50051),
                UrlSecurity::Plaintext,
            ),
            (
                "http://localhost",
                dns("localhost", 80),
                UrlSecurity::Plaintext,
            ),
            (
                "HTTPS://example.com/",
                dns("example.com", 443),
                UrlSecurity::Tls,
            ),
            ("https://[::1]:8443", dns("::1", 8443), UrlSecurity::Tls),
            ("https://127.0.0.1:1", dns("127.0.0.1", 1), UrlSecurity::Tls),
        ];
        for (s, want, security) in ok {
            assert_eq!(Target::parse(s).expect(s), want, "{s}");
            assert_eq!(url_security(s), Some(security), "{s}");
        }
        for s in ["localhost:1", "dns:///h:1", "unix:/x", "http:h"] {
            assert_eq!(url_security(s), None, "{s}");
        }
        for s in [
            "http://h:1/path",
            "https://h?x=1",
            "http://user@h:1",
            "http://",
            "http://::1:80",
            "http:h:1",
        ] {
            let e = Target::parse(s).expect_err(s);
            assert_eq!(e.target, s, "{s}: {e}");
        }
    }

    #[test]
    fn refuses_bad_targets_with_a_reason() {
        let bad = [
            "",
            "host:",
            "host:99999",
            "host:port",
            "::1:80",
            "[::1",
            "ipv4:::1",
            "ipv6:127.0.0.1",
            "dns://dns.example/host:1",
            "unix:",
            "unix://relative",
            "bad host:1",
        ];
        for s in bad {
            let e = Target::parse(s).expect_err(s);
            assert_eq!(e.target, s, "{s}: {e}");
        }
    }

    #[test]
    fn unix_abstract_names_are_taken_as_written_up_to_the_bound() {
        for (s, name) in [
            ("unix-abstract:grpc", "grpc"),
            ("UNIX-ABSTRACT:a/b:c", "a/b:c"),
            ("unix-abstract:", ""),
            ("unix-abstract://x", "//x"),
        ] {
            let t = Target::parse(s).expect(s);
            assert_eq!(t, Target::UnixAbstract(name.into()), "{s}");
            assert_eq!(t.authority(), "localhost");
            assert_eq!(t.to_string(), format!("unix-abstract:{name}"));
        }
        let at_bound = format!("unix-abstract:{}", "n".repeat(MAX_ABSTRACT_NAME));
        assert!(Target::parse(&at_bound).is_ok());
        let past = format!("unix-abstract:{}", "n".repeat(MAX_ABSTRACT_NAME + 1));
        let e = Target::parse(&past).expect_err("too long");
        assert!(e.reason.contains("at most 107 bytes"), "{e}");
    }

    #[test]
    fn unknown_schemes_are_custom_targets() {
        let custom = |scheme: &str, authority: &str, endpoint: &str| Target::Custom {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            endpoint: endpoint.to_owned(),
        };
        assert_eq!(
            Target::parse("PassThrough:///h:1").expect("passthrough"),
            custom("passthrough", "", "h:1")
        );
        let etcd = Target::parse("etcd://127.0.0.1:2379/svc/a").expect("etcd");
        assert_eq!(etcd, custom("etcd", "127.0.0.1:2379", "svc/a"));
        assert_eq!(etcd.authority(), "svc/a");
        assert_eq!(etcd.to_string(), "etcd://127.0.0.1:2379/svc/a");
        assert_eq!(
            Target::parse("ftp://h:1").expect("ftp"),
            custom("ftp", "h:1", "")
        );
        // Still a host and a port, not a scheme.
        assert_eq!(
            Target::parse("svc:8080").expect("host:port"),
            dns("svc", 8080)
        );
    }

    #[test]
    fn xds_targets_with_the_empty_authority_only() {
        let t = Target::parse("xds:///svc.example.com:8080").expect("xds");
        assert_eq!(
            t,
            Target::Xds {
                name: "svc.example.com:8080".to_owned()
            }
        );
        assert_eq!(t.authority(), "svc.example.com:8080");
        assert_eq!(t.to_string(), "xds:///svc.example.com:8080");
        let e = Target::parse("xds://authority/svc").expect_err("authority");
        assert!(e.to_string().contains("not supported"), "{e}");
        for s in ["xds:///", "xds:svc"] {
            assert!(Target::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn authority_and_display() {
        assert_eq!(dns("::1", 1).authority(), "[::1]:1");
        assert_eq!(dns("a.b", 2).to_string(), "dns:///a.b:2");
        let t = Target::parse("ipv4:127.0.0.1:9").expect("ipv4");
        assert_eq!(t.authority(), "127.0.0.1:9");
        assert_eq!(t.to_string(), "ipv4:127.0.0.1:9");
    }
}
