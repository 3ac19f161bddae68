//! Timelines of the xDS client's state: watches, responses, deletions, timers and stream restarts.

use super::*;
use grpc_base::SplitMix64;

const L: ResourceType = ResourceType::Listener;
const C: ResourceType = ResourceType::Cluster;
const E: ResourceType = ResourceType::ClusterLoadAssignment;

fn client(features: ServerFeatures, t0: Instant) -> XdsClient<String> {
    XdsClient::new(features, t0, Box::new(SplitMix64::new(7)))
}

fn valid(name: &str, value: &str) -> Decoded<String> {
    Decoded::Valid {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

fn invalid(name: &str, reason: &str) -> Decoded<String> {
    Decoded::Invalid {
        name: Some(name.to_owned()),
        reason: reason.to_owned(),
    }
}

fn events(c: &mut XdsClient<String>) -> Vec<(WatchId, WatchEvent<String>)> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn requests(c: &mut XdsClient<String>, now: Instant) -> Vec<Request> {
    std::iter::from_fn(|| c.poll_request(now)).collect()
}

fn changed(v: &str) -> WatchEvent<String> {
    WatchEvent::Changed(Arc::new(v.to_owned()))
}

#[test]
fn watchers_share_a_subscription_and_a_late_watcher_gets_the_cached_value() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let a = c.watch(L, "svc");
    c.stream_started(t0);
    let sent = requests(&mut c, t0);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].resource_names, vec!["svc".to_owned()]);
    c.handle_response(t0, L.type_url(), "1", "n1", vec![valid("svc", "v1")]);
    assert_eq!(events(&mut c), vec![(a, changed("v1"))]);
    let ack = requests(&mut c, t0);
    assert_eq!(ack[0].version_info, "1");
    assert_eq!(ack[0].error_detail, None);

    let b = c.watch(L, "svc");
    assert_eq!(events(&mut c), vec![(b, changed("v1"))]);
    assert!(
        requests(&mut c, t0).is_empty(),
        "a second watcher sends nothing"
    );

    c.unwatch(a);
    assert!(requests(&mut c, t0).is_empty(), "one watcher is left");
    c.unwatch(b);
    let unsub = requests(&mut c, t0);
    assert_eq!(unsub.len(), 1);
    assert!(unsub[0].resource_names.is_empty());
    assert_eq!(
        c.cached(L, "svc"),
        None,
        "the last watcher leaving forgets the resource"
    );
}

#[test]
fn an_identical_update_notifies_nobody_unless_the_last_one_was_rejected() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let w = c.watch(C, "c");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(t0, C.type_url(), "1", "n1", vec![valid("c", "v1")]);
    assert_eq!(events(&mut c).len(), 1);
    c.handle_response(t0, C.type_url(), "2", "n2", vec![valid("c", "v1")]);
    assert!(events(&mut c).is_empty());
    c.handle_response(
        t0,
        C.type_url(),
        "3",
        "n3",
        vec![invalid("c", "bad lb_policy")],
    );
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [(id, WatchEvent::AmbientError(m))] if *id == w && m.contains("bad lb_policy")),
        "{ev:?}"
    );
    assert_eq!(
        c.cached(C, "c").as_deref(),
        Some(&"v1".to_owned()),
        "the last good value stays"
    );
    c.handle_response(t0, C.type_url(), "4", "n4", vec![valid("c", "v1")]);
    assert_eq!(
        events(&mut c),
        vec![(w, changed("v1"))],
        "the same value after a NACK is news"
    );
}

#[test]
fn a_nack_names_each_bad_resource_and_applies_the_good_ones() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let good = c.watch(C, "good");
    let bad = c.watch(C, "bad");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(
        t0,
        C.type_url(),
        "7",
        "n1",
        vec![valid("good", "g"), invalid("bad", "no eds_cluster_config")],
    );
    let ev = events(&mut c);
    assert!(ev.contains(&(good, changed("g"))), "{ev:?}");
    assert!(
        ev.iter().any(|(id, e)| *id == bad
            && matches!(e, WatchEvent::Error(m) if m.contains("no eds_cluster_config"))),
        "a resource never valid gets a plain error: {ev:?}"
    );
    let nack = requests(&mut c, t0);
    assert_eq!(nack.len(), 1);
    assert_eq!(
        nack[0].version_info, "",
        "a NACK keeps the previous ACKed version"
    );
    assert_eq!(nack[0].response_nonce, "n1");
    let detail = nack[0].error_detail.clone().unwrap_or_default();
    assert!(
        detail.contains("\"bad\"") && detail.contains("no eds_cluster_config"),
        "{detail}"
    );
    let dump = c.dump();
    assert_eq!(dump.len(), 2);
    assert_eq!(
        (dump[0].name.as_str(), dump[0].status),
        ("bad", ResourceStatus::Nacked)
    );
    assert!(
        matches!(&dump[0].rejection, Some(r) if r.reason.contains("no eds_cluster_config") && r.version == "7"),
        "{dump:?}"
    );
    assert_eq!(dump[0].version, None, "never accepted");
    assert_eq!(
        (dump[1].name.as_str(), dump[1].status),
        ("good", ResourceStatus::Acked)
    );
}

#[test]
fn the_dump_has_each_resource_s_version_update_time_and_last_rejection() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(1);
    let t2 = t0 + Duration::from_secs(2);
    let t3 = t0 + Duration::from_secs(3);
    let mut c = client(ServerFeatures::default(), t0);
    c.watch(C, "c");
    c.watch(E, "e");
    c.stream_started(t0);
    requests(&mut c, t0);
    let dump = c.dump();
    assert_eq!(dump.len(), 2);
    assert_eq!(dump[0].resource_type, C);
    assert_eq!(dump[1].resource_type, E);
    for d in &dump {
        assert_eq!(d.status, ResourceStatus::Requested);
        assert_eq!((d.version.as_deref(), d.last_updated), (None, None));
    }

    c.handle_response(t1, C.type_url(), "1", "n1", vec![valid("c", "v1")]);
    let d = &c.dump()[0];
    assert_eq!(d.status, ResourceStatus::Acked);
    assert_eq!(
        (d.version.as_deref(), d.last_updated),
        (Some("1"), Some(t1))
    );

    // A rejected update: the value of version 1 stays, with the rejection beside it.
    c.handle_response(
        t2,
        C.type_url(),
        "2",
        "n2",
        vec![invalid("c", "bad lb_policy")],
    );
    let d = &c.dump()[0];
    assert_eq!(d.status, ResourceStatus::Nacked);
    assert_eq!(
        (d.version.as_deref(), d.last_updated),
        (Some("1"), Some(t1))
    );
    assert_eq!(
        d.rejection,
        Some(Rejection {
            version: "2".into(),
            reason: "bad lb_policy".into(),
            at: t2,
        })
    );

    // The same value again under a new version: ACKed, that version, the rejection gone.
    c.handle_response(t3, C.type_url(), "3", "n3", vec![valid("c", "v1")]);
    let d = &c.dump()[0];
    assert_eq!(d.status, ResourceStatus::Acked);
    assert_eq!(
        (d.version.as_deref(), d.last_updated, &d.rejection),
        (Some("3"), Some(t3), &None)
    );

    // The endpoints never come: does-not-exist, with no version.
    c.handle_timeout(t0 + DOES_NOT_EXIST_TIMEOUT);
    let d = &c.dump()[1];
    assert_eq!(d.status, ResourceStatus::DoesNotExist);
    assert_eq!(d.version, None);
}

#[test]
fn the_does_not_exist_timer_starts_when_the_request_is_sent_and_stops_with_the_stream() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let w = c.watch(E, "eds");
    assert_eq!(c.poll_timeout(), None, "no timer before a stream");
    let t1 = t0 + Duration::from_secs(40);
    c.stream_started(t1);
    assert_eq!(
        c.poll_timeout(),
        None,
        "no timer before the request is sent"
    );
    requests(&mut c, t1);
    assert_eq!(c.poll_timeout(), Some(t1 + DOES_NOT_EXIST_TIMEOUT));
    c.handle_timeout(t1 + Duration::from_secs(14));
    assert!(events(&mut c).is_empty());
    // The stream ends before the timer fires: the timer stops and starts again on the next stream.
    c.stream_ended(t1 + Duration::from_secs(14), "reset");
    assert_eq!(c.poll_timeout(), None);
    events(&mut c);
    let t2 = c.next_stream_start().unwrap_or(t1) + Duration::from_secs(1);
    c.stream_started(t2);
    requests(&mut c, t2);
    assert_eq!(c.poll_timeout(), Some(t2 + DOES_NOT_EXIST_TIMEOUT));
    c.handle_timeout(t2 + DOES_NOT_EXIST_TIMEOUT);
    assert_eq!(events(&mut c), vec![(w, WatchEvent::DoesNotExist)]);
    assert_eq!(c.poll_timeout(), None);
    // It arrives later after all.
    c.handle_response(t0, E.type_url(), "1", "n", vec![valid("eds", "e")]);
    assert_eq!(events(&mut c), vec![(w, changed("e"))]);
}

#[test]
fn a_resource_added_mid_stream_gets_its_own_timer() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    c.watch(C, "a");
    c.stream_started(t0);
    requests(&mut c, t0);
    let t1 = t0 + Duration::from_secs(10);
    c.handle_response(t0, C.type_url(), "1", "n1", vec![valid("a", "A")]);
    requests(&mut c, t1);
    events(&mut c);
    let b = c.watch(C, "b");
    let sent = requests(&mut c, t1);
    assert_eq!(sent[0].resource_names, vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(c.poll_timeout(), Some(t1 + DOES_NOT_EXIST_TIMEOUT));
    c.handle_timeout(t1 + DOES_NOT_EXIST_TIMEOUT);
    assert_eq!(events(&mut c), vec![(b, WatchEvent::DoesNotExist)]);
}

#[derive(Clone, Copy, Debug)]
enum OnDeletion {
    Ambient,
    Gone,
    Nothing,
}

#[test]
fn deletion_by_absence_follows_the_server_features() {
    let t0 = Instant::now();
    for (features, expect) in [
        (ServerFeatures::default(), OnDeletion::Ambient),
        (
            ServerFeatures {
                fail_on_data_errors: true,
                ..ServerFeatures::default()
            },
            OnDeletion::Gone,
        ),
        (
            ServerFeatures {
                ignore_resource_deletion: true,
                ..ServerFeatures::default()
            },
            OnDeletion::Nothing,
        ),
    ] {
        let mut c = client(features, t0);
        let a = c.watch(L, "a");
        let b = c.watch(L, "b");
        c.stream_started(t0);
        requests(&mut c, t0);
        c.handle_response(
            t0,
            L.type_url(),
            "1",
            "n1",
            vec![valid("a", "A"), valid("b", "B")],
        );
        events(&mut c);
        c.handle_response(t0, L.type_url(), "2", "n2", vec![valid("a", "A")]);
        let ev = events(&mut c);
        match expect {
            OnDeletion::Ambient => {
                assert!(
                    matches!(&ev[..], [(id, WatchEvent::AmbientError(_))] if *id == b),
                    "{ev:?}"
                );
                assert!(c.cached(L, "b").is_some());
            }
            OnDeletion::Gone => {
                assert_eq!(ev, vec![(b, WatchEvent::DoesNotExist)]);
                assert!(c.cached(L, "b").is_none());
            }
            OnDeletion::Nothing => assert!(ev.is_empty(), "{ev:?}"),
        }
        assert!(!ev.iter().any(|(id, _)| *id == a), "{expect:?}");
    }
}

#[test]
fn endpoints_are_never_deleted_by_absence() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    c.watch(E, "x");
    c.watch(E, "y");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(
        t0,
        E.type_url(),
        "1",
        "n1",
        vec![valid("x", "X"), valid("y", "Y")],
    );
    events(&mut c);
    c.handle_response(t0, E.type_url(), "2", "n2", vec![valid("x", "X2")]);
    assert_eq!(events(&mut c).len(), 1);
    assert!(c.cached(E, "y").is_some());
}

#[test]
fn a_stream_failing_before_any_response_is_an_error_and_backs_off() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let w = c.watch(L, "svc");
    assert_eq!(c.next_stream_start(), Some(t0));
    c.stream_started(t0);
    requests(&mut c, t0);
    c.stream_ended(t0 + Duration::from_millis(10), "connection refused");
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [(id, WatchEvent::Error(m))] if *id == w && m.contains("connection refused")),
        "{ev:?}"
    );
    // 1 s after the first start, then 1.6 s ±20 % after the second.
    assert_eq!(c.next_stream_start(), Some(t0 + Duration::from_secs(1)));
    let t1 = t0 + Duration::from_secs(1);
    c.stream_started(t1);
    c.stream_ended(t1, "refused");
    let gap = c.next_stream_start().map(|t| t - t1).unwrap_or_default();
    assert!(
        gap >= Duration::from_millis(1280) && gap <= Duration::from_millis(1920),
        "{gap:?}"
    );
}

#[test]
fn a_stream_that_had_a_response_restarts_at_once_quietly_and_resubscribes() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let w = c.watch(C, "c");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(t0, C.type_url(), "5", "n1", vec![valid("c", "v")]);
    requests(&mut c, t0);
    events(&mut c);
    let t1 = t0 + Duration::from_secs(30);
    c.stream_ended(t1, "server restart");
    assert!(
        events(&mut c).is_empty(),
        "not an error: {w:?} keeps its value"
    );
    assert_eq!(c.next_stream_start(), Some(t1));
    c.stream_started(t1);
    let again = requests(&mut c, t1);
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].version_info, "5",
        "the ACKed version survives the restart"
    );
    assert_eq!(again[0].response_nonce, "");
    assert!(again[0].include_node);
    assert_eq!(c.poll_timeout(), None, "a cached resource has no timer");
}

#[test]
fn a_failed_stream_is_ambient_for_cached_resources() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let w = c.watch(C, "c");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(t0, C.type_url(), "1", "n1", vec![valid("c", "v")]);
    c.stream_ended(t0, "bye");
    events(&mut c);
    c.stream_started(t0 + Duration::from_secs(1));
    c.stream_ended(t0 + Duration::from_secs(1), "refused");
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [(id, WatchEvent::AmbientError(_))] if *id == w),
        "{ev:?}"
    );
    assert!(c.cached(C, "c").is_some());
}

#[test]
fn unrequested_resources_and_unknown_types_are_ignored() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    c.watch(C, "mine");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(
        t0,
        C.type_url(),
        "1",
        "n1",
        vec![valid("other", "o"), valid("mine", "m")],
    );
    assert_eq!(events(&mut c).len(), 1);
    assert!(c.cached(C, "other").is_none());
    requests(&mut c, t0);
    c.handle_response(t0, "type.googleapis.com/some.Other", "1", "n2", vec![]);
    assert!(
        requests(&mut c, t0).is_empty(),
        "no ACK for a type never asked for"
    );
}

#[test]
fn an_unwatched_watcher_gets_no_queued_event() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let a = c.watch(C, "c");
    let b = c.watch(C, "c");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(t0, C.type_url(), "1", "n1", vec![valid("c", "v")]);
    c.unwatch(a);
    assert_eq!(events(&mut c), vec![(b, changed("v"))]);
}

#[test]
fn an_unreadable_resource_deletes_nothing() {
    let t0 = Instant::now();
    let features = ServerFeatures {
        fail_on_data_errors: true,
        ..ServerFeatures::default()
    };
    let mut c = client(features, t0);
    c.watch(C, "a");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.handle_response(t0, C.type_url(), "1", "n1", vec![valid("a", "A")]);
    events(&mut c);
    c.handle_response(
        t0,
        C.type_url(),
        "2",
        "n2",
        vec![Decoded::Invalid {
            name: None,
            reason: "cannot decode".to_owned(),
        }],
    );
    assert!(events(&mut c).is_empty(), "not taken as a deletion");
    assert!(c.cached(C, "a").is_some());
    let nack = requests(&mut c, t0);
    assert!(nack[0].error_detail.is_some());
}

#[test]
fn a_new_watcher_gets_the_stream_error_at_once_until_a_response_arrives() {
    let t0 = Instant::now();
    let mut c = client(ServerFeatures::default(), t0);
    let first = c.watch(L, "svc");
    c.stream_started(t0);
    requests(&mut c, t0);
    c.stream_ended(t0, "connection refused");
    assert_eq!(events(&mut c).len(), 1, "the first watcher's error");
    let refused = |ev: &[(WatchId, WatchEvent<String>)], who: &[WatchId]| {
        ev.len() == who.len()
            && ev.iter().zip(who).all(|((id, e), w)| {
                id == w && matches!(e, WatchEvent::Error(m) if m.contains("connection refused"))
            })
    };

    // A57 (C-core's xDS channel status): while the stream is down, a new watcher of a resource with no
    // value learns why at once, whether the resource is already watched or not; nothing waits for the
    // next stream (the backoff, up to 120 s).
    let second = c.watch(L, "svc");
    let other = c.watch(C, "c");
    let ev = events(&mut c);
    assert!(refused(&ev, &[second, other]), "{ev:?}");

    // The next stream fails too: still the error for a newcomer.
    let t1 = t0 + Duration::from_secs(1);
    c.stream_started(t1);
    requests(&mut c, t1);
    let ev = events(&mut c);
    assert!(ev.is_empty(), "a stream starting is no news: {ev:?}");
    let third = c.watch(E, "e");
    let ev = events(&mut c);
    assert!(
        refused(&ev, &[third]),
        "no response yet on the new stream: {ev:?}"
    );

    // A response: the server is reachable, and a newcomer waits for its resource as usual.
    c.handle_response(t1, L.type_url(), "1", "n1", vec![valid("svc", "v1")]);
    events(&mut c);
    let quiet = c.watch(C, "d");
    assert!(events(&mut c).is_empty());
    let cached = c.watch(L, "svc");
    assert_eq!(events(&mut c), vec![(cached, changed("v1"))]);

    // Down again after a response: restarting at once is no error; a stream that then fails before any
    // response is. A newcomer to a cached resource gets its value and the error as an ambient one, as
    // the resource's other watchers did.
    c.stream_ended(t1, "server restart");
    c.stream_started(t1);
    c.stream_ended(t1, "connection refused");
    events(&mut c);
    let late = c.watch(L, "svc");
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [(a, WatchEvent::Changed(v)), (b, WatchEvent::AmbientError(m))]
            if *a == late && *b == late && **v == "v1" && m.contains("connection refused")),
        "{ev:?}"
    );
    let _ = (first, quiet);
}
