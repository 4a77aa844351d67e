//! A child's process group, killed as a whole.
//!
//! Children that run programs (`cmd_run`, hooks, stdio MCP servers) start
//! in their own process group. Killing only the child left what it had started running past a
//! timeout or a cancel, holding the output pipes open; the group goes too.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The process group led by a child started with `process_group(0)`;
/// killed when dropped.
#[derive(Debug)]
pub struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    /// The group of the child with this pid (`None`: nothing to kill).
    pub fn of(child: Option<u32>) -> Self {
        ProcessGroup(
            child
                .and_then(|pid| i32::try_from(pid).ok())
                .map(Pid::from_raw),
        )
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // ESRCH (nothing left in the group) is the usual case.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}
