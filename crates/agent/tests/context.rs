#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The context budget: whole turns dropped oldest first, a call never sent
//! without its result, the newest turn always kept, the model told; the
//! store keeps everything.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common;

use common::{Recorder, local_runtime};
use homeagent_agent::context::{
    CountedHistory, RequestMessages, approx_tokens, elision_note, fit_history,
};
use homeagent_agent::store::Store;
use homeagent_agent::{AgentSettings, DemoModel, Frame, FrameSink, TurnControl, TurnInput};
use homeagent_core::{
    AssistantMessage, Message, StreamEvent, ToolCall, ToolCallFragment, ToolMessage, check_pairing,
    remint_reused_ids,
};
use homeagent_llm::{ChatRequest, LocalModel, ProviderError};
use serde_json::json;

fn exchange(n: usize) -> Vec<Message> {
    vec![
        Message::user(format!("question {n} {}", "x".repeat(200))),
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: Vec::new(),
            tool_calls: vec![ToolCall {
                id: format!("call_{n}"),
                name: "demo_echo".into(),
                arguments: json!({"n": n}),
                raw_arguments: format!("{{\"n\":{n}}}"),
            }],
        }),
        Message::Tool(ToolMessage {
            tool_call_id: format!("call_{n}"),
            name: "demo_echo".into(),
            content: format!("{{\"n\":{n}}}"),
            success: true,
        }),
        Message::Assistant(AssistantMessage {
            content: format!("answer {n}"),
            ..AssistantMessage::default()
        }),
    ]
}

#[test]
fn the_oldest_whole_turns_go_first_and_the_newest_always_stays() {
    let history: Vec<Message> = (0..10).flat_map(exchange).collect();
    let turn_cost: usize = exchange(5).iter().map(approx_tokens).sum();
    // Room for three turns and a half: three are kept.
    let fitted = fit_history(&history, turn_cost * 7 / 2 + 100, 100);
    assert_eq!(fitted.elided, 7 * 4);
    assert_eq!(fitted.messages, history[28..]);
    check_pairing(&fitted.messages).unwrap();
    // Everything fits: nothing elided.
    let all = fit_history(&history, usize::MAX / 2, 0);
    assert_eq!(all.elided, 0);
    assert_eq!(all.messages.len(), 40);
    // Nothing fits: the newest turn is still sent, whole.
    let tiny = fit_history(&history, 1, 0);
    assert_eq!(tiny.messages, history[36..]);
}

#[test]
fn a_turn_that_fits_exactly_is_kept_and_leading_non_user_messages_count() {
    let history: Vec<Message> = (0..5).flat_map(exchange).collect();
    let last_three: usize = history[8..].iter().map(approx_tokens).sum();
    // Exactly the room the newest three turns need (after the reserve).
    let fitted = fit_history(&history, last_three + 50, 50);
    assert_eq!(fitted.elided, 8);
    // One token less: only two fit.
    let fitted = fit_history(&history, last_three + 49, 50);
    assert_eq!(fitted.elided, 12);

    // A history that starts before its first user message (an assistant
    // greeting): that message belongs to the first turn and is kept when
    // everything fits.
    let mut greeted = vec![Message::Assistant(AssistantMessage {
        content: "hello".into(),
        ..AssistantMessage::default()
    })];
    greeted.extend(exchange(0));
    let all = fit_history(&greeted, 1_000_000, 0);
    assert_eq!(all.elided, 0);
    assert_eq!(all.messages.len(), 5);
    // Over the budget, the greeting is the oldest and goes first: room for
    // both turns is not room for it too.
    greeted.extend(exchange(1));
    let turns: usize = greeted[1..].iter().map(approx_tokens).sum();
    let fitted = fit_history(&greeted, turns + 50, 50);
    assert_eq!(fitted.elided, 1, "{:?}", fitted.messages.first());
    assert_eq!(fitted.messages, greeted[1..]);
}

/// The agent keeps its history counted as messages join it (loaded, then
/// pushed and extended turn by turn): fitting it must cut exactly where
/// counting everything afresh would, at every budget.
#[test]
fn a_counted_history_fits_as_counting_afresh_does() {
    let all: Vec<Message> = (0..8).flat_map(exchange).collect();
    let mut counted = CountedHistory::new(all[..9].to_vec());
    counted.push(all[9].clone());
    counted.extend(all[10..22].iter().cloned());
    for message in &all[22..] {
        counted.push(message.clone());
    }
    assert_eq!(counted.messages(), all.as_slice());
    let whole: usize = all.iter().map(approx_tokens).sum();
    let mut cuts = std::collections::BTreeSet::new();
    for budget in (0..whole + 200).step_by(7) {
        let fitted = counted.fit(budget, 40);
        assert_eq!(fitted, fit_history(&all, budget, 40), "budget {budget}");
        cuts.insert(fitted.elided);
    }
    // The budgets above cut at every turn boundary, not one by chance.
    assert_eq!(cuts.len(), 8, "{cuts:?}");
}

/// The request list the agent keeps from turn to turn within an input is,
/// after every turn, exactly the list built afresh from the history: the
/// system prompt (with the elision note once turns are left out), the
/// fitted history, reused ids reminted. The model here reuses `call_0`
/// every turn, so every turn after the first is reminted.
#[test]
fn the_request_kept_from_turn_to_turn_is_the_one_built_afresh() {
    fn expected(history: &[Message], budget: usize) -> Vec<Message> {
        let fitted = fit_history(history, budget, 40);
        let system = if fitted.elided > 0 {
            format!("prompt\n\n{}", elision_note(fitted.elided))
        } else {
            "prompt".to_owned()
        };
        let mut messages = vec![Message::system(system)];
        messages.extend(fitted.messages);
        remint_reused_ids(&mut messages);
        messages
    }
    let turn = |n: usize| -> Vec<Message> {
        let mut messages = exchange(n);
        for message in &mut messages {
            match message {
                Message::Assistant(a) => {
                    a.tool_calls.iter_mut().for_each(|c| c.id = "call_0".into())
                }
                Message::Tool(t) => t.tool_call_id = "call_0".into(),
                _ => {}
            }
        }
        messages
    };
    // Turns with calls (4 messages) alternate with plain exchanges (a user
    // message and the answer): the fit then sometimes moves by fewer
    // messages than a turn adds, which must still rebuild the request.
    let plain = |n: usize| {
        vec![
            Message::user(format!("chat {n}")),
            Message::Assistant(AssistantMessage {
                content: format!("ok {n}"),
                ..AssistantMessage::default()
            }),
        ]
    };
    let pair: usize = turn(0).iter().chain(&plain(0)).map(approx_tokens).sum();
    // Room for about three pairs of turns: the seventh turn starts the
    // elision.
    let budget = pair * 3 + pair / 3 + 40;
    let mut history = CountedHistory::default();
    let mut sent = RequestMessages::default();
    let mut request = Vec::new();
    let mut reminted = 0;
    // A build afresh is due on the first request and whenever the fit
    // starts elsewhere than for the request before.
    let mut starts: Vec<usize> = Vec::new();
    let mut ask = |history: &CountedHistory, request: &mut Vec<Message>, what: &str| {
        starts.push(fit_history(history.messages(), budget, 40).elided);
        let before = request.clone();
        let unchanged = sent.update(request, "prompt", history, budget, 40).unwrap();
        assert_eq!(*request, expected(history.messages(), budget), "{what}");
        check_pairing(request).unwrap();
        // What the update says it left alone (for the codec's kept text):
        // everything when the fit did not move, nothing when it did.
        let moved = starts.len() == 1 || starts[starts.len() - 2] != starts[starts.len() - 1];
        let left_alone = if moved { 0 } else { before.len() };
        assert_eq!(unchanged, left_alone, "{what}");
        assert_eq!(request[..unchanged], before[..unchanged], "{what}");
    };
    for n in 0..14 {
        if n % 2 == 1 {
            let [user, answer] = <[Message; 2]>::try_from(plain(n)).unwrap();
            history.push(user);
            ask(&history, &mut request, &format!("turn {n}"));
            history.push(answer);
            continue;
        }
        // As the agent goes: the user message, a request; the calls and
        // their results, a request; the answer.
        let [user, calls, result, answer] = <[Message; 4]>::try_from(turn(n)).unwrap();
        history.push(user);
        ask(&history, &mut request, &format!("turn {n}, first request"));
        history.extend([calls, result]);
        ask(&history, &mut request, &format!("turn {n}, second request"));
        reminted += request
            .iter()
            .filter(|m| matches!(m, Message::Tool(t) if t.tool_call_id != "call_0"))
            .count();
        history.push(answer);
    }
    let full_builds = sent.full_builds();
    assert!(reminted > 0);
    let due = 1 + starts.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(due > 1 && due < starts.len() / 2, "{starts:?}");
    assert_eq!(full_builds, due, "{starts:?}");
}

/// Plain exchanges only: once the history is over budget, each request
/// adds two messages (the last answer, the new question) and the fit moves
/// by one exchange, two messages. The request must follow the fit, not
/// just append.
#[test]
fn a_fit_that_moves_by_as_much_as_was_added_rebuilds_the_request() {
    let exchange = |n: usize| {
        [
            Message::user(format!("question {n}")),
            Message::Assistant(AssistantMessage {
                content: format!("answer {n}"),
                ..AssistantMessage::default()
            }),
        ]
    };
    let cost: usize = exchange(5).iter().map(approx_tokens).sum();
    let budget = cost * 3 + 40;
    let mut history = CountedHistory::default();
    let mut sent = RequestMessages::default();
    let mut request = Vec::new();
    let mut elided = Vec::new();
    for n in 0..8 {
        let [user, answer] = exchange(n);
        history.push(user);
        sent.update(&mut request, "p", &history, budget, 40)
            .unwrap();
        let fitted = fit_history(history.messages(), budget, 40);
        elided.push(fitted.elided);
        assert_eq!(request[1..], fitted.messages, "request {n}");
        history.push(answer);
    }
    // The fit did move by one exchange at a time.
    assert!(elided.windows(2).any(|w| w[1] == w[0] + 2), "{elided:?}");
}

/// A client's own system message at the start of a conversation (a
/// persona, a preset: what an OpenAI-compatible client sends first) is
/// kept when old turns are left out, as the agent's own prompt is: it was
/// the first thing dropped, silently. It goes into the request's system
/// message, with the note on what was left out.
#[test]
fn a_clients_leading_system_message_is_kept_when_old_turns_go() {
    let persona = Message::system("You are PIRATE. Always answer like a pirate.");
    let mut all = vec![persona.clone()];
    all.extend((0..10).flat_map(exchange));
    let turn_cost: usize = exchange(5).iter().map(approx_tokens).sum();
    // Room for the persona and three turns (and less than a fourth).
    let budget = approx_tokens(&persona) + turn_cost * 3 + 100 + 40;
    let fitted = fit_history(&all, budget, 40);
    assert_eq!(
        fitted.elided,
        7 * 4,
        "the persona is not counted as left out"
    );
    assert_eq!(fitted.messages[0], persona);
    assert_eq!(fitted.messages[1..], all[all.len() - 12..]);

    let history = CountedHistory::new(all.clone());
    let mut sent = RequestMessages::default();
    let mut request = Vec::new();
    sent.update(&mut request, "agent prompt", &history, budget, 40)
        .unwrap();
    let Message::System { content } = &request[0] else {
        panic!("{request:?}")
    };
    assert!(content.starts_with("agent prompt"), "{content}");
    assert!(content.contains("You are PIRATE"), "{content}");
    assert!(content.ends_with(&elision_note(7 * 4)), "{content}");
    assert_eq!(request[1..], all[all.len() - 12..]);
    check_pairing(&request).unwrap();
}

/// A client's system message and one turn over the budget: the turn is
/// kept (the newest always is) and nothing is left out, so the model is
/// told nothing was, rather than that "the 0 oldest messages" were.
#[test]
fn no_note_when_nothing_was_left_out() {
    let persona = Message::system("You are PIRATE.");
    let all = vec![persona.clone(), Message::user("x".repeat(4000))];
    let budget = approx_tokens(&persona) + 40 + 10;
    assert_eq!(fit_history(&all, budget, 40).elided, 0);
    let history = CountedHistory::new(all.clone());
    let mut sent = RequestMessages::default();
    let mut request = Vec::new();
    sent.update(&mut request, "agent prompt", &history, budget, 40)
        .unwrap();
    let Message::System { content } = &request[0] else {
        panic!("{request:?}")
    };
    assert_eq!(content, "agent prompt\n\nYou are PIRATE.");
    assert_eq!(request[1..], all[1..]);
}

fn temp_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-context-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_session_longer_than_the_budget_still_sends_valid_requests() {
    let _ = DemoModel::default();
    let dir = temp_dir();
    let recorder = Arc::new(Recorder::replying(format!("reply {}", "y".repeat(300))));
    let store = Arc::new(Store::open(&dir.join("homeagent.db")).unwrap());
    // A long history with calls and results already in the store.
    store.ensure_session("long", "main").unwrap();
    let old: Vec<Message> = (0..40).flat_map(exchange).collect();
    store.append_messages("long", &old).unwrap();
    let runtime = local_runtime(
        Arc::clone(&recorder) as Arc<dyn LocalModel>,
        Arc::clone(&store),
        AgentSettings {
            context_tokens: 2_000,
            ..AgentSettings::default()
        },
    );
    let sink: FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: "long".into(),
        agent: "main".into(),
        text: "the newest question".into(),
    };
    let frame = runtime.run(&input, &TurnControl::default(), &sink).await;
    assert!(matches!(frame, Frame::Response { .. }), "{frame:?}");
    let requests = recorder.requests.lock().unwrap();
    let request = &requests[0];
    check_pairing(&request.messages).unwrap();
    // System prompt first, telling the model history was left out.
    let Message::System { content } = &request.messages[0] else {
        panic!("no system prompt");
    };
    assert!(content.contains("were left out"), "{content}");
    // The newest input is last; far fewer than the 161 messages are sent,
    // and what is sent is the newest end of the history, in order.
    assert_eq!(
        request.messages.last(),
        Some(&Message::user("the newest question"))
    );
    let sent = request.messages.len() - 1;
    // Whole old turns (4 messages each) plus the new input, within budget.
    assert!(sent < 161, "{sent}");
    assert_eq!((sent - 1) % 4, 0, "{sent}");
    let cost: usize = request.messages[1..].iter().map(approx_tokens).sum();
    assert!(cost <= 2_000, "{cost}");
    // And not needlessly little (the system prompt and the tool list take
    // their share of the budget too).
    assert!(cost > 1_000, "{cost}");
    let full = store.history("long").unwrap();
    assert_eq!(full.len(), 162);
    assert_eq!(
        request.messages[1..],
        full[full.len() - 1 - sent..full.len() - 1]
    );
    // A sent history never starts inside a turn.
    assert!(matches!(request.messages[1], Message::User { .. }));
    drop(requests);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Calls `demo_echo` without an id after every user message (as Ollama and
/// Gemini stream calls: the assembler names them `call_0`, `call_1`, ...
/// in every turn), then answers with text.
struct IdlessCaller;

impl LocalModel for IdlessCaller {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        // What a strict provider would refuse.
        check_pairing(&request.messages).map_err(|e| {
            ProviderError::Codec(homeagent_llm::CodecError::Unencodable {
                protocol: "test",
                detail: format!("the request breaks the pairing: {e}"),
            })
        })?;
        if matches!(request.messages.last(), Some(Message::User { .. })) {
            Ok(vec![StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(0),
                id: None,
                name: Some("demo_echo".into()),
                raw_arguments: r#"{"text":"hi"}"#.into(),
            })])
        } else {
            Ok(vec![StreamEvent::TextDelta {
                text: "done".into(),
            }])
        }
    }
}

/// The same call id in every turn of a session (what a provider without
/// ids gets) is stored as the model gave it, and the session goes on:
/// every later input loads it and sends a request with the ids reminted.
#[tokio::test]
async fn a_session_whose_turns_reuse_one_call_id_goes_on() {
    let dir = temp_dir();
    let store = Arc::new(Store::open(&dir.join("homeagent.db")).unwrap());
    let runtime = local_runtime(
        Arc::new(IdlessCaller),
        Arc::clone(&store),
        AgentSettings::default(),
    );
    let sink: FrameSink = Arc::new(|_| {});
    for n in 0..3 {
        let input = TurnInput {
            session: "idless".into(),
            agent: "main".into(),
            text: format!("input {n}"),
        };
        let frame = runtime.run(&input, &TurnControl::default(), &sink).await;
        assert!(
            matches!(&frame, Frame::Response { content, .. } if content == "done"),
            "input {n}: {frame:?}"
        );
    }
    let stored = store.history("idless").unwrap();
    let ids: Vec<&str> = stored
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => a.tool_calls.first().map(|c| c.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_0", "call_0", "call_0"]);
    std::fs::remove_dir_all(dir).unwrap();
}
