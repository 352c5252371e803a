//! Abuse of every subcommand through the real binary: output to `/dev/full`
//! and to a closed pipe, stderr to `/dev/full`, numbers out of every range,
//! FIFOs, directories, devices, missing and over-long paths for every file
//! argument, another user's files, and programs that cannot start.
//!
//! What must hold for each run: no panic or crash (exit status 101, 134, 135
//! or 139, or death by a signal), no hang (each run has a time limit and is
//! killed after it), and where the input is refused, exactly one line on
//! stderr, starting `pagewise:`, that says its cause once, and a non-zero
//! exit status. docs/TESTING.md has the table of what is tried.

mod common;

use pagewise::text::function_table::FunctionTable;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one run may take before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(20);

/// Exit statuses of a Rust panic (101) and of the signals a crash raises
/// (SIGABRT, SIGBUS, SIGSEGV as 128 + N).
const CRASH_STATUSES: [i32; 4] = [101, 134, 135, 139];

/// Where a run's standard output or error goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sink {
    /// A file the test reads afterwards.
    Captured,
    /// `/dev/full`: every write fails with `ENOSPC`.
    Full,
    /// A pipe whose reading end is already closed: writes fail with `EPIPE`.
    ClosedPipe,
}

/// How one run ended.
#[derive(Debug)]
struct Outcome {
    what: String,
    status: Option<i32>,
    signal: Option<i32>,
    hung: bool,
    stderr: String,
}

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("pagewise")
}

fn pagewise<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut c = Command::new(bin());
    // `run --huge-text` installs its preload library in a cache: never the user's.
    c.args(args)
        .env("XDG_CACHE_HOME", common::test_cache_home());
    c
}

fn sink(s: Sink, file: &Path) -> Stdio {
    match s {
        Sink::Captured => File::create(file).unwrap().into(),
        Sink::Full => std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
            .into(),
        Sink::ClosedPipe => {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            writer.into()
        }
    }
}

/// Runs `cmd` with stdin empty and the given sinks; kills its process group
/// after [`LIMIT`].
fn run_with(mut cmd: Command, stdout: Sink, stderr: Sink) -> Outcome {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let what = format!("{cmd:?}");
    let dir = tempfile::tempdir().unwrap();
    let err_file = dir.path().join("stderr");
    cmd.stdin(Stdio::null())
        .stdout(sink(stdout, &dir.path().join("stdout")))
        .stderr(sink(stderr, &err_file))
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > LIMIT {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Outcome {
        what,
        status: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        hung: status.is_none(),
        stderr: std::fs::read_to_string(&err_file).unwrap_or_default(),
    }
}

fn run(cmd: Command) -> Outcome {
    run_with(cmd, Sink::Captured, Sink::Captured)
}

impl Outcome {
    /// Ended by itself, without a panic or a crash.
    fn no_crash(&self) -> &Self {
        assert!(!self.hung, "{}: still running after {LIMIT:?}", self.what);
        assert_eq!(self.signal, None, "{}: killed by a signal", self.what);
        assert!(
            !self.status.is_some_and(|s| CRASH_STATUSES.contains(&s)),
            "{}: exit status {:?}, a crash\n{}",
            self.what,
            self.status,
            self.stderr
        );
        self
    }

    /// Refused: a non-zero status and one line on stderr that names pagewise
    /// and says its cause once.
    fn one_line_error(&self) -> &Self {
        self.no_crash();
        assert_ne!(self.status, Some(0), "{}: succeeded", self.what);
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{}: not one line:\n{}",
            self.what,
            self.stderr
        );
        let line = lines[0];
        assert!(line.starts_with("pagewise"), "{}: {line}", self.what);
        assert!(
            line.matches("(os error").count() <= 1,
            "{}: cause said twice: {line}",
            self.what
        );
        let parts: Vec<&str> = line.split(": ").collect();
        assert!(
            parts.windows(2).all(|w| w[0] != w[1]),
            "{}: a part repeats: {line}",
            self.what
        );
        self
    }

    fn status(&self, expected: i32) -> &Self {
        assert_eq!(
            self.status,
            Some(expected),
            "{}:\n{}",
            self.what,
            self.stderr
        );
        self
    }
}

/// `bench memcpy` in a fraction of a second: one tiny size, one trial.
const QUICK_MEMCPY: [&str; 10] = [
    "bench",
    "memcpy",
    "--sizes",
    "8",
    "--trials",
    "1",
    "--no-cold",
    "--no-misaligned",
    "--no-end-to-end",
    "-q",
];

/// A folder of things to point commands at.
struct Fixture {
    dir: tempfile::TempDir,
    /// A profile whose samples fall in `main` of the pagewise binary.
    profile: PathBuf,
    /// A queue with two records.
    queue: PathBuf,
    /// A FIFO nobody writes to or reads from.
    fifo: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let table = FunctionTable::read(&bin()).unwrap();
        let main = &table.functions()[table.by_name("main").expect("main in pagewise")];
        let profile = dir.path().join("p.profile");
        std::fs::write(
            &profile,
            format!(
                "# pagewise-profile 1\nobject 0 {}\nstack 10 0:{:x}\n",
                bin().display(),
                main.vaddr
            ),
        )
        .unwrap();
        let queue = dir.path().join("q.queue");
        let out = pagewise(&[
            OsString::from("queue"),
            "append".into(),
            queue.clone().into(),
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"one\ntwo\n")?;
            c.wait()
        })
        .unwrap();
        assert!(out.success(), "could not make the queue fixture");
        let fifo = dir.path().join("fifo");
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        Fixture {
            dir,
            profile,
            queue,
            fifo,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn s(p: &Path) -> String {
        p.display().to_string()
    }

    /// Commands that print to stdout and succeed, quickly.
    fn printing_commands(&self) -> Vec<Vec<String>> {
        let (p, b, q) = (
            Self::s(&self.profile),
            Self::s(&bin()),
            Self::s(&self.queue),
        );
        let out = Self::s(&self.path("order.txt"));
        let mut list: Vec<Vec<String>> = [
            "doctor",
            "doctor --json",
            "--help",
            "--version",
            "queue --help",
            "bench heap-churn-worker --mode malloc --threads 1 --min-size 4K --max-size 4K --iterations 1 --warmup 0",
            "bench first-touch --size 2M --trials 1 -q --only malloc",
            "bench first-touch --size 2M --trials 1 -q --only malloc --json",
            "bench mmap-prefault --size 64K --record 4K --trials 1 -q --only plain",
            "stat --json -o - -- true",
        ]
        .iter()
        .map(|c| c.split(' ').map(String::from).collect())
        .collect();
        for extra in [&["--no-fleet"][..], &["--no-fleet", "--json"]] {
            list.push(
                QUICK_MEMCPY
                    .iter()
                    .chain(extra)
                    .map(|a| a.to_string())
                    .collect(),
            );
        }
        for args in [
            vec!["queue", "inspect", &q],
            vec!["queue", "inspect", "--json", &q],
            vec!["queue", "tail", &q],
            vec!["text", "footprint", &p, "--binary", &b],
            vec!["text", "footprint", "--json", &p, "--binary", &b],
            vec!["text", "order", &p, "--binary", &b, "-o", &out],
            vec!["text", "order", "--json", &p, "--binary", &b, "-o", &out],
        ] {
            list.push(args.into_iter().map(String::from).collect());
        }
        list
    }
}

/// Before: `println!` panicked (exit status 101) on `ENOSPC`.
#[test]
fn output_to_a_full_device_is_a_one_line_error() {
    let f = Fixture::new();
    for args in f.printing_commands() {
        let outcome = run_with(pagewise(&args), Sink::Full, Sink::Captured);
        outcome.one_line_error().status(1);
        assert_eq!(
            outcome.stderr.trim(),
            "pagewise: cannot write output: No space left on device (os error 28)",
            "{}",
            outcome.what
        );
    }
}

/// Before: `println!` panicked on `EPIPE` (`pagewise doctor | head -n1`, 1
/// time in 3). Now the run ends quietly with status 141, as when SIGPIPE ends
/// a program.
#[test]
fn a_closed_stdout_ends_quietly_with_status_141() {
    let f = Fixture::new();
    for args in f.printing_commands() {
        let outcome = run_with(pagewise(&args), Sink::ClosedPipe, Sink::Captured);
        outcome.no_crash().status(141);
        assert_eq!(outcome.stderr, "", "{}", outcome.what);
    }
}

/// Before: `eprintln!` panicked when stderr was full, so an error, a
/// progress line or `queue append`'s summary ended in exit status 101.
#[test]
fn a_full_stderr_never_crashes() {
    let f = Fixture::new();
    let q = Fixture::s(&f.queue);
    let missing = Fixture::s(&f.path("missing"));
    for (args, ok) in [
        (vec!["queue", "inspect", missing.as_str()], false),
        (vec!["queue", "append", q.as_str()], true),
        (vec!["--no-such-flag"], false),
        (vec!["stat", "--pid", "1", "--seconds", "1e20"], false),
        (
            vec![
                "bench",
                "first-touch",
                "--size",
                "2M",
                "--trials",
                "1",
                "--only",
                "malloc",
            ],
            true,
        ),
    ] {
        let outcome = run_with(pagewise(&args), Sink::Captured, Sink::Full);
        outcome.no_crash();
        assert_eq!(outcome.status == Some(0), ok, "{}", outcome.what);
    }
}

/// Every numeric option of every subcommand, with values out of its range:
/// one usage line, exit status 2. Before: `stat --pid P --seconds 1e20` and
/// `text profile --seconds 1e20` panicked; `--keep-heap-pad 16TiB` was taken.
#[test]
fn numbers_out_of_range_are_one_line_usage_errors() {
    const OPTIONS: &[(&str, &[&str])] = &[
        ("stat", &["interval", "pid", "seconds", "top"]),
        ("text profile", &["frequency", "pid", "seconds"]),
        ("text order", &["max-cluster"]),
        ("run", &["keep-heap-pad"]),
        ("queue append", &["chunk-size"]),
        (
            "bench memcpy",
            &[
                "trials",
                "sizes",
                "fleet-calls",
                "parallel",
                "end-to-end-records",
            ],
        ),
        (
            "bench memset",
            &["trials", "sizes", "fleet-calls", "parallel"],
        ),
        ("bench first-touch", &["size", "threads", "trials"]),
        (
            "bench mmap-prefault",
            &["size", "record", "window", "max-window", "trials"],
        ),
        (
            "bench queue",
            &[
                "record",
                "records",
                "latency-records",
                "rate",
                "window",
                "trials",
            ],
        ),
        (
            "bench heap-churn",
            &[
                "threads",
                "min-size",
                "max-size",
                "iterations",
                "warmup",
                "trials",
            ],
        ),
        (
            "bench heap-churn-worker",
            &["threads", "min-size", "max-size", "iterations", "warmup"],
        ),
        (
            "bench itlb",
            &["functions", "padding", "zipf", "rounds", "trials"],
        ),
    ];
    let values = [
        "-1",
        "18446744073709551615",
        "99999999999999999999999",
        "1e20",
        "NaN",
        "-inf",
        "16EiB",
    ];
    let mut runs = 0;
    for (command, options) in OPTIONS {
        for option in *options {
            // `--option=-1`, and a negative number given apart, `--option -1`:
            // the option's value too, refused with its range.
            let joined = values.map(|value| vec![format!("--{option}={value}")]);
            let apart = ["-1", "-2.5"].map(|value| vec![format!("--{option}"), value.to_owned()]);
            for given in joined.into_iter().chain(apart) {
                let mut args: Vec<String> = command.split(' ').map(String::from).collect();
                args.extend(given);
                let outcome = run(pagewise(&args));
                outcome.one_line_error().status(2);
                assert!(
                    outcome.stderr.contains("invalid value"),
                    "{}: {}",
                    outcome.what,
                    outcome.stderr
                );
                assert!(
                    !outcome.stderr.contains("unexpected argument"),
                    "{}: {}",
                    outcome.what,
                    outcome.stderr
                );
                runs += 1;
            }
        }
    }
    // A seed may be any 64-bit number, but no more and not negative.
    for value in ["-1", "18446744073709551616", "1e3"] {
        run(pagewise(&["bench", "itlb", &format!("--seed={value}")]))
            .one_line_error()
            .status(2);
    }
    assert!(runs > 250, "{runs}");
}

/// A command line clap cannot parse is one usage line that points at the
/// help of the (sub)command it is about, not always `pagewise --help`.
#[test]
fn parse_errors_point_at_their_subcommands_help() {
    for (args, help) in [
        (
            &["bench", "run", "--bogus", "--", "true"][..],
            "pagewise bench run --help",
        ),
        (
            &["bench", "run", "-n", "x", "--", "true"],
            "pagewise bench run --help",
        ),
        (&["bench", "bogus"], "pagewise bench --help"),
        (&["queue", "inspect"], "pagewise queue inspect --help"),
        (&["text", "order", "--bogus"], "pagewise text order --help"),
        (&["doctor", "--bogus"], "pagewise doctor --help"),
        (&["bogus"], "pagewise --help"),
    ] {
        let outcome = run(pagewise(args));
        outcome.one_line_error().status(2);
        assert!(
            outcome
                .stderr
                .trim_end()
                .ends_with(&format!("(see '{help}')")),
            "{}: {}",
            outcome.what,
            outcome.stderr
        );
    }
}

/// What a file argument is replaced with.
#[derive(Debug, Clone, Copy)]
enum Bad {
    Fifo,
    Directory,
    Missing,
    /// `/dev/zero` (reads never end) for inputs, `/dev/full` for outputs.
    Device,
    /// Longer than PATH_MAX.
    Long,
    Empty,
}

impl Fixture {
    fn bad(&self, bad: Bad, output: bool, suffix: &str) -> String {
        match bad {
            Bad::Fifo => {
                let p = self.path(&format!("fifo{suffix}"));
                if !p.exists() {
                    assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
                }
                Self::s(&p)
            }
            Bad::Directory => {
                let p = self.path(&format!("dir{suffix}"));
                std::fs::create_dir_all(&p).unwrap();
                Self::s(&p)
            }
            Bad::Missing => Self::s(&self.path(&format!("no/such/dir/file{suffix}"))),
            Bad::Device if output => "/dev/full".into(),
            Bad::Device => "/dev/zero".into(),
            Bad::Long => format!("/{}{suffix}", "x/".repeat(3000)),
            Bad::Empty => String::new(),
        }
    }
}

/// Every file argument given a FIFO, a directory, a device, a missing, an
/// over-long or an empty path: one line and a non-zero status, at once.
/// Before: `text footprint` with a FIFO and `run --huge-text=hot:FIFO` hung,
/// `--binary /dev/zero` read until memory ran out, and a directory said
/// "Is a directory (os error 21): Is a directory (os error 21)".
#[test]
fn bad_file_arguments_are_one_line_errors_without_hanging() {
    let f = Fixture::new();
    let (p, b) = (Fixture::s(&f.profile), Fixture::s(&bin()));
    let out = Fixture::s(&f.path("out.txt"));
    let memcpy = QUICK_MEMCPY;
    // (arguments with "{}" for the bad path, is it an output, file name suffix)
    let mut cases: Vec<(Vec<&str>, bool, &str)> = vec![
        (vec!["text", "footprint", "{}", "--binary", &b], false, ""),
        (vec!["text", "footprint", &p, "--binary", "{}"], false, ""),
        (
            vec!["text", "footprint", &p, "--binary", &b, "--order", "{}"],
            false,
            "",
        ),
        (
            vec!["text", "order", "{}", "--binary", &b, "-o", &out],
            false,
            "",
        ),
        (
            vec!["text", "order", &p, "--binary", "{}", "-o", &out],
            false,
            "",
        ),
        (
            vec!["text", "order", &p, "--binary", &b, "-o", "{}"],
            true,
            "",
        ),
        (vec!["run", "--huge-text=hot:{}", "--", "true"], false, ""),
        (vec!["queue", "inspect", "{}"], false, ""),
        (vec!["queue", "tail", "{}"], false, ""),
        (vec!["queue", "tail", "--follow", "{}"], false, ""),
        (vec!["queue", "append", "{}"], true, ""),
        (vec!["stat", "--", "{}"], false, ""),
        (vec!["run", "--keep-heap", "--", "{}"], false, ""),
    ];
    let mut with_fleet: Vec<&str> = memcpy.to_vec();
    with_fleet.extend(["--fleet-file", "{}"]);
    cases.push((with_fleet, false, ""));
    let mut with_plot: Vec<&str> = memcpy.to_vec();
    with_plot.extend(["--no-fleet", "--plot", "{}"]);
    cases.push((with_plot, true, ".svg"));
    let mut runs = 0;
    for (args, output, suffix) in &cases {
        for bad in [
            Bad::Fifo,
            Bad::Directory,
            Bad::Missing,
            Bad::Device,
            Bad::Long,
            Bad::Empty,
        ] {
            if matches!(bad, Bad::Device | Bad::Empty) && args.contains(&"--plot") {
                continue; // the name must end in .svg
            }
            let path = f.bad(bad, *output, suffix);
            let args: Vec<String> = args.iter().map(|a| a.replace("{}", &path)).collect();
            let outcome = run(pagewise(&args));
            outcome.one_line_error();
            runs += 1;
        }
    }
    // Outputs that are refused after the work (the report is written at the end).
    for bad in [Bad::Fifo, Bad::Directory, Bad::Missing, Bad::Device] {
        let path = f.bad(bad, true, "");
        for args in [
            vec!["stat", "-o", path.as_str(), "--", "true"],
            vec!["text", "profile", "-o", path.as_str(), "--", "true"],
        ] {
            run(pagewise(&args)).one_line_error();
            runs += 1;
        }
        // No fault stacks without tracefs: then a note, not an error; never a hang.
        run(pagewise(&["stat", "--flame", path.as_str(), "--", "true"])).no_crash();
    }
    // Folders the benchmarks write in: refused in one line, or the row
    // reported as not run; never a hang.
    for bad in [Bad::Fifo, Bad::Missing, Bad::Device] {
        let path = f.bad(bad, true, "");
        run(pagewise(&[
            "bench",
            "mmap-prefault",
            "--size",
            "64K",
            "--record",
            "4K",
            "--trials",
            "1",
            "-q",
            "--dir",
            &path,
        ]))
        .no_crash();
        run(pagewise(&[
            "bench",
            "queue",
            "--records",
            "1000",
            "--latency-records",
            "100",
            "--trials",
            "1",
            "-q",
            "--only",
            "tmpfs",
            "--tmpfs-dir",
            &path,
        ]))
        .no_crash();
    }
    assert!(runs >= 90, "{runs}");
}

/// The second user's commands as `setpriv … pagewise ARGS`, with a home
/// of its own in `dir` (which it must be able to enter), or why not.
fn as_nobody(dir: &Path, args: &[&str]) -> Result<Command, String> {
    if !pagewise_testkit::is_root() {
        return Err("not running as root".into());
    }
    if let Some(why) = pagewise_testkit::tool_missing("setpriv") {
        return Err(why);
    }
    let mut c = pagewise_testkit::pagewise_as_nobody(&bin(), dir);
    c.args(args);
    Ok(c)
}

/// User nobody against root's files: a profile, queue, order file and
/// distribution it may not read, and a report file and folder it may not
/// write. Each is a one-line permission error.
#[test]
fn another_users_files_are_one_line_errors() {
    let f = Fixture::new();
    if let Err(why) = as_nobody(f.dir.path(), &[]) {
        pagewise_testkit::skip!(pagewise_testkit::Need::Root, "needs a second user: {why}");
    }
    let private = |name: &str, from: &Path| {
        let p = f.path(name);
        std::fs::copy(from, &p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        Fixture::s(&p)
    };
    let profile = private("private.profile", &f.profile);
    let queue = private("private.queue", &f.queue);
    let binary = private("private.bin", &f.profile);
    let readable_queue = Fixture::s(&f.queue);
    let report = f.path("root-report.txt");
    std::fs::write(&report, "root's").unwrap();
    let report = Fixture::s(&report);
    let root_dir = f.path("root-only");
    std::fs::create_dir(&root_dir).unwrap();
    let new_file = Fixture::s(&root_dir.join("new.txt"));
    let p = Fixture::s(&f.profile);
    let b = Fixture::s(&bin());
    let huge_text = format!("--huge-text=hot:{profile}");
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["text", "footprint", &profile, "--binary", &b],
        vec!["text", "footprint", &p, "--binary", &binary],
        vec!["text", "order", &p, "--binary", &b, "-o", &report],
        vec!["text", "order", &p, "--binary", &b, "-o", &new_file],
        vec!["queue", "inspect", &queue],
        vec!["queue", "tail", &queue],
        vec!["queue", "append", &readable_queue],
        vec!["queue", "append", &new_file],
        vec!["run", &huge_text, "--", "true"],
        vec!["stat", "-o", &report, "--", "true"],
    ];
    let mut fleet = QUICK_MEMCPY.to_vec();
    fleet.extend(["--fleet-file", &profile]);
    cases.push(fleet);
    for args in &cases {
        let outcome = run(as_nobody(f.dir.path(), args).unwrap());
        outcome.one_line_error();
    }
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "root's",
        "nobody wrote root's file"
    );
}

/// `run` and `stat` give a program that cannot start the same status, as a
/// shell would: 127 not found, 126 found but not executable. Before: `run`
/// gave 1 for a file without execute permission (where `stat` gave 126) and
/// 127 for a directory (126).
#[test]
fn run_and_stat_agree_on_programs_that_cannot_start() {
    let f = Fixture::new();
    let data = f.path("data.txt");
    std::fs::write(&data, "not a program\n").unwrap();
    let bad_interpreter = f.path("bad-interpreter");
    std::fs::write(&bad_interpreter, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&bad_interpreter, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = f.path("a-dir");
    std::fs::create_dir(&dir).unwrap();
    let stat_works = run(pagewise(&["stat", "--", "true"])).status == Some(0);
    for (program, status) in [
        (data, 126),
        (dir, 126),
        (f.fifo.clone(), 126),
        (f.path("missing"), 127),
        (bad_interpreter, 127),
        (PathBuf::from("no-such-program-on-path"), 127),
    ] {
        let program = Fixture::s(&program);
        run(pagewise(&["run", "--keep-heap", "--", &program]))
            .one_line_error()
            .status(status);
        run(pagewise(&["run", "--huge-text", "--", &program]))
            .one_line_error()
            .status(status);
        if stat_works {
            run(pagewise(&["stat", "--", &program]))
                .one_line_error()
                .status(status);
        }
    }
    if !stat_works {
        pagewise_testkit::skip_part!(
            "stat",
            pagewise_testkit::Need::PerfEvents,
            "`pagewise stat -- true` does not run here, so its statuses were not compared"
        );
    }
}

/// A script without a `#!` line, which `exec` refuses (`ENOEXEC`), runs
/// with /bin/sh as a shell runs it (`/bin/sh FILE ARGS…`), with its
/// arguments and exit status: under `run --keep-heap`, `run --huge-text`
/// (both prepare /bin/sh), `stat`, and both sides of `bench run`.
#[test]
fn a_script_without_a_shebang_line_runs_with_sh() {
    let f = Fixture::new();
    let ran = f.path("ran");
    let script = f.path("no-shebang");
    std::fs::write(
        &script,
        format!("echo \"$0 $*\" >> {}\nexit 3\n", ran.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Fixture::s(&script);
    let line = format!("{script} a b\n");
    let stat_works = run(pagewise(&["stat", "--", "true"])).status == Some(0);
    let mut commands = vec![
        vec!["run", "--keep-heap", "--"],
        vec!["run", "--huge-text", "--"],
    ];
    if stat_works {
        commands.push(vec!["stat", "--"]);
    } else {
        pagewise_testkit::skip_part!(
            "stat",
            pagewise_testkit::Need::PerfEvents,
            "`pagewise stat -- true` does not run here"
        );
    }
    for command in commands {
        let _ = std::fs::remove_file(&ran);
        let args: Vec<&str> = command
            .iter()
            .copied()
            .chain([&*script, "a", "b"])
            .collect();
        run(pagewise(&args)).no_crash().status(3);
        assert_eq!(std::fs::read_to_string(&ran).unwrap(), line, "{args:?}");
    }
    // One baseline run and one under the fix: both run the script and agree.
    let _ = std::fs::remove_file(&ran);
    run(pagewise(&[
        "bench",
        "run",
        "--fix",
        "keep-heap",
        "-n",
        "1",
        "--warmup",
        "0",
        "-q",
        "--",
        &script,
        "a",
        "b",
    ]))
    .no_crash()
    .status(0);
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), line.repeat(2));
}

/// `PAGEWISE_HUGE_TEXT=hot-pages:FIFO` in the preload, which runs before
/// the program's `main`: the program starts and runs on. (With the earlier
/// `hot:PROFILE` the preload read the profile itself and blocked before
/// `main`; `pagewise run` now reads it and the check there is
/// `bad_file_arguments_are_one_line_errors_without_hanging`.)
#[test]
fn the_preload_does_not_block_on_a_fifo_of_hot_pages() {
    let f = Fixture::new();
    let mut cmd = Command::new("true");
    cmd.env("LD_PRELOAD", common::preload_library()).env(
        "PAGEWISE_HUGE_TEXT",
        format!("hot-pages:{}", f.fifo.display()),
    );
    run(cmd).no_crash().status(0);
}
