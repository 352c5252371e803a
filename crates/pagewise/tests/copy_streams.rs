//! The process copier's non-temporal copies while it times its stream
//! counts and after it has chosen: every byte lands, at odd lengths and
//! offsets, through the timed segments and the untimed rest, and nothing
//! around the destination changes. Its own test binary: it lowers the
//! process-wide non-temporal threshold.

use pagewise::copy::{self, Plan};

/// Bytes per copy: 4 MiB segments and a ragged rest (nine timed segments;
/// every other copy 4 MiB shorter, eight, so that the rotation's shift from
/// one copy to the next is exercised with both parities).
const LEN: usize = (40 << 20) + 12_345;
/// Bytes kept on each side of the destination, to see that none is written.
const MARGIN: usize = 4096;
const SENTINEL: u8 = 0xa5;

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn nontemporal_copies_are_exact_while_the_stream_count_is_timed_and_after() {
    copy::set_nontemporal_threshold(Some(1 << 20));
    let timed = Plan::current().timed_streams();
    let src = pattern(LEN + 64);
    let mut buf = vec![SENTINEL; LEN + 64 + 2 * MARGIN];
    // Enough copies for 32 segments of each of up to four candidates, at
    // three placements.
    for round in 0..20u32 {
        let (s, d) = [(0, 0), (7, 1), (1, 63)][round as usize % 3];
        let len = LEN - (round as usize % 2) * (4 << 20);
        let src = &src[s..s + len];
        let start = MARGIN + d;
        buf.fill(SENTINEL);
        buf[start..start + len].fill(round as u8 ^ 0x5a);
        copy::copy(&mut buf[start..start + len], src).unwrap();
        let dst = &buf[start..start + len];
        if dst != src {
            let i = dst.iter().zip(src).position(|(a, b)| a != b).unwrap();
            panic!("round {round}: first wrong byte at {i} of {len} (src+{s} dst+{d})");
        }
        let outside = buf[..start].iter().chain(&buf[start + len..]);
        assert!(
            outside.clone().all(|&b| b == SENTINEL),
            "round {round}: a byte outside the destination changed"
        );
    }
    match copy::nontemporal_streams_chosen() {
        Some(k) => assert!(timed.contains(&k), "chose {k}, timed {timed:?}"),
        None => assert!(
            timed.is_empty(),
            "still timing {timed:?} after 20 large copies"
        ),
    }
}
