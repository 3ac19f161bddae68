//! Which retry policy a call runs shows in its tracing events (`retry.policy`).
//!
//! Alone in its test binary: `tracing` caches each callsite's interest, and a test running in parallel
//! that reaches the same callsite first, while this test installs its subscriber, can leave the callsite
//! disabled for it (a race in callsite registration). With one test per process there is no such race.

mod support;

use bytes::Bytes;
use grpc_channel::{Channel, NoRetry, Request};
use interop::faulty::methods;
use support::config::retry;
use support::flaky::{channel_with, flaky_request};
use support::guards::guarded;

mod capture {
    //! A minimal `tracing` subscriber recording the `retry.policy` values of the events it sees.

    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Clone, Default)]
    pub(super) struct Capture {
        pub(super) events: Arc<Mutex<Vec<String>>>,
    }

    struct Policy(Option<String>);

    impl Visit for Policy {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "retry.policy" {
                self.0 = Some(value.to_owned());
            }
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "retry.policy" {
                self.0 = Some(format!("{value:?}"));
            }
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }

        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }

        fn record(&self, _: &Id, _: &Record<'_>) {}

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut v = Policy(None);
            event.record(&mut v);
            if let Some(p) = v.0 {
                self.events.lock().expect("lock").push(p);
            }
        }

        fn enter(&self, _: &Id) {}

        fn exit(&self, _: &Id) {}
    }
}

#[tokio::test(start_paused = true)]
async fn the_policy_source_shows_in_tracing() {
    let capture = capture::Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let server = support::faulty_server().await;
    let target = format!("ipv4:{}", server.addr);
    let config = retry(3, &["UNAVAILABLE"])
        .max_backoff("0.1s")
        .backoff_multiplier(1);
    let with_config = channel_with(&target, Some(&config.to_string()), |b| b);
    let plain = Channel::builder(target).build().expect("channel");
    let call = |ch: &Channel, key: &str, no_retry: bool| {
        let mut req = flaky_request(Request::new(Bytes::new()), key, &[]);
        if no_retry {
            req = req.with_retry_policy(NoRetry);
        }
        let ch = ch.clone();
        async move { guarded("flaky call", ch.unary_raw(methods::FLAKY, req)).await }
    };
    call(&with_config, "a", false).await.expect("ok");
    call(&with_config, "b", true).await.expect("ok");
    call(&plain, "c", false).await.expect("ok");
    assert_eq!(
        *capture.events.lock().expect("lock"),
        ["service_config", "application", "none"]
    );
}
