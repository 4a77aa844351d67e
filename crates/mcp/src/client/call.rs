//! One `tools/call`, with the server's time limits kept on our side.
//!
//! A call must answer, or report progress, within the server's `timeout`;
//! each progress notification gives it `timeout` again, up to
//! `max_call_time` in all (the MCP specification lets a client reset its
//! timeout on progress, and asks it to keep a maximum). rmcp keeps both
//! limits when the request carries a progress token, and sends
//! `notifications/cancelled` when one runs out.
//!
//! A call dropped before its answer (the person stopped it, the executor's
//! backstop) also tells the server to cancel it: rmcp's plain `call_tool`
//! does that, the request handle used here does not, so [`CancelOnDrop`]
//! does. (rmcp then keeps the call's progress watcher, a small map entry,
//! until that token's next progress message or the connection's end: its
//! handle offers no way to drop it without awaiting the answer.)

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient};
use rmcp::{Peer, ServiceError};

/// The time limits of one server's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallLimits {
    /// For an answer or the next progress notification.
    pub idle: Duration,
    /// For the whole call, progress or not.
    pub total: Duration,
}

/// Calls the tool and waits for its answer within `limits`.
pub(crate) async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    limits: CallLimits,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let options = PeerRequestOptions::with_timeout(limits.idle)
        .reset_timeout_on_progress()
        .with_max_total_timeout(limits.total);
    let handle = peer.send_request_with_option(request, options).await?;
    let mut unanswered = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    // Answered, or timed out (rmcp has told the server already).
    unanswered.id = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(result),
        other => contentless_result(other).ok_or(ServiceError::UnexpectedResponse),
    }
}

/// A `tools/call` reply without `content` (which the untagged
/// `ServerResult` decodes as another variant) is still an answer, empty:
/// `{}`, `{"resultType": "complete"}`, or `_meta` alone (what rmcp's own
/// `call_tool` accepts).
fn contentless_result(result: ServerResult) -> Option<CallToolResult> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct MetaOnly {
        #[serde(rename = "_meta")]
        meta: rmcp::model::MetaObject,
    }
    let mut empty = CallToolResult::default();
    match result {
        ServerResult::EmptyResult(_) => {}
        ServerResult::TaskAckResult(ack) => {
            empty.result_type = Some(ack.result_type);
            empty.meta = ack.meta;
        }
        ServerResult::CustomResult(custom) => {
            let MetaOnly { meta } = serde_json::from_value(custom.0).ok()?;
            empty.meta = Some(meta);
        }
        _ => return None,
    }
    Some(empty)
}

/// Tells the server to cancel request `id` if dropped while still set.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(id), Some("the call was stopped".to_owned())),
        ));
        // Dropped inside the runtime (a handler's task); without one there
        // is no connection left to tell either.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.send_notification(notification).await;
            });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decoded(reply: serde_json::Value) -> ServerResult {
        serde_json::from_value(reply).unwrap()
    }

    #[test]
    fn replies_without_content_are_empty_answers_and_others_are_not() {
        for reply in [
            json!({}),
            json!({"resultType": "complete"}),
            json!({"_meta": {"k": 1}}),
        ] {
            let answer = contentless_result(decoded(reply.clone()));
            let answer = answer.unwrap_or_else(|| panic!("{reply} was not taken as an answer"));
            assert!(answer.content.is_empty(), "{reply}");
        }
        let meta_only = contentless_result(decoded(json!({"_meta": {"k": 1}}))).unwrap();
        assert_eq!(meta_only.meta.unwrap().get("k"), Some(&json!(1)));
        assert!(contentless_result(decoded(json!({"tools": []}))).is_none());
    }
}
