//! Review probe: validating a ClusterLoadAssignment costs the square of the localities of a priority
//! (each new locality is compared with, and its weight added to the sum of, every earlier one).

use super::*;

#[test]
#[ignore = "a probe (wall-clock figures, printed): cargo test -p grpc-xds --lib probe_ -- --ignored --nocapture"]
fn probe_many_localities() {
    // Linear validation would take about twice as long for twice the localities; here it is four times.
    for n in [2_000usize, 4_000, 8_000, 16_000] {
        let localities = (0..n)
            .map(|i| locality(&format!("z{i}"), Some(1), 0, vec![]))
            .collect();
        let proto = cla(localities);
        let t = std::time::Instant::now();
        let parsed = Endpoints::from_proto(&proto).expect("valid");
        eprintln!(
            "{n} localities ({} bytes): {:?}",
            proto.encoded_len(),
            t.elapsed()
        );
        assert_eq!(parsed.priorities[0].localities.len(), n);
    }
}
