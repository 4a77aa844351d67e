//! What `cmd_run` may run: the allowlist, the write switch, time and output
//! limits, and the environment a child gets.
//!
//! The lists here are the security boundary, so they are plain constants a
//! reviewer can read in one screen:
//!
//! - [`DEFAULT_ALLOWLIST`]: read-only inspection programs. Every entry that
//!   has an option able to write a file or set system state is modelled by
//!   the write guard (`guard.rs`); entries without such options need no model.
//! - [`PROGRAM_RUNNERS`]: shells, interpreters and programs whose job is to
//!   run another program. Allowing one of them would allow everything, so they
//!   are refused even when a configuration lists them.
//! - [`WRITE_ONLY_PROGRAMS`]: programs whose only job is to change files;
//!   they run only when listed *and* `allow_writes` is on.

use std::time::Duration;

/// The search path every child gets. Fixed rather than inherited, so the
/// agent's own `PATH` (which may include a writable directory) never decides
/// which binary a name means.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Variables copied from the agent's environment into every child, when set.
pub const INHERITED_ENV: &[&str] = &["HOME", "LANG", "TZ"];

/// Read-only inspection programs allowed when no allowlist is configured.
pub const DEFAULT_ALLOWLIST: &[&str] = &[
    "basename",
    "cat",
    "cut",
    "date",
    "df",
    "dirname",
    "du",
    "echo",
    "false",
    "find",
    "free",
    "grep",
    "groups",
    "head",
    "hostname",
    "id",
    "ls",
    "md5sum",
    "nl",
    "nproc",
    "printenv",
    "ps",
    "pwd",
    "readlink",
    "realpath",
    "sed",
    "seq",
    "sha1sum",
    "sha256sum",
    "sleep",
    "sort",
    "stat",
    "tac",
    "tail",
    "tr",
    "true",
    "uname",
    "uniq",
    "uptime",
    "wc",
    "whoami",
];

/// Programs that run other programs (shells, interpreters, wrappers), or
/// can through an option or a command of their own (`tar
/// --checkpoint-action=exec=`, `rsync -e`, `zip -TT`, `scp -S`, an editor's
/// or a database shell's `!`). Refused even when configured: any of them
/// turns the allowlist into "everything". A configured program that is on
/// no list runs with no option guard, so this list errs on the long side.
pub const PROGRAM_RUNNERS: &[&str] = &[
    "aria2c",
    "ash",
    "at",
    "awk",
    "bash",
    "batch",
    "bun",
    "busybox",
    "bwrap",
    "capsh",
    "cgexec",
    "chpst",
    "chroot",
    "chrt",
    "command",
    "cpio",
    "crontab",
    "csh",
    "daemonize",
    "dash",
    "dc",
    "deno",
    "doas",
    "docker",
    "dotnet",
    "ed",
    "elvish",
    "emacs",
    "env",
    "ex",
    "exec",
    "expect",
    "fakeroot",
    "firejail",
    "fish",
    "flatpak-spawn",
    "flock",
    "gawk",
    "gdb",
    "git",
    "groovy",
    "guile",
    "ionice",
    "ip",
    "irb",
    "java",
    "jshell",
    "julia",
    "kotlin",
    "ksh",
    "kubectl",
    "ld.so",
    "less",
    "ltrace",
    "lua",
    "m4",
    "make",
    "man",
    "mawk",
    "mksh",
    "more",
    "mysql",
    "nawk",
    "nc",
    "ncat",
    "netcat",
    "newgrp",
    "nice",
    "nix-shell",
    "node",
    "nodejs",
    "nohup",
    "npm",
    "npx",
    "nsenter",
    "nu",
    "numactl",
    "nvim",
    "ocaml",
    "parallel",
    "perl",
    "php",
    "pip",
    "pip3",
    "pkexec",
    "podman",
    "posh",
    "powershell",
    "prlimit",
    "proot",
    "psql",
    "pwsh",
    "python",
    "python2",
    "python3",
    "R",
    "racket",
    "raku",
    "rbash",
    "rksh",
    "Rscript",
    "rsync",
    "ruby",
    "run-parts",
    "runcon",
    "runuser",
    "scala",
    "scp",
    "screen",
    "script",
    "setarch",
    "setpriv",
    "setsid",
    "sftp",
    "sg",
    "sh",
    "socat",
    "sqlite3",
    "ssh",
    "ssh-agent",
    "sshpass",
    "start-stop-daemon",
    "stdbuf",
    "strace",
    "su",
    "sudo",
    "systemd-nspawn",
    "systemd-run",
    "tar",
    "taskset",
    "tclsh",
    "tcpdump",
    "tcsh",
    "time",
    "timeout",
    "tmux",
    "toybox",
    "unshare",
    "uvx",
    "valgrind",
    "vi",
    "view",
    "vim",
    "watch",
    "wget",
    "wish",
    "xargs",
    "xonsh",
    "yash",
    "zip",
    "zsh",
];

/// Whether `program` (a file name) runs other programs: one of
/// [`PROGRAM_RUNNERS`], one of them under a versioned name (`python3.11`,
/// `perl5.36.0`, `lua5.4`: Debian installs those beside the plain names),
/// or the dynamic loader (`ld-linux-x86-64.so.2 /bin/sh`).
pub fn is_program_runner(program: &str) -> bool {
    if PROGRAM_RUNNERS.contains(&program) || program.starts_with("ld-linux") {
        return true;
    }
    let base =
        program.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | '-' | '_'));
    // Debian's suffixed builds: `vim.basic`, `vim.tiny`.
    let stem = program.split('.').next().unwrap_or(program);
    (base != program && PROGRAM_RUNNERS.contains(&base))
        || (stem != program && PROGRAM_RUNNERS.contains(&stem))
}

/// Whether the file `path` leads to (its links followed: `editor` →
/// /etc/alternatives/editor → `vim.basic`) is a program runner by its own
/// name.
/// A multi-call binary (busybox, toybox: what `ls` is on Alpine or
/// OpenWrt) acts as the name it is run by, and is not counted by its own.
pub fn leads_to_program_runner(path: &std::path::Path) -> bool {
    std::fs::canonicalize(path).is_ok_and(|target| {
        target
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| !MULTI_CALL.contains(&name) && is_program_runner(name))
    })
}

/// Binaries that act as the name they are run by.
const MULTI_CALL: &[&str] = &["busybox", "toybox"];

/// Programs whose only purpose is to change files: refused unless
/// `allow_writes` is on, even when a configuration lists them.
pub const WRITE_ONLY_PROGRAMS: &[&str] = &[
    "chgrp",
    "chmod",
    "chown",
    "cp",
    "csplit",
    "dd",
    "fallocate",
    "install",
    "link",
    "ln",
    "mkdir",
    "mkfifo",
    "mknod",
    "mv",
    "rm",
    "rmdir",
    "shred",
    "split",
    "sync",
    "tee",
    "touch",
    "truncate",
    "unlink",
];

/// Variables a command may not set with a leading `NAME=value`, nor the
/// policy pass on: they change which code a program loads or runs, or how
/// it reads its arguments, not just what it prints.
pub fn is_dangerous_env_name(name: &str) -> bool {
    dangerous_env_reason(name).is_some()
}

/// Why `name` is one of [`is_dangerous_env_name`]'s, as a phrase that
/// follows the variable's name ("`LD_PRELOAD` changes ...").
pub fn dangerous_env_reason(name: &str) -> Option<&'static str> {
    // GNU programs read options anywhere on the line, and the write guard
    // reads them so; POSIX mode stops at the first operand, so what the
    // guard took for an option would be a file name to them (`uniq in -x`
    // writes `-x`), and the reverse.
    const ARGUMENT_PARSING: &[&str] = &["POSIXLY_CORRECT", "_POSIX2_VERSION"];
    // procps's personalities: `bsd` and `old` (what I_WANT_A_BROKEN_PS
    // forces) read `-e` as BSD's `e`, every process's environment.
    const PS_PERSONALITY: &[&str] = &["PS_PERSONALITY", "CMD_ENV", "I_WANT_A_BROKEN_PS"];
    if PS_PERSONALITY.contains(&name) {
        return Some(
            "changes how ps reads its options (BSD style, where `-e` shows every process's \
             environment), which the private-path checks read the default way",
        );
    }
    if ARGUMENT_PARSING.contains(&name) {
        return Some(
            "changes how programs read their arguments (POSIX order), which the write guard \
             reads the GNU way",
        );
    }
    if adds_options(name) {
        return Some(
            "adds options a program reads besides its command line, which the guards do not see",
        );
    }
    loads_code(name).then_some("changes which code a program loads or runs")
}

/// Variables programs read as more options. The write guard and the
/// private-path checks read the command line only: `GREP_OPTIONS=-r`
/// made grep before 3.6 recurse past them, `TAR_OPTIONS` can make tar
/// write. The suffixes catch the convention (`NODE_OPTIONS`, `XZ_OPT`,
/// `JAVA_TOOL_OPTIONS`).
fn adds_options(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "GZIP",
        "BZIP",
        "BZIP2",
        "XZ_DEFAULTS",
        "LESS",
        "RUBYOPT",
        "PERL5OPT",
        "ZIPOPT",
        "UNZIP",
        "ZIPINFO",
    ];
    const SUFFIXES: &[&str] = &["_OPTIONS", "_OPTS", "_OPT"];
    EXACT.contains(&name) || SUFFIXES.iter().any(|s| name.ends_with(s))
}

fn loads_code(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "IFS",
        "BASH_ENV",
        "ENV",
        "SHELL",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "RESOLV_HOST_CONF",
        "TMPDIR",
        // Programs a program may start by itself.
        "PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "SSH_ASKPASS",
        "RSYNC_RSH",
        // Code an interpreter loads first.
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5LIB",
        "PERLLIB",
        "RUBYLIB",
    ];
    const PREFIXES: &[&str] = &["LD_", "DYLD_", "MALLOC_", "GIT_"];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The `cmd_run` configuration (`[tools.cmd_run]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdRunPolicy {
    /// Program names (basenames) that may run. Empty means
    /// [`DEFAULT_ALLOWLIST`]; a non-empty list replaces it. Never "everything".
    pub allowlist: Vec<String>,
    /// Lets options that write files or set system state through, and the
    /// [`WRITE_ONLY_PROGRAMS`] that are allowlisted. Never lets a program run
    /// another program.
    pub allow_writes: bool,
    /// Timeout when a call gives none.
    pub timeout: Duration,
    /// The most a call may ask for; longer requests are capped to this.
    pub max_timeout: Duration,
    /// Extra variable names passed through from the agent's environment.
    /// Names `is_dangerous_env_name` rejects are skipped.
    pub env: Vec<String>,
    /// Bytes kept per stream (stdout, stderr); the rest is counted and
    /// replaced by a truncation marker.
    pub output_cap_bytes: usize,
    /// Where children run and relative program paths resolve; `None` is the
    /// agent's working directory.
    pub working_dir: Option<std::path::PathBuf>,
    /// Files and directories no command may read (the config file, which
    /// may hold keys), with symlinks resolved. `/proc` is private always.
    pub private_paths: Vec<std::path::PathBuf>,
}

impl Default for CmdRunPolicy {
    fn default() -> Self {
        CmdRunPolicy {
            allowlist: Vec::new(),
            allow_writes: false,
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            env: Vec::new(),
            output_cap_bytes: 32 * 1024,
            working_dir: None,
            private_paths: Vec::new(),
        }
    }
}

/// A configuration that cannot be honoured as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "tools.cmd_run.allowlist contains `{program}`, which runs other programs; it is never \
         allowed because it would allow everything. Remove it and list the programs it would run"
    )]
    ProgramRunner { program: String },
    #[error(
        "tools.cmd_run.allowlist entry `{name}` is not a program name; list bare names like \
         `ls`, without a directory"
    )]
    BadProgramName { name: String },
    #[error(
        "tools.cmd_run.env lists `{name}`, which {why}; remove it (PATH, HOME, LANG and TZ are \
         set for every child already)"
    )]
    BadEnvName { name: String, why: &'static str },
    #[error(
        "tools.cmd_run.timeout ({timeout:?}) is longer than tools.cmd_run.max_timeout ({max:?}); \
         raise max_timeout or lower timeout"
    )]
    TimeoutAboveMax { timeout: Duration, max: Duration },
    #[error("tools.cmd_run.{key} must be greater than zero")]
    Zero { key: &'static str },
    #[error(
        "tools.cmd_run.working_dir `{}` {problem}; give an existing directory, or leave it out \
         (the agent's own working directory)",
        dir.display()
    )]
    WorkingDir {
        dir: std::path::PathBuf,
        problem: String,
    },
}

impl CmdRunPolicy {
    /// The configured programs (never the built-in list, any of which may
    /// be missing on a machine) that are not on [`CHILD_PATH`], where
    /// commands are looked up: every call to one would fail with "cannot
    /// start", so a start names them.
    pub fn unavailable_programs(&self) -> Vec<String> {
        self.allowlist
            .iter()
            .filter(|program| super::check::find_on_child_path(program).is_none())
            .cloned()
            .collect()
    }

    /// The programs that may run: the configured list, or the default one.
    pub fn effective_allowlist(&self) -> Vec<String> {
        let mut list: Vec<String> = if self.allowlist.is_empty() {
            DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect()
        } else {
            self.allowlist.clone()
        };
        list.retain(|p| !is_program_runner(p));
        list.sort();
        list.dedup();
        list
    }

    /// Whether no command this policy allows can change anything: writes
    /// are refused and every allowed program is one of the default list,
    /// whose options the write guard knows. A configured program outside it
    /// (`systemctl`, `touch`) may change the system whatever its options.
    pub fn changes_nothing(&self) -> bool {
        !self.allow_writes
            && self
                .effective_allowlist()
                .iter()
                .all(|program| DEFAULT_ALLOWLIST.contains(&program.as_str()))
    }

    /// Checks the configuration; `homeagent config check` reports these.
    /// `cmd_run` still runs with an invalid policy, fail-closed: runners are
    /// refused and bad env names skipped.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for name in &self.allowlist {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(PolicyError::BadProgramName { name: name.clone() });
            }
            if is_program_runner(name) {
                return Err(PolicyError::ProgramRunner {
                    program: name.clone(),
                });
            }
        }
        for name in &self.env {
            if !homeagent_core::is_env_var_name(name) {
                return Err(PolicyError::BadEnvName {
                    name: name.clone(),
                    why: "is not a valid variable name",
                });
            }
            if let Some(why) = dangerous_env_reason(name) {
                return Err(PolicyError::BadEnvName {
                    name: name.clone(),
                    why,
                });
            }
        }
        // Checked now: a typo here would fail every command with "cannot
        // start `ls`", which points at the program rather than at this key.
        if let Some(dir) = &self.working_dir {
            let problem = match std::fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => None,
                Ok(_) => Some("is not a directory".to_owned()),
                Err(e) => Some(format!("cannot be used ({e})")),
            };
            if let Some(problem) = problem {
                return Err(PolicyError::WorkingDir {
                    dir: dir.clone(),
                    problem,
                });
            }
        }
        // The cap first: a config that sets only `max_timeout = 0` gets a
        // default timeout lowered to it, and must hear about the key it set.
        if self.max_timeout.is_zero() {
            return Err(PolicyError::Zero { key: "max_timeout" });
        }
        if self.timeout.is_zero() {
            return Err(PolicyError::Zero { key: "timeout" });
        }
        if self.output_cap_bytes == 0 {
            return Err(PolicyError::Zero {
                key: "output_cap_bytes",
            });
        }
        if self.timeout > self.max_timeout {
            return Err(PolicyError::TimeoutAboveMax {
                timeout: self.timeout,
                max: self.max_timeout,
            });
        }
        Ok(())
    }
}
