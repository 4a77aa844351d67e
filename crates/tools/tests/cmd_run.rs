#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `cmd_run`: the checker's refusals by variant, the write guard in every
//! option form, and real runs (exit codes, timeout kill, output cap, the
//! child's clean environment).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use homeagent_core::{ErrorReason, Registry, ToolContext, ToolSource};
use homeagent_tools::cmd_run::{
    CmdRefusal, CmdRunPolicy, DEFAULT_ALLOWLIST, check_command, register_cmd_run, truncation_marker,
};
use serde_json::{Value, json};

fn default_policy() -> CmdRunPolicy {
    CmdRunPolicy::default()
}

fn writes_policy(allowlist: &[&str]) -> CmdRunPolicy {
    CmdRunPolicy {
        allowlist: allowlist.iter().map(|s| s.to_string()).collect(),
        allow_writes: true,
        ..CmdRunPolicy::default()
    }
}

fn refusal(policy: &CmdRunPolicy, command: &str) -> CmdRefusal {
    match check_command(policy, command) {
        Ok(checked) => panic!("`{command}` passed the checker: {checked:?}"),
        Err(r) => r,
    }
}

fn passes(policy: &CmdRunPolicy, command: &str) {
    if let Err(r) = check_command(policy, command) {
        panic!("`{command}` was refused: {r}");
    }
}

fn default_allowed() -> Vec<String> {
    let mut list: Vec<String> = DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect();
    list.sort();
    list
}

fn write_guard(program: &str, option: &str, why: &'static str) -> CmdRefusal {
    CmdRefusal::WriteGuard {
        program: program.into(),
        option: option.into(),
        why,
    }
}

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "homeagent-cmd-run-{tag}-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------- allowlist

#[test]
fn allowlist_matches_the_basename_exactly() {
    let p = default_policy();
    passes(&p, "ls -l /tmp");
    passes(&p, "grep -rn foo .");
    for program in ["grepx", "mygrep", "LS", "curl"] {
        assert_eq!(
            refusal(&p, &format!("{program} x")),
            CmdRefusal::NotAllowed {
                program: program.into(),
                allowed: default_allowed()
            }
        );
    }
}

#[test]
fn a_configured_list_replaces_the_default_and_is_never_everything() {
    let p = CmdRunPolicy {
        allowlist: vec!["uptime".into()],
        ..CmdRunPolicy::default()
    };
    passes(&p, "uptime");
    assert_eq!(
        refusal(&p, "ls"),
        CmdRefusal::NotAllowed {
            program: "ls".into(),
            allowed: vec!["uptime".into()]
        }
    );
}

#[test]
fn runners_are_refused_even_when_configured() {
    let configured = CmdRunPolicy {
        allowlist: vec!["bash".into(), "env".into(), "ls".into()],
        ..CmdRunPolicy::default()
    };
    for (command, program) in [
        ("env ls", "env"),
        ("xargs rm", "xargs"),
        ("bash -c ls", "bash"),
        ("python3 -c 'print(1)'", "python3"),
        ("busybox sh", "busybox"),
        ("/bin/sh -c id", "sh"),
        ("awk 'BEGIN{system(\"id\")}'", "awk"),
        ("prlimit --nofile=64 sh -c id", "prlimit"),
        ("perl5.36.0 -e 'system(1)'", "perl5.36.0"),
        // Debian's names: node as `nodejs`, vim as `vim.basic`; and a
        // program that runs every executable in a directory.
        ("nodejs -e 1", "nodejs"),
        ("vim.basic -es", "vim.basic"),
        ("run-parts /etc/cron.daily", "run-parts"),
    ] {
        let expected = CmdRefusal::ProgramRunner {
            program: program.into(),
        };
        assert_eq!(refusal(&default_policy(), command), expected, "{command}");
        assert_eq!(refusal(&configured, command), expected, "{command}");
    }
}

/// A name that is a link to a program runner (`editor` → `vim.basic`,
/// through /etc/alternatives) is one: the file the name leads to counts.
#[test]
fn a_link_to_a_program_runner_is_one() {
    let dir = std::env::temp_dir().join(format!("homeagent-runner-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("vim.basic");
    std::fs::write(&target, "").unwrap();
    let alias = dir.join("editor");
    std::os::unix::fs::symlink(&target, &alias).unwrap();
    let plain = dir.join("lister");
    std::fs::write(&plain, "").unwrap();
    assert!(homeagent_tools::cmd_run::leads_to_program_runner(&alias));
    assert!(!homeagent_tools::cmd_run::leads_to_program_runner(&plain));
    // `ls` on Alpine is a link to busybox, which acts as `ls`.
    let busybox = dir.join("busybox");
    std::fs::write(&busybox, "").unwrap();
    let ls = dir.join("ls");
    std::os::unix::fs::symlink(&busybox, &ls).unwrap();
    assert!(!homeagent_tools::cmd_run::leads_to_program_runner(&ls));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_path_qualified_program_must_be_the_file_path_finds() {
    let p = default_policy();
    let real = check_command(&p, "ls").unwrap().executable;
    passes(&p, &real.display().to_string());
    passes(&p, "/usr/bin/ls");
    passes(&p, "/bin/ls /");

    let dir = TempDir::new("trojan");
    std::fs::write(dir.path().join("ls"), "#!/bin/sh\necho owned\n").unwrap();
    let in_dir = CmdRunPolicy {
        working_dir: Some(dir.path().to_path_buf()),
        ..CmdRunPolicy::default()
    };
    // `./ls` is read from the policy's working directory, not the agent's:
    // there it is a link to the real one, and so it passes.
    let linked = TempDir::new("linked");
    std::os::unix::fs::symlink(&real, linked.path().join("ls")).unwrap();
    passes(
        &CmdRunPolicy {
            working_dir: Some(linked.path().to_path_buf()),
            ..CmdRunPolicy::default()
        },
        "./ls -l",
    );
    let absolute = dir.path().join("ls").display().to_string();
    for (policy, given) in [(&in_dir, "./ls".to_string()), (&p, absolute)] {
        assert_eq!(
            refusal(policy, &given),
            CmdRefusal::QualifiedPathMismatch {
                given: given.clone(),
                program: "ls".into(),
                found: Some(real.clone()),
            }
        );
    }
}

#[test]
fn variable_assignments_are_set_unless_dangerous() {
    let p = default_policy();
    let checked = check_command(&p, "LC_ALL=C TZ=UTC date +%Y").unwrap();
    assert_eq!(
        checked.env,
        vec![("LC_ALL".into(), "C".into()), ("TZ".into(), "UTC".into())]
    );
    assert_eq!(checked.args, vec!["+%Y".to_string()]);
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "PATH",
        "IFS",
    ] {
        assert_eq!(
            refusal(&p, &format!("{name}=x ls")),
            CmdRefusal::BadEnvAssignment {
                name: name.into(),
                why: "changes which code a program loads or runs"
            }
        );
    }
    // POSIX argument order would make the guard's reading of the options
    // wrong (`uniq in -x` writes `./-x`).
    let refused = refusal(&p, "POSIXLY_CORRECT=1 uniq /etc/hostname -x");
    assert!(
        matches!(&refused, CmdRefusal::BadEnvAssignment { name, .. } if name == "POSIXLY_CORRECT"),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("write guard"), "{refused}");
    // procps reads these to parse BSD-style: `-e` is then "show the
    // environment", of every process the agent may see.
    for name in ["PS_PERSONALITY", "CMD_ENV", "I_WANT_A_BROKEN_PS"] {
        let refused = refusal(&p, &format!("{name}=bsd ps -e 1"));
        assert!(
            matches!(&refused, CmdRefusal::BadEnvAssignment { name: refused_name, .. } if refused_name == name),
            "{name}: {refused:?}"
        );
    }
    // Variables programs read as more options: the guards read the
    // command line only (`GREP_OPTIONS=-r grep key ~` recursed into the
    // private config on grep before 3.6; `TAR_OPTIONS` can make tar write).
    for name in [
        "GREP_OPTIONS",
        "TAR_OPTIONS",
        "GZIP",
        "XZ_OPT",
        "XZ_DEFAULTS",
        "BZIP2",
        "LESS",
        "JAVA_TOOL_OPTIONS",
        "NODE_OPTIONS",
        "RUBYOPT",
        "PERL5OPT",
        "ANY_TOOL_OPTS",
    ] {
        assert_eq!(
            refusal(&p, &format!("{name}=-r grep key .")),
            CmdRefusal::BadEnvAssignment {
                name: name.into(),
                why: "adds options a program reads besides its command line, which the \
                      guards do not see"
            },
            "{name}"
        );
    }
    // Programs a program may start on its own.
    for name in [
        "PAGER",
        "MANPAGER",
        "GIT_PAGER",
        "GIT_SSH_COMMAND",
        "EDITOR",
        "VISUAL",
        "LESSOPEN",
        "SSH_ASKPASS",
        "RSYNC_RSH",
        "PYTHONPATH",
        "PERL5LIB",
    ] {
        assert_eq!(
            refusal(&p, &format!("{name}=/tmp/x ls")),
            CmdRefusal::BadEnvAssignment {
                name: name.into(),
                why: "changes which code a program loads or runs"
            },
            "{name}"
        );
    }
    // Ordinary settings still pass.
    for fine in [
        "LC_ALL=C",
        "LANG=C.UTF-8",
        "TZ=UTC",
        "COLUMNS=200",
        "NO_COLOR=1",
    ] {
        assert!(check_command(&p, &format!("{fine} ls")).is_ok(), "{fine}");
    }
    for name in ["BASH_ENV", "ENV", "_POSIX2_VERSION"] {
        assert!(matches!(
            refusal(&p, &format!("{name}=/tmp/x ls")),
            CmdRefusal::BadEnvAssignment { name: n, .. } if n == name
        ));
    }
    assert!(matches!(
        refusal(&p, "1X=y ls"),
        CmdRefusal::BadEnvAssignment { name, .. } if name == "1X"
    ));
    assert!(matches!(refusal(&p, "A=1"), CmdRefusal::Empty { .. }));
    assert!(matches!(refusal(&p, "   "), CmdRefusal::Empty { .. }));
    assert!(matches!(
        refusal(&p, "echo 'open"),
        CmdRefusal::Unparseable { .. }
    ));
    // No argument of a program can hold a NUL: said as such, not as a
    // program that failed to start.
    let nul = refusal(&p, "cat \"a\u{0}b\"");
    assert!(
        matches!(&nul, CmdRefusal::Unparseable { why } if why.contains("NUL")),
        "{nul:?}"
    );
}

// ---------------------------------------------------------------- operators

#[test]
fn every_shell_operator_is_refused() {
    let p = default_policy();
    for (command, operator) in [
        ("ls; rm -rf /", ";"),
        ("ls | sh", "|"),
        ("ls || id", "||"),
        ("ls && id", "&&"),
        ("sleep 9 &", "&"),
        ("echo x > /etc/passwd", ">"),
        ("echo x >> f", ">>"),
        ("cat < /etc/shadow", "<"),
        ("echo $(id)", "$("),
        ("echo `id`", "`"),
        ("echo \"$(id)\"", "$("),
        ("echo \"`id`\"", "`"),
        ("ls\nid", "newline"),
        ("ls # comment\nid", "newline"),
        ("ls 2>&1", ">"),
    ] {
        assert_eq!(
            refusal(&p, command),
            CmdRefusal::ShellOperator {
                operator: operator.into()
            },
            "{command:?}"
        );
    }
    let message = refusal(&p, "ls | wc").to_string();
    assert!(message.starts_with("no shell is used"), "{message}");
}

#[test]
fn quoted_or_escaped_operators_are_plain_arguments() {
    let p = default_policy();
    for (command, args) in [
        ("grep 'a|b' f", vec!["a|b", "f"]),
        ("grep \"a;b&&c>d\" f", vec!["a;b&&c>d", "f"]),
        ("echo '$(id)' '`id`'", vec!["$(id)", "`id`"]),
        ("echo a\\;b", vec!["a;b"]),
        ("echo 'two\nlines'", vec!["two\nlines"]),
        ("ls\n", vec![]),
    ] {
        let checked = check_command(&p, command).unwrap();
        assert_eq!(checked.args, args, "{command:?}");
    }
}

/// A `#` starts a comment only where a shell would: at the start of a
/// word. Inside a word it is a character, and an operator after it still
/// counts; a comment's own operators do not (the shell never sees them).
/// A `$` is refused only before `(`: a regex's end anchor or a `$HOME`
/// is a plain argument (no shell expands it).
#[test]
fn comments_and_dollars_are_read_as_a_shell_reads_them() {
    let p = default_policy();
    for (command, operator) in [("grep a#b f; id", ";"), ("ls x#y|wc", "|")] {
        assert_eq!(
            refusal(&p, command),
            CmdRefusal::ShellOperator {
                operator: operator.into()
            },
            "{command:?}"
        );
    }
    // Inside double quotes a `\"` does not end them and a `$` alone is a
    // character; the closing quote ends them, and what follows is read
    // again as a shell reads it.
    assert_eq!(
        refusal(&p, "echo \"a\"; id"),
        CmdRefusal::ShellOperator {
            operator: ";".into()
        }
    );
    for (command, args) in [
        ("echo \"a\\\"; id\"", vec!["a\"; id"]),
        ("echo \"$HOME\" \"cost: 5$\"", vec!["$HOME", "cost: 5$"]),
        ("ls -l # list; then stop", vec!["-l"]),
        ("grep error$ log.txt", vec!["error$", "log.txt"]),
        ("echo $HOME a#b", vec!["$HOME", "a#b"]),
    ] {
        let checked = check_command(&p, command)
            .unwrap_or_else(|refusal| panic!("`{command}` was refused: {refusal}"));
        assert_eq!(checked.args, args, "{command:?}");
    }
}

// ---------------------------------------------------------------- write guard

#[test]
fn sed_in_place_in_every_form_is_a_write() {
    let p = default_policy();
    let why = "edits files in place";
    for (command, option) in [
        ("sed -i s/a/b/ f", "-i"),
        ("sed -ni p f", "-i"),
        ("sed -i.bak s/a/b/ f", "-i.bak"),
        ("sed --in-place=.bak s/a/b/ f", "-i.bak"),
        ("sed --in-pl s/a/b/ f", "-i"),
        ("sed s/a/b/ f -i", "-i"),
    ] {
        assert_eq!(
            refusal(&p, command),
            write_guard("sed", option, why),
            "{command}"
        );
        passes(&writes_policy(&["sed"]), command);
    }
    passes(&p, "sed -n /error/p f");
    passes(&p, "sed -e s/a/b/ -e 's/x/w/' f");
}

/// A command hidden after a label (GNU sed ends labels at a blank) ran
/// programs through the shell under the default policy.
#[test]
fn sed_commands_hidden_after_a_label_are_refused() {
    let writes = writes_policy(&["sed"]);
    for command in [
        "sed ':x e id | tr a-z A-Z' /etc/hostname",
        "sed -n -e 't x e id' -e ':x' f",
        "sed '$!b x e id' f",
    ] {
        for policy in [&default_policy(), &writes] {
            let refused = refusal(policy, command);
            assert!(
                matches!(&refused, CmdRefusal::NeverAllowed { program, .. } if program == "sed"),
                "{command}: {refused:?}"
            );
        }
    }
}

#[test]
fn sed_scripts_that_write_or_run_programs() {
    let p = default_policy();
    for (command, option) in [
        ("sed 'w /tmp/out' f", "script command `w`"),
        ("sed -n '1W /tmp/out' f", "script command `W`"),
        ("sed 's/a/b/w /tmp/out' f", "script command `s///w`"),
        ("sed -e p -e 's/a/b/gw out' f", "script command `s///w`"),
    ] {
        for policy in [&p, &writes_policy(&["sed"])] {
            assert!(
                matches!(refusal(policy, command), CmdRefusal::NeverAllowed { option: o, .. } if o == option),
                "{command}"
            );
        }
    }
    let writes = writes_policy(&["sed"]);
    for (command, option) in [
        ("sed 'e id' f", "script command `e`"),
        ("sed 's/.*/id/e' f", "script command `s///e`"),
        ("sed -n 'p;1e id' f", "script command `e`"),
    ] {
        for policy in [&p, &writes] {
            assert_eq!(
                refusal(policy, command),
                CmdRefusal::NeverAllowed {
                    program: "sed".into(),
                    option: option.into(),
                    why: "runs a program through the shell".into()
                },
                "{command}"
            );
        }
    }
    assert!(matches!(
        refusal(&writes, "sed -f script.sed f"),
        CmdRefusal::NeverAllowed { option, .. } if option == "-f"
    ));
    assert!(matches!(
        refusal(&p, "sed 's/a/b/Z' f"),
        CmdRefusal::NeverAllowed { .. }
    ));
    assert!(matches!(
        refusal(&p, "sed --bogus p f"),
        CmdRefusal::UnknownOption { option, .. } if option == "--bogus"
    ));
}

#[test]
fn find_actions_that_write_or_run() {
    let p = default_policy();
    passes(&p, "find /var/log -name '*.log' -mtime -1 -print");
    for (command, option, why) in [
        ("find . -delete", "-delete", "deletes files"),
        (
            "find . -fprint out",
            "-fprint",
            "writes its output to a file",
        ),
        (
            "find . -fprintf out %p",
            "-fprintf",
            "writes its output to a file",
        ),
        ("find . -fls out", "-fls", "writes its output to a file"),
    ] {
        assert_eq!(refusal(&p, command), write_guard("find", option, why));
        passes(&writes_policy(&["find"]), command);
    }
    for option in ["-exec", "-execdir", "-ok", "-okdir"] {
        let command = format!("find . {option} rm {{}} \\;");
        let expected = CmdRefusal::NeverAllowed {
            program: "find".into(),
            option: option.into(),
            why: "runs another program".into(),
        };
        assert_eq!(refusal(&p, &command), expected);
        assert_eq!(refusal(&writes_policy(&["find"]), &command), expected);
    }
}

#[test]
fn sort_uniq_date_hostname_options_that_write() {
    let p = default_policy();
    let out = "writes its output to a file";
    for (command, expected) in [
        ("sort -o out f", write_guard("sort", "-o", out)),
        ("sort -ro out f", write_guard("sort", "-o", out)),
        ("sort -oout f", write_guard("sort", "-o", out)),
        ("sort --output=out f", write_guard("sort", "--output", out)),
        ("sort --out out f", write_guard("sort", "--output", out)),
        (
            "uniq a b",
            write_guard("uniq", "b", "is an output file uniq would write"),
        ),
        (
            "uniq -c -f 1 a b",
            write_guard("uniq", "b", "is an output file uniq would write"),
        ),
        // `+N` is GNU uniq's old form of `-s N`, not a file: the output
        // file is the one after the input.
        (
            "uniq +0 - victim",
            write_guard("uniq", "victim", "is an output file uniq would write"),
        ),
        (
            "uniq -c +1 a q",
            write_guard("uniq", "q", "is an output file uniq would write"),
        ),
        // Only `+` and digits is the old form: `+out` is a file.
        (
            "uniq a +out",
            write_guard("uniq", "+out", "is an output file uniq would write"),
        ),
        (
            "date -s 2020-01-01",
            write_guard("date", "-s", "sets the system clock"),
        ),
        (
            "date --set=2020-01-01",
            write_guard("date", "--set", "sets the system clock"),
        ),
        (
            "date 010100002020",
            write_guard(
                "date",
                "010100002020",
                "is a date operand, which sets the system clock",
            ),
        ),
        (
            "hostname foo",
            write_guard("hostname", "foo", "is a new host name, which sets it"),
        ),
        (
            "hostname -F /etc/x",
            write_guard("hostname", "-F", "sets the host name from a file"),
        ),
        (
            "hostname -b",
            write_guard("hostname", "-b", "sets the host name"),
        ),
        (
            "hostname --boot",
            write_guard("hostname", "-b", "sets the host name"),
        ),
    ] {
        assert_eq!(refusal(&p, command), expected, "{command}");
        passes(
            &writes_policy(&["sort", "uniq", "date", "hostname"]),
            command,
        );
    }
    for command in [
        "sort -k2 -t, -n f",
        "sort -r f",
        "uniq -c a",
        "uniq a -",
        "date +%s",
        "date -d yesterday +%F",
        "hostname -f",
        "hostname",
    ] {
        passes(&p, command);
    }
    for policy in [&p, &writes_policy(&["sort"])] {
        assert!(matches!(
            refusal(policy, "sort --compress-program=sh f"),
            CmdRefusal::NeverAllowed { option, .. } if option == "--compress-program"
        ));
    }
}

/// `install --strip-program` and `split --filter` run another program,
/// so even a policy that allows writes (and lists both) refuses them, in
/// every abbreviation the program accepts; shorter prefixes name other
/// options, and after `--` they are file names.
#[test]
fn install_and_split_never_run_another_program() {
    let policy = writes_policy(&["install", "split"]);
    for (command, option) in [
        ("install --strip-program=sh a b", "--strip-program=sh"),
        ("install -s --strip-p /bin/sh a b", "--strip-p"),
        ("install --strip- x a b", "--strip-"),
        ("split --filter=sh big", "--filter=sh"),
        ("split -l 10 --f 'sh -c id' big", "--f"),
    ] {
        assert!(
            matches!(
                refusal(&policy, command),
                CmdRefusal::NeverAllowed { option: o, .. } if o == option
            ),
            "{command}"
        );
    }
    for command in [
        "install --strip a b",
        "install -m 644 -- --strip-program=sh b",
        "split -l 10 big part-",
        "split -- --filter=sh",
    ] {
        passes(&policy, command);
    }
}

#[test]
fn write_only_programs_need_allow_writes_even_when_listed() {
    let listed = CmdRunPolicy {
        allowlist: vec!["rm".into(), "tee".into(), "dd".into()],
        ..CmdRunPolicy::default()
    };
    for program in ["rm", "tee", "dd"] {
        let command = format!("{program} x");
        assert_eq!(
            refusal(&listed, &command),
            CmdRefusal::WriteOnlyProgram {
                program: program.into()
            }
        );
        assert!(matches!(
            refusal(&default_policy(), &command),
            CmdRefusal::NotAllowed { .. }
        ));
        passes(&writes_policy(&["rm", "tee", "dd"]), &command);
    }
}

// ---------------------------------------------------------------- running

async fn run(policy: CmdRunPolicy, args: Value) -> Result<Value, homeagent_core::ToolError> {
    let registry = Registry::new();
    register_cmd_run(&registry, policy).unwrap();
    let ctx = ToolContext {
        call_id: "call-1".into(),
        tool: "cmd_run".into(),
        arguments: args,
        batch_id: "batch-1".into(),
        extras: Default::default(),
        cancel: Default::default(),
    };
    registry.invoke("cmd_run", ctx).await
}

#[tokio::test]
async fn the_definition_declares_its_scheduling() {
    let registry = Registry::new();
    register_cmd_run(&registry, CmdRunPolicy::default()).unwrap();
    let def = registry.definition("cmd_run").unwrap();
    assert!(def.parallel_safe && !def.serial && def.read_only);
    assert!(def.description.contains("WITHOUT a shell"));
    assert!(def.description.contains("grep"));
    // The tool keeps the call's own timeout and says so; the executor's
    // limit is a backstop past the longest a call may ask for.
    let max = CmdRunPolicy::default().max_timeout;
    assert!(def.timeout.is_some_and(|t| t > max), "{:?}", def.timeout);
    // Writes allowed, or a program the default list does not hold (its
    // options are not guarded: `systemctl restart`, `touch`): the tool may
    // change things, so it is not read-only, and two calls may depend on
    // each other's order (write, then read), so they run one at a time.
    let custom = |allowlist: &[&str]| CmdRunPolicy {
        allowlist: allowlist.iter().map(|s| s.to_string()).collect(),
        ..CmdRunPolicy::default()
    };
    for (what, policy) in [
        ("allow_writes", writes_policy(&["ls"])),
        (
            "a program outside the default list",
            custom(&["ls", "touch"]),
        ),
    ] {
        let registry = Registry::new();
        register_cmd_run(&registry, policy).unwrap();
        let def = registry.definition("cmd_run").unwrap();
        assert!(!def.read_only, "{what}");
        assert!(!def.parallel_safe, "{what}");
    }
    // A custom list within the default one is still read-only.
    let registry = Registry::new();
    register_cmd_run(&registry, custom(&["ls", "grep"])).unwrap();
    let def = registry.definition("cmd_run").unwrap();
    assert!(def.parallel_safe && def.read_only);
}

#[tokio::test]
async fn echo_runs_and_returns_its_output() {
    let value = run(default_policy(), json!({"command": "echo hi"}))
        .await
        .unwrap();
    assert_eq!(value["exit_code"], json!(0));
    assert_eq!(value["stdout"], json!("hi\n"));
    assert_eq!(value["stderr"], json!(""));
    assert_eq!(value["truncated"], json!(false));
    assert!(value["duration_ms"].is_u64());
}

#[tokio::test]
async fn a_non_zero_exit_is_a_successful_call() {
    let value = run(
        default_policy(),
        json!({"command": "ls /nonexistent-homeagent"}),
    )
    .await
    .unwrap();
    assert_eq!(value["exit_code"], json!(2));
    assert!(
        value["stderr"]
            .as_str()
            .unwrap()
            .contains("nonexistent-homeagent")
    );
}

#[tokio::test]
async fn refusals_are_denied_with_a_hint() {
    let err = run(default_policy(), json!({"command": "ls | wc"}))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::Denied);
    assert!(err.detail.starts_with("no shell is used"));
    let err = run(default_policy(), json!({"command": "sed -i s/a/b/ f"}))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::Denied);
    assert!(
        err.hint
            .unwrap()
            .contains("tools.cmd_run.allow_writes = true")
    );
    let err = run(default_policy(), json!({"command": "curl x"}))
        .await
        .unwrap_err();
    assert!(
        err.hint
            .unwrap()
            .contains("add `curl` to tools.cmd_run.allowlist")
    );
}

#[tokio::test]
async fn a_program_that_cannot_start_is_an_execution_error() {
    let policy = CmdRunPolicy {
        allowlist: vec!["no-such-program-homeagent".into()],
        ..CmdRunPolicy::default()
    };
    let err = run(policy, json!({"command": "no-such-program-homeagent"}))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::Execution);
    assert!(
        err.detail.contains("No such file or directory"),
        "{}",
        err.detail
    );
}

/// Processes whose command line is exactly `argv`, found through /proc.
fn processes_running(argv: &[&str]) -> usize {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| std::fs::read(e.path().join("cmdline")).ok().as_deref() == Some(&wanted))
        .count()
}

#[tokio::test]
async fn the_timeout_kills_the_child() {
    // A sleep length no other process uses, to find the child in /proc.
    let length = format!("5.{}", std::process::id());
    let started = Instant::now();
    let err = run(
        default_policy(),
        json!({"command": format!("sleep {length}"), "timeout": "300ms"}),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(err.reason, ErrorReason::Timeout);
    assert_eq!(processes_running(&["sleep", &length]), 0);
}

#[tokio::test]
async fn timeouts_accept_strings_and_integers() {
    for timeout in [json!("10s"), json!("500ms"), json!(10), json!("2m")] {
        run(
            default_policy(),
            json!({"command": "true", "timeout": timeout}),
        )
        .await
        .unwrap();
    }
    let err = run(
        default_policy(),
        json!({"command": "true", "timeout": "soon"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, ErrorReason::InvalidArguments);
    assert_eq!(err.field.as_deref(), Some("timeout"));
    // A timeout must be a time to wait: zero and less are refused.
    for timeout in [json!(0), json!("0s"), json!(-5)] {
        let err = run(
            default_policy(),
            json!({"command": "true", "timeout": timeout}),
        )
        .await
        .unwrap_err();
        assert!(
            err.detail.contains("must be greater than zero"),
            "{timeout}: {err:?}"
        );
    }
}

#[tokio::test]
async fn output_is_capped_with_a_marker() {
    let dir = TempDir::new("cap");
    let file = dir.path().join("big.txt");
    std::fs::write(&file, "x".repeat(10_000)).unwrap();
    let policy = CmdRunPolicy {
        output_cap_bytes: 1000,
        ..CmdRunPolicy::default()
    };
    let value = run(
        policy,
        json!({"command": format!("cat '{}'", file.display())}),
    )
    .await
    .unwrap();
    assert_eq!(value["exit_code"], json!(0));
    assert_eq!(value["truncated"], json!(true));
    let expected = format!("{}{}", "x".repeat(1000), truncation_marker(1000, 9000));
    assert_eq!(value["stdout"], json!(expected));
    assert!(expected.contains("truncated after 1000 bytes; 9000 more bytes"));
}

/// Either stream cut makes the result say so: here only stderr is.
#[tokio::test]
async fn a_cut_stderr_alone_marks_the_result_truncated() {
    let policy = CmdRunPolicy {
        output_cap_bytes: 10,
        ..CmdRunPolicy::default()
    };
    let value = run(
        policy,
        json!({"command": "cat /nonexistent-homeagent-dir/missing-file"}),
    )
    .await
    .unwrap();
    assert_eq!(value["stdout"], json!(""));
    assert_eq!(value["truncated"], json!(true), "{value}");
    let stderr = value["stderr"].as_str().unwrap();
    assert!(stderr.starts_with("cat: /none"), "{stderr}");
    assert!(stderr.contains("truncated after 10 bytes"), "{stderr}");
}

#[tokio::test]
async fn the_child_gets_a_clean_environment() {
    // cargo sets these for the test process; none may reach the child.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let value = run(
        default_policy(),
        json!({"command": "cat /proc/self/environ"}),
    )
    .await
    .unwrap();
    let names: Vec<String> = value["stdout"]
        .as_str()
        .unwrap()
        .split('\0')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split_once('=').unwrap().0.to_string())
        .collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "TZ"].contains(&name.as_str()),
            "{name} leaked"
        );
    }
    assert!(names.contains(&"PATH".to_string()));
    assert!(!names.contains(&"CARGO_MANIFEST_DIR".to_string()));

    // A name the policy lists passes through; an assignment is set.
    let policy = CmdRunPolicy {
        env: vec!["CARGO_PKG_NAME".into()],
        ..CmdRunPolicy::default()
    };
    let value = run(
        policy,
        json!({"command": "LC_ALL=C cat /proc/self/environ"}),
    )
    .await
    .unwrap();
    let env = value["stdout"].as_str().unwrap();
    assert!(env.contains("CARGO_PKG_NAME=homeagent-tools\0"), "{env:?}");
    assert!(env.contains("LC_ALL=C\0"));
    assert!(!env.contains("CARGO_MANIFEST_DIR"));
}

#[test]
fn policy_validation_names_the_problem() {
    use homeagent_tools::cmd_run::PolicyError;
    assert_eq!(CmdRunPolicy::default().validate(), Ok(()));
    let with = |allowlist: &[&str], env: &[&str]| CmdRunPolicy {
        allowlist: allowlist.iter().map(|s| s.to_string()).collect(),
        env: env.iter().map(|s| s.to_string()).collect(),
        ..CmdRunPolicy::default()
    };
    assert_eq!(
        with(&["ls", "bash"], &[]).validate(),
        Err(PolicyError::ProgramRunner {
            program: "bash".into()
        })
    );
    assert_eq!(
        with(&["/bin/ls"], &[]).validate(),
        Err(PolicyError::BadProgramName {
            name: "/bin/ls".into()
        })
    );
    for name in ["", "bin/ls", ".", ".."] {
        assert_eq!(
            with(&[name], &[]).validate(),
            Err(PolicyError::BadProgramName { name: name.into() }),
            "{name:?}"
        );
    }
    assert!(matches!(
        with(&[], &["LD_PRELOAD"]).validate(),
        Err(PolicyError::BadEnvName { name, .. }) if name == "LD_PRELOAD"
    ));
    assert_eq!(with(&["ls", "cat"], &["MY_DIR", "_X1"]).validate(), Ok(()));
    for name in ["1BAD", "MY-DIR", ""] {
        assert!(
            matches!(
                with(&[], &[name]).validate(),
                Err(PolicyError::BadEnvName { name: named, why }) if named == name
                    && why == "is not a valid variable name"
            ),
            "{name:?}"
        );
    }
    // A call's default timeout may be its cap, not above it.
    let timed = |timeout: u64, max_timeout: u64| CmdRunPolicy {
        timeout: std::time::Duration::from_secs(timeout),
        max_timeout: std::time::Duration::from_secs(max_timeout),
        ..CmdRunPolicy::default()
    };
    assert_eq!(timed(60, 60).validate(), Ok(()));
    assert_eq!(timed(59, 60).validate(), Ok(()));
    assert_eq!(
        timed(61, 60).validate(),
        Err(PolicyError::TimeoutAboveMax {
            timeout: std::time::Duration::from_secs(61),
            max: std::time::Duration::from_secs(60),
        })
    );
    // Zero limits name their key; the cap before the timeout, since a
    // config that sets only the cap to 0 lowers the default timeout to it.
    let zero = |key: &'static str| Err(PolicyError::Zero { key });
    assert_eq!(timed(0, 60).validate(), zero("timeout"));
    assert_eq!(timed(0, 0).validate(), zero("max_timeout"));
    let no_output = CmdRunPolicy {
        output_cap_bytes: 0,
        ..CmdRunPolicy::default()
    };
    assert_eq!(no_output.validate(), zero("output_cap_bytes"));
    // A working directory that is not one fails here, naming the key, not
    // at every command as "cannot start `ls`".
    let in_dir = |dir: &str| CmdRunPolicy {
        working_dir: Some(dir.into()),
        ..CmdRunPolicy::default()
    };
    assert_eq!(in_dir("/tmp").validate(), Ok(()));
    for dir in ["/nonexistent/homeagent-dir", "/etc/hostname"] {
        let error = in_dir(dir).validate().unwrap_err();
        assert!(
            matches!(&error, PolicyError::WorkingDir { dir: named, .. } if named.as_os_str() == dir),
            "{error:?}"
        );
        assert!(
            error.to_string().starts_with("tools.cmd_run.working_dir"),
            "{error}"
        );
    }
    // A configured program that is not on the PATH commands run with is
    // named at start (every call to it would fail with "cannot start");
    // the built-in list is not, as any of it may be missing on a machine.
    assert_eq!(
        with(&["ls", "no-such-program-here", "cat"], &[]).unavailable_programs(),
        ["no-such-program-here"]
    );
    assert!(CmdRunPolicy::default().unavailable_programs().is_empty());
    // A runner that slipped into the configuration still never runs.
    assert_eq!(with(&["ls", "bash"], &[]).effective_allowlist(), vec!["ls"]);
    // A program whose name ends in digits is no runner unless its name
    // without them is one.
    assert_eq!(with(&["ls", "base64"], &[]).validate(), Ok(()));
    // Programs that run commands through an option: tar
    // --checkpoint-action=exec=CMD, rsync -e CMD, zip -TT CMD, scp -S CMD,
    // and the editors, database shells and relays with a `!` command.
    for program in [
        "tar",
        "cpio",
        "rsync",
        "zip",
        "scp",
        "sftp",
        "ed",
        "ex",
        "nvim",
        "emacs",
        "sqlite3",
        "psql",
        "mysql",
        "socat",
        "nc",
        "ncat",
        "tmux",
        "screen",
        "docker",
        "npx",
        // Wrappers that run the rest of their command line, and programs
        // with a command language of their own.
        "prlimit",
        "setpriv",
        "chrt",
        "runcon",
        "sg",
        "ssh-agent",
        "toybox",
        "dc",
        "m4",
        "ip",
        "wget",
        "tcpdump",
        "bwrap",
        "firejail",
        "capsh",
        "valgrind",
        "ltrace",
        "setarch",
        "numactl",
        "systemd-nspawn",
        "newgrp",
        // Interpreters by their versioned names, and the dynamic loader.
        "python3.11",
        "perl5.36.0",
        "lua5.4",
        "php8.2",
        "ruby3.1",
        "node18",
        "pip3.11",
        "ld-linux-x86-64.so.2",
        // Restricted and other shells, and more interpreters and launchers.
        "rbash",
        "mksh",
        "pwsh",
        "yash",
        "nu",
        "Rscript",
        "julia",
        "deno",
        "bun",
        "java",
        "guile",
        "proot",
        "fakeroot",
        "sshpass",
        "start-stop-daemon",
    ] {
        assert_eq!(
            with(&["ls", program], &[]).validate(),
            Err(PolicyError::ProgramRunner {
                program: program.into()
            }),
            "{program}"
        );
    }
}

/// Every sed command runs under GNU sed's `--sandbox` where sed has it, so
/// the script commands the sandbox refuses (`e`, `r`, `w`) are refused by
/// the guard too, under every policy: the script parser never decides
/// whether the sandbox applies.
#[test]
fn sed_always_runs_sandboxed_and_its_file_commands_are_refused() {
    let writes = writes_policy(&["sed"]);
    for command in [
        "sed -n 1p f",
        "sed -e 's/a/b/g' -e p f",
        "sed ':x; n; b x' f",
    ] {
        for policy in [&default_policy(), &writes] {
            let checked = check_command(policy, command)
                .unwrap_or_else(|r| panic!("`{command}` was refused: {r}"));
            assert!(checked.sed_sandbox, "{command}");
        }
    }
    // In place is the way to write with sed, when writes are allowed.
    assert!(
        check_command(&writes, "sed -i s/a/b/ f")
            .unwrap()
            .sed_sandbox
    );
    for (command, option) in [
        ("sed 'r /etc/hostname' f", "script command `r`"),
        ("sed -n '1R other' f", "script command `R`"),
        ("sed -n -e p -e '$r /dev/null' f", "script command `r`"),
    ] {
        for policy in [&default_policy(), &writes] {
            let refused = refusal(policy, command);
            assert!(
                matches!(&refused, CmdRefusal::NeverAllowed { option: o, .. } if o == option),
                "{command}: {refused:?}"
            );
        }
    }
    assert!(
        !check_command(&default_policy(), "cat f")
            .unwrap()
            .sed_sandbox
    );
}

fn private_refusal(policy: &CmdRunPolicy, command: &str) -> String {
    match refusal(policy, command) {
        CmdRefusal::PrivatePath { argument, .. } => argument,
        other => panic!("`{command}`: expected a private-path refusal, got {other:?}"),
    }
}

/// After `--` every argument is a file name, however it starts: a
/// recursive grep may not start at `-conf` when it holds the config, and
/// `-f/proc/1/environ` there names a file under the working directory,
/// not `/proc`.
#[test]
fn after_a_double_dash_every_argument_is_a_path() {
    let dir = TempDir::new("dashes");
    std::fs::create_dir_all(dir.path().join("-conf")).unwrap();
    let config = dir.path().join("-conf/homeagent.toml");
    std::fs::write(&config, "[server]\napi_key = \"k\"\n").unwrap();
    let policy = CmdRunPolicy {
        private_paths: vec![config.canonicalize().unwrap()],
        working_dir: Some(dir.path().to_path_buf()),
        ..default_policy()
    };
    // Named by the argument it starts at (a search of the working
    // directory, which holds it too, would be refused as `.`).
    assert_eq!(private_refusal(&policy, "grep -r key -- -conf"), "-conf");
    passes(&policy, "cat -- -f/proc/1/environ");
}

/// An MCP server's token sits in its environment, readable at
/// /proc/<pid>/environ by anything running as the same user, in every
/// spelling of the path.
#[test]
fn other_processes_proc_entries_are_refused_in_every_spelling() {
    let policy = default_policy();
    let other = std::process::id(); // some process that is not the child
    for command in [
        format!("cat /proc/{other}/environ"),
        format!("cat /proc/self/../{other}/environ"),
        format!("cat /dev/fd/../../{other}/environ"),
        format!("cat /proc/self/root/proc/{other}/environ"),
        format!("grep -a KEY /proc/{other}/environ"),
        format!("grep -f/proc/{other}/environ /dev/null"),
        format!("grep --file=/proc/{other}/environ /dev/null"),
        format!("head -c 100 /proc/{other}/cmdline"),
        "grep -r KEY /".to_owned(),
        "grep -rn KEY /proc".to_owned(),
        "grep --recursive KEY /".to_owned(),
        "grep -d recurse KEY /".to_owned(),
        // GNU grep takes any unambiguous prefix of a long option, and of
        // the `-d` action, and a value-taking option at a cluster's end.
        "grep --rec KEY /".to_owned(),
        "grep --recur KEY /".to_owned(),
        "grep -d rec KEY /".to_owned(),
        "grep --directories=rec KEY /".to_owned(),
        "grep --dir rec KEY /".to_owned(),
        "grep -nd recurse KEY /".to_owned(),
        "grep -ndrecurse KEY /".to_owned(),
        // An option grep may read differently than this check cannot pass.
        "grep --no-such-option KEY /etc/hostname".to_owned(),
        "ps axe".to_owned(),
        "ps eww".to_owned(),
        "sort --files0-from=names".to_owned(),
        // GNU's long options may be abbreviated: every prefix that names
        // --files0-from reads a file of names.
        "sort --files0=names".to_owned(),
        "wc --files0-f=names".to_owned(),
        "du --files names".to_owned(),
        "wc --f=names".to_owned(),
        // BSD `e` with a pid list after it, or after a long option that
        // takes no value, or after -N (negate, no value).
        "ps ewwp4242".to_owned(),
        "ps e4242".to_owned(),
        "ps --forest axe".to_owned(),
        "ps --no-headers e".to_owned(),
        "ps -N e".to_owned(),
        // A flag group before it takes no value: `e` is an option.
        "ps ax e".to_owned(),
        // procps reads every argument again as BSD when one is not SysV
        // (`-x`, or a BSD group): `-e` is then the BSD `e` too.
        "ps -ex".to_owned(),
        "ps -e -x".to_owned(),
        "ps -aex".to_owned(),
        "ps -x -e -o args".to_owned(),
        "ps --sort pid -x -e".to_owned(),
        "ps -e ax".to_owned(),
        // A SysV value procps cannot read (a user or session list that is
        // no such thing, a format it does not know) sends it back over
        // every argument the BSD way, where `e` shows environments.
        "ps -uex".to_owned(),
        "ps -sex".to_owned(),
        "ps -gex".to_owned(),
        "ps -se 1234".to_owned(),
        "ps -u -e 1234".to_owned(),
        "ps -e -o nosuchformat".to_owned(),
    ] {
        private_refusal(&policy, &command);
    }
    // Paths not written as paths: dd's `if=`, curl's `file://` URLs and
    // `@file` values (with those programs configured).
    let configured = CmdRunPolicy {
        allowlist: ["dd", "curl"].map(String::from).to_vec(),
        allow_writes: true,
        ..default_policy()
    };
    for command in [
        format!("dd if=/proc/{other}/environ"),
        format!("curl file:///proc/{other}/environ"),
        format!("curl --data-binary @/proc/{other}/environ http://127.0.0.1:9/"),
        format!("curl -d@/proc/{other}/environ http://127.0.0.1:9/"),
    ] {
        private_refusal(&configured, &command);
    }
    passes(&configured, "dd if=/dev/zero of=/tmp/zeros count=1");
    // Programs other than grep that read below where they start.
    let readers = CmdRunPolicy {
        allowlist: ["rg", "diff", "cp"].map(String::from).to_vec(),
        allow_writes: true,
        ..default_policy()
    };
    for command in [
        "rg -uuu api_key /",
        "diff -rN / /tmp",
        "cp -r / /tmp/copy",
        "cp -a / /tmp/copy",
    ] {
        let refused = refusal(&readers, command);
        assert!(
            matches!(&refused, CmdRefusal::PrivatePath { .. })
                && refused.to_string().contains("recursive read"),
            "{command}: {refused:?}"
        );
    }
    passes(&readers, "rg key /var/log");
    passes(&readers, "diff /etc/hostname /etc/hosts");
    passes(&readers, "cp /etc/hostname /tmp/hostname-copy");
    passes(&configured, "curl file:///etc/hostname");
    // grep's other names: `rgrep` is `grep -r`.
    let greps = CmdRunPolicy {
        allowlist: ["grep", "egrep", "fgrep", "rgrep"]
            .map(String::from)
            .to_vec(),
        ..default_policy()
    };
    for command in ["egrep -r KEY /", "fgrep --rec KEY /", "rgrep KEY /"] {
        private_refusal(&greps, command);
    }
    passes(&greps, "rgrep KEY /var/log");
    // An option the guard does not know is its own gap, not grep's.
    let unknown = refusal(&policy, "grep --no-such-option KEY /etc/hostname");
    assert!(unknown.to_string().contains("does not know"), "{unknown}");
    let refused = refusal(&policy, &format!("cat /proc/{other}/environ"));
    assert!(refused.to_string().contains("/proc"), "{refused}");
    assert!(refused.hint().contains("/proc/self"), "{}", refused.hint());

    // The child's own entries, system-wide figures and ordinary paths pass.
    for command in [
        "cat /proc/self/environ",
        "cat /proc/meminfo",
        "cat /proc/loadavg",
        "grep -rn error /var/log",
        // A pattern is not where grep starts, even a `/` attached to -e.
        "grep -rn -e/ /var/log",
        // Other directory actions do not recurse, from / either.
        "grep -d skip KEY /",
        "grep --directories=read KEY /",
        "grep -n proc /etc/hostname",
        "ps aux",
        "ps -ef",
        "ps -C sleep -o pid,etime",
        // A value that starts with `e` is not the option `e`.
        "ps axo etime,pid",
        "ps -o etime,pid",
        // SysV all through: `-e` is every process.
        "ps -eo pid,comm",
        // Re-read as BSD, a dashed option without `e`, or an `e` that is
        // the value of the option before it, is no environment.
        "ps -A x",
        "ps x -o -etime",
        "ps -e -o pid",
        "ps -eF",
        "ps --sort etime",
        "ps --format etime,pid",
        "grep -A1 --no-group-separator foo /var/log",
        "grep -A1 --group-separator=-- foo /etc/hostname",
        "grep -A1 --group-separator ~~ foo /etc/hostname",
        "ps p 1",
        // Values procps reads as SysV: nothing is read again as BSD.
        "ps -e -u root",
        "ps -e -p 1,2",
        "ps -e -o pid,comm,etime",
        "ps -ef -s 1",
        // `U` takes the rest as a user list: `edward` is no option `e`.
        "ps Uedward",
        "ps 1",
        "sort --field-separator=, /etc/hostname",
        "ls -l /tmp",
    ] {
        passes(&policy, command);
    }
}

/// The config file may hold the server's key and device tokens: no
/// command reads it, through a symlink or a recursive grep either.
#[test]
fn private_paths_are_refused_directly_through_a_symlink_and_recursively() {
    let dir = std::env::temp_dir().join(format!("homeagent-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    let config = dir.join("conf/homeagent.toml");
    std::fs::write(&config, "[server]\napi_key = \"k\"\n").unwrap();
    std::fs::write(dir.join("conf/notes.txt"), "fine").unwrap();
    std::os::unix::fs::symlink(&config, dir.join("link.toml")).unwrap();
    let policy = CmdRunPolicy {
        private_paths: vec![config.canonicalize().unwrap()],
        ..default_policy()
    };
    let dir_text = dir.display();
    for command in [
        format!("cat {}", config.display()),
        format!("cat {dir_text}/conf/../conf/homeagent.toml"),
        format!("cat {dir_text}/link.toml"),
        format!("grep -r key {dir_text}"),
        format!("grep -R key {dir_text}/conf"),
    ] {
        private_refusal(&policy, &command);
    }
    passes(&policy, &format!("cat {dir_text}/conf/notes.txt"));
    passes(&policy, &format!("grep key {dir_text}/conf/notes.txt"));

    // `-R` follows every symlink below its start: a link to the config (or
    // to /proc) anywhere in an innocent directory would be read through.
    let innocent = dir.join("innocent");
    std::fs::create_dir_all(&innocent).unwrap();
    std::os::unix::fs::symlink(&config, innocent.join("settings")).unwrap();
    let innocent = innocent.display();
    for command in [
        format!("grep -R key {innocent}"),
        format!("grep -nR key {innocent}"),
        format!("grep --dereference-recursive key {innocent}"),
        format!("grep --deref key {innocent}"),
        format!("grep -nR key {innocent}"),
        format!("grep -C 2 -R key {innocent}"),
    ] {
        private_refusal(&policy, &command);
    }
    let refused = refusal(&policy, &format!("grep -R key {innocent}"));
    assert!(refused.to_string().contains("use -r"), "{refused}");
    // `-r` does not follow links below its start, so it may search there;
    // an `R` that is a value is not the option.
    passes(&policy, &format!("grep -r key {innocent}"));
    passes(&policy, &format!("grep --rec key {innocent}"));
    passes(&policy, &format!("grep -eR {innocent}/notes"));
    passes(&policy, &format!("grep -e -R {innocent}/notes"));

    // A value attached to a short option is a path relative to the working
    // directory too, with or without a `/` in it: `date -fFILE` prints
    // every line of FILE in its "invalid date" errors.
    let in_dir = CmdRunPolicy {
        working_dir: Some(dir.clone()),
        ..policy.clone()
    };
    let in_conf = CmdRunPolicy {
        working_dir: Some(dir.join("conf")),
        ..policy.clone()
    };
    for (policy, command) in [
        (&in_dir, "date -fconf/homeagent.toml"),
        (&in_dir, "grep -fconf/homeagent.toml /dev/null"),
        (&in_dir, "grep -nfconf/homeagent.toml /dev/null"),
        (&in_dir, "date -f./conf/../conf/homeagent.toml"),
        (&in_conf, "date -fhomeagent.toml"),
        (&in_conf, "grep -fhomeagent.toml /dev/null"),
        (&in_dir, "date -flink.toml"),
    ] {
        assert_eq!(
            private_refusal(policy, command),
            command.split(' ').nth(1).unwrap(),
            "{command}"
        );
    }
    passes(&in_conf, "date -fnotes.txt");
    passes(&in_conf, "grep -nfnotes.txt notes.txt");
    // After `--` every argument is an operand, dash or not: a link named
    // `-x` to the config is read as the file `-x`.
    std::os::unix::fs::symlink(&config, dir.join("-x")).unwrap();
    assert_eq!(private_refusal(&in_dir, "cat -- -x"), "-x");
    // GNU getopt gives an option that takes a value the next argument
    // even when it starts with a dash: `date -f --/../x` reads the file
    // `--/../x`, and `-` and `--` are directories as good as any.
    std::fs::create_dir_all(dir.join("conf/--")).unwrap();
    std::fs::create_dir_all(dir.join("conf/-")).unwrap();
    assert_eq!(
        private_refusal(&in_conf, "date -f --/../homeagent.toml"),
        "--/../homeagent.toml"
    );
    assert_eq!(
        private_refusal(&in_conf, "date -f -/../homeagent.toml"),
        "-/../homeagent.toml"
    );
    // A long option cluster costs its length in checks, not its square in
    // memory: tails longer than a path can be are not paths.
    let long = format!("grep -e{} notes.txt", "a".repeat(60_000));
    passes(&in_conf, &long);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The check resolves every path argument, and a path on a dead network
/// mount blocks that in the kernel: it runs on the blocking pool, so the
/// async worker (the waiter has one) goes on with other work meanwhile.
/// A task that counts while it is polled must count while a long command
/// (20,000 paths to resolve) is checked on a one-thread runtime.
#[tokio::test(flavor = "current_thread")]
async fn the_check_leaves_the_async_worker_free() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let policy = default_policy();
    let command = format!("ls{}", " /usr/share/../share/.".repeat(20_000));
    let polls = Arc::new(AtomicUsize::new(0));
    let counter = {
        let polls = Arc::clone(&polls);
        tokio::spawn(async move {
            loop {
                polls.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::task::yield_now().await;
    let before = polls.load(Ordering::SeqCst);
    let checked =
        homeagent_tools::check_command_async(&policy, &command, Duration::from_secs(600)).await;
    let after = polls.load(Ordering::SeqCst);
    counter.abort();
    assert!(checked.is_ok(), "{checked:?}");
    assert!(
        after > before,
        "nothing else ran while the command was checked"
    );
}
