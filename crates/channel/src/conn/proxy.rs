//! HTTP CONNECT proxies (gRFC A1): which proxy a channel uses, and for which of its connections.
//!
//! The proxy comes from [`ChannelBuilder::proxy`](crate::ChannelBuilder::proxy) (or none, with
//! [`ChannelBuilder::no_proxy`](crate::ChannelBuilder::no_proxy)); otherwise from the environment, in
//! C-core's order: the first of `grpc_proxy`, `GRPC_PROXY`, `https_proxy`, `HTTPS_PROXY`, `http_proxy`,
//! `HTTP_PROXY` that is set (set and empty means no proxy), and the targets it does not apply to from the
//! first of `no_grpc_proxy`, `NO_GRPC_PROXY`, `no_proxy`, `NO_PROXY` that is set ([`NoProxy`]).
//!
//! A proxy URI is `http://[user[:password]@]host[:port]` (the port defaults to 80, as for any `http://`
//! URI; a value without a scheme is read as `http://`, as curl and Go do); any other scheme, a path, or a
//! malformed authority is a build error naming `ChannelBuilder::proxy` when the application gave it, and
//! a warning naming the variable when it came from the environment: the channel then connects directly,
//! as C-core does. Percent-encoded credentials are
//! decoded and sent as `Proxy-Authorization: Basic`; they never appear in logs, errors or `Debug` output
//! (a [`Proxy`] shows as `http://host:port`).
//!
//! What goes through the proxy ([`Route`]): a `dns:` target is not resolved by the client: its name goes
//! to the proxy in the CONNECT request (the channel's own resolver still looks up the `_grpc_config` TXT
//! record); each address of an `ipv4:`/`ipv6:` list is a CONNECT of its own, unless the no-proxy list
//! exempts it; `unix:` targets never go through a proxy.
//!
//! Not here: the CONNECT handshake (`proxy/handshake.rs`) and the no-proxy rules (`proxy/no_proxy.rs`).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use base64::Engine as _;
use grpc_service_config::Target;

mod handshake;
mod no_proxy;

#[cfg(feature = "unstable")]
pub(crate) use handshake::parse_answer;
pub(crate) use handshake::tunnel;
pub(crate) use no_proxy::NoProxy;

/// The environment variables that name a proxy, in the order they are read.
pub(crate) const PROXY_VARIABLES: [&str; 6] = [
    "grpc_proxy",
    "GRPC_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
];

/// The environment variables that exempt targets from the proxy, in the order they are read.
pub(crate) const NO_PROXY_VARIABLES: [&str; 4] =
    ["no_grpc_proxy", "NO_GRPC_PROXY", "no_proxy", "NO_PROXY"];

/// An HTTP proxy that tunnels connections with CONNECT.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    host: String,
    port: u16,
    /// `Basic base64(user:password)`, when the URI had credentials.
    authorization: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("uri", &self.to_string())
            .field("credentials", &self.authorization.is_some())
            .finish()
    }
}

/// `http://host:port`: never the credentials.
impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "http://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "http://{}:{}", self.host, self.port)
        }
    }
}

/// Why a proxy URI is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid proxy URI from {source_name}: {reason}")]
pub struct ProxyError {
    /// Where the URI came from: an environment variable's name, or `ChannelBuilder::proxy`.
    pub source_name: String,
    /// What is wrong with it (the URI's credentials are never quoted).
    pub reason: String,
}

impl Proxy {
    /// Parses `http://[user[:password]@]host[:port]` (see the module docs); `from` names where it came
    /// from, for the error.
    pub(crate) fn parse(uri: &str, from: &str) -> Result<Proxy, ProxyError> {
        let err = |reason: &str| ProxyError {
            source_name: from.to_owned(),
            reason: reason.to_owned(),
        };
        let uri = uri.trim();
        // Only a real scheme (a letter, then letters, digits, `+`, `-`, `.`) is quoted in an error: what
        // precedes a `://` elsewhere may be credentials.
        let is_scheme = |s: &str| {
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        };
        let rest = match uri.find("://") {
            Some(i) if uri[..i].eq_ignore_ascii_case("http") => &uri[i + 3..],
            Some(i) if is_scheme(&uri[..i]) => {
                return Err(err(&format!(
                    "the scheme {:?} is not supported: only http:// proxies are",
                    &uri[..i]
                )))
            }
            Some(_) => {
                return Err(err(
                    "not a URI: expected http://[user[:password]@]host[:port]",
                ))
            }
            None => uri,
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if !path.is_empty() && path != "/" {
            return Err(err("a proxy URI has no path or query"));
        }
        let (userinfo, host_port) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (host, port) = split_host_port(host_port).map_err(err)?;
        let authorization = userinfo.map(|userinfo| {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let credentials = [percent_decode(user), percent_decode(password)].join(&b':');
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(credentials)
            )
        });
        Ok(Proxy {
            host,
            port,
            authorization,
        })
    }

    /// The proxy's host (a name, or an IP address without brackets).
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The proxy's port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Whether the URI had credentials.
    #[cfg(test)]
    pub(crate) fn has_credentials(&self) -> bool {
        self.authorization.is_some()
    }

    pub(crate) fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }
}

/// `host[:port]` with an IPv6 host in brackets; port 80 when absent.
fn split_host_port(s: &str) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address without its closing bracket")?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("not an IPv6 address in brackets");
        }
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("junk after the bracketed address")?,
                ),
            ),
        }
    } else {
        match s.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("no host");
    }
    if host.contains(':') && !s.starts_with('[') {
        return Err("an IPv6 address must be in brackets");
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        return Err("the host has characters a host name cannot have");
    }
    let port = match port {
        None | Some("") => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or("the port is not a number from 1 to 65535")?,
    };
    Ok((host.to_owned(), port))
}

fn percent_decode(s: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(s).collect()
}

/// The application's choice, before the environment is read. Its `Debug` never shows credentials.
#[derive(Clone, Default)]
pub(crate) enum ProxyChoice {
    /// Read the environment (the default).
    #[default]
    FromEnvironment,
    /// This proxy (`ChannelBuilder::proxy`), with no exemptions.
    Given(String),
    /// No proxy (`ChannelBuilder::no_proxy`).
    Off,
}

impl fmt::Debug for ProxyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyChoice::FromEnvironment => f.write_str("FromEnvironment"),
            ProxyChoice::Off => f.write_str("Off"),
            ProxyChoice::Given(uri) => match Proxy::parse(uri, "") {
                Ok(proxy) => f.debug_tuple("Given").field(&proxy).finish(),
                Err(_) => f.write_str("Given(<an invalid URI>)"),
            },
        }
    }
}

/// How a channel's connections reach their addresses.
#[derive(Clone, Debug, Default)]
pub(crate) enum Route {
    /// Directly.
    #[default]
    Direct,
    /// The target's name goes to the proxy unresolved: the channel resolves no address (a `dns:` target).
    ByName(Arc<Proxy>),
    /// Each address is a CONNECT of its own, unless the no-proxy list exempts it (`ipv4:`/`ipv6:` lists).
    PerAddress(Arc<Proxy>, Arc<NoProxy>),
}

impl Route {
    /// The proxy for a connection to `addr`, if any.
    pub(crate) fn proxy_for(&self, addr: &SocketAddr) -> Option<&Proxy> {
        match self {
            Route::Direct => None,
            Route::ByName(proxy) => Some(proxy),
            Route::PerAddress(proxy, exempt) => {
                (!exempt.matches_ip(addr.ip(), addr.port())).then_some(&**proxy)
            }
        }
    }

    /// The proxy a name address goes to.
    pub(crate) fn name_proxy(&self) -> Option<&Proxy> {
        match self {
            Route::ByName(proxy) => Some(proxy),
            Route::Direct | Route::PerAddress(..) => None,
        }
    }

    /// Whether the target's name goes to the proxy unresolved.
    pub(crate) fn by_name(&self) -> bool {
        matches!(self, Route::ByName(_))
    }
}

/// The route for `target` given the application's `choice` and the environment (`env` reads a variable).
/// A target that would not use the proxy (a `unix:` one, or one the no-proxy list exempts) connects
/// directly whatever the proxy variable holds; a proxy from the environment that does not parse is logged
/// and ignored (direct); only the application's own proxy must parse.
pub(crate) fn route(
    target: &Target,
    choice: &ProxyChoice,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Route, ProxyError> {
    if let Target::Unix(_) | Target::UnixAbstract(_) = target {
        return Ok(Route::Direct);
    }
    let (uri, from, exempt) = match choice {
        ProxyChoice::Off => return Ok(Route::Direct),
        ProxyChoice::Given(uri) => (uri.clone(), "ChannelBuilder::proxy", NoProxy::default()),
        ProxyChoice::FromEnvironment => {
            let Some((name, value)) = first_set(&PROXY_VARIABLES, &env) else {
                return Ok(Route::Direct);
            };
            if value.trim().is_empty() {
                return Ok(Route::Direct);
            }
            let exempt = first_set(&NO_PROXY_VARIABLES, &env)
                .map(|(_, list)| NoProxy::parse(&list))
                .unwrap_or_default();
            (value, name, exempt)
        }
    };
    let exempt_target = match target {
        Target::Dns { host, port, .. } => exempt.matches_host(host, *port),
        Target::Addresses(addrs) => addrs.iter().all(|a| exempt.matches_ip(a.ip(), a.port())),
        Target::Unix(_) | Target::UnixAbstract(_) => true,
        // The endpoints come from the control plane: each is checked as it is connected.
        Target::Xds { .. } => false,
        // A scheme this channel does not know: its endpoints are checked one by one, as xDS's are.
        _ => false,
    };
    if exempt_target {
        return Ok(Route::Direct);
    }
    let proxy = match Proxy::parse(&uri, from) {
        Ok(proxy) => Arc::new(proxy),
        // A value in the environment the channel cannot use is logged and ignored, as C-core does: a
        // variable set for other programs (`https_proxy=https://...` is common) must not stop every
        // channel from being built. The application's own `ChannelBuilder::proxy` is an error.
        Err(e) if matches!(choice, ProxyChoice::FromEnvironment) => {
            tracing::warn!(
                variable = %e.source_name,
                reason = %e.reason,
                "ignoring the proxy environment variable: connecting directly"
            );
            return Ok(Route::Direct);
        }
        Err(e) => return Err(e),
    };
    Ok(match target {
        Target::Addresses(_) | Target::Xds { .. } => Route::PerAddress(proxy, Arc::new(exempt)),
        Target::Dns { .. } | Target::Unix(_) | Target::UnixAbstract(_) => Route::ByName(proxy),
        _ => Route::PerAddress(proxy, Arc::new(exempt)),
    })
}

/// The first of `names` that is set, and its value.
fn first_set<'a>(
    names: &[&'a str],
    env: &impl Fn(&str) -> Option<String>,
) -> Option<(&'a str, String)> {
    names
        .iter()
        .find_map(|name| env(name).map(|value| (*name, value)))
}

/// The target a CONNECT request names: `host:port`, an IPv6 address in brackets.
pub(crate) fn authority_form(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ if host.contains(':') => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn dns(host: &str, port: u16) -> Target {
        Target::Dns {
            server: None,
            host: host.to_owned(),
            port,
        }
    }

    fn proxy_of(route: &Route) -> Option<String> {
        match route {
            Route::Direct => None,
            Route::ByName(p) | Route::PerAddress(p, _) => Some(p.to_string()),
        }
    }

    #[test]
    fn proxy_uris() {
        let p = Proxy::parse("http://user:pa%20ss@proxy.corp:3128/", "x").expect("valid");
        assert_eq!((p.host(), p.port()), ("proxy.corp", 3128));
        assert!(p.has_credentials());
        assert_eq!(
            p.to_string(),
            "http://proxy.corp:3128",
            "no credentials shown"
        );
        assert!(!format!("{p:?}").contains("pa"), "{p:?}");
        assert_eq!(p.authorization(), Some("Basic dXNlcjpwYSBzcw=="));
        let p = Proxy::parse("HTTP://[::1]", "x").expect("valid");
        assert_eq!(
            (p.host(), p.port(), p.to_string().as_str()),
            ("::1", 80, "http://[::1]:80")
        );
        let p = Proxy::parse("proxy.corp:8080", "x").expect("a scheme-less value is http://");
        assert_eq!(p.port(), 8080);
        let p = Proxy::parse("http://only-user@p", "x").expect("valid");
        assert_eq!(p.authorization(), Some("Basic b25seS11c2VyOg=="));
    }

    #[test]
    fn bad_proxy_uris_name_their_source_and_hide_credentials() {
        for (uri, fragment) in [
            ("https://proxy:443", "only http://"),
            ("socks5://proxy:1080", "only http://"),
            ("http://proxy:3128/path", "no path"),
            ("http://proxy:0", "port"),
            ("http://proxy:99999", "port"),
            ("http://", "no host"),
            ("http://user:secret@", "no host"),
            ("http://::1:80", "brackets"),
            ("http://[::1", "bracket"),
            ("http://pro xy", "characters"),
        ] {
            let e = Proxy::parse(uri, "https_proxy").expect_err(uri);
            assert_eq!(e.source_name, "https_proxy");
            assert!(e.reason.contains(fragment), "{uri}: {}", e.reason);
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }

    #[test]
    fn environment_order_is_grpc_then_https_then_http_lower_case_first() {
        let target = dns("api.example.com", 443);
        let all = [
            ("HTTP_PROXY", "http://upper-http:1"),
            ("http_proxy", "http://http:1"),
            ("HTTPS_PROXY", "http://upper-https:1"),
            ("https_proxy", "http://https:1"),
            ("GRPC_PROXY", "http://upper-grpc:1"),
            ("grpc_proxy", "http://grpc:1"),
        ];
        for skip in 0..all.len() {
            let route = route(
                &target,
                &ProxyChoice::FromEnvironment,
                env(&all[..all.len() - skip]),
            )
            .expect("valid");
            let expected = all[all.len() - skip - 1].1;
            assert_eq!(proxy_of(&route).as_deref(), Some(expected), "{skip}");
            assert!(route.by_name(), "a dns target goes by name");
        }
        let none = route(&target, &ProxyChoice::FromEnvironment, env(&[])).expect("valid");
        assert!(proxy_of(&none).is_none());
        // Set and empty: no proxy, whatever comes later.
        let empty = route(
            &target,
            &ProxyChoice::FromEnvironment,
            env(&[("grpc_proxy", ""), ("https_proxy", "http://https:1")]),
        )
        .expect("valid");
        assert!(proxy_of(&empty).is_none());
    }

    #[test]
    fn a_bad_environment_value_is_ignored_and_a_bad_given_one_is_an_error() {
        for value in [
            "https://p:1",
            "socks5://p:1080",
            "http://p:0",
            "http://pr\u{fffd}xy:1",
        ] {
            let route = route(
                &dns("a", 1),
                &ProxyChoice::FromEnvironment,
                env(&[("https_proxy", value), ("http_proxy", "http://later:1")]),
            )
            .expect("an unusable environment value is ignored");
            assert!(
                proxy_of(&route).is_none(),
                "{value}: direct, the later variables not read"
            );
        }
        let e = route(
            &dns("a", 1),
            &ProxyChoice::Given("ftp://p".into()),
            env(&[]),
        )
        .expect_err("ftp scheme");
        assert_eq!(e.source_name, "ChannelBuilder::proxy");
    }

    #[test]
    fn no_proxy_exempts_targets_and_the_builder_wins() {
        let vars = [
            ("https_proxy", "http://p:3128"),
            ("no_proxy", "example.com,10.0.0.0/8"),
            ("no_grpc_proxy", "internal.corp"),
        ];
        let choice = ProxyChoice::FromEnvironment;
        // no_grpc_proxy is read first and replaces no_proxy.
        assert!(
            proxy_of(&route(&dns("svc.internal.corp", 443), &choice, env(&vars)).expect("ok"))
                .is_none()
        );
        assert!(
            proxy_of(&route(&dns("api.example.com", 443), &choice, env(&vars)).expect("ok"))
                .is_some()
        );
        let vars = [
            ("https_proxy", "http://p:3128"),
            ("NO_PROXY", "example.com,10.0.0.0/8"),
        ];
        assert!(
            proxy_of(&route(&dns("api.example.com", 443), &choice, env(&vars)).expect("ok"))
                .is_none()
        );
        // An address list: exempt when every address is; otherwise each address is decided alone.
        let list = Target::Addresses(vec![
            "10.1.1.1:5".parse().expect("a"),
            "192.0.2.1:5".parse().expect("a"),
        ]);
        let r = route(&list, &choice, env(&vars)).expect("ok");
        assert!(r.proxy_for(&"10.1.1.1:5".parse().expect("a")).is_none());
        assert!(r.proxy_for(&"192.0.2.1:5".parse().expect("a")).is_some());
        assert!(!r.by_name());
        let exempt = Target::Addresses(vec!["10.1.1.1:5".parse().expect("a")]);
        assert!(proxy_of(&route(&exempt, &choice, env(&vars)).expect("ok")).is_none());
        // unix: never; the builder's choices ignore the environment.
        assert!(
            proxy_of(&route(&Target::Unix("/s".into()), &choice, env(&vars)).expect("ok"))
                .is_none()
        );
        assert!(proxy_of(
            &route(&dns("api.example.com", 443), &ProxyChoice::Off, env(&vars)).expect("ok")
        )
        .is_none());
        let given = route(
            &dns("api.example.com", 443),
            &ProxyChoice::Given("http://b:1".into()),
            env(&vars),
        )
        .expect("ok");
        assert_eq!(
            proxy_of(&given).as_deref(),
            Some("http://b:1"),
            "no exemptions for a given proxy"
        );
    }

    #[test]
    fn connect_targets_bracket_ipv6() {
        assert_eq!(
            authority_form("api.example.com", 443),
            "api.example.com:443"
        );
        assert_eq!(authority_form("10.0.0.1", 1), "10.0.0.1:1");
        assert_eq!(authority_form("::1", 5), "[::1]:5");
    }
}
