//! What the runtime tests share: a runtime over the demo tools whose model
//! is a `LocalModel` of the test's choosing.

#![allow(dead_code)] // each test binary uses its own part of it
#![allow(clippy::unwrap_used)] // a panic in a test is a test failure

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use homeagent_agent::store::Store;
use homeagent_agent::{AgentSettings, Runtime};
use homeagent_core::{Message, Registry, StreamEvent};
use homeagent_llm::{
    ChatRequest, FallbackOptions, LocalModel, ProviderError, SourceConfig, SourceProtocol,
    SourceSetup, Sources,
};
use homeagent_tools::{Approval, Gate, GatedSource, register_demo_tools};

/// Makes SQLite refuse every insert into `table` whose `column` contains
/// `marker`, with the error text `failure`. Done from a second
/// connection, as another process (or a full disk) could.
pub fn refuse_inserts(
    db: &std::path::Path,
    table: &str,
    column: &str,
    marker: &str,
    failure: &str,
) {
    rusqlite::Connection::open(db)
        .unwrap()
        .execute_batch(&format!(
            "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table}
             WHEN NEW.{column} LIKE '%{marker}%'
             BEGIN SELECT RAISE(ABORT, '{failure}'); END;"
        ))
        .unwrap();
}

/// The user messages' texts of `history`, in order.
pub fn user_texts(history: &[Message]) -> Vec<&str> {
    history
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

/// A runtime whose `sources` (of protocol `demo`) all answer from `model`,
/// with the demo tools, no approval, and `store`.
pub fn runtime_over(
    sources: Vec<SourceConfig>,
    model: Arc<dyn LocalModel>,
    store: Arc<Store>,
    settings: AgentSettings,
) -> Runtime {
    let setup = SourceSetup {
        adapter_dir: None,
        local_model: Some(model),
    };
    let sources =
        Sources::build(sources, &|_: &str| None, FallbackOptions::default(), &setup).unwrap();
    let registry = Arc::new(Registry::new());
    register_demo_tools(&registry).unwrap();
    let tools = Arc::new(GatedSource::new(
        registry as _,
        Arc::new(Gate::new([])),
        Approval::Refused,
    ));
    Runtime::new(Arc::new(sources), tools, store, settings)
}

/// [`runtime_over`] one source answering from `model`.
pub fn local_runtime(
    model: Arc<dyn LocalModel>,
    store: Arc<Store>,
    settings: AgentSettings,
) -> Runtime {
    runtime_over(
        vec![SourceConfig::new("local", SourceProtocol::Demo)],
        model,
        store,
        settings,
    )
}

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "homeagent-test-{label}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// The store file in it.
    pub fn db(&self) -> PathBuf {
        self.0.join("homeagent.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A model that records every request it is sent and answers each with
/// the same text.
pub struct Recorder {
    pub requests: Mutex<Vec<ChatRequest>>,
    reply: String,
}

impl Recorder {
    pub fn replying(reply: impl Into<String>) -> Recorder {
        Recorder {
            requests: Mutex::new(Vec::new()),
            reply: reply.into(),
        }
    }
}

impl LocalModel for Recorder {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        self.requests.lock().unwrap().push(request.clone());
        Ok(vec![StreamEvent::TextDelta {
            text: self.reply.clone(),
        }])
    }
}
