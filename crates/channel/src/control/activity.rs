//! The event loop's idleness (gRFC A62): whether the channel is IDLE, and what exists only while it is not
//! (the idle timer, the wait for a fresh resolution, the load-balancing policy and the outlier detector),
//! as one enum, [`Activity`]; and what the loop is started with ([`Setup`]).
//!
//! Not here: the loop that leaves and enters IDLE and drives the policy (`event_loop.rs`), the count of
//! calls in flight that the idle timer reads (`shared.rs`).

use std::sync::Arc;
use std::time::Duration;

use grpc_lb::{LbPolicy, OutlierDetectors};
use tokio::time::Instant;

use super::health_watches::HealthWatches;
use super::shared::ActiveCalls;
use crate::conn::connect::Http2Settings;
use crate::conn::keepalive::Keepalive;
use crate::conn::proxy::Route;
use crate::conn::tls::TlsConnector;
use crate::control::resolver::Resolution;

/// How long a channel leaving IDLE waits for a fresh resolution before it uses the last one.
const FRESH_RESOLUTION_WAIT: Duration = Duration::from_secs(1);

/// What the event loop is started with.
pub(super) struct Setup {
    pub(super) resolution: Arc<Resolution>,
    pub(super) settings: Http2Settings,
    /// TLS for every connection, or plaintext.
    pub(super) tls: Option<TlsConnector>,
    /// Which connections go through an HTTP CONNECT proxy.
    pub(super) route: Route,
    pub(super) keepalive: Arc<Keepalive>,
    pub(super) idle_timeout: Duration,
    /// The health watches (A17).
    pub(super) health: HealthWatches,
    /// Where the default policy (no `loadBalancingConfig`) is looked up: a registered `pick_first`
    /// replaces the built-in there too.
    pub(super) policies: grpc_lb::PolicyRegistry,
}

/// Whether the channel is IDLE (gRFC A62: no call for the idle timeout), and what exists only while it is
/// not: the idle timer, the load-balancing policy and the outlier detector.
///
/// ```text
///   Idle ──a call, `connect()`──▶ Active ──no call for the idle timeout──▶ Idle
/// ```
// One per channel, in its event loop: boxing the active side would cost an allocation each time the
// channel leaves IDLE, and save nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Activity {
    /// No policy, no connections, no timer: the next call or `connect()` makes the channel leave IDLE.
    Idle {
        /// The channel left IDLE with a resolution before, which may now be as old as the idle timeout.
        resolved_before: bool,
    },
    /// Out of IDLE.
    Active(Active),
}

/// What an active channel has.
pub(super) struct Active {
    /// When the idle timer fires (`None`: never; a timeout too large to add to now).
    idle_deadline: Option<Instant>,
    /// Leaving IDLE, waiting until then for a fresh resolution.
    fresh_wait: Option<Instant>,
    /// The policy, from the first resolution on (none again after a routing resolver failed).
    pub(super) policy: Option<Policy>,
    /// Outlier detection, when the config has it (the service config's, or the xDS clusters' each).
    pub(super) outlier: Option<OutlierDetectors>,
    /// The channel left IDLE with a resolution (not when its resolver could not be set up): its
    /// resolution may be stale when it leaves IDLE again.
    resolved: bool,
}

/// The load-balancing policy (built-in or registered, behind one trait object; its name says which).
pub(super) struct Policy {
    pub(super) lb: LbPolicy,
}

impl Activity {
    pub(super) fn is_idle(&self) -> bool {
        matches!(self, Activity::Idle { .. })
    }

    /// Leaves IDLE (if the channel is IDLE), with or without a resolution to use; if it was IDLE, whether
    /// it had left IDLE with a resolution before.
    pub(super) fn leave_idle(&mut self, resolution: bool) -> Option<bool> {
        let Activity::Idle { resolved_before } = *self else {
            return None;
        };
        *self = Activity::Active(Active {
            idle_deadline: None,
            fresh_wait: None,
            policy: None,
            outlier: None,
            resolved: resolution || resolved_before,
        });
        Some(resolved_before)
    }

    /// Goes IDLE: the policy, the outlier detector and the timers go; whether the channel had left IDLE
    /// with a resolution stays.
    pub(super) fn enter_idle(&mut self) {
        let resolved_before = match self {
            Activity::Active(a) => a.resolved,
            Activity::Idle { resolved_before } => *resolved_before,
        };
        *self = Activity::Idle { resolved_before };
    }

    /// The active channel's state, `None` when IDLE.
    pub(super) fn active(&mut self) -> Option<&mut Active> {
        match self {
            Activity::Active(active) => Some(active),
            Activity::Idle { .. } => None,
        }
    }

    pub(super) fn policy(&mut self) -> Option<&mut LbPolicy> {
        self.active()?.policy.as_mut().map(|p| &mut p.lb)
    }

    pub(super) fn outlier(&mut self) -> Option<&mut OutlierDetectors> {
        self.active()?.outlier.as_mut()
    }

    /// Starts the idle timeout (a timeout too large to add to now means never).
    pub(super) fn arm_idle_timer(&mut self, timeout: Duration) {
        if let Some(a) = self.active() {
            a.idle_deadline = Instant::now().checked_add(timeout);
        }
    }

    /// Whether the channel goes IDLE at `now`: its idle timer fired, no call is in flight and none ended
    /// within the timeout. Otherwise a timer that fired is re-armed for the earliest time it could be.
    pub(super) fn idle_due(
        &mut self,
        now: Instant,
        calls: &ActiveCalls,
        timeout: Duration,
    ) -> bool {
        let Some(a) = self.active() else {
            return false;
        };
        if a.idle_deadline.is_some_and(|d| d <= now) {
            match calls.idle_at(now, timeout) {
                Some(at) if at <= now => return true,
                // The last call ended less than the timeout ago: check again when it will have.
                Some(at) => a.idle_deadline = Some(at),
                // Calls in flight: the earliest the channel can go idle is a timeout from now.
                None => a.idle_deadline = now.checked_add(timeout),
            }
        }
        false
    }

    /// Waits (briefly) for a fresh resolution before using the last one.
    pub(super) fn wait_for_fresh_resolution(&mut self) {
        if let Some(a) = self.active() {
            a.fresh_wait = Some(Instant::now() + FRESH_RESOLUTION_WAIT);
        }
    }

    /// A resolution came: the wait for a fresh one is over.
    pub(super) fn resolved(&mut self) {
        if let Some(a) = self.active() {
            a.fresh_wait = None;
        }
    }

    /// Whether the wait for a fresh resolution ran out at `now` (it is over then).
    pub(super) fn fresh_wait_ran_out(&mut self, now: Instant) -> bool {
        match self.active() {
            Some(a) if a.fresh_wait.is_some_and(|at| at <= now) => {
                a.fresh_wait = None;
                true
            }
            _ => false,
        }
    }

    /// The earliest of the active channel's timers: the policy's, the idle timer, the wait for a fresh
    /// resolution, the outlier detector's sweep.
    pub(super) fn next_timer(&self) -> Option<Instant> {
        let Activity::Active(a) = self else {
            return None;
        };
        [
            a.policy
                .as_ref()
                .and_then(|p| p.lb.poll_timeout().map(Instant::from_std)),
            a.idle_deadline,
            a.fresh_wait,
            a.outlier
                .as_ref()
                .and_then(|d| d.poll_timeout().map(Instant::from_std)),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
