//! Buffer behaviour checked against `Vec<u8>`, and the page-keeping promise
//! checked with the kernel's page-fault counter.

use pagewise::buffer::{Buffer, BufferOptions, Pretouch};
use pagewise::observe::faults_during;
use pagewise::os::mem::Discard;
use proptest::prelude::*;
use std::io::Write;

#[derive(Debug, Clone)]
enum Op {
    Push(u8),
    Extend(Vec<u8>),
    Resize(usize, u8),
    Truncate(usize),
    Clear,
    Write(Vec<u8>),
    Release,
    Poke(usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u8>().prop_map(Op::Push),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Op::Extend),
        (0usize..200_000, any::<u8>()).prop_map(|(n, v)| Op::Resize(n, v)),
        (0usize..100_000).prop_map(Op::Truncate),
        Just(Op::Clear),
        proptest::collection::vec(any::<u8>(), 0..100).prop_map(Op::Write),
        Just(Op::Release),
        (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Op::Poke(i, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn behaves_like_vec(max in 0usize..300_000, huge in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        let mut buffer = Buffer::with_options(BufferOptions { max_capacity: max, huge_pages: huge, pretouch: Pretouch::None }).unwrap();
        // The reservation is `max` rounded up to the commit granule.
        let reserved = buffer.max_capacity();
        prop_assert!(reserved >= max);
        let mut model: Vec<u8> = Vec::new();
        let mut peak = 0usize;
        for op in ops {
            match op {
                Op::Push(b) => { buffer.push(b).unwrap(); model.push(b); }
                Op::Extend(v) => { buffer.extend_from_slice(&v).unwrap(); model.extend_from_slice(&v); }
                Op::Resize(n, v) => { buffer.resize(n, v).unwrap(); model.resize(n, v); }
                Op::Truncate(n) => { buffer.truncate(n); model.truncate(n); }
                Op::Clear => { buffer.clear(); model.clear(); }
                Op::Write(v) => { buffer.write_all(&v).unwrap(); model.write_all(&v).unwrap(); }
                Op::Release => { buffer.release_unused(Discard::DontNeed).unwrap(); }
                Op::Poke(i, v) => {
                    if !model.is_empty() {
                        let i = i % model.len();
                        buffer[i] = v;
                        model[i] = v;
                    }
                }
            }
            peak = peak.max(model.len());
            prop_assert_eq!(buffer.len(), model.len());
            prop_assert!(buffer.capacity() >= buffer.len());
            prop_assert!(buffer.max_capacity() >= buffer.capacity());
        }
        prop_assert_eq!(buffer.as_slice(), model.as_slice());
        // Growth moves the pages only when it passes the reservation, and then
        // to at least twice the size, so never more often than the doublings needed.
        let report = buffer.report();
        if peak <= reserved || reserved == 0 {
            // Within the reservation nothing moves; a zero-capacity buffer's first
            // reservation is not a move either.
            if reserved > 0 {
                prop_assert_eq!(report.moves, 0);
            }
        } else {
            prop_assert!(report.moves >= 1);
            let doublings = (usize::BITS - (peak / reserved.max(1)).leading_zeros()) + 1;
            prop_assert!(report.moves <= doublings, "{} moves for peak {} over {}", report.moves, peak, reserved);
        }
    }
}

#[test]
fn refilling_after_clear_takes_no_page_fault() {
    let mut buffer = Buffer::new(64 << 20).unwrap();
    buffer.resize(48 << 20, 1).unwrap();
    let Some(faults) = faults_during(|| {
        for round in 0..5u8 {
            buffer.clear();
            buffer
                .resize(((round as usize % 3) + 1) << 24, round)
                .unwrap();
        }
    }) else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    };
    assert_eq!(faults, 0);
    assert_eq!(buffer.report().moves, 0);
}

#[test]
fn eager_pretouch_makes_growth_fault_free() {
    let grown = || {
        let mut buffer = Buffer::with_options(BufferOptions {
            max_capacity: 64 << 20,
            huge_pages: false,
            pretouch: Pretouch::Eager,
        })
        .unwrap();
        buffer.reserve(32 << 20).unwrap();
        buffer
    };
    let fill_faults = |buffer: &mut Buffer| faults_during(|| buffer.resize(32 << 20, 5).unwrap());
    // The first 32 MiB fill of the process runs its code, and reaches its stack
    // depth, for the first time: those code and stack pages fault once, whatever
    // the buffer does. Count a second buffer's fill through the same closure.
    fill_faults(&mut grown());
    let mut buffer = grown();
    let Some(faults) = fill_faults(&mut buffer) else {
        pagewise_testkit::skip!(
            pagewise_testkit::Need::PerfEvents,
            "the page-faults software event does not open here"
        );
    };
    assert_eq!(faults, 0);
}

#[test]
fn io_write_errors_on_capacity_overflow() {
    let mut buffer = Buffer::new(0).unwrap();
    buffer.write_all(b"abc").unwrap();
    let err = buffer.reserve(usize::MAX - 1).unwrap_err();
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(buffer.as_slice(), b"abc");
}
