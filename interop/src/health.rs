//! The standard health service (`grpc.health.v1.Health`, the server side of gRFC A17's client-side health
//! checking) that the interop server offers, with [`HealthStatuses`], the handle through which a test sets
//! each service's status.
//!
//! As the health checking protocol says: `Check` answers a service's status, and fails with NOT_FOUND for a
//! service the server has no status for; `Watch` sends the status at once, then each change, until the
//! client cancels; a service with no status is reported as SERVICE_UNKNOWN and the call stays open, so the
//! status the service gets later follows. The empty service name stands for the server as a whole and is
//! SERVING unless a test says otherwise.
//!
//! Memory is bounded: each service has one `tokio::sync::watch` slot, which a status change overwrites, and
//! each `Watch` call one receiver of it, so a watcher that reads slowly (or a client that does not grant
//! flow control) sees the latest status, not every one in between (which the protocol allows), and no
//! queue grows. A `Watch` does not send a status equal to the one it sent last. A service that has no status
//! and no watcher takes no room.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;

use grpc_channel::{Code, Status};
use interop_proto::grpc_health_v1::{HealthCheckRequest, HealthCheckResponse};
use parking_lot::Mutex;
use tokio::sync::watch;

pub use interop_proto::grpc_health_v1::health_check_response::ServingStatus;

use crate::server_call::{read_one, send, ServerCall};

/// Every service's serving status, as the health service reports it; cheap to clone (clones share the
/// statuses), so a test keeps one while the server serves it.
///
/// A new one knows one service, the server as a whole (`""`), SERVING.
#[derive(Clone)]
pub struct HealthStatuses {
    /// One slot per service with a status or a `Watch` call; `None` is "no status" (SERVICE_UNKNOWN).
    services: Arc<Mutex<HashMap<String, watch::Sender<Option<ServingStatus>>>>>,
}

impl Default for HealthStatuses {
    fn default() -> Self {
        HealthStatuses::new()
    }
}

impl std::fmt::Debug for HealthStatuses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let services = self.services.lock();
        let mut map = f.debug_map();
        for (name, slot) in services.iter() {
            if let Some(status) = *slot.borrow() {
                map.entry(name, &status);
            }
        }
        map.finish()
    }
}

impl HealthStatuses {
    /// The server as a whole (`""`) SERVING, no other service known.
    pub fn new() -> HealthStatuses {
        let statuses = HealthStatuses {
            services: Arc::default(),
        };
        statuses.set("", ServingStatus::Serving);
        statuses
    }

    /// Sets `service`'s status (`""` is the server as a whole); its `Watch` calls send it unless it is the
    /// status they sent last. [`ServingStatus::ServiceUnknown`] is the same as [`HealthStatuses::remove`].
    pub fn set(&self, service: &str, status: ServingStatus) {
        if status == ServingStatus::ServiceUnknown {
            self.remove(service);
            return;
        }
        let mut services = self.services.lock();
        match services.get(service) {
            Some(slot) => {
                slot.send_if_modified(|now| replace(now, Some(status)));
            }
            None => {
                services.insert(service.to_owned(), watch::Sender::new(Some(status)));
            }
        }
    }

    /// Forgets `service`'s status: `Check` fails with NOT_FOUND, and its `Watch` calls send SERVICE_UNKNOWN
    /// and stay open.
    pub fn remove(&self, service: &str) {
        let mut services = self.services.lock();
        if let Some(slot) = services.get(service) {
            if slot.receiver_count() == 0 {
                services.remove(service);
            } else {
                slot.send_if_modified(|now| replace(now, None));
            }
        }
    }

    /// `service`'s status, `None` if it has none.
    pub fn get(&self, service: &str) -> Option<ServingStatus> {
        self.services
            .lock()
            .get(service)
            .and_then(|slot| *slot.borrow())
    }

    /// How many `Watch` calls follow `service` now.
    pub fn watchers(&self, service: &str) -> usize {
        self.services
            .lock()
            .get(service)
            .map_or(0, watch::Sender::receiver_count)
    }

    /// Completes once no `Watch` call follows `service` (at once if none does): for tests that check that
    /// a cancelled `Watch` ends on the server.
    pub async fn unwatched(&self, service: &str) {
        let slot = self.services.lock().get(service).cloned();
        if let Some(slot) = slot {
            slot.closed().await;
        }
    }

    /// A receiver of `service`'s slot (made if it has none), for one `Watch` call.
    fn watch(&self, service: &str) -> Watcher {
        let mut services = self.services.lock();
        let rx = match services.get(service) {
            Some(slot) => slot.subscribe(),
            None => {
                let (slot, rx) = watch::channel(None);
                services.insert(service.to_owned(), slot);
                rx
            }
        };
        Watcher {
            rx: Some(rx),
            statuses: self.clone(),
            service: service.to_owned(),
        }
    }
}

/// Replaces `now` with `new`; whether it changed (for `send_if_modified`, which wakes watchers only then).
fn replace(now: &mut Option<ServingStatus>, new: Option<ServingStatus>) -> bool {
    if *now == new {
        return false;
    }
    *now = new;
    true
}

/// One `Watch` call's receiver; dropping it (the call ended) forgets its service's slot if the service has
/// no status and no other watcher.
struct Watcher {
    rx: Option<watch::Receiver<Option<ServingStatus>>>,
    statuses: HealthStatuses,
    service: String,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let mut services = self.statuses.services.lock();
        drop(self.rx.take());
        if let Some(slot) = services.get(&self.service) {
            if slot.borrow().is_none() && slot.receiver_count() == 0 {
                services.remove(&self.service);
            }
        }
    }
}

/// `Health/Check`.
pub(crate) async fn check(call: &mut ServerCall, statuses: &HealthStatuses) -> Result<(), Status> {
    let req: HealthCheckRequest = read_one(call).await?;
    match statuses.get(&req.service) {
        Some(status) => send(call, &response(status), false).await,
        None => Err(Status::new(
            Code::NotFound,
            format!("unknown service {:?}", req.service),
        )),
    }
}

/// `Health/Watch`: the status now, then each change, until the client cancels (or the call's deadline).
pub(crate) async fn watch(call: &mut ServerCall, statuses: &HealthStatuses) -> Result<(), Status> {
    let req: HealthCheckRequest = read_one(call).await?;
    let mut watcher = statuses.watch(&req.service);
    let Some(rx) = watcher.rx.as_mut() else {
        return Err(Status::new(Code::Internal, "no health status receiver"));
    };
    let mut sent = None;
    loop {
        let now = rx
            .borrow_and_update()
            .unwrap_or(ServingStatus::ServiceUnknown);
        if sent != Some(now) {
            send(call, &response(now), false).await?;
            sent = Some(now);
        }
        let Some(stream) = call.send_stream_mut() else {
            return Err(Status::new(Code::Internal, "no response stream"));
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() {
                // The slot outlives its receivers (`remove` keeps a watched one), so this is not expected.
                return Err(Status::new(Code::Unavailable, "the health status is gone"));
            },
            // The client cancelled (RST_STREAM) or the connection failed: nobody is reading any more.
            _ = poll_fn(|cx| stream.poll_reset(cx)) => {
                return Err(Status::new(Code::Cancelled, "the client cancelled the watch"));
            }
        }
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(statuses: &HealthStatuses) -> usize {
        statuses.services.lock().len()
    }

    #[test]
    fn an_unknown_service_takes_room_only_while_watched() {
        let statuses = HealthStatuses::new();
        assert_eq!(slots(&statuses), 1);
        let first = statuses.watch("x");
        let second = statuses.watch("x");
        assert_eq!((slots(&statuses), statuses.watchers("x")), (2, 2));
        drop(first);
        assert_eq!((slots(&statuses), statuses.watchers("x")), (2, 1));
        drop(second);
        assert_eq!((slots(&statuses), statuses.watchers("x")), (1, 0));
        assert_eq!(statuses.get("x"), None);
    }

    #[test]
    fn remove_keeps_a_watched_slot_and_drops_an_unwatched_one() {
        let statuses = HealthStatuses::new();
        statuses.set("a", ServingStatus::Serving);
        statuses.set("b", ServingStatus::NotServing);
        let mut watcher = statuses.watch("a");
        statuses.remove("a");
        statuses.remove("b");
        assert_eq!(slots(&statuses), 2, "\"\" and the watched \"a\"");
        let rx = watcher.rx.as_mut().expect("receiver");
        assert!(rx.has_changed().expect("open"));
        assert_eq!(*rx.borrow_and_update(), None);
        // A watched service known again is the same slot, and its watcher learns it.
        statuses.set("a", ServingStatus::NotServing);
        assert_eq!(*rx.borrow_and_update(), Some(ServingStatus::NotServing));
        drop(watcher);
        assert_eq!(statuses.get("a"), Some(ServingStatus::NotServing));
        assert_eq!(slots(&statuses), 2, "a service with a status stays");
    }

    #[test]
    fn setting_the_same_status_wakes_nobody() {
        let statuses = HealthStatuses::new();
        let mut watcher = statuses.watch("");
        let rx = watcher.rx.as_mut().expect("receiver");
        rx.borrow_and_update();
        statuses.set("", ServingStatus::Serving);
        assert!(!rx.has_changed().expect("open"));
        statuses.set("", ServingStatus::ServiceUnknown);
        assert!(rx.has_changed().expect("open"));
        assert_eq!(*rx.borrow_and_update(), None, "SERVICE_UNKNOWN removes");
    }
}
