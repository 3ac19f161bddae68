//! How the control plane's event loop lets go of connections: all at once (IDLE, shutdown), released (a
//! routing resolver that failed) or retired (a policy switch: `graceful_switch.rs` keeps them). Methods of [`Loop`] only.
//!
//! Not here: a single connection the policy disconnects (`LbAction::Disconnect`, in the loop's
//! `drain_actions`), the loop itself (`event_loop.rs`).

use std::collections::HashSet;

use grpc_lb::Address;
use tokio::task::JoinHandle;

use super::{Loop, Retired};

/// How the loop lets go of connections: all at once (IDLE, shutdown: every task aborted, those the policy
/// already let go of too), released (a routing resolver that failed: READY connections finish the calls
/// they carry, connecting ones stop), or retired (a policy switch: the old policy's READY connections keep
/// serving its last picker until the new one is READY). A single connection the policy disconnects is
/// `LbAction::Disconnect`, in `drain_actions`.
impl Loop {
    pub(super) fn drop_connections(&mut self) {
        self.health.stop_all();
        self.drop_retired(true);
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
        for task in self.detached.drain(..) {
            task.abort();
        }
        self.conns.clear();
    }

    /// Lets go of every connection without cutting calls: a READY connection finishes the calls it
    /// carries (then closes: its handles are gone), a connection still being made stops now, and the
    /// retired policy's connections finish theirs too. `drop_connections` still aborts them all at close.
    pub(super) fn release_connections(&mut self) {
        self.health.stop_all();
        self.drop_retired(false);
        self.detached.retain(|t| !t.is_finished());
        for (id, (_, task)) in self.tasks.drain() {
            if self.conns.contains_key(&id) {
                self.detached.push(task);
            } else {
                task.abort();
            }
        }
        self.conns.clear();
    }

    /// Keeps the current policy's connections serving its last picker (if it was READY) while a new
    /// policy starts; otherwise closes them.
    pub(super) fn retire_policy(&mut self) {
        // The retired connections serve as they are, unchecked, until the new policy is READY.
        self.health.stop_all();
        self.drop_retired(false);
        let tasks: Vec<JoinHandle<()>> = self.tasks.drain().map(|(_, (_, task))| task).collect();
        let conns = std::mem::take(&mut self.conns);
        self.retired = Retired::retire(&self.spec, conns, tasks);
        // The old policy's subchannels are gone (the new policy numbers its own): their rows show IDLE,
        // but for the kept connections, which serve until the switch ends.
        let old: Vec<Address> = self.subchannel_addresses.drain().map(|(_, a)| a).collect();
        let kept: HashSet<&Address> = self.retired.iter().flat_map(Retired::addresses).collect();
        for addr in &old {
            self.stats.addresses.retire(addr, kept.contains(addr));
        }
    }

    /// Lets go of a retired policy's connections: closed at once (`abort`), or left to finish the calls
    /// they carry (h2 closes a connection whose handles are gone once its last stream ends).
    pub(super) fn drop_retired(&mut self, abort: bool) {
        if let Some(retired) = self.retired.take() {
            // Their rows show what the current policy's subchannels show (IDLE without any).
            for addr in retired.addresses() {
                self.stats.addresses.retired_gone(addr);
            }
            retired.release(abort);
        }
    }
}
