//! What no command may read, whatever the allowlist says: other processes'
//! entries under `/proc`, and the files the operator named as private (the
//! config file, which may hold the server's key and device tokens).
//!
//! Why: a child runs as the agent's user, so `cat` or `grep` could read
//! `/proc/<pid>/environ` of an MCP server (its token is in its environment)
//! or the config file. The agent's own process is not dumpable (the binary
//! sees to it), so its `/proc` entries are closed by the kernel; the MCP
//! servers it starts cannot be made so, hence this check.
//!
//! Every argument is taken as a path (relative ones against the child's
//! working directory), and so is the value of a `--name=value` option and
//! every tail of a cluster of short options, where an attached value may
//! start (`-f/proc/1/environ`, `-nf.config/homeagent.toml`).
//! A path is private when, spelled out (`..` applied) or with every symlink
//! resolved (`/dev/fd/..`, `/etc/mtab`, `/proc/self/root/...`), it lies in
//! `/proc` or is a private file. The child's own `/proc/self` files and the
//! system-wide read-only ones in [`PROC_READABLE`] stay readable. A
//! recursive `grep` may not start at a directory that holds a private path
//! (`grep -r key /`, read as grep reads its options: `--rec`, `-d rec`)
//! nor follow every symlink below its start (`-R`), `ps` may not show
//! environments (`ps e`), and `--files0-from` (a file of file names nobody
//! checks) is refused.

use std::path::{Component, Path, PathBuf};

use super::check::CmdRefusal;
use super::options::{Arity, OptionProblem, OptionSpec, Parsed, parse};
use super::policy::CmdRunPolicy;

/// Files under `/proc` any command may read: system-wide figures, and the
/// child's own (`/proc/self` is the reading process).
pub const PROC_READABLE: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/loadavg",
    "/proc/meminfo",
    "/proc/mounts",
    "/proc/net/dev",
    "/proc/partitions",
    "/proc/self/cgroup",
    "/proc/self/environ",
    "/proc/self/limits",
    "/proc/self/status",
    "/proc/stat",
    "/proc/uptime",
    "/proc/version",
];

const PROC: &str = "/proc";

/// Refuses a command whose arguments would read a private path.
pub(super) fn check_private_reads(
    policy: &CmdRunPolicy,
    program: &str,
    args: &[String],
) -> Result<(), CmdRefusal> {
    let refuse = |argument: &str, why: String| CmdRefusal::PrivatePath {
        program: program.to_owned(),
        argument: argument.to_owned(),
        why,
    };
    let cwd = match &policy.working_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    if program == "ps"
        && let Some(arg) = bsd_environment_option(args)
    {
        return Err(refuse(
            arg,
            "the BSD option `e` shows other processes' environments".into(),
        ));
    }
    if program == "ps"
        && reread_as_bsd(args)
        && let Some(arg) = dashed_environment_option(args)
    {
        return Err(refuse(
            arg,
            "beside an option that is not SysV (`-x`, a BSD group), ps reads every argument again \
             as BSD, and `e` there shows other processes' environments; write `-e` with SysV \
             options only (`ps -ef`, `ps -eo pid,args`) or `ax` without the dash"
                .into(),
        ));
    }
    if program == "ps"
        && sysv_value_may_fail(args)
        && let Some(arg) = bsd_reading_shows_environment(args)
    {
        return Err(refuse(
            arg,
            "a value here may not read as SysV (a user, group, session or pid list, or a \
             format ps does not know), and ps then reads every argument again as BSD, where \
             `e` shows other processes' environments; give existing users and numeric ids, \
             and known format names, or leave `e` out"
                .into(),
        ));
    }
    if let Some(arg) = args.iter().find(|a| names_files0_from(a)) {
        return Err(refuse(
            arg,
            "it reads the names of the files to open from a file, which cannot be checked".into(),
        ));
    }
    let recursive = match grep_recursion(program, args) {
        Ok(Recursion::None) => reads_recursively(program, args),
        Ok(Recursion::Physical) => true,
        Ok(Recursion::FollowsEveryLink(arg)) => {
            return Err(refuse(
                arg,
                "it follows every symlink below where it starts, and a link there could lead \
                 to /proc or HomeAgent's config; use -r, which follows only the paths given"
                    .into(),
            ));
        }
        Err(problem) => {
            let (option, why) = match problem {
                OptionProblem::UnknownLong(option) => (
                    option,
                    "the guard does not know this option of grep's, so it cannot tell what \
                     grep would read; leave it out or check its spelling",
                ),
                OptionProblem::AmbiguousLong { given, .. } => (
                    given,
                    "it abbreviates several of grep's options, so what grep would read cannot \
                     be checked; spell the option out",
                ),
            };
            return Err(refuse(&option, why.to_owned()));
        }
    };
    let mut starts = Vec::new();
    let mut operands_only = false;
    for arg in args {
        if !operands_only && arg == "--" {
            operands_only = true;
            continue;
        }
        let operand = operands_only || !arg.starts_with('-');
        for candidate in path_candidates(arg, operands_only) {
            let joined = cwd.join(candidate);
            let spelled = lexical(&joined);
            // Resolved as the kernel would: `..` after a symlink climbs
            // from its target (`/dev/fd/..` is `/proc/self`).
            let resolved = std::fs::canonicalize(&joined).ok();
            if let Some(why) = private(policy, &spelled, resolved.as_deref()) {
                return Err(refuse(arg, why));
            }
            // Only an operand is where a recursive grep starts.
            if recursive && operand {
                starts.push((arg, resolved.unwrap_or(spelled)));
            }
        }
    }
    if recursive {
        // With no path operand grep -r searches the working directory.
        let cwd_start = std::fs::canonicalize(&cwd).unwrap_or(cwd);
        let every = starts
            .iter()
            .map(|(arg, path)| (arg.as_str(), path.clone()))
            .chain(std::iter::once((".", cwd_start)));
        for (arg, start) in every {
            if let Some(inside) = private_roots(policy).find(|root| root.starts_with(&start)) {
                return Err(refuse(
                    arg,
                    format!(
                        "a recursive read from {} would read {}",
                        start.display(),
                        inside.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Why `spelled` (and `resolved`, the same path with symlinks resolved) is
/// private, if it is.
fn private(policy: &CmdRunPolicy, spelled: &Path, resolved: Option<&Path>) -> Option<String> {
    if PROC_READABLE.iter().any(|p| spelled == Path::new(p)) {
        return None;
    }
    for path in std::iter::once(spelled).chain(resolved) {
        if path.starts_with(PROC) {
            return Some(format!(
                "{} is under /proc, where other processes' environments (and their keys) \
                 are; only the system-wide files and the command's own /proc/self ones may be \
                 read",
                path.display()
            ));
        }
        if let Some(file) = policy.private_paths.iter().find(|p| path.starts_with(p)) {
            return Some(format!(
                "{} is private to HomeAgent (it may hold keys)",
                file.display()
            ));
        }
    }
    None
}

/// The directories a recursive read must not start above or in.
fn private_roots(policy: &CmdRunPolicy) -> impl Iterator<Item = &Path> {
    std::iter::once(Path::new(PROC)).chain(policy.private_paths.iter().map(PathBuf::as_path))
}

/// The parts of one argument that could name a file.
///
/// In a cluster of short options (`-nfFILE`) which letters are flags and
/// where an attached value starts depends on the program, which this check
/// does not model: every tail of the cluster is a candidate, so a relative
/// value (`-f.config/x`, `-fx`) is caught as surely as one with a `/`.
///
/// A tail longer than a path can be ([`MAX_PATH_BYTES`]) names nothing, so a
/// long cluster costs at most that many checks, never its length squared.
/// After `--` (`operand`) every argument is a file name, dash or not; and
/// a dashed argument is one as it stands too (the value of the option
/// before it).
fn path_candidates(arg: &str, operand: bool) -> Vec<&str> {
    let mut candidates = named_paths(arg, operand);
    // Paths not written as one: `if=FILE` (dd), `@FILE` (curl's data
    // values, attached to an option too: every cluster tail is a
    // candidate, the one from the `@` included), `file://FILE` URLs. Only
    // cheap strips per candidate: a cluster has thousands of tails.
    if !arg.starts_with('-')
        && let Some((_, value)) = arg.split_once('=')
    {
        candidates.push(value);
    }
    let derived: Vec<&str> = candidates
        .iter()
        .flat_map(|candidate| {
            let unquoted = candidate.strip_prefix('@').unwrap_or(candidate);
            let url = unquoted
                .strip_prefix("file://")
                .map(|rest| rest.strip_prefix("localhost").unwrap_or(rest));
            [(unquoted != *candidate).then_some(unquoted), url]
        })
        .flatten()
        .filter(|path| !path.is_empty())
        .collect();
    candidates.extend(derived);
    candidates
}

/// [`path_candidates`] as the argument is written.
fn named_paths(arg: &str, operand: bool) -> Vec<&str> {
    if operand {
        return if arg.is_empty() {
            Vec::new()
        } else {
            vec![arg]
        };
    }
    // A dashed argument is also a path as it stands: GNU getopt gives an
    // option that takes a value the next argument whatever it starts with
    // (`date -f --/../x` reads the file `--/../x`).
    let whole = (arg.len() <= MAX_PATH_BYTES).then_some(arg);
    if let Some(long) = arg.strip_prefix("--") {
        whole
            .into_iter()
            .chain(long.split_once('=').map(|(_, value)| value))
            .collect()
    } else if let Some(short) = arg.strip_prefix('-') {
        whole
            .into_iter()
            .chain(short.char_indices().map(|(at, _)| &short[at..]))
            .filter(|tail| tail.len() <= MAX_PATH_BYTES)
            .collect()
    } else if arg.is_empty() {
        Vec::new()
    } else {
        vec![arg]
    }
}

/// Linux's PATH_MAX: no longer text names a file.
const MAX_PATH_BYTES: usize = 4096;

/// Whether `arg` is `--files0-from` (of sort, wc, du) in any spelling GNU
/// getopt takes: the whole name or a prefix of it (`--files0`, `--f`
/// where that is the only option starting so), with or without `=value`.
/// A prefix another option shares is refused too: no harm, spell it out.
fn names_files0_from(arg: &str) -> bool {
    let Some(long) = arg.strip_prefix("--") else {
        return false;
    };
    let name = long.split_once('=').map_or(long, |(name, _)| name);
    !name.is_empty() && "files0-from".starts_with(name)
}

/// BSD-syntax letters of procps `ps` that take the rest of their argument
/// (or the next argument) as a value: formats, pid, tty and user lists,
/// the sort key.
const BSD_VALUED: &str = "oOpqtUk";

/// A `ps` argument in BSD syntax (no dash, a letter first) holding the
/// option `e`, which adds each process's environment to its line. Letters
/// are options up to the first digit or value-taking letter; what follows
/// is that option's value (`ps ewwp4242` is `e`, `w`, `w`, then pid 4242).
/// An argument that is the value of the option before it (`-C sleep`,
/// `--sort etime`, `axo etime,pid`) is not one.
fn bsd_environment_option(args: &[String]) -> Option<&String> {
    ps_options(args).find(|arg| bsd_options(arg).contains('e'))
}

/// The `ps` arguments that are options, not the value of the option
/// before them.
fn ps_options(args: &[String]) -> impl Iterator<Item = &String> {
    args.iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || !ps_takes_next_as_value(&args[i - 1]))
        .map(|(_, arg)| arg)
}

/// procps ps's short options with a value (`-N` negates; it takes none).
const PS_VALUED_SHORT: &str = "CDGUgpqstuoOk";

/// procps `ps`'s SysV short options. An argument with another letter (or
/// a BSD group, without a dash) makes ps read all its arguments again the
/// BSD way, where the dash is ignored and `-e` is the BSD `e`.
const SYSV_SHORT: &str = "AaCcDdeFfGgHjLlMmNnOoPpqsTtUuVwyZ";

/// Whether ps will read these arguments again as BSD (see [`SYSV_SHORT`]).
fn reread_as_bsd(args: &[String]) -> bool {
    ps_options(args).any(|arg| {
        if arg.starts_with("--") {
            return false;
        }
        match arg.strip_prefix('-') {
            Some(cluster) => {
                // The letters up to the first that takes a value (the rest
                // is that value: `-opid,args`).
                let letters = cluster
                    .find(|c: char| PS_VALUED_SHORT.contains(c))
                    .map_or(cluster, |at| &cluster[..at]);
                letters.chars().any(|c| !SYSV_SHORT.contains(c))
            }
            None => arg.starts_with(|c: char| c.is_ascii_alphabetic()),
        }
    })
}

/// Whether a value of a SysV `ps` option might not read as one: procps
/// then reads every argument again the BSD way (`-uex`: no user `ex`, so
/// `u`, `e`, `x`). Only values read here for sure pass: numeric pid,
/// session and process-group lists, users and groups this machine has (or
/// numbers), known format names, terminals under /dev; a command name or a
/// date format reads as anything.
fn sysv_value_may_fail(args: &[String]) -> bool {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg.starts_with("--") {
            if ps_takes_next_as_value(arg) {
                i += 1;
            }
        } else if let Some(cluster) = arg.strip_prefix('-')
            && let Some(at) = cluster.find(|c: char| PS_VALUED_SHORT.contains(c))
            && let Some(letter) = cluster[at..].chars().next()
        {
            let attached = &cluster[at + letter.len_utf8()..];
            let value = if attached.is_empty() {
                i += 1;
                args.get(i).map(String::as_str)
            } else {
                Some(attached)
            };
            if !value.is_some_and(|value| sysv_value_reads(letter, value)) {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// Whether procps reads `value` as the value of its SysV option `letter`.
fn sysv_value_reads(letter: char, value: &str) -> bool {
    let items = || value.split([',', ' ']).filter(|item| !item.is_empty());
    let numeric = |item: &str| item.bytes().all(|b| b.is_ascii_digit());
    match letter {
        'p' | 'q' | 's' => items().count() > 0 && items().all(numeric),
        'u' | 'U' => {
            items().count() > 0 && items().all(|i| numeric(i) || named_in("/etc/passwd", i))
        }
        'g' | 'G' => {
            items().count() > 0 && items().all(|i| numeric(i) || named_in("/etc/group", i))
        }
        'o' | 'O' | 'k' => {
            items().count() > 0
                && items().all(|item| {
                    let key = item.split('=').next().unwrap_or(item);
                    PS_FORMATS.contains(&key.trim_start_matches(['+', '-']))
                })
        }
        't' => {
            items().count() > 0
                && items().all(|tty| {
                    tty == "-"
                        || ["/dev/", "/dev/tty", "/dev/pts/"]
                            .iter()
                            .any(|dir| Path::new(&format!("{dir}{tty}")).exists())
                })
        }
        _ => true,
    }
}

/// Whether `file` (`/etc/passwd`, `/etc/group`) has an entry named `name`.
/// Only local entries: a user known through the network reads as unknown,
/// which can only refuse more.
fn named_in(file: &str, name: &str) -> bool {
    std::fs::read_to_string(file).is_ok_and(|text| {
        text.lines()
            .any(|line| line.split(':').next() == Some(name))
    })
}

/// procps format names a value of `-o`, `-O` or `-k` is checked against.
const PS_FORMATS: &[&str] = &[
    "%cpu",
    "%mem",
    "args",
    "blocked",
    "bsdstart",
    "bsdtime",
    "c",
    "caught",
    "cgroup",
    "class",
    "cls",
    "cmd",
    "comm",
    "command",
    "cp",
    "cputime",
    "cputimes",
    "drs",
    "egid",
    "egroup",
    "eip",
    "esp",
    "etime",
    "etimes",
    "euid",
    "euser",
    "f",
    "fgid",
    "fgroup",
    "flag",
    "flags",
    "fname",
    "fuid",
    "fuser",
    "gid",
    "group",
    "ignored",
    "label",
    "lstart",
    "lwp",
    "maj_flt",
    "min_flt",
    "ni",
    "nice",
    "nlwp",
    "nwchan",
    "pcpu",
    "pending",
    "pgid",
    "pgrp",
    "pid",
    "pmem",
    "policy",
    "ppid",
    "pri",
    "psr",
    "rgid",
    "rgroup",
    "rss",
    "rssize",
    "rsz",
    "rtprio",
    "ruid",
    "ruser",
    "s",
    "sched",
    "sess",
    "sgi_p",
    "sgid",
    "sgroup",
    "sid",
    "sig",
    "sigcatch",
    "sigignore",
    "sigmask",
    "size",
    "spid",
    "stackp",
    "start",
    "start_time",
    "stat",
    "state",
    "stime",
    "suid",
    "suser",
    "svgid",
    "svuid",
    "sz",
    "thcount",
    "tid",
    "time",
    "tname",
    "tpgid",
    "trs",
    "tt",
    "tty",
    "ucmd",
    "ucomm",
    "uid",
    "uname",
    "user",
    "vsize",
    "vsz",
    "wchan",
];

/// The argument that holds the option `e` when ps reads every argument the
/// BSD way (dashes ignored), skipping the values of its value-taking
/// letters and long options.
fn bsd_reading_shows_environment(args: &[String]) -> Option<&String> {
    let mut value_next = false;
    for arg in args {
        if std::mem::take(&mut value_next) {
            continue;
        }
        if arg.starts_with("--") {
            value_next = ps_takes_next_as_value(arg);
            continue;
        }
        let letters_of = arg.trim_start_matches('-');
        let letters = bsd_options(letters_of);
        if letters.contains('e') {
            return Some(arg);
        }
        value_next = letters.len() == letters_of.len()
            && letters.ends_with(|c: char| BSD_VALUED.contains(c));
    }
    None
}

/// A single-dash `ps` argument holding `e` as the BSD reading takes it.
fn dashed_environment_option(args: &[String]) -> Option<&String> {
    ps_options(args).find(|arg| {
        arg.strip_prefix('-')
            .filter(|cluster| !cluster.starts_with('-'))
            .is_some_and(|cluster| bsd_options(cluster).contains('e'))
    })
}

/// The option letters of a BSD-syntax `ps` argument (empty for any other).
fn bsd_options(arg: &str) -> &str {
    if !arg.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return "";
    }
    let end = arg
        .find(|c: char| !c.is_ascii_alphabetic() || BSD_VALUED.contains(c))
        .map_or(arg.len(), |at| {
            // A value-taking letter is an option itself; its value follows.
            if arg[at..].starts_with(|c: char| BSD_VALUED.contains(c)) {
                at + 1
            } else {
                at
            }
        });
    &arg[..end]
}

/// Whether the `ps` argument `option` takes the next argument as its value.
/// Unknown long options are taken as not: the next argument is then checked
/// as an option, which can only refuse more.
fn ps_takes_next_as_value(option: &str) -> bool {
    const VALUED_LONG: [&str; 17] = [
        "cols",
        "columns",
        "width",
        "rows",
        "lines",
        "format",
        "Group",
        "group",
        "pid",
        "ppid",
        "quick-pid",
        "sid",
        "sort",
        "tty",
        "User",
        "user",
        "help",
    ];
    if let Some(long) = option.strip_prefix("--") {
        return !long.contains('=') && VALUED_LONG.contains(&long);
    }
    if let Some(short) = option.strip_prefix('-') {
        return short
            .chars()
            .last()
            .is_some_and(|c| PS_VALUED_SHORT.contains(c));
    }
    // A BSD group ending with a value-taking letter (`axo`, `p`).
    let letters = bsd_options(option);
    letters.len() == option.len() && letters.ends_with(|c: char| BSD_VALUED.contains(c))
}

/// Whether a program other than grep reads files below the directories it
/// is given (or the working directory), when configured: ripgrep and its
/// kin always, `diff -r` and `cp -r` (a copy is readable where it lands)
/// when told to. Checked as a recursive grep is: no start above or in a
/// private directory.
fn reads_recursively(program: &str, args: &[String]) -> bool {
    let flagged = |short: &[char], long: &[&str]| {
        args.iter().any(|arg| match arg.strip_prefix("--") {
            Some(name) => long.contains(&name.split('=').next().unwrap_or(name)),
            None => arg
                .strip_prefix('-')
                .is_some_and(|cluster| cluster.chars().any(|c| short.contains(&c))),
        })
    };
    match program {
        "rg" | "ripgrep" | "ag" | "ack" | "ack-grep" => true,
        "diff" => flagged(&['r'], &["recursive"]),
        "cp" => flagged(&['r', 'R', 'a'], &["recursive", "archive"]),
        _ => false,
    }
}

/// How a `grep` command recurses into directories.
enum Recursion {
    None,
    /// `-r`: symlinks below the start are not followed.
    Physical,
    /// `-R`: every symlink is followed; the option, as grep names it.
    FollowsEveryLink(&'static str),
}

/// GNU grep 3's options, for reading a command as grep will
/// (abbreviations, clusters, attached values).
const GREP: OptionSpec = OptionSpec {
    short_required: "efmABCdDX",
    short_optional: "",
    long: &[
        ("after-context", Arity::Required),
        ("basic-regexp", Arity::None),
        ("before-context", Arity::Required),
        ("binary", Arity::None),
        ("binary-files", Arity::Required),
        ("byte-offset", Arity::None),
        ("color", Arity::Optional),
        ("colour", Arity::Optional),
        ("context", Arity::Required),
        ("count", Arity::None),
        ("dereference-recursive", Arity::None),
        ("devices", Arity::Required),
        ("directories", Arity::Required),
        ("exclude", Arity::Required),
        ("exclude-dir", Arity::Required),
        ("exclude-from", Arity::Required),
        ("extended-regexp", Arity::None),
        ("file", Arity::Required),
        ("files-with-matches", Arity::None),
        ("files-without-match", Arity::None),
        ("fixed-strings", Arity::None),
        ("group-separator", Arity::Required),
        ("help", Arity::None),
        ("ignore-case", Arity::None),
        ("include", Arity::Required),
        ("initial-tab", Arity::None),
        ("invert-match", Arity::None),
        ("label", Arity::Required),
        ("line-buffered", Arity::None),
        ("line-number", Arity::None),
        ("line-regexp", Arity::None),
        ("max-count", Arity::Required),
        ("no-filename", Arity::None),
        ("no-group-separator", Arity::None),
        ("no-ignore-case", Arity::None),
        ("no-messages", Arity::None),
        ("null", Arity::None),
        ("null-data", Arity::None),
        ("only-matching", Arity::None),
        ("perl-regexp", Arity::None),
        ("quiet", Arity::None),
        ("recursive", Arity::None),
        ("regexp", Arity::Required),
        ("silent", Arity::None),
        ("text", Arity::None),
        ("version", Arity::None),
        ("with-filename", Arity::None),
        ("word-regexp", Arity::None),
    ],
};

/// How a command of `program` recurses, read the way GNU grep reads its
/// arguments; not at all for other programs. `rgrep` is `grep -r`; grep
/// takes an abbreviation of the `-d` action too (`-d rec`).
fn grep_recursion(program: &str, args: &[String]) -> Result<Recursion, OptionProblem> {
    if !matches!(program, "grep" | "egrep" | "fgrep" | "rgrep") {
        return Ok(Recursion::None);
    }
    let mut recursion = if program == "rgrep" {
        Recursion::Physical
    } else {
        Recursion::None
    };
    let recurses = |action: &Option<String>| {
        action
            .as_deref()
            .is_some_and(|a| !a.is_empty() && "recurse".starts_with(a))
    };
    for parsed in parse(&GREP, args)? {
        match parsed {
            Parsed::Short { name: 'R', .. } => return Ok(Recursion::FollowsEveryLink("-R")),
            Parsed::Long {
                name: "dereference-recursive",
                ..
            } => return Ok(Recursion::FollowsEveryLink("--dereference-recursive")),
            Parsed::Short { name: 'r', .. }
            | Parsed::Long {
                name: "recursive", ..
            } => {
                recursion = Recursion::Physical;
            }
            Parsed::Short { name: 'd', value }
            | Parsed::Long {
                name: "directories",
                value,
            } if recurses(&value) => {
                recursion = Recursion::Physical;
            }
            _ => {}
        }
    }
    Ok(recursion)
}

/// `path` with `.` and `..` applied, without touching the disk.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}
