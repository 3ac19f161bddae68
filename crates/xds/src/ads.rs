//! The request side of one ADS stream (`AggregatedDiscoveryService/StreamAggregatedResources`, the xDS
//! transport protocol in its state-of-the-world form, as gRFC A27 uses it): which `DiscoveryRequest` to
//! send, and when. Sans-IO: the caller feeds it subscriptions, stream starts and the verdict on each
//! response, and polls [`AdsState::poll_request`] for what to send.
//!
//! The rules (the Envoy xDS protocol, A27, and what grpc-go and C-core do):
//! * per resource type: the last ACKed `version_info` survives stream restarts (it is sent in the new
//!   stream's first request); the last `response_nonce` does not (it is empty on a new stream);
//! * `node` goes only in the first request of each stream;
//! * every response gets one request for its type: its nonce and the current names, and either its
//!   version (ACK) or the previous ACKed version with `error_detail` (NACK);
//! * a subscription change sends the full name list with the current version and nonce; removing the last
//!   name of a type sends an empty list (it is not the type's first request, so not a wildcard), and a
//!   type's first request on a stream is never empty (nothing is sent for a type with no names);
//! * several changes to a type before its request is sent make one request (the latest state);
//! * a response for a type this stream never asked for is ignored (neither ACK nor NACK).
//!
//! Not here: the messages themselves (the caller maps [`Request`] to a `DiscoveryRequest`), resource
//! parsing and caching, the does-not-exist timers and stream backoff.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The resource type's URL.
    pub type_url: String,
    /// The last ACKed version of the type (empty before any), or the response's version for an ACK.
    pub version_info: String,
    /// The nonce of the response this answers (empty if none on this stream).
    pub response_nonce: String,
    /// The names subscribed to, sorted.
    pub resource_names: Vec<String>,
    /// Why the response was rejected, for a NACK.
    pub error_detail: Option<String>,
    /// Whether `node` goes with it (the first request of the stream).
    pub include_node: bool,
}

/// What the caller made of a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every resource in it was valid: ACK.
    Accepted,
    /// Some were not: NACK with this detail (the valid ones are still applied, A46).
    Rejected(String),
}

#[derive(Debug, Default)]
struct TypeState {
    names: BTreeSet<String>,
    /// The last version ACKed (kept across streams).
    acked_version: String,
    /// The last response's nonce on this stream.
    nonce: String,
    /// Whether a request for this type was sent on this stream.
    sent_on_stream: bool,
    /// A pending NACK's detail, sent with the type's next request.
    pending_error: Option<String>,
}

/// The request side of an ADS stream (see the module docs).
#[derive(Debug, Default)]
pub struct AdsState {
    types: BTreeMap<String, TypeState>,
    /// The types with a request to send, in the order they became due.
    due: VecDeque<String>,
    /// Whether the stream is up (requests are only produced then).
    streaming: bool,
    /// Whether the stream's first request has gone out.
    node_sent: bool,
}

impl AdsState {
    /// A state with no subscription and no stream.
    pub fn new() -> AdsState {
        AdsState::default()
    }

    fn make_due(&mut self, type_url: &str) {
        if !self.due.iter().any(|t| t == type_url) {
            self.due.push_back(type_url.to_owned());
        }
    }

    /// Subscribes to `name` of `type_url`.
    pub fn subscribe(&mut self, type_url: &str, name: &str) {
        let state = self.types.entry(type_url.to_owned()).or_default();
        if state.names.insert(name.to_owned()) {
            self.make_due(type_url);
        }
    }

    /// Unsubscribes from `name` of `type_url`.
    pub fn unsubscribe(&mut self, type_url: &str, name: &str) {
        if let Some(state) = self.types.get_mut(type_url) {
            if state.names.remove(name) {
                self.make_due(type_url);
            }
        }
    }

    /// A new stream is up: nonces start empty, and every type with names is requested again (with its
    /// last ACKed version), the first request carrying `node`.
    pub fn stream_started(&mut self) {
        self.streaming = true;
        self.node_sent = false;
        self.due.clear();
        let mut due = Vec::new();
        for (type_url, state) in &mut self.types {
            state.nonce.clear();
            state.sent_on_stream = false;
            state.pending_error = None;
            if !state.names.is_empty() {
                due.push(type_url.clone());
            }
        }
        self.due.extend(due);
    }

    /// The stream ended: nothing is sent until the next one starts.
    pub fn stream_ended(&mut self) {
        self.streaming = false;
        self.due.clear();
    }

    /// A response of `type_url` (`version`, `nonce`) was `verdict`ed. Ignored for a type this stream
    /// never asked for.
    pub fn response(&mut self, type_url: &str, version: &str, nonce: &str, verdict: Verdict) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        if !state.sent_on_stream {
            return;
        }
        state.nonce = nonce.to_owned();
        match verdict {
            Verdict::Accepted => {
                state.acked_version = version.to_owned();
                state.pending_error = None;
            }
            Verdict::Rejected(detail) => state.pending_error = Some(detail),
        }
        self.make_due(type_url);
    }

    /// The last version ACKed for `type_url`.
    pub fn acked_version(&self, type_url: &str) -> Option<&str> {
        self.types.get(type_url).map(|s| s.acked_version.as_str())
    }

    /// The next request to send, if any.
    pub fn poll_request(&mut self) -> Option<Request> {
        if !self.streaming {
            return None;
        }
        while let Some(type_url) = self.due.pop_front() {
            let Some(state) = self.types.get_mut(&type_url) else {
                continue;
            };
            // A type's first request on a stream is never empty (it would be a wildcard).
            if !state.sent_on_stream && state.names.is_empty() {
                continue;
            }
            state.sent_on_stream = true;
            let include_node = !self.node_sent;
            self.node_sent = true;
            return Some(Request {
                type_url,
                version_info: state.acked_version.clone(),
                response_nonce: state.nonce.clone(),
                resource_names: state.names.iter().cloned().collect(),
                error_detail: state.pending_error.take(),
                include_node,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn drain(ads: &mut AdsState) -> Vec<Request> {
        std::iter::from_fn(|| ads.poll_request()).collect()
    }

    fn req(type_url: &str, version: &str, nonce: &str, names: &[&str], node: bool) -> Request {
        Request {
            type_url: type_url.to_owned(),
            version_info: version.to_owned(),
            response_nonce: nonce.to_owned(),
            resource_names: names.iter().map(|n| (*n).to_owned()).collect(),
            error_detail: None,
            include_node: node,
        }
    }

    #[test]
    fn a_stream_timeline_with_ack_nack_and_restart() {
        let mut ads = AdsState::new();
        ads.subscribe(LDS, "svc");
        assert!(drain(&mut ads).is_empty(), "no stream, nothing sent");
        ads.stream_started();
        assert_eq!(drain(&mut ads), [req(LDS, "", "", &["svc"], true)]);

        // ACK: the response's version and nonce.
        ads.response(LDS, "1", "n1", Verdict::Accepted);
        assert_eq!(drain(&mut ads), [req(LDS, "1", "n1", &["svc"], false)]);

        // NACK: the previous ACKed version, the nonce, and the detail.
        ads.response(LDS, "2", "n2", Verdict::Rejected("bad listener".into()));
        let nack = drain(&mut ads);
        assert_eq!(
            nack,
            [Request {
                error_detail: Some("bad listener".into()),
                ..req(LDS, "1", "n2", &["svc"], false)
            }]
        );
        assert_eq!(ads.acked_version(LDS), Some("1"));

        // A new name: the full list, the current version and nonce.
        ads.subscribe(LDS, "other");
        assert_eq!(
            drain(&mut ads),
            [req(LDS, "1", "n2", &["other", "svc"], false)]
        );

        // Restart: the ACKed version survives, the nonce does not, node again.
        ads.stream_ended();
        ads.subscribe(CDS, "c1");
        assert!(drain(&mut ads).is_empty());
        ads.stream_started();
        assert_eq!(
            drain(&mut ads),
            [
                req(CDS, "", "", &["c1"], true),
                req(LDS, "1", "", &["other", "svc"], false)
            ]
        );
    }

    #[test]
    fn removing_the_last_name_sends_an_empty_list_but_a_first_request_is_never_empty() {
        let mut ads = AdsState::new();
        ads.stream_started();
        ads.subscribe(CDS, "c1");
        ads.unsubscribe(CDS, "c1");
        assert!(drain(&mut ads).is_empty(), "never sent, now empty: nothing");
        ads.subscribe(CDS, "c1");
        assert_eq!(drain(&mut ads), [req(CDS, "", "", &["c1"], true)]);
        ads.unsubscribe(CDS, "c1");
        assert_eq!(drain(&mut ads), [req(CDS, "", "", &[], false)]);
        // On a new stream, a type with no names is not requested.
        ads.stream_started();
        assert!(drain(&mut ads).is_empty());
    }

    #[test]
    fn changes_before_sending_make_one_request_and_unknown_types_are_ignored() {
        let mut ads = AdsState::new();
        ads.stream_started();
        for name in ["a", "b", "c"] {
            ads.subscribe(CDS, name);
        }
        ads.unsubscribe(CDS, "b");
        assert_eq!(drain(&mut ads), [req(CDS, "", "", &["a", "c"], true)]);
        ads.response(LDS, "9", "x", Verdict::Accepted);
        assert!(drain(&mut ads).is_empty(), "a type never asked for");
        assert_eq!(ads.acked_version(LDS), None);
    }
}
