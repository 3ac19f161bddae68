//! A ClusterLoadAssignment at fleet scale: a locality of a priority is checked (not seen before in its
//! priority, its weight within the sum) in the same time however many came before it, so a priority of
//! 20,000 localities is validated in one pass. By hand, in a debug build, this test took about 40 s when
//! each locality was compared with every earlier one and the earlier weights summed again, and under a
//! second since.

use super::*;

/// The localities of priority 0: `count` of them, zones `z0`, `z1`, ..., each of weight 1 with one
/// endpoint of its own.
fn many(count: usize) -> Vec<LocalityLbEndpoints> {
    (0..count)
        .map(|i| {
            let address = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
            locality(&format!("z{i}"), Some(1), 0, vec![endpoint(&address, 80)])
        })
        .collect()
}

#[test]
fn twenty_thousand_localities_of_one_priority_are_validated() {
    const N: usize = 20_000;
    let with = |extra: Vec<LocalityLbEndpoints>| {
        let mut localities = many(N);
        localities.extend(extra);
        cla(localities)
    };
    // A second priority may hold the same localities again.
    let parsed =
        Endpoints::from_proto(&with(vec![locality("z0", Some(1), 1, vec![])])).expect("valid");
    assert_eq!(parsed.priorities.len(), 2);
    let localities = &parsed.priorities[0].localities;
    assert_eq!(localities.len(), N);
    for (i, l) in localities.iter().enumerate() {
        assert_eq!(l.locality, id(&format!("z{i}")));
        assert_eq!(l.weight, weight(1));
        assert_eq!(l.endpoints.len(), 1);
    }
    assert_eq!(parsed.priorities[1].localities[0].locality, id("z0"));
    // The last locality repeating one of its priority is found...
    let e = err(&with(vec![locality("z7", Some(1), 0, vec![])]));
    assert_eq!(e.field, format!("endpoints[{N}].locality"));
    assert!(e.reason.contains("appears twice in priority 0"), "{e}");
    // ... as is the one whose weight takes the sum past 2^32 - 1, and not one that reaches it.
    let rest = u32::MAX - u32::try_from(N).expect("small");
    let e = err(&with(vec![locality("last", Some(rest + 1), 0, vec![])]));
    assert_eq!(e.field, format!("endpoints[{N}].load_balancing_weight"));
    let parsed =
        Endpoints::from_proto(&with(vec![locality("last", Some(rest), 0, vec![])])).expect("valid");
    assert_eq!(parsed.priorities[0].localities.len(), N + 1);
}
