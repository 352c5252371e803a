//! `/proc/PID/task`: the threads of a process.

/// The thread ids of process `pid` (`None`: this process), sorted. One
/// directory listing; an error when the process is gone.
pub fn thread_ids(pid: Option<i32>) -> std::io::Result<Vec<i32>> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_owned(),
    };
    let mut tids: Vec<i32> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_its_main_thread() {
        let me = std::process::id() as i32;
        let own = thread_ids(None).unwrap();
        assert!(own.contains(&me), "{own:?}");
        // Thread ids are not in creation order once pids wrap around.
        assert!(thread_ids(Some(me)).unwrap().contains(&me));
        assert!(thread_ids(Some(i32::MAX)).is_err());
    }
}
