//! [`Address`]: where a backend is, as the balancer connects to it and as a call's attempts avoid it.
//!
//! A backend is a TCP socket address (`ipv4:`, `ipv6:` and `dns:` targets), the path of a Unix-domain
//! socket (`unix:` targets), the name of one in Linux's abstract namespace (`unix-abstract:` targets), or
//! a host name and port (a `dns:` target reached through an HTTP CONNECT
//! proxy, which resolves it; or a registry's `host:port`, which the channel resolves when it connects). The resolver produces them, `grpc-lb` keeps one subchannel per address and
//! hands them to pickers, and `grpc-retry` remembers the ones a call used so that its next attempt can
//! avoid them. Cloning is cheap: a TCP address is copied, a path is shared (`Arc<Path>`), so an address
//! can travel with every pick without allocating.
//!
//! Display is the form people read in logs and statuses: `127.0.0.1:50051`, `[::1]:5`, `unix:/path`,
//! `unix-abstract:name`, `api.example.com:443`.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A backend's address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Address {
    /// A TCP socket address.
    Tcp(SocketAddr),
    /// The path of a Unix-domain socket.
    Unix(Arc<Path>),
    /// The name of a Unix-domain socket in Linux's abstract namespace (`unix-abstract:name` targets),
    /// without the leading NUL byte of the kernel's address. Connecting to one fails on other systems.
    UnixAbstract(Arc<str>),
    /// A host name and port ([`Address::name`]), as a registry names a backend (etcd's `Addr`, Consul, a
    /// Kubernetes pod's name). Through an HTTP CONNECT proxy the proxy resolves it; without one the
    /// channel looks it up (the system's resolver) each time it connects, and tries its addresses in
    /// order within the connection deadline. To a load balancing policy it is one address.
    Name {
        /// The host name (or an IP literal without brackets).
        host: Arc<str>,
        /// The port.
        port: u16,
    },
}

/// An address family, for Happy Eyeballs' interleaving (RFC 8305 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// An IPv4 socket address.
    Ipv4,
    /// An IPv6 socket address, IPv4-mapped ones included (they are connected over an IPv6 socket).
    Ipv6,
    /// A Unix-domain socket.
    Unix,
    /// A host name, resolved elsewhere.
    Name,
}

impl Address {
    /// The address of the Unix-domain socket at `path`.
    pub fn unix(path: impl Into<PathBuf>) -> Address {
        Address::Unix(Arc::from(path.into()))
    }

    /// The host name (or IP literal, without brackets) `host` on `port`: `Address::name("localhost",
    /// 50051)`. See [`Address::Name`].
    pub fn name(host: impl Into<Arc<str>>, port: u16) -> Address {
        Address::Name {
            host: host.into(),
            port,
        }
    }

    /// The address's family.
    pub fn family(&self) -> Family {
        match self {
            Address::Tcp(SocketAddr::V4(_)) => Family::Ipv4,
            Address::Tcp(SocketAddr::V6(_)) => Family::Ipv6,
            Address::Unix(_) | Address::UnixAbstract(_) => Family::Unix,
            Address::Name { .. } => Family::Name,
        }
    }

    /// The TCP socket address, if it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Address::Tcp(addr) => Some(*addr),
            Address::Unix(_) | Address::UnixAbstract(_) | Address::Name { .. } => None,
        }
    }

    /// The socket's path, if it is a Unix-domain socket.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            Address::Tcp(_) | Address::UnixAbstract(_) | Address::Name { .. } => None,
            Address::Unix(path) => Some(path),
        }
    }
}

impl Hash for Address {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // A TCP address hashes as its socket address alone: pickers hash addresses on every pick that
        // avoids some, and the variant adds nothing there (equal addresses still hash equally).
        match self {
            Address::Tcp(addr) => addr.hash(state),
            Address::Unix(path) => path.hash(state),
            Address::UnixAbstract(name) => name.hash(state),
            Address::Name { host, port } => {
                host.hash(state);
                port.hash(state);
            }
        }
    }
}

impl From<SocketAddr> for Address {
    fn from(addr: SocketAddr) -> Address {
        Address::Tcp(addr)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
            Address::UnixAbstract(name) => write!(f, "unix-abstract:{name}"),
            Address::Name { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Address::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_people_read_it() {
        let v4 = Address::from(SocketAddr::from(([127, 0, 0, 1], 50051)));
        let v6 = Address::from(SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], 5)));
        assert_eq!(v4.to_string(), "127.0.0.1:50051");
        assert_eq!(v6.to_string(), "[::1]:5");
        assert_eq!(Address::unix("/path").to_string(), "unix:/path");
        assert_eq!(Address::unix("rel/sock").to_string(), "unix:rel/sock");
        let abstract_socket = Address::UnixAbstract("grpc".into());
        assert_eq!(abstract_socket.to_string(), "unix-abstract:grpc");
        assert_eq!(abstract_socket.family(), Family::Unix);
        assert_eq!(abstract_socket.unix_path(), None);
        let name = Address::name("api.example.com", 443);
        assert_eq!(
            name,
            Address::Name {
                host: "api.example.com".into(),
                port: 443
            }
        );
        assert_eq!(name.to_string(), "api.example.com:443");
        assert_eq!(name.family(), Family::Name);
        let literal = Address::Name {
            host: "::1".into(),
            port: 443,
        };
        assert_eq!(literal.to_string(), "[::1]:443");
    }

    #[test]
    fn families() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1".parse().expect("valid");
        assert_eq!(
            Address::from(SocketAddr::from(([10, 0, 0, 1], 1))).family(),
            Family::Ipv4
        );
        assert_eq!(Address::from(mapped).family(), Family::Ipv6);
        assert_eq!(Address::unix("/s").family(), Family::Unix);
    }

    #[test]
    fn accessors_and_equality() {
        let tcp = Address::from(SocketAddr::from(([10, 0, 0, 1], 1)));
        assert_eq!(tcp.tcp(), Some(SocketAddr::from(([10, 0, 0, 1], 1))));
        assert_eq!(tcp.unix_path(), None);
        let unix = Address::unix("/s");
        assert_eq!(unix.tcp(), None);
        assert_eq!(unix.unix_path(), Some(Path::new("/s")));
        assert_eq!(unix.clone(), Address::unix(PathBuf::from("/s")));
        assert_ne!(unix, Address::unix("/t"));
    }
}
