//! The first copy of a process is a large one: it builds the process-wide
//! plan on the way (through the process entry's first-call path) and copies
//! correctly. Its own test binary, so that no earlier copy built the plan.

use pagewise::copy;

#[test]
fn the_first_copy_of_the_process_is_large_and_correct() {
    let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let mut dst = vec![0u8; src.len()];
    copy::copy(&mut dst, &src).unwrap();
    assert_eq!(dst, src);
    // The plan exists now, and later copies of every kind agree.
    let plan = copy::Plan::current();
    assert!(plan.isa.is_supported(), "{plan:?}");
    let mut again = vec![0u8; 700];
    copy::copy(&mut again, &src[3..703]).unwrap();
    assert_eq!(again, &src[3..703]);
}
