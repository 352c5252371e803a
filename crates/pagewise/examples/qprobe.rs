use pagewise::queue::*;
use pagewise::sys::perf::*;
use std::time::Instant;
fn main() {
    let n: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(2_000_000);
    let pre = std::env::args().nth(2).map(|s| s == "pre").unwrap_or(true);
    let path = "/dev/shm/qprobe.q";
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file("/dev/shm/qprobe.q.wait");
    let opts = Options { pretouch: if pre { Some(PreTouch::default()) } else { None }, ..Options::default() };
    let mut w = Writer::create(path, opts).unwrap();
    w.wait_pretouched(4 << 20).unwrap();
    let c = Counter::open(&CounterSpec::new(EventType::Software, SW_PAGE_FAULTS), 0).unwrap();
    let payload = [7u8; 128];
    let f0 = c.read().unwrap();
    let t = Instant::now();
    for _ in 0..n { w.append(&payload).unwrap(); }
    let dt = t.elapsed().as_secs_f64();
    let f1 = c.read().unwrap();
    println!("writer: {:.1} M rec/s, {:.1} ns/rec, faults {}", n as f64 / dt / 1e6, dt * 1e9 / n as f64, f1 - f0);
    println!("{:?}", w.report().window);
    let mut r = Reader::open(path).unwrap();
    let t = Instant::now();
    let mut k = 0;
    while let Some(_) = r.next().unwrap() { k += 1; }
    let dt = t.elapsed().as_secs_f64();
    println!("reader: {k} recs {:.1} M rec/s", k as f64 / dt / 1e6);
    drop(w);
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file("/dev/shm/qprobe.q.wait");
}
