//! Reading `/proc` and `/sys` files under a root that tests can replace.
//!
//! Every reader in [`crate::host`] that `pagewise doctor` reports from takes a
//! [`SysRoot`]: the live system in use, a fixture folder laid out like `/` in
//! tests. A root remembers each path it failed to read and why, so a report
//! can list what it could not see instead of guessing.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// A file or folder that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotRead {
    /// The absolute path as seen by the process (without the test root).
    pub path: String,
    /// Why: the OS error, or "missing".
    pub reason: String,
}

/// Reads kernel interface files relative to a root (`/` on a live system,
/// a fixture folder in tests), and remembers every path it failed to read.
#[derive(Debug)]
pub struct SysRoot {
    root: PathBuf,
    not_read: std::cell::RefCell<Vec<NotRead>>,
}

impl SysRoot {
    /// The live system.
    pub fn live() -> SysRoot {
        SysRoot::at("/")
    }

    /// A fixture tree laid out like `/` (with `proc/…` and `sys/…` below it).
    pub fn at(root: impl Into<PathBuf>) -> SysRoot {
        SysRoot {
            root: root.into(),
            not_read: Default::default(),
        }
    }

    fn full(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// Whether `path` exists (without reading it).
    pub fn exists(&self, path: &str) -> bool {
        self.full(path).exists()
    }

    /// Reads a whole file, trimmed, or records why it could not.
    pub fn read(&self, path: &str) -> Option<String> {
        match std::fs::read_to_string(self.full(path)) {
            Ok(text) => Some(text.trim().to_owned()),
            Err(e) => {
                self.record(path, &e);
                None
            }
        }
    }

    /// Reads a file that holds one unsigned integer.
    pub fn read_u64(&self, path: &str) -> Option<u64> {
        self.read_number(path)
    }

    /// Reads a file that holds one signed integer.
    pub fn read_i64(&self, path: &str) -> Option<i64> {
        self.read_number(path)
    }

    fn read_number<T: std::str::FromStr>(&self, path: &str) -> Option<T> {
        let text = self.read(path)?;
        let value = text.parse().ok();
        if value.is_none() {
            self.note(path, format!("not a number: {text:?}"));
        }
        value
    }

    /// Lists the entry names of a folder, sorted, or records why it could not.
    pub fn list(&self, path: &str) -> Option<Vec<String>> {
        let entries = match std::fs::read_dir(self.full(path)) {
            Ok(entries) => entries,
            Err(e) => {
                self.record(path, &e);
                return None;
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Some(names)
    }

    fn record(&self, path: &str, error: &std::io::Error) {
        let reason = match error.kind() {
            std::io::ErrorKind::NotFound => "missing".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => error.to_string(),
        };
        self.note(path, reason);
    }

    /// Records that `path` could not be used, with a reason.
    pub fn note(&self, path: &str, reason: String) {
        self.not_read.borrow_mut().push(NotRead {
            path: Path::new("/")
                .join(path.trim_start_matches('/'))
                .display()
                .to_string(),
            reason,
        });
    }

    /// Everything that could not be read so far.
    pub fn not_read(&self) -> Vec<NotRead> {
        self.not_read.borrow().clone()
    }
}
