//! The waiter: the device side of the bridge (`homeagent waiter`).
//!
//! It dials the server, introduces itself, binds with a token and then runs
//! the commands the server sends, each in its own task, answering every one
//! with a [`DeviceFrame::CmdResult`](crate::protocol::DeviceFrame::CmdResult).
//!
//! Why the policy lives here, on the device, and not only on the server: the
//! machine's owner decides what runs on the machine. The server's gate
//! decides which *agent* may reach which device; the waiter decides which
//! *programs* run, whoever asks. Neither trusts the other.
//!
//! The policy is a **command-name allowlist plus an argument-level write
//! guard**, enforced by the very code behind `cmd_run`
//! ([`homeagent_tools::run_command`]): no shell, exact basename match, a
//! configured list replaces the default one and an empty list means the
//! default (never "everything"), `find -delete`/`sed -i`/`sort -o` refused
//! unless `allow_writes`, `find -exec` never. It is *not* a read-only
//! guarantee: an allowed program may still have effects the guard does not
//! model (reading a secret file, for one). Say so when documenting it.
//!
//! The seed's bug this module is shaped against: its waiter had two start
//! paths (interactive and `--daemon`) and the allowlist was wired into only
//! one, so the production daemons silently ran with the built-in list.
//! Here there is one way from a config file to a policy,
//! [`WaiterPolicy::load`], and one way to run, [`run_waiter`]; the CLI's
//! daemon re-executes itself into the same foreground path.
//!
//! Modules:
//! - `config`: `waiter.toml` ([`WaiterConfig`]), strict (`deny_unknown_fields`).
//! - `policy`: [`WaiterPolicy`] and [`handle_cmd`], one command to one result.
//! - `client`: [`run_waiter`]: connect, bind, serve, ping, reconnect.
//! - `tls`: the `wss://` client configuration (ring, system roots, `--ca-file`).
//! - `identity`: the default device id, `waiter-<hostname>`.

mod client;
mod config;
mod identity;
mod link;
mod policy;
mod tls;

pub use client::{MAX_WAITING_CMDS, WaiterError, WaiterOptions, run_waiter};
pub use config::{
    DEFAULT_CONFIG_FILE_NAME, MAX_OUTPUT_CAP_BYTES, Secret, WaiterConfig, WaiterConfigError,
};
pub use identity::{default_device_id, hostname, sanitize_device_id};
pub use policy::{WaiterPolicy, handle_cmd};
pub use tls::client_config as tls_client_config;
