//! The per-user cache of measured copy plans ("wisdom", as FFTW calls it).
//!
//! `pagewise tune` measures a plan and [`save`]s it to the per-user cache
//! directory ([`crate::host::user_cache`]: `$XDG_CACHE_HOME/pagewise/`,
//! `~/.cache/pagewise/` or `$TMPDIR/pagewise-UID`), one file per
//! [`MachineKey`]; [`super::Plan::detect`] [`load`]s the one for this machine.
//! A plan is only used on the machine key it was measured on: a new CPU
//! model, stepping, microcode, kernel or glibc means measuring again.
//!
//! The files are kept as [`crate::host::user_cache`] keeps every cache file:
//! in a private directory of this user's, never through a link, replaced
//! atomically.

use super::plan::Tables;
use super::Isa;
use crate::host::user_cache::{self, Chosen, Purpose, UserCacheError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// JSON schema of a cached plan file.
pub const SCHEMA: &str = "pagewise.copy-plan/2";

/// Largest plan file read (a plan is a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What a measured plan is valid for: it is used only where every field is equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MachineKey {
    /// `cpuid` vendor string.
    pub vendor: String,
    /// CPU family.
    pub family: u32,
    /// CPU model.
    pub model: u32,
    /// CPU stepping.
    pub stepping: u32,
    /// Microcode revision from `/proc/cpuinfo`, if readable.
    pub microcode: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// glibc version (its `memcpy`/`memset` are candidates).
    pub glibc: Option<String>,
}

impl MachineKey {
    /// This machine's key: two `cpuid` instructions and two small file reads.
    pub fn current() -> MachineKey {
        let id = crate::sys::cpu::cpu_identity().unwrap_or_default();
        let microcode = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("microcode"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_owned());
        MachineKey {
            vendor: id.vendor,
            family: id.family,
            model: id.model,
            stepping: id.stepping,
            microcode,
            kernel,
            glibc: crate::sys::libc_info::glibc_version(),
        }
    }

    /// The cache file name for this key: `copy-plan-<16 hex digits>.json`
    /// (FNV-1a of the fields, so that machines sharing a home directory keep
    /// their own files).
    pub fn file_name(&self) -> String {
        let text = format!(
            "{}|{}|{}|{}|{}|{}|{}",
            self.vendor,
            self.family,
            self.model,
            self.stepping,
            self.microcode.as_deref().unwrap_or("-"),
            self.kernel.as_deref().unwrap_or("-"),
            self.glibc.as_deref().unwrap_or("-")
        );
        user_cache::file_name("copy-plan", &text)
    }

    /// `AuthenticAMD family 26 model 2 stepping 1`.
    pub fn cpu(&self) -> String {
        format!(
            "{} family {} model {} stepping {}",
            self.vendor, self.family, self.model, self.stepping
        )
    }
}

/// A measured plan as the cache holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuned {
    /// [`SCHEMA`].
    pub schema: String,
    /// The machine it was measured on.
    pub key: MachineKey,
    /// When (Unix seconds).
    pub measured_at: u64,
    /// The instruction set it was measured with.
    pub isa: Isa,
    /// The chosen strategies.
    pub tables: Tables,
}

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache directory or file could not be used (see [`UserCacheError`]).
    #[error("copy plan {0}")]
    Store(UserCacheError),
    /// The file is not a plan of this version.
    #[error("copy plan cache {path}: not a {SCHEMA} file ({why}); run `pagewise tune` again")]
    Malformed {
        /// The path.
        path: PathBuf,
        /// The parser's complaint.
        why: String,
    },
}

impl From<UserCacheError> for CacheError {
    fn from(e: UserCacheError) -> Self {
        // Said in the message, not as `source()`: said once.
        CacheError::Store(e)
    }
}

/// The directory to save plans in ([`user_cache::directory`] to write:
/// created if missing), and why the places before it were passed over.
pub fn directory() -> Result<Chosen, CacheError> {
    Ok(user_cache::directory(Purpose::Write)?)
}

/// What [`load`] found.
#[derive(Debug, Clone)]
pub struct Found {
    /// The plan cached for the key, and its path.
    pub plan: Option<(Tuned, PathBuf)>,
    /// Why cache directories were passed over on the way, one line each.
    pub passed_over: Vec<String>,
    /// The directory `pagewise tune` would save a plan in (the one looked
    /// in; it may not exist yet), or `None` when no place is usable for this
    /// user, so that a plan could not be saved.
    pub directory: Option<PathBuf>,
}

/// The plan cached for `key` and its path, looked for in the directory
/// [`user_cache::directory`] picks to read (nothing is created); no plan
/// when there is none. A file for another key (which only a hash collision
/// could bring) is treated as none. Costs a few `stat`s, one `open` and a
/// read of a few KiB.
pub fn load(key: &MachineKey) -> Result<Found, CacheError> {
    match user_cache::directory(Purpose::Read) {
        Ok(chosen) => Ok(Found {
            plan: load_from(&chosen.path, key)?,
            passed_over: chosen.passed_over,
            directory: Some(chosen.path),
        }),
        Err(UserCacheError::NoUsableDirectory(passed_over)) => Ok(Found {
            plan: None,
            passed_over,
            directory: None,
        }),
        Err(e) => Err(e.into()),
    }
}

/// [`load`] from a given directory.
pub fn load_from(dir: &Path, key: &MachineKey) -> Result<Option<(Tuned, PathBuf)>, CacheError> {
    let Some((text, path)) = user_cache::read(dir, &key.file_name(), MAX_FILE_BYTES)? else {
        return Ok(None);
    };
    let tuned: Tuned = serde_json::from_str(&text).map_err(|e| CacheError::Malformed {
        path: path.clone(),
        why: e.to_string(),
    })?;
    if tuned.schema != SCHEMA {
        return Err(CacheError::Malformed {
            path,
            why: format!("schema {:?}", tuned.schema),
        });
    }
    Ok((tuned.key == *key).then_some((tuned, path)))
}

/// Writes `tuned` to the cache under its key and returns the path.
pub fn save(tuned: &Tuned) -> Result<PathBuf, CacheError> {
    save_to(&directory()?.path, tuned)
}

/// [`save`] into a given directory.
pub fn save_to(dir: &Path, tuned: &Tuned) -> Result<PathBuf, CacheError> {
    let name = tuned.key.file_name();
    let mut text = serde_json::to_string_pretty(tuned).map_err(|e| CacheError::Malformed {
        path: dir.join(&name),
        why: e.to_string(),
    })?;
    text.push('\n');
    Ok(user_cache::write(dir, &name, text.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::plan::{default_tables, CpuKind};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn tuned(key: MachineKey) -> Tuned {
        Tuned {
            schema: SCHEMA.into(),
            key,
            measured_at: 1_700_000_000,
            isa: Isa::Avx2,
            tables: default_tables(CpuKind::AmdZen1To4, Isa::Avx2, true, Some(32 << 20)),
        }
    }

    fn key() -> MachineKey {
        MachineKey {
            vendor: "AuthenticAMD".into(),
            family: 26,
            model: 2,
            stepping: 1,
            microcode: Some("0x1000065".into()),
            kernel: Some("6.18.0".into()),
            glibc: Some("2.36".into()),
        }
    }

    #[test]
    fn a_saved_plan_loads_back_only_for_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("pagewise");
        let t = tuned(key());
        let path = save_to(&cache, &t).unwrap();
        let mode = std::fs::metadata(&cache).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let (back, at) = load_from(&cache, &key()).unwrap().unwrap();
        assert_eq!((back, at), (t, path));
        // Another microcode, kernel or glibc is another machine.
        for other in [
            MachineKey {
                microcode: Some("0x1000066".into()),
                ..key()
            },
            MachineKey {
                kernel: Some("6.19.0".into()),
                ..key()
            },
            MachineKey {
                glibc: Some("2.41".into()),
                ..key()
            },
            MachineKey {
                stepping: 0,
                ..key()
            },
        ] {
            assert!(load_from(&cache, &other).unwrap().is_none(), "{other:?}");
        }
        // No temporary files left behind.
        let names: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_missing_cache_is_no_plan() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_from(&dir.path().join("none"), &key())
            .unwrap()
            .is_none());
    }

    #[test]
    fn links_loose_modes_and_bad_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("pagewise");
        let path = save_to(&cache, &tuned(key())).unwrap();
        // A world-writable file.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = load_from(&cache, &key()).unwrap_err();
        assert!(err.to_string().contains("writable by group"), "{err}");
        // A symbolic link in its place.
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "{}").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let err = load_from(&cache, &key()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // Not JSON of this schema.
        std::fs::remove_file(&path).unwrap();
        user_cache::write(&cache, &key().file_name(), b"{\"schema\": 1}").unwrap();
        let err = load_from(&cache, &key()).unwrap_err();
        assert!(matches!(err, CacheError::Malformed { .. }), "{err}");
        // A group-writable directory.
        std::fs::remove_file(&path).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = load_from(&cache, &key()).unwrap_err();
        assert!(
            matches!(err, CacheError::Store(UserCacheError::Untrusted { .. })),
            "{err}"
        );
    }

    #[test]
    fn file_names_differ_by_key() {
        let a = key().file_name();
        let b = MachineKey { model: 3, ..key() }.file_name();
        assert_ne!(a, b);
        assert!(a.starts_with("copy-plan-") && a.ends_with(".json"), "{a}");
    }
}
