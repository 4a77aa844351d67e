//! The two child processes the bench measures: `homeagent mock-llm` (the
//! model) and `homeagent serve` (the agent), started from the same binary on
//! free loopback ports with a private data directory, the way a user
//! deploys them. Measuring separate processes over real sockets is the
//! point: an in-process bench would hide the HTTP and provider paths, and
//! the agent's RSS could not be read apart from the bench's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::error::BenchError;

/// How long a child may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The mock's knobs (`homeagent mock-llm --delay-ms ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockSettings {
    pub delay_ms: u64,
    pub chunk_delay_ms: u64,
    pub tool_sleep_ms: u64,
}

/// The agent's `[store] sync` for a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreSync {
    /// The default: every commit waits for the disk.
    #[default]
    Full,
    /// Commits survive a process crash without waiting for the disk.
    Normal,
}

impl StoreSync {
    fn toml(self) -> &'static str {
        match self {
            StoreSync::Full => "full",
            StoreSync::Normal => "normal",
        }
    }
}

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Result<TempDir, BenchError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "homeagent-bench-{}-{nanos}-{label}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).map_err(|source| BenchError::Io {
            what: format!("create the temporary directory {}", path.display()),
            source,
        })?;
        Ok(TempDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A mock and an agent serving it. Dropping it kills both children
/// (`kill_on_drop`) and removes the data directory.
#[derive(Debug)]
pub struct Stack {
    pub mock_url: String,
    pub serve_url: String,
    pub serve_pid: u32,
    pub mock_pid: u32,
    pub settings: MockSettings,
    // Field order is drop order: the children die before their directory goes.
    _serve: Child,
    _mock: Child,
    dir: TempDir,
}

impl Stack {
    /// Starts `binary mock-llm` with `settings`, then `binary serve` with a
    /// config pointing at it (`[tools] demo = true`, room for
    /// `max_sessions` sessions running at once, and the store's `sync`).
    pub async fn start(
        binary: &Path,
        settings: MockSettings,
        max_sessions: usize,
        sync: StoreSync,
        label: &str,
    ) -> Result<Stack, BenchError> {
        let dir = TempDir::new(label)?;
        let mut mock_cmd = Command::new(binary);
        mock_cmd.args([
            "mock-llm",
            "--listen",
            "127.0.0.1:0",
            "--delay-ms",
            &settings.delay_ms.to_string(),
            "--chunk-delay-ms",
            &settings.chunk_delay_ms.to_string(),
            "--tool-sleep-ms",
            &settings.tool_sleep_ms.to_string(),
        ]);
        let (mock, mock_url) = spawn_and_wait(
            mock_cmd,
            &dir.path().join("mock.log"),
            "HomeAgent mock LLM listening on ",
            "homeagent mock-llm",
            START_TIMEOUT,
        )
        .await?;
        let mock_pid = mock.id().ok_or_else(|| BenchError::Start {
            what: "homeagent mock-llm".into(),
            detail: "it exited right after printing its address".into(),
        })?;

        let config = dir.path().join("homeagent.toml");
        let toml = config_toml(&mock_url, max_sessions, sync);
        std::fs::write(&config, toml).map_err(|source| BenchError::Io {
            what: format!("write {}", config.display()),
            source,
        })?;
        let mut serve_cmd = Command::new(binary);
        serve_cmd
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0"]);
        let (serve, serve_url) = spawn_and_wait(
            serve_cmd,
            &dir.path().join("serve.log"),
            "HomeAgent listening on ",
            "homeagent serve",
            START_TIMEOUT,
        )
        .await?;
        let serve_pid = serve.id().ok_or_else(|| BenchError::Start {
            what: "homeagent serve".into(),
            detail: "it exited right after printing its address".into(),
        })?;
        Ok(Stack {
            mock_url,
            serve_url,
            serve_pid,
            mock_pid,
            settings,
            _serve: serve,
            _mock: mock,
            dir,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The agent's config: the mock as its only (OpenAI) source, the demo
/// tools on, and as many concurrent sessions as the bench will drive (the
/// default 16 would make the blast measure queueing behind the permit, not
/// the kernel), with the store's `sync`.
pub fn config_toml(mock_url: &str, max_sessions: usize, sync: StoreSync) -> String {
    format!(
        "[[llm.sources]]\n\
         name = \"mock\"\n\
         protocol = \"openai\"\n\
         base_url = \"{mock_url}/v1\"\n\
         model = \"mock\"\n\
         \n\
         [tools]\n\
         demo = true\n\
         \n\
         [scheduler]\n\
         max_concurrent_sessions = {}\n\
         \n\
         [store]\n\
         sync = \"{}\"\n",
        max_sessions.max(16),
        sync.toml()
    )
}

/// Spawns `cmd` (stdout piped, stderr to `log`) and waits for the line
/// starting with `prefix`; returns the child and the URL after the prefix.
pub(crate) async fn spawn_and_wait(
    mut cmd: Command,
    log: &Path,
    prefix: &str,
    what: &str,
    start_timeout: Duration,
) -> Result<(Child, String), BenchError> {
    let log_file = std::fs::File::create(log).map_err(|source| BenchError::Io {
        what: format!("create {}", log.display()),
        source,
    })?;
    // A clean environment for what matters: no key (loopback needs none),
    // no other config or data dir, no logging to slow the agent down.
    for var in [
        "HOMEAGENT_API_KEY",
        "HOMEAGENT_CONFIG",
        "HOMEAGENT_DATA_DIR",
        "OPENAI_API_KEY",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| BenchError::Io {
        what: format!("start {what}"),
        source,
    })?;
    let Some(stdout) = child.stdout.take() else {
        return Err(BenchError::Start {
            what: what.into(),
            detail: "no stdout pipe".into(),
        });
    };
    let found = tokio::time::timeout(start_timeout, read_address(stdout, prefix)).await;
    let log_tail = || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(10).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    match found {
        Ok(Some(url)) => Ok((child, url)),
        Ok(None) => Err(BenchError::Start {
            what: what.into(),
            detail: format!(
                "it exited without printing its address; its log:\n{}",
                log_tail()
            ),
        }),
        Err(_) => Err(BenchError::Start {
            what: what.into(),
            detail: format!(
                "no address within {} s; its log:\n{}",
                start_timeout.as_secs(),
                log_tail()
            ),
        }),
    }
}

/// Reads lines until one starts with `prefix`, then keeps draining stdout
/// in the background so the child never blocks on a full pipe.
async fn read_address(stdout: ChildStdout, prefix: &str) -> Option<String> {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(rest) = line.strip_prefix(prefix) {
            let url = rest
                .split_whitespace()
                .next()?
                .trim_end_matches('/')
                .to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Some(url);
        }
    }
    None
}

/// The resident set size of `pid` in kB, from `/proc/<pid>/status`.
pub fn rss_kb(pid: u32) -> Result<u64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let text = read_status(&path)?;
    status_value(&text, "VmRSS").ok_or_else(|| BenchError::Start {
        what: format!("process {pid}"),
        detail: format!("{path} has no VmRSS line"),
    })
}

/// The most memory and threads a process has held, as far as
/// `/proc/<pid>/status` tells: `VmHWM` is the peak resident set, and
/// tokio's idle blocking threads linger 10 s, so `Threads` read just after
/// a burst is about its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessPeak {
    pub peak_rss_kb: u64,
    pub threads: u64,
}

/// [`ProcessPeak`] of `pid`, or `None` where `/proc` cannot tell.
pub fn process_peak(pid: u32) -> Option<ProcessPeak> {
    let text = read_status(&format!("/proc/{pid}/status")).ok()?;
    Some(ProcessPeak {
        peak_rss_kb: status_value(&text, "VmHWM")?,
        threads: status_value(&text, "Threads")?,
    })
}

/// Context switches of every thread of `pid` so far, voluntary and not,
/// summed over `/proc/<pid>/task/*/status`; `None` where `/proc` cannot
/// tell. A thread that exits takes its count with it, so a difference
/// over a window in which threads exit is a lower bound.
pub fn context_switches(pid: u32) -> Option<u64> {
    sum_over_threads(pid, "status", switches_in_status)
}

/// Nanoseconds every thread of `pid` has run on a CPU so far, summed over
/// `/proc/<pid>/task/*/schedstat`; `None` where `/proc` cannot tell. Unlike
/// `/proc/<pid>/stat` (whole clock ticks, 10 ms here) it resolves the
/// ~1 ms an input costs. Threads that exit take their time with them, as
/// in [`context_switches`].
pub fn cpu_ns(pid: u32) -> Option<u64> {
    sum_over_threads(pid, "schedstat", cpu_ns_in_schedstat)
}

/// The first field of a thread's `schedstat` line: time on the CPU, in ns
/// (then time waiting to run, and time slices run).
pub fn cpu_ns_in_schedstat(schedstat: &str) -> Option<u64> {
    let mut fields = schedstat.split_whitespace();
    let on_cpu = fields.next()?.parse().ok()?;
    // A full line has all three; fewer means it is not what we think.
    fields.nth(1)?;
    Some(on_cpu)
}

/// `read` of `/proc/<pid>/task/<tid>/<file>`, summed over the threads.
fn sum_over_threads(pid: u32, file: &str, read: fn(&str) -> Option<u64>) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        // A thread that ended after the listing has no file: skip it.
        if let Ok(text) = std::fs::read_to_string(task.path().join(file)) {
            total += read(&text)?;
        }
    }
    Some(total)
}

/// `voluntary_ctxt_switches` + `nonvoluntary_ctxt_switches` of one
/// thread's status text.
pub fn switches_in_status(status: &str) -> Option<u64> {
    Some(
        status_value(status, "voluntary_ctxt_switches")?
            + status_value(status, "nonvoluntary_ctxt_switches")?,
    )
}

fn read_status(path: &str) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|source| BenchError::Io {
        what: format!("read {path} (memory is read from /proc, so Linux only)"),
        source,
    })
}

/// The number on the `<field>:  1234 kB` (or unitless `Threads:  4`) line
/// of a `/proc/<pid>/status` text; `None` for a missing field or another
/// unit.
pub fn status_value(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| {
        l.strip_prefix(field)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let mut parts = line[field.len() + 1..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kb_or_as_plain_counts() {
        let status = "Name:\thomeagent\nVmPeak:\t  99999 kB\nVmHWM:\t  20000 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(status_value(status, "VmRSS"), Some(12345));
        assert_eq!(status_value(status, "VmHWM"), Some(20000));
        assert_eq!(status_value(status, "Threads"), Some(4));
        // A field whose name starts another's is not mistaken for it.
        assert_eq!(status_value("VmRSSx:\t5 kB\n", "VmRSS"), None);
        assert_eq!(status_value("Name:\tx\n", "VmRSS"), None);
        assert_eq!(status_value("VmRSS:\t12 MB\n", "VmRSS"), None);
    }

    #[test]
    fn a_threads_switches_are_its_voluntary_and_involuntary_ones() {
        let status = "Name:\ttokio-rt-worker\nThreads:\t1\nvoluntary_ctxt_switches:\t1500\nnonvoluntary_ctxt_switches:\t27\n";
        assert_eq!(switches_in_status(status), Some(1527));
        assert_eq!(switches_in_status("voluntary_ctxt_switches:\t3\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_switched_at_least_once_per_thread_that_slept() {
        let before = context_switches(std::process::id()).unwrap();
        // Each sleep parks the thread: a voluntary switch.
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = context_switches(std::process::id()).unwrap();
        assert!(after >= before + 3, "{before} -> {after}");
    }

    #[test]
    fn a_threads_cpu_time_is_the_first_schedstat_field() {
        assert_eq!(cpu_ns_in_schedstat("765455 120033 17\n"), Some(765_455));
        assert_eq!(cpu_ns_in_schedstat("765455 12\n"), None);
        assert_eq!(cpu_ns_in_schedstat("x 1 2\n"), None);
        assert_eq!(cpu_ns_in_schedstat(""), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_cpu_time_rises_while_it_works() {
        let pid = std::process::id();
        let before = cpu_ns(pid).unwrap();
        let started = std::time::Instant::now();
        let mut spins = 0u64;
        // Work until the count shows 2 ms more (the cap only stops a
        // reading that never rises from spinning for ever).
        while cpu_ns(pid).unwrap() < before + 2_000_000
            && started.elapsed() < std::time::Duration::from_secs(20)
        {
            spins = std::hint::black_box(spins + 1);
        }
        let after = cpu_ns(pid).unwrap();
        assert!(after >= before + 2_000_000, "{before} -> {after}");
    }

    #[test]
    fn the_config_points_at_the_mock_with_demo_tools() {
        let toml = config_toml("http://127.0.0.1:4000", 240, StoreSync::Full);
        assert!(
            toml.contains("base_url = \"http://127.0.0.1:4000/v1\"\n"),
            "{toml}"
        );
        assert!(toml.contains("[tools]\ndemo = true\n"), "{toml}");
        assert!(toml.contains("max_concurrent_sessions = 240\n"), "{toml}");
        assert!(toml.contains("[store]\nsync = \"full\"\n"), "{toml}");
        let normal = config_toml("http://x", 4, StoreSync::Normal);
        assert!(
            normal.contains("max_concurrent_sessions = 16\n"),
            "{normal}"
        );
        assert!(normal.contains("[store]\nsync = \"normal\"\n"), "{normal}");
    }
}
