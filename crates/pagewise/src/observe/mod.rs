//! Observing memory from the kernel's side: which page sizes a range really
//! got, how much of it is resident.

pub mod smaps;
