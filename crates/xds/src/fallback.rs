//! Which of the bootstrap's management servers the xDS client takes its resources from: gRFC A71's
//! fallback (shared/spec/turn4.md §4.3), sans-IO. The servers are a priority list; the first is used
//! from the start. The driver (grpc-channel's ADS task, which runs one [`XdsClient`](crate::XdsClient)
//! per server in use) reports each server's stream outcomes and whether every watched resource is
//! cached, and gets back the switches to make:
//! * a server **fails** when its connection cannot be made or its stream ends before any response (A57);
//!   when the server in use fails while some watched resource is not cached (cached: a valid value, or
//!   known not to exist), the client **falls back** to the next server: it connects to it and subscribes
//!   every watched resource there. All cached: it stays on the cache. A watch added while the server in
//!   use is failing falls back the same way;
//! * higher-priority servers stay connected and retrying; the first response from one of them
//!   **switches back** to it and closes every lower-priority server;
//! * watchers see connectivity errors only when every server in use failed and none is left to fall
//!   back to ([`ServerChoice::errors_shown`]).
//!
//! Bounded: at most [`MAX_XDS_SERVERS`] servers. Not here: the streams themselves, the per-authority
//! server lists (authorities use the top-level list), CSDS's client scopes.

use std::ops::Range;

/// The most management servers one bootstrap may list (A71 sets none; 16 keeps the connections one
/// client may hold bounded).
pub const MAX_XDS_SERVERS: usize = 16;

/// Why a server list cannot be used.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerListError {
    /// The bootstrap lists no server.
    #[error("the xDS bootstrap names no server")]
    Empty,
    /// The bootstrap lists more than [`MAX_XDS_SERVERS`].
    #[error("the xDS bootstrap names {0} servers, more than the {MAX_XDS_SERVERS} supported")]
    TooMany(usize),
}

/// What one server's connection has shown.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerHealth {
    /// Not in use: never connected to, or closed after a switch back to a higher-priority server.
    Unused,
    /// In use, no outcome yet: connecting, or a stream open without a response.
    Connecting,
    /// Its stream got a response.
    Responding,
    /// Its last connection or stream failed before any response.
    Failing,
}

/// A change of server the driver makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Start using server `to`: connect to it and subscribe every watched resource there; its resources
    /// replace the cached ones as they come.
    FallBack {
        /// The server now in use.
        to: usize,
    },
    /// Server `to`, of higher priority, responded: it is in use again, and the servers in `close` (every
    /// lower-priority one) are closed (streams, connections, caches).
    Restore {
        /// The server now in use.
        to: usize,
        /// The servers to close.
        close: Range<usize>,
    },
}

/// The choice of server (see the module docs): the servers in use are `0..=current`.
#[derive(Clone, Debug)]
pub struct ServerChoice {
    health: Vec<ServerHealth>,
    current: usize,
}

impl ServerChoice {
    /// A choice among `servers` servers, the first in use.
    pub fn new(servers: usize) -> Result<ServerChoice, ServerListError> {
        if servers == 0 {
            return Err(ServerListError::Empty);
        }
        if servers > MAX_XDS_SERVERS {
            return Err(ServerListError::TooMany(servers));
        }
        let mut health = vec![ServerHealth::Unused; servers];
        health[0] = ServerHealth::Connecting;
        Ok(ServerChoice { health, current: 0 })
    }

    /// The server resources come from.
    pub fn current(&self) -> usize {
        self.current
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.health.len()
    }

    /// Never: a choice has at least one server.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `server` is in use (connected to and subscribed): the current one and those before it.
    pub fn in_use(&self, server: usize) -> bool {
        server <= self.current
    }

    /// What `server`'s connection has shown.
    pub fn health(&self, server: usize) -> ServerHealth {
        self.health
            .get(server)
            .copied()
            .unwrap_or(ServerHealth::Unused)
    }

    /// Whether watchers are told of connectivity errors: only when every server in use is failing and
    /// there is none left to fall back to.
    pub fn errors_shown(&self) -> bool {
        self.current + 1 == self.health.len()
            && self.health[..=self.current]
                .iter()
                .all(|h| *h == ServerHealth::Failing)
    }

    /// Whether an error event of the current server is withheld from the watchers: it is failing, and
    /// [`ServerChoice::errors_shown`] says no.
    pub fn errors_withheld(&self) -> bool {
        self.health[self.current] == ServerHealth::Failing && !self.errors_shown()
    }

    /// `server`'s connection could not be made, or its stream ended before any response; `all_cached`:
    /// every watched resource is cached. Ignored for a server not in use.
    pub fn failed(&mut self, server: usize, all_cached: bool) -> Option<Switch> {
        if !self.in_use(server) {
            return None;
        }
        self.health[server] = ServerHealth::Failing;
        self.check(all_cached)
    }

    /// `server`'s stream got a response. Ignored for a server not in use.
    pub fn responded(&mut self, server: usize) -> Option<Switch> {
        if !self.in_use(server) {
            return None;
        }
        self.health[server] = ServerHealth::Responding;
        if server == self.current {
            return None;
        }
        let close = server + 1..self.current + 1;
        for h in &mut self.health[close.clone()] {
            *h = ServerHealth::Unused;
        }
        self.current = server;
        Some(Switch::Restore { to: server, close })
    }

    /// Falls back if the current server is failing and `all_cached` is false (a watch was added, or the
    /// server failed), and a next server exists.
    pub fn check(&mut self, all_cached: bool) -> Option<Switch> {
        if all_cached
            || self.health[self.current] != ServerHealth::Failing
            || self.current + 1 >= self.health.len()
        {
            return None;
        }
        self.current += 1;
        self.health[self.current] = ServerHealth::Connecting;
        Some(Switch::FallBack { to: self.current })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_list_is_bounded() {
        assert_eq!(
            ServerChoice::new(0).expect_err("refused"),
            ServerListError::Empty
        );
        assert!(ServerChoice::new(MAX_XDS_SERVERS).is_ok());
        assert_eq!(
            ServerChoice::new(MAX_XDS_SERVERS + 1).expect_err("refused"),
            ServerListError::TooMany(MAX_XDS_SERVERS + 1)
        );
    }

    #[test]
    fn the_first_server_is_used_and_a_lone_one_shows_its_errors() {
        let mut choice = ServerChoice::new(1).expect("a valid list");
        assert_eq!(choice.current(), 0);
        assert!(choice.in_use(0) && !choice.in_use(1));
        assert!(!choice.errors_shown());
        assert_eq!(choice.failed(0, false), None);
        assert!(choice.errors_shown() && !choice.errors_withheld());
        assert_eq!(choice.responded(0), None);
        assert!(!choice.errors_shown());
    }

    #[test]
    fn a_failure_with_a_resource_not_cached_falls_back_and_a_higher_response_switches_back() {
        let mut choice = ServerChoice::new(3).expect("a valid list");
        assert_eq!(choice.failed(0, false), Some(Switch::FallBack { to: 1 }));
        assert_eq!(choice.health(1), ServerHealth::Connecting);
        assert!(!choice.errors_shown() && !choice.errors_withheld());
        assert_eq!(choice.failed(1, false), Some(Switch::FallBack { to: 2 }));
        assert_eq!(choice.responded(2), None);
        // A server not in use is ignored.
        let mut fresh = ServerChoice::new(3).expect("a valid list");
        assert_eq!(fresh.failed(2, false), None);
        assert_eq!(fresh.responded(1), None);
        assert_eq!(fresh.current(), 0);
        // Server 1 comes back first: 2 closes.
        assert_eq!(
            choice.responded(1),
            Some(Switch::Restore { to: 1, close: 2..3 })
        );
        assert_eq!(choice.health(2), ServerHealth::Unused);
        assert_eq!(
            choice.responded(0),
            Some(Switch::Restore { to: 0, close: 1..2 })
        );
        assert_eq!(choice.current(), 0);
    }

    #[test]
    fn all_cached_stays_on_the_failing_server_until_a_watch_is_missing() {
        let mut choice = ServerChoice::new(2).expect("a valid list");
        assert_eq!(choice.responded(0), None);
        assert_eq!(choice.failed(0, true), None);
        assert_eq!(choice.current(), 0);
        // Errors are withheld: a server to fall back to is left.
        assert!(choice.errors_withheld());
        // A new watch the cache lacks.
        assert_eq!(choice.check(false), Some(Switch::FallBack { to: 1 }));
        // A healthy current server never falls back.
        assert_eq!(choice.check(false), None);
    }

    #[test]
    fn errors_show_only_once_every_server_failed() {
        let mut choice = ServerChoice::new(2).expect("a valid list");
        choice.failed(0, false);
        assert!(!choice.errors_shown());
        assert_eq!(choice.failed(1, false), None);
        assert!(choice.errors_shown());
        // Server 0 answering again.
        assert_eq!(
            choice.responded(0),
            Some(Switch::Restore { to: 0, close: 1..2 })
        );
        assert!(!choice.errors_shown());
        // Server 1 failing after it was closed changes nothing.
        assert_eq!(choice.failed(1, false), None);
        assert_eq!(choice.current(), 0);
    }

    #[test]
    fn the_last_of_sixteen_servers_is_reached_and_then_errors_show() {
        let mut choice = ServerChoice::new(MAX_XDS_SERVERS).expect("a valid list");
        for i in 0..MAX_XDS_SERVERS - 1 {
            assert_eq!(
                choice.failed(i, false),
                Some(Switch::FallBack { to: i + 1 })
            );
        }
        assert_eq!(choice.failed(MAX_XDS_SERVERS - 1, false), None);
        assert!(choice.errors_shown());
        assert_eq!(choice.check(false), None);
    }
}
