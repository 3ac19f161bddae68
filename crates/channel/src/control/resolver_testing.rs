//! A [`ResolverSink`] with no channel behind it, for a resolver's own unit tests
//! ([`ResolverSink::for_testing`]): what the resolver publishes is read back through a [`SinkObserver`],
//! as the channel would see it (after the same checks and gRFC A21 rules), and the test decides when the
//! "channel" is gone.
//!
//! Not here: the sink itself and its rules (`resolver_api.rs`), a channel's use of it (`resolver.rs`).

use std::sync::Arc;

use grpc_service_config::ParseOptions;
use tokio::sync::watch;

use crate::control::resolver_api::{Closed, PublishCount, ResolverSink};
use crate::control::resolver_state::State;
use grpc_base::Endpoint;

/// What a channel would hold from a resolver, as a [`SinkObserver`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkState {
    /// Nothing published yet.
    Pending,
    /// The endpoints in use (the last update the channel took).
    Endpoints(Vec<Endpoint>),
    /// A failure before any endpoints: the message fail-fast calls would fail with.
    Failed(String),
}

impl SinkState {
    fn of(state: &State) -> SinkState {
        match state {
            State::Pending => SinkState::Pending,
            State::Ready { endpoints, .. } => SinkState::Endpoints(endpoints.to_vec()),
            State::Failed(status) => SinkState::Failed(status.message().to_owned()),
        }
    }
}

/// The test's side of [`ResolverSink::for_testing`]: reads what the sink published, and closes it.
#[derive(Debug)]
pub struct SinkObserver {
    state: watch::Receiver<State>,
    closed: Arc<Closed>,
}

impl SinkObserver {
    /// What the sink holds now.
    pub fn state(&self) -> SinkState {
        SinkState::of(&self.state.borrow())
    }

    /// Waits for the next change and returns it; `None` once every clone of the sink is dropped (the
    /// resolver let go of it) and nothing new came.
    pub async fn changed(&mut self) -> Option<SinkState> {
        self.state.changed().await.ok()?;
        Some(SinkState::of(&self.state.borrow_and_update()))
    }

    /// Makes the sink say the channel is gone, as a channel's close or drop does:
    /// [`ResolverSink::is_closed`] turns true, [`ResolverSink::closed`] completes and
    /// [`ResolverSink::update`] returns [`UpdateError::Closed`](crate::resolver::UpdateError::Closed).
    pub fn close(&self) {
        self.closed.close();
    }
}

impl ResolverSink {
    /// A sink with no channel behind it, for a resolver's unit tests: hand it to your builder's `build`
    /// and read what it publishes through the [`SinkObserver`]. It applies the same checks and gRFC A21
    /// rules as a channel's (no default service config; the built-in load balancing policies and those
    /// registered process-wide).
    ///
    /// ```
    /// use grpc_channel::resolver::{Address, Endpoint, ResolverSink, ResolverUpdate, SinkState};
    /// let (sink, observer) = ResolverSink::for_testing();
    /// let e = Endpoint::new(Address::name("localhost", 50051));
    /// sink.update(ResolverUpdate::new(vec![e.clone()])).expect("taken");
    /// assert_eq!(observer.state(), SinkState::Endpoints(vec![e]));
    /// observer.close();
    /// assert!(sink.is_closed());
    /// ```
    pub fn for_testing() -> (ResolverSink, SinkObserver) {
        let closed = Arc::new(Closed::default());
        let (tx, rx) = watch::channel(State::Pending);
        let sink = ResolverSink::new(
            tx,
            None,
            ParseOptions::default(),
            closed.clone(),
            Arc::new(PublishCount::default()),
        );
        (sink, SinkObserver { state: rx, closed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::resolver_api::{ResolverUpdate, UpdateError};
    use grpc_base::Address;

    #[tokio::test]
    async fn a_testing_sink_shows_what_a_channel_would_hold() {
        let (sink, mut observer) = ResolverSink::for_testing();
        assert_eq!(observer.state(), SinkState::Pending);
        sink.report_error("registry down");
        assert_eq!(
            observer.changed().await,
            Some(SinkState::Failed("registry down".to_owned()))
        );
        let e = Endpoint::new(Address::Tcp(([127, 0, 0, 1], 1).into()));
        assert!(matches!(
            sink.update(ResolverUpdate::new(vec![e.clone()]).with_service_config("{not json")),
            Err(UpdateError::Rejected(_))
        ));
        sink.update(ResolverUpdate::new(vec![e.clone()]))
            .expect("taken");
        assert_eq!(
            observer.changed().await,
            Some(SinkState::Endpoints(vec![e.clone()]))
        );
        observer.close();
        sink.closed().await;
        assert_eq!(
            sink.update(ResolverUpdate::new(vec![e])),
            Err(UpdateError::Closed)
        );
        drop(sink);
        assert_eq!(observer.changed().await, None);
    }
}
