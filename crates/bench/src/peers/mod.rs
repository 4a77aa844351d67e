//! Scenario 6: the peers. The same mock, the same tools and the same
//! inputs through two other agent frameworks, the OpenAI Agents SDK
//! (`openai-agents`) and LangGraph (`langgraph` + `langchain-openai`),
//! driven by `peers/driver.py` in a virtualenv the bench makes on first use
//! ([`venv`]).
//!
//! # Keeping the comparison honest
//!
//! - **Same mock, same count.** Each peer talks to the very `homeagent
//!   mock-llm` the HomeAgent rows used (OpenAI chat-completions wire), and
//!   its executed count is the mock's own count of done-tags, never what
//!   the driver says. A row whose count is not N is FAIL.
//! - **Same tools.** `demo_sleep` / `demo_echo` are async Python functions
//!   that sleep exactly what the mock asks (`asyncio.sleep`), or return at
//!   once.
//! - **What each framework does by default is what is measured.** Both run
//!   the function calls of one model response concurrently: the Agents SDK
//!   starts one asyncio task per call (`_FunctionToolBatchExecutor`, no
//!   limit unless `RunConfig.tool_execution.max_function_tool_concurrency`
//!   is set), and LangGraph's `ToolNode` gathers every call of the message
//!   with `asyncio.gather` on its async path (no limit to set). The driver
//!   records the peak of sleeps in flight so the report shows it.
//! - **The serial baseline.** For HomeAgent it is a serial tool in the
//!   batch (`!serialbatchN`). The peers have no serial tools, so the Agents
//!   SDK's baseline is its own knob set to one (`max_function_tool_concurrency
//!   = 1`), and LangGraph has none: its row has no speed-up, only times.
//! - **What differs.** HomeAgent's time is measured by an HTTP client in
//!   front of `homeagent serve` (its HTTP front, scheduler and SQLite store
//!   with fsyncs included); a peer's is measured inside its Python process
//!   around one run of the agent, with no front and no persistence. The
//!   comparison favours the peers there.

pub mod driver;
pub mod rows;
pub mod venv;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::client::MockClient;
use crate::error::BenchError;
use crate::procs::Stack;
use crate::report::{BatchRow, InputOutcome, OverheadRow};
use crate::scenarios::outcome;

use driver::{DriverReply, DriverSpec, run_driver};
pub use rows::{PeerBatchRow, PeerOverheadRow, batch_row, overhead_rows};

/// Unmeasured inputs each driver sends first (imports, the HTTP pool).
pub const PEER_WARMUP: usize = 3;

/// A peer framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    OpenAiAgents,
    LangGraph,
}

impl Framework {
    pub const ALL: [Framework; 2] = [Framework::OpenAiAgents, Framework::LangGraph];

    /// The driver's name for it (and the package's).
    pub fn id(self) -> &'static str {
        match self {
            Framework::OpenAiAgents => "openai-agents",
            Framework::LangGraph => "langgraph",
        }
    }

    /// How it runs the calls of one response, as measured and as read in
    /// its source (see the module docs).
    pub fn concurrency(self) -> &'static str {
        match self {
            Framework::OpenAiAgents => {
                "function tools of one response run concurrently (one asyncio task each, no limit by default); serial baseline = RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))"
            }
            Framework::LangGraph => {
                "ToolNode runs the calls of one message concurrently (asyncio.gather on its async path, no limit); it has no serial setting, so no speed-up is measured"
            }
        }
    }

    /// The concurrency the driver sets for the serial baseline, if any.
    fn serial_knob(self) -> Option<u32> {
        match self {
            Framework::OpenAiAgents => Some(1),
            Framework::LangGraph => None,
        }
    }
}

/// Where the peers' Python comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOptions {
    /// The interpreter that creates the virtualenv (`python3`).
    pub python: PathBuf,
    /// Where virtualenvs are kept ([`venv::default_peers_dir`]).
    pub dir: PathBuf,
}

impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            python: PathBuf::from("python3"),
            dir: venv::default_peers_dir(),
        }
    }
}

/// A ready environment: the virtualenv's interpreter and the driver file.
#[derive(Debug, Clone)]
pub struct PeerEnv {
    pub python: PathBuf,
    pub driver: PathBuf,
}

/// Makes (or reuses) the virtualenv and writes the driver beside it.
/// `Err` is the message to show for skipping every peer.
pub async fn prepare(options: &PeerOptions, note: &dyn Fn(String)) -> Result<PeerEnv, String> {
    let python = venv::ensure_venv(&options.python, &options.dir, note)
        .await
        .map_err(|e| e.to_string())?;
    let driver = driver_path(&options.dir);
    std::fs::write(&driver, venv::DRIVER_PY)
        .map_err(|e| format!("cannot write {}: {e}", driver.display()))?;
    Ok(PeerEnv { python, driver })
}

/// One peer's part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerReport {
    #[serde(skip)]
    pub kind: Framework,
    pub framework: &'static str,
    pub version: Option<String>,
    pub python: Option<String>,
    pub concurrency: &'static str,
    /// Why the peer (or part of it) did not run.
    pub skipped: Vec<String>,
    pub batch: Vec<PeerBatchRow>,
    pub overhead: Vec<PeerOverheadRow>,
}

impl PeerReport {
    pub fn new(framework: Framework) -> PeerReport {
        PeerReport {
            kind: framework,
            framework: framework.id(),
            version: None,
            python: None,
            concurrency: framework.concurrency(),
            skipped: Vec::new(),
            batch: Vec::new(),
            overhead: Vec::new(),
        }
    }

    /// A peer that could not run at all.
    pub fn skipped(framework: Framework, why: &str) -> PeerReport {
        let mut report = PeerReport::new(framework);
        report.skipped.push(why.to_owned());
        report
    }
}

fn warmup(framework: Framework, run: &str) -> Vec<String> {
    (0..PEER_WARMUP)
        .map(|w| format!("!batch1-{}-warm{w}-{run}", framework.id()))
        .collect()
}

fn spec<'a>(
    framework: Framework,
    stack: &Stack,
    inputs: Vec<String>,
    run: &str,
    max_tool_concurrency: Option<u32>,
) -> DriverSpec<'a> {
    DriverSpec {
        framework: framework.id(),
        base_url: format!("{}/v1", stack.mock_url),
        warmup: warmup(framework, run),
        inputs,
        max_tool_concurrency,
    }
}

/// The outcomes of a driver's replies, from the mock's log.
async fn outcomes(
    stack: &Stack,
    replies: &[DriverReply],
) -> Result<Vec<(InputOutcome, u64)>, BenchError> {
    let log = MockClient::new(&stack.mock_url)?.inputs().await?;
    Ok(replies
        .iter()
        .map(|r| (outcome(&r.text, &r.to_reply(), &log), r.peak_in_flight))
        .collect())
}

/// Scenario 1 through `report.kind` on the delays stack. A driver failure
/// goes into `report.skipped`; `Err` only when the mock cannot be read.
pub async fn speedup(
    env: &PeerEnv,
    stack: &Stack,
    sizes: &[usize],
    rounds: usize,
    run: &str,
    homeagent: &[BatchRow],
    report: &mut PeerReport,
) -> Result<(), BenchError> {
    let framework = report.kind;
    let id = framework.id();
    let texts = |kind: &str| -> Vec<String> {
        sizes
            .iter()
            .flat_map(|n| (1..=rounds).map(move |r| (n, r)))
            .map(|(n, r)| format!("!slowbatch{n}-{id}-{kind}-n{n}-r{r}-{run}"))
            .collect()
    };
    let parallel = match run_driver(
        &env.python,
        &env.driver,
        &spec(framework, stack, texts("par"), run, None),
    )
    .await
    {
        Ok(result) => result,
        Err(error) => {
            report.skipped.push(format!("scenario 1: {error}"));
            return Ok(());
        }
    };
    report.version = Some(parallel.version.clone());
    report.python = Some(parallel.python.clone());
    let serial = match framework.serial_knob() {
        None => None,
        Some(knob) => {
            match run_driver(
                &env.python,
                &env.driver,
                &spec(framework, stack, texts("ser"), run, Some(knob)),
            )
            .await
            {
                Ok(result) => Some(result),
                Err(error) => {
                    report
                        .skipped
                        .push(format!("scenario 1, serial baseline: {error}"));
                    None
                }
            }
        }
    };
    let par = outcomes(stack, &parallel.replies).await?;
    let ser = match &serial {
        Some(s) => Some(outcomes(stack, &s.replies).await?),
        None => None,
    };
    for (i, &n) in sizes.iter().enumerate() {
        let range = i * rounds..(i + 1) * rounds;
        let par_n = par.get(range.clone()).unwrap_or_default();
        let ser_n: Option<Vec<InputOutcome>> = ser.as_ref().map(|s| {
            s.get(range.clone())
                .unwrap_or_default()
                .iter()
                .map(|(o, _)| o.clone())
                .collect()
        });
        let ha = homeagent.iter().find(|r| r.n == n);
        report.batch.push(batch_row(
            n,
            stack.settings.tool_sleep_ms,
            par_n,
            ser_n.as_deref(),
            ha,
        ));
    }
    Ok(())
}

/// Scenario 4 through `report.kind` on the zero-delay stack.
pub async fn overhead(
    env: &PeerEnv,
    stack: &Stack,
    sizes: &[usize],
    rounds: usize,
    run: &str,
    homeagent: &[OverheadRow],
    report: &mut PeerReport,
) -> Result<(), BenchError> {
    let framework = report.kind;
    let id = framework.id();
    // The sizes in turn, as HomeAgent's own rounds run.
    let order = crate::scenarios::kernel::schedule(sizes.len(), rounds);
    let texts: Vec<String> = order
        .iter()
        .map(|&(r, slot)| {
            let n = sizes[slot];
            format!("!batch{n}-{id}-ov{n}-r{r}-{run}")
        })
        .collect();
    let result = match run_driver(
        &env.python,
        &env.driver,
        &spec(framework, stack, texts, run, None),
    )
    .await
    {
        Ok(result) => result,
        Err(error) => {
            report.skipped.push(format!("scenario 4: {error}"));
            return Ok(());
        }
    };
    report.version.get_or_insert(result.version.clone());
    report.python.get_or_insert(result.python.clone());
    let all = outcomes(stack, &result.replies).await?;
    let mut per_size: Vec<(usize, Vec<InputOutcome>)> =
        sizes.iter().map(|&n| (n, Vec::new())).collect();
    for (&(_, slot), (outcome, _)) in order.iter().zip(&all) {
        if let Some((_, outcomes)) = per_size.get_mut(slot) {
            outcomes.push(outcome.clone());
        }
    }
    report.overhead = overhead_rows(&per_size, homeagent);
    Ok(())
}

/// The driver's path inside `dir` (for messages).
pub fn driver_path(dir: &Path) -> PathBuf {
    venv::venv_dir(dir).join("homeagent_bench_driver.py")
}
