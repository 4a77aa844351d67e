//! The offline demo model: the mock LLM's script, answering in-process for
//! `protocol = "demo"` sources (and when nothing else is configured).

use homeagent_core::StreamEvent;
use homeagent_llm::{ChatRequest, LocalModel, ProviderError};
use homeagent_mock_llm::script::{self, ScriptOptions};

/// [`LocalModel`] over the mock's script: `!slowbatch4`, `!serialbatch4`,
/// `!truncate`, `!calls [...]`… work as they do against `mock-llm`.
#[derive(Debug, Clone, Default)]
pub struct DemoModel {
    pub options: ScriptOptions,
}

impl LocalModel for DemoModel {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        Ok(script::respond(&request.messages, &self.options).events)
    }
}
