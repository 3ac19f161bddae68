//! A graceful policy switch (grpc-go's `gracefulswitch` balancer is the model): when a resolution selects
//! another load-balancing policy, the old policy's READY connections keep serving its last picker while the
//! new policy is CONNECTING, and go once it says anything else (READY, or TRANSIENT_FAILURE). [`Retired`]
//! holds them; the event loop decides when a switch starts and ends.
//!
//! Not here: which policy a resolution selects (`policy_choice.rs`), the loop's other ways of letting go
//! of connections (`event_loop.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use grpc_lb::{Address, ConnectivityState, Picker, PickerSpec, SubchannelId};
use tokio::task::JoinHandle;

use super::shared::{Conn, Handle};
use crate::control::outlier::CallResults;

/// A replaced policy's connections, kept until the new policy is READY.
pub(super) struct Retired {
    spec: PickerSpec,
    conns: HashMap<SubchannelId, (Address, Conn)>,
    tasks: Vec<JoinHandle<()>>,
}

impl Retired {
    /// The old policy's connections, kept if it was READY with any (its last picker, `published`, goes
    /// on); otherwise its connection tasks stop now and nothing is kept.
    pub(super) fn retire(
        published: &(ConnectivityState, PickerSpec),
        conns: HashMap<SubchannelId, (Address, Conn)>,
        tasks: Vec<JoinHandle<()>>,
    ) -> Option<Retired> {
        if published.0 == ConnectivityState::Ready && !conns.is_empty() {
            return Some(Retired {
                spec: published.1.clone(),
                conns,
                tasks,
            });
        }
        for task in tasks {
            task.abort();
        }
        None
    }

    /// A picker over the kept connections, as the old policy last published it, from rotation `start`.
    /// Each handle carries its address's call results (`results`), so the attempts it serves count on
    /// their address (per-address stats, outlier detection) as the current policy's do.
    pub(super) fn picker(
        &self,
        start: usize,
        results: &HashMap<Address, Arc<CallResults>>,
    ) -> Picker<Handle> {
        let conns = &self.conns;
        let handle = |id| {
            conns.get(&id).map(|(addr, conn)| Handle {
                conn: conn.send.clone(),
                results: results.get(addr).cloned(),
            })
        };
        Picker::new(&self.spec, handle, start)
    }

    /// The addresses of the kept connections.
    pub(super) fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.conns.values().map(|(addr, _)| addr)
    }

    /// Lets go of the kept connections: closed at once (`abort`), or left to finish the calls they carry
    /// (h2 closes a connection whose handles are gone once its last stream ends).
    pub(super) fn release(self, abort: bool) {
        if abort {
            for task in self.tasks {
                task.abort();
            }
        }
    }
}
