#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! A session's next input starts from its last input's request when the
//! stored history only grew since, and afresh when it did not.

use std::sync::{Arc, Mutex};

use crate::common;

use common::{TempDir, local_runtime};
use homeagent_agent::store::Store;
use homeagent_agent::{AgentSettings, Frame, FrameSink, Runtime, TurnControl, TurnInput};
use homeagent_core::{AssistantMessage, Message, StreamEvent, ToolCallFragment};
use homeagent_llm::{ChatRequest, LocalModel, ProviderError};

/// Calls `demo_echo` after every user message, then answers; records
/// every request.
#[derive(Default)]
struct EchoThenAnswer {
    requests: Mutex<Vec<ChatRequest>>,
}

impl LocalModel for EchoThenAnswer {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        self.requests.lock().unwrap().push(request.clone());
        let after_user = matches!(request.messages.last(), Some(Message::User { .. }));
        let n = self.requests.lock().unwrap().len();
        Ok(if after_user {
            vec![StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(0),
                id: Some(format!("call_{n}")),
                name: Some("demo_echo".into()),
                raw_arguments: format!(r#"{{"text":"echo \"{n}\""}}"#),
            })]
        } else {
            vec![StreamEvent::TextDelta {
                text: format!("answer {n}"),
            }]
        })
    }
}

async fn say(runtime: &Runtime, text: &str) {
    let sink: FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: "s".into(),
        agent: "main".into(),
        text: text.into(),
    };
    let frame = runtime.run(&input, &TurnControl::default(), &sink).await;
    assert!(matches!(frame, Frame::Response { .. }), "{frame:?}");
}

/// The messages the last request sent after its system prompt, and the
/// stored history they must be (all of it but the reply).
fn last_sent_and_stored(model: &EchoThenAnswer, store: &Store) -> (Vec<Message>, Vec<Message>) {
    let requests = model.requests.lock().unwrap();
    let sent = requests.last().unwrap().messages[1..].to_vec();
    let mut stored = store.history("s").unwrap();
    stored.pop();
    (sent, stored)
}

/// A runtime over a fresh store, answered by an [`EchoThenAnswer`].
fn setup(label: &str) -> (TempDir, Arc<Store>, Arc<EchoThenAnswer>, Runtime) {
    let dir = TempDir::new(label);
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let model = Arc::new(EchoThenAnswer::default());
    let runtime = local_runtime(
        Arc::clone(&model) as Arc<dyn LocalModel>,
        Arc::clone(&store),
        AgentSettings::default(),
    );
    (dir, store, model, runtime)
}

#[tokio::test]
async fn an_input_starts_from_the_last_input_s_request_while_the_history_only_grew() {
    let (_dir, store, model, runtime) = setup("kept-request");
    for n in 0..5 {
        if n == 4 {
            // Written through the same store between two inputs (as the
            // dashboard could): the history only grew, so the request is
            // still kept, and the store gives these two with the input.
            store
                .append_messages(
                    "s",
                    &[
                        Message::user("written between"),
                        Message::Assistant(AssistantMessage {
                            content: "noted".into(),
                            ..AssistantMessage::default()
                        }),
                    ],
                )
                .unwrap();
        }
        say(&runtime, &format!("input {n}")).await;
        let (sent, stored) = last_sent_and_stored(&model, &store);
        assert_eq!(sent, stored, "input {n}");
    }
    // The first input creates the session and the second reads it in
    // full: from the third on, each starts from the request before.
    assert_eq!(runtime.kept_request_reuses(), 3);
}

#[tokio::test]
async fn a_history_rewritten_elsewhere_starts_the_next_input_afresh() {
    let (dir, store, model, runtime) = setup("kept-request-rewritten");
    for n in 0..3 {
        say(&runtime, &format!("input {n}")).await;
    }
    assert_eq!(runtime.kept_request_reuses(), 1);
    // Another connection replaces the session with a longer history of
    // other messages (as another process could): the kept request's
    // messages are all still "there", by count, but not the same ones.
    let other = Store::open(&dir.db()).unwrap();
    let before = other.history("s").unwrap().len();
    assert!(other.delete_session("s").unwrap());
    other.ensure_session("s", "main").unwrap();
    let rewritten: Vec<Message> = (0..before)
        .flat_map(|n| {
            [
                Message::user(if n == 0 {
                    "written elsewhere".to_owned()
                } else {
                    format!("elsewhere {n}")
                }),
                Message::Assistant(AssistantMessage {
                    content: format!("noted {n}"),
                    ..AssistantMessage::default()
                }),
            ]
        })
        .collect();
    other.append_messages("s", &rewritten).unwrap();
    drop(other);
    say(&runtime, "after the rewrite").await;
    let (sent, stored) = last_sent_and_stored(&model, &store);
    assert_eq!(sent, stored);
    assert_eq!(sent[0], Message::user("written elsewhere"));
    assert_eq!(runtime.kept_request_reuses(), 1, "not reused");
    // And it goes on from there.
    say(&runtime, "and again").await;
    say(&runtime, "once more").await;
    let (sent, stored) = last_sent_and_stored(&model, &store);
    assert_eq!(sent, stored);
    assert_eq!(runtime.kept_request_reuses(), 3);
}

/// A model whose every call arrives without a tool name (an adapter that
/// lost it): the assembler cannot run such a call, and drops it.
struct NamelessCalls;

impl LocalModel for NamelessCalls {
    fn respond(&self, _request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        Ok(vec![
            StreamEvent::TextDelta {
                text: "Checking both.".into(),
            },
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(0),
                id: Some("call_a".into()),
                name: None,
                raw_arguments: r#"{"text":"a"}"#.into(),
            }),
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(1),
                id: Some("call_b".into()),
                name: None,
                raw_arguments: r#"{"text":"b"}"#.into(),
            }),
            StreamEvent::Finish {
                reason: "tool_calls".into(),
            },
        ])
    }
}

/// Calls the model asked for but that could not be run (no tool name)
/// leave a reply that is not the model's whole answer: it says so, instead
/// of passing as complete.
#[tokio::test]
async fn a_reply_whose_calls_were_all_dropped_says_it_is_incomplete() {
    let dir = TempDir::new("nameless");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let runtime = local_runtime(Arc::new(NamelessCalls), store, AgentSettings::default());
    let sink: FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: "s".into(),
        agent: "main".into(),
        text: "check a and b".into(),
    };
    let frame = runtime.run(&input, &TurnControl::default(), &sink).await;
    let Frame::Response {
        content,
        incomplete,
        ..
    } = &frame
    else {
        panic!("{frame:?}");
    };
    assert_eq!(content, "Checking both.");
    let incomplete = incomplete.as_ref().expect("marked incomplete");
    assert_eq!(
        incomplete,
        &homeagent_agent::Incomplete::UnnamedCalls { dropped: 2 }
    );
    assert_eq!(
        incomplete.note(),
        "[the model asked for 2 tool calls without naming their tool, so they could not run; \
         ask again, or try another model]"
    );
}
