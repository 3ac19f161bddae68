//! A `tracing` layer that records every span: its name, its parent's name, its fields' last values, and how
//! often each field was recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// A span as the test saw it.
#[derive(Clone, Debug, Default)]
pub struct SeenSpan {
    /// The span's name.
    pub name: String,
    /// Its parent's name.
    pub parent: Option<String>,
    /// Each field's last value (strings without their quotes).
    pub fields: HashMap<String, String>,
    /// How often each field was recorded.
    pub records: HashMap<String, usize>,
}

/// The layer; clones share what it saw.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Seen>>);

/// Every span in the order they started, and where each live span id's span is (the registry reuses
/// the ids of closed spans).
#[derive(Default)]
struct Seen {
    spans: Vec<SeenSpan>,
    by_id: HashMap<u64, usize>,
}

impl Capture {
    /// Every span seen so far.
    pub fn spans(&self) -> Vec<SeenSpan> {
        self.0.lock().expect("lock").spans.clone()
    }
}

struct Fields<'a>(&'a mut SeenSpan);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}").trim_matches('"').to_owned();
        self.record_str(field, &value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .fields
            .insert(field.name().to_owned(), value.to_owned());
        *self.0.records.entry(field.name().to_owned()).or_default() += 1;
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut span = SeenSpan {
            name: attrs.metadata().name().to_owned(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent().map(|p| p.name().to_owned())),
            ..SeenSpan::default()
        };
        attrs.record(&mut Fields(&mut span));
        let mut seen = self.0.lock().expect("lock");
        let index = seen.spans.len();
        seen.spans.push(span);
        seen.by_id.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut seen = self.0.lock().expect("lock");
        let Some(&index) = seen.by_id.get(&id.into_u64()) else {
            return;
        };
        if let Some(span) = seen.spans.get_mut(index) {
            values.record(&mut Fields(span));
        }
    }
}
