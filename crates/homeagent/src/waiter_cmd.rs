//! `homeagent waiter`: the device side of the bridge, in the foreground or
//! detached with `--daemon`.
//!
//! One rule shapes this file: **every start path loads the configuration
//! the same way.** The seed's waiter wired its allowlist into the
//! interactive path only, so the daemons it ran in production enforced the
//! built-in list while the config said otherwise. Here [`prepare`] is the
//! only place a `WaiterPolicy` is made; the foreground path calls it, and
//! `--daemon` calls it too (to fail in the terminal, not in a log nobody
//! reads) and then re-executes this program without `--daemon`, so the
//! background process goes through [`prepare`] again and runs the very same
//! foreground code.
//!
//! Detaching without unsafe code (the workspace forbids it): no fork; the
//! child is a new process in its own process group, stdin from /dev/null,
//! stdout and stderr appended to the log file. The token never goes on the
//! child's command line (visible in `ps`): it is passed in its environment;
//! and a foreground waiter given `--token` starts itself again (`exec`,
//! same pid) with the token moved to its environment.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use homeagent_agent::config::ConfigPaths;
use homeagent_device::protocol::{Hello, PROTOCOL_VERSION, is_valid_device_id};
use homeagent_device::waiter::{
    DEFAULT_CONFIG_FILE_NAME, Secret, WaiterError, WaiterOptions, WaiterPolicy, default_device_id,
    hostname, run_waiter,
};

use crate::cli::{GlobalArgs, WaiterArgs};
use crate::setup;

/// The exit code when the server refuses this device for good (a wrong
/// token): EX_CONFIG, so a service manager can be told not to restart
/// (`RestartPreventExitStatus=78`) instead of retrying a bad token forever.
pub const EXIT_REFUSED: u8 = 78;

/// The environment variable the token travels in (also read by clap).
const TOKEN_ENV: &str = "HOMEAGENT_DEVICE_TOKEN";

/// The log file name in the data directory, for `--daemon`.
const LOG_FILE_NAME: &str = "waiter.log";

pub async fn run(args: WaiterArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let prepared = prepare(&args, global)?;
    if args.daemon {
        return daemonize(&args, global).await;
    }
    if let Some(token) = &args.token {
        leave_the_command_line(token)?;
    }
    foreground(prepared, args.daemon_child).await
}

/// A token given with `--token` would stay in this process's command line
/// for its whole life, where any process of the same user reads it (`ps
/// -ef`, which a waiter's allowlist may well let the agent run). So this
/// process replaces itself (same pid, through `exec`) with the same
/// arguments minus the token, which travels in the environment instead,
/// as it does for `--daemon`. Returns only when the token was not on the
/// command line (it came from the environment) or `exec` failed.
fn leave_the_command_line(token: &str) -> anyhow::Result<()> {
    let (rest, had_token) = without(std::env::args_os().skip(1), &[], &["--token"]);
    if !had_token {
        return Ok(());
    }
    let fix = format!("give the token in {TOKEN_ENV} or as `token` in waiter.toml instead");
    let exe = std::env::current_exe()
        .with_context(|| format!("cannot find this program to start it again; {fix}"))?;
    let error = std::process::Command::new(exe)
        .args(rest)
        .env(TOKEN_ENV, token)
        .exec();
    Err(error).with_context(|| {
        format!("cannot start this program again without --token on its command line; {fix}")
    })
}

/// Everything a waiter runs with, resolved from the command line,
/// `waiter.toml` and the environment.
struct Prepared {
    policy: WaiterPolicy,
    options: WaiterOptions,
    config_file: Option<PathBuf>,
}

/// The one way from arguments and config to a policy and options, for
/// every start path.
fn prepare(args: &WaiterArgs, global: &GlobalArgs) -> anyhow::Result<Prepared> {
    let config_file = match &global.config {
        Some(path) => Some(path.clone()),
        None => Some(data_dir(global)?.join(DEFAULT_CONFIG_FILE_NAME)).filter(|p| p.exists()),
    };
    let (config, policy) = WaiterPolicy::load(config_file.as_deref(), args.device_authorized)
        .context("the waiter's config is not usable")?;
    let policy = policy.protecting(homeagents_own_files(global)?);

    let server = args.server.clone().or(config.server.clone()).context(
        "no server to connect to: pass --server ws://HOST:PORT (or set `server` in waiter.toml)",
    )?;
    // An empty variable (a blank `Environment=` line) is unset, as it is
    // everywhere else in HomeAgent: the file's token still counts.
    let given = args.token.as_ref().filter(|token| !token.trim().is_empty());
    let token = match (given, &config.token) {
        (Some(token), _) => Secret::new(token.clone()),
        (None, Some(token)) => token.clone(),
        (None, None) => bail!(
            "no device token: pass --token, set {TOKEN_ENV}, or set `token` in waiter.toml \
             (the server's server.device_token, or its API key when that is unset)"
        ),
    };
    if token.expose().trim().is_empty() {
        bail!(
            "the device token is empty: pass the server's device token with --token or {TOKEN_ENV}"
        );
    }
    let device_id = args
        .device_id
        .clone()
        .or(config.device_id.clone())
        .unwrap_or_else(default_device_id);
    if !is_valid_device_id(&device_id) {
        bail!(
            "bad device id `{device_id}`: use 1–64 characters from A-Z, a-z, 0-9, `.`, `_` and \
             `-` (--device-id or device_id in waiter.toml)"
        );
    }
    let name = config
        .name
        .clone()
        .or_else(hostname)
        .unwrap_or_else(|| device_id.clone());
    let hello = Hello {
        device_id,
        name,
        capabilities: vec!["cmd".into()],
        version: PROTOCOL_VERSION,
    };
    let mut options = WaiterOptions::new(server, token, hello);
    options.ca_file = args.ca_file.clone();
    Ok(Prepared {
        policy,
        options,
        config_file,
    })
}

/// HomeAgent's data directory and config file as a server run by this
/// user would find them: the ones this command resolves (`--data-dir`,
/// `$HOMEAGENT_DATA_DIR`, `$HOMEAGENT_CONFIG`), and the default ones when
/// `--data-dir` names another. The config holds the API key and device
/// tokens, the data directory every session's history: on the server's
/// own machine (the usual one-box set-up) a device command must not read
/// them, as `cmd_run` may not.
fn homeagents_own_files(global: &GlobalArgs) -> anyhow::Result<Vec<PathBuf>> {
    let resolved = ConfigPaths::resolve(None, global.data_dir.clone(), &setup::env)?;
    let mut files = vec![resolved.data_dir, resolved.config_file];
    if global.data_dir.is_some()
        && let Ok(default) = ConfigPaths::resolve(None, None, &setup::env)
    {
        files.extend([default.data_dir, default.config_file]);
    }
    Ok(files)
}

fn data_dir(global: &GlobalArgs) -> anyhow::Result<PathBuf> {
    Ok(ConfigPaths::resolve(None, global.data_dir.clone(), &setup::env)?.data_dir)
}

async fn foreground(prepared: Prepared, detached: bool) -> anyhow::Result<ExitCode> {
    init_logs();
    if detached {
        eprintln!(
            "waiter started in the background (--daemon), pid {}",
            std::process::id()
        );
    }
    let Prepared {
        policy,
        options,
        config_file,
    } = prepared;
    // The line the seed's operators looked for to confirm the list was read.
    eprintln!(
        "waiter {} for {} (config: {}): {}",
        options.hello.device_id,
        options.server,
        config_file
            .as_ref()
            .map_or("none, defaults".into(), |p| p.display().to_string()),
        policy.summary()
    );
    for program in policy.cmd.unavailable_programs() {
        eprintln!(
            "warning: device_cmd_allowlist names `{program}`, which is not on the PATH commands \
             run with ({}); every command of it will fail until it is installed there",
            homeagent_tools::cmd_run::CHILD_PATH
        );
    }
    tokio::select! {
        ended = run_waiter(options, Arc::new(policy)) => match ended {
            Err(error @ (WaiterError::Refused { .. } | WaiterError::HandshakeRefused { .. })) => {
                eprintln!("error: {error}");
                Ok(ExitCode::from(EXIT_REFUSED))
            }
            Err(error) => Err(error.into()),
            Ok(never) => match never {},
        },
        () = crate::serve::shutdown_signal("the waiter") => {
            eprintln!("waiter stopping");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Logs at info level to stderr (the log file under `--daemon`), unless
/// `RUST_LOG` already set the program's own subscriber up.
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "homeagent=info,homeagent_device=info",
        ))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Starts this program again without `--daemon`, detached, and reports it.
async fn daemonize(args: &WaiterArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let log_path = match &args.log_file {
        Some(path) => path.clone(),
        None => data_dir(global)?.join(LOG_FILE_NAME),
    };
    if let Some(dir) = log_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open the log file {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find this program to start it again")?;

    let mut command = std::process::Command::new(exe);
    command
        .args(child_arguments(std::env::args_os().skip(1)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cannot share the log file")?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal does not reach it.
        .process_group(0);
    if let Some(token) = &args.token {
        command.env(TOKEN_ENV, token);
    }
    let mut child = command
        .spawn()
        .context("cannot start the background waiter")?;
    // A waiter the server refuses (a wrong token) stops at once, with its
    // own exit code (78 for a refusal): said here, for the caller and its
    // service manager, rather than only in the log.
    let deadline = std::time::Instant::now() + DAEMON_START_CHECK;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child
            .try_wait()
            .context("cannot check on the background waiter")?
        {
            let code = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1);
            eprintln!(
                "error: the background waiter stopped at once (exit {code}); see its log, {}",
                log_path.display()
            );
            return Ok(ExitCode::from(code.max(1)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let started = format!(
        "waiter running in the background: pid {}, log {}",
        child.id(),
        log_path.display()
    );
    // The waiter runs whether or not this can be said: a closed stdout
    // moves the line to stderr instead of failing a start that worked.
    {
        use std::io::Write as _;
        if writeln!(std::io::stdout(), "{started}").is_err() {
            eprintln!("{started}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `--daemon` watches the background waiter before reporting it
/// running: long enough for a local or nearby server to refuse its token.
const DAEMON_START_CHECK: std::time::Duration = std::time::Duration::from_secs(3);

/// This process's arguments for the background one: the same, minus
/// `--daemon`, `--log-file` and `--token` (which goes in the environment),
/// plus the hidden `--daemon-child`.
fn child_arguments(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let (mut out, _) = without(
        args,
        &["--daemon", "--daemon-child"],
        &["--token", "--log-file"],
    );
    out.push("--daemon-child".into());
    out
}

/// `args` without the `flags` and without the `valued` options (written
/// `--name value` or `--name=value`), and whether a valued one was there.
fn without(
    args: impl Iterator<Item = OsString>,
    flags: &[&str],
    valued: &[&str],
) -> (Vec<OsString>, bool) {
    let mut out = Vec::new();
    let (mut skip_value, mut dropped_valued) = (false, false);
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_str().unwrap_or_default();
        if flags.contains(&text) {
            continue;
        }
        if valued.contains(&text) {
            (skip_value, dropped_valued) = (true, true);
            continue;
        }
        let with_value = valued.iter().any(|name| {
            text.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('='))
        });
        if with_value {
            dropped_valued = true;
            continue;
        }
        out.push(arg);
    }
    (out, dropped_valued)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_gets_the_same_arguments_without_daemon_or_token() {
        let given = [
            "--data-dir",
            "/d",
            "waiter",
            "--daemon",
            "--server",
            "ws://h:1",
            "--token",
            "secret",
            "--log-file=/l",
            "--config",
            "w.toml",
            "--token=secret2",
        ];
        let child = child_arguments(given.iter().map(OsString::from));
        let expected: Vec<OsString> = [
            "--data-dir",
            "/d",
            "waiter",
            "--server",
            "ws://h:1",
            "--config",
            "w.toml",
            "--daemon-child",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(child, expected);
    }
}
