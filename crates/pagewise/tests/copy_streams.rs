//! The process copier's non-temporal copies while it times its stream
//! counts and after it has chosen: every byte lands, at odd lengths and
//! offsets, through the timed segments and the untimed rest. Its own test
//! binary: it lowers the process-wide non-temporal threshold.

use pagewise::copy::{self, Plan};

/// Bytes per copy: 4 MiB segments and a ragged rest.
const LEN: usize = (40 << 20) + 12_345;

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
    let mut dst = vec![0u8; LEN + 64];
    // Enough 40 MiB copies for 32 segments of each of up to four candidates
    // (nine segments per copy), at three placements.
    for round in 0..16u32 {
        let (s, d) = [(0, 0), (7, 1), (1, 63)][round as usize % 3];
        let src = &src[s..s + LEN];
        let dst = &mut dst[d..d + LEN];
        dst.fill(round as u8 ^ 0x5a);
        copy::copy(dst, src).unwrap();
        if dst != src {
            let i = dst.iter().zip(src).position(|(a, b)| a != b).unwrap();
            panic!("round {round}: first wrong byte at {i} of {LEN} (src+{s} dst+{d})");
        }
    }
    match copy::nontemporal_streams_chosen() {
        Some(k) => assert!(timed.contains(&k), "chose {k}, timed {timed:?}"),
        None => assert!(
            timed.is_empty(),
            "still timing {timed:?} after 16 large copies"
        ),
    }
}
