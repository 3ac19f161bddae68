//! A minimal `tracing` subscriber that records every event's fields, for the tests that check what the
//! channel traces. A test installs it with [`install`], in a test binary that holds only such tests:
//! `tracing` caches each callsite's interest per process, and a test running in parallel that reaches a
//! callsite first while another installs its subscriber can leave the callsite disabled for it (a race in
//! callsite registration). [`install`] takes a process-wide lock, so those tests run one at a time, as
//! they would one per process.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The lock that keeps the tests installing a [`Capture`] from running in parallel.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A [`Capture`] installed as this thread's default subscriber: the capture, and what keeps it installed
/// (and the other capturing tests of the process waiting) until dropped.
pub async fn install() -> (Capture, Installed) {
    let serial = ONE_AT_A_TIME.lock().await;
    let capture = Capture::default();
    let default = tracing::subscriber::set_default(capture.clone());
    (
        capture,
        Installed {
            _default: default,
            _serial: serial,
        },
    )
}

/// Keeps a [`Capture`] installed, and the other capturing tests waiting, until dropped (the subscriber
/// first, then the lock).
pub struct Installed {
    _default: tracing::subscriber::DefaultGuard,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// One event's `(field, value)` pairs, in order.
type EventFields = Vec<(String, String)>;

/// The events seen, each as its `(field, value)` pairs in order (`&str` values as they are, others as
/// `Debug` shows them), then its `level`.
#[derive(Clone, Default)]
pub struct Capture {
    events: Arc<Mutex<Vec<EventFields>>>,
}

impl Capture {
    /// Every value of `field`, one per event that has it, in order.
    pub fn values_of(&self, field: &str) -> Vec<String> {
        let events = self.events.lock().expect("lock");
        events
            .iter()
            .filter_map(|fields| fields.iter().find(|(name, _)| name == field))
            .map(|(_, value)| value.clone())
            .collect()
    }

    /// The events with a field value containing `text`, each as one line of `name=value ` pairs.
    pub fn lines_containing(&self, text: &str) -> Vec<String> {
        let events = self.events.lock().expect("lock");
        events
            .iter()
            .filter(|fields| fields.iter().any(|(_, value)| value.contains(text)))
            .map(|fields| {
                let mut line = String::new();
                for (name, value) in fields {
                    let _ = write!(line, "{name}={value} ");
                }
                line
            })
            .collect()
    }
}

#[derive(Default)]
struct Fields(EventFields);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
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
        let mut fields = Fields::default();
        event.record(&mut fields);
        // The level last, as a field of its own.
        fields
            .0
            .push(("level".to_owned(), event.metadata().level().to_string()));
        self.events.lock().expect("lock").push(fields.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
