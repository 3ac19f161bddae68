//! One xDS cluster's own outlier ejections as its priorities' children see them (gRFC A50's ejection
//! overlay in its xDS mapping, one detector per cluster): an ejected endpoint counts as TRANSIENT_FAILURE
//! in that cluster's round_robin localities (`weighted_target.rs`) and rings (`ring_hash.rs`). The
//! subchannel itself is untouched (its connection stays, other clusters keep using it).
//!
//! Not here: the detectors (`outlier_scopes.rs`) and the per-address overlay of non-xDS policies
//! (`subchannel.rs`).

use std::collections::{BTreeSet, HashSet};

use grpc_base::Address;

use crate::round_robin::effective_state;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;

/// One cluster's own outlier ejections as its children see them (A50's overlay, per cluster in xDS): an
/// endpoint whose address the cluster's detector ejected counts as TRANSIENT_FAILURE in that cluster's
/// localities and rings (so a priority whose every endpoint is ejected fails over, A56), while its
/// subchannel stays connected and other clusters keep using it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Ejections<'a> {
    /// The addresses the cluster's detector ejected (`None`: none).
    pub(crate) out: Option<&'a HashSet<Address>>,
    /// The cluster's subchannels whose ejection changed since its children last looked (read again as
    /// if their state had changed).
    pub(crate) changed: Option<&'a BTreeSet<SubchannelId>>,
}

impl Ejections<'_> {
    /// The state subchannel `id` counts as in the cluster: TRANSIENT_FAILURE while ejected, else
    /// round_robin's effective state (failed since READY counts as TRANSIENT_FAILURE).
    pub(crate) fn state(&self, subs: &Subchannels, id: SubchannelId) -> ConnectivityState {
        match (self.out, subs.get(id)) {
            (Some(out), Some(s)) if out.contains(&s.addr) => ConnectivityState::TransientFailure,
            _ => effective_state(subs, id),
        }
    }

    /// The subchannels whose ejection changed.
    pub(crate) fn changed(&self) -> impl Iterator<Item = &SubchannelId> + '_ {
        self.changed.into_iter().flatten()
    }
}
