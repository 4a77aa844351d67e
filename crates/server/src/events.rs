//! The event stream: every frame of every input, numbered, kept in a
//! bounded ring and served as SSE (`GET /api/v1/events`).
//!
//! # Why one ring and per-subscriber cursors
//!
//! A subscriber never receives events pushed at it; it reads the ring from
//! its own cursor (the last id it has) whenever the ring's head moves. Live
//! delivery and `Last-Event-ID` replay are then the same code path, so a
//! reconnecting client gets *exactly* the events after its id, with no
//! window where one is both replayed and delivered live, or neither. A
//! subscriber whose cursor fell out of the ring — it reconnected too late,
//! or read too slowly — first gets an explicit `gap` event saying which ids
//! it missed; it is never skipped past them silently.
//!
//! Publishing (from the scheduler's observer, a synchronous callback inside
//! the turn) takes a short lock, stores a clone of the frame and bumps a
//! `watch` channel when someone subscribes; it never waits for a
//! subscriber.
//!
//! # Why serialization is lazy
//!
//! Publishing sits in the agent's hot path: every frame of every tool call
//! passes through it, and most servers have no one subscribed to the
//! stream. Serializing there cost about 5 % of all instructions per tool
//! call, for text nobody might read. So the ring keeps the frame itself and
//! an empty once-cell; the first subscriber that reads an event renders its
//! JSON (outside the ring's lock) and caches it, and every later reader gets
//! the same `Arc<str>`. N subscribers serialize once; none serialize never.
//! The cost is memory: an event that was read keeps both its frame and its
//! text until the ring drops it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use homeagent_agent::Frame;
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;

/// The default number of events the ring keeps.
pub const DEFAULT_RING_CAPACITY: usize = 4096;

/// One published event as a subscriber reads it: its id and its JSON text
/// (`{"session": …, "frame": {…}}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    pub id: u64,
    pub data: Arc<str>,
}

/// What a subscriber reads next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Ids `from..=to` are gone from the ring; the events that follow start
    /// at `to + 1`.
    Gap {
        from: u64,
        to: u64,
    },
    Event(Numbered),
}

/// The JSON of a gap event (`event: gap`).
pub fn gap_data(from: u64, to: u64) -> String {
    json!({
        "missed_from": from,
        "missed_to": to,
        "missed": to.saturating_sub(from) + 1,
        "message": "these events are no longer in the server's ring; reload state \
                    (GET /api/v1/sessions/{id}) instead of relying on them",
    })
    .to_string()
}

/// One event in the ring. Shared (`Arc`) between the ring and the
/// subscribers that are about to read it, so its text is rendered once.
struct Entry {
    id: u64,
    source: Source,
    /// The rendered text of a [`Source::Frame`], filled on first read.
    json: OnceLock<Arc<str>>,
}

enum Source {
    /// Published with [`EventHub::publish`]: rendered when first read.
    Frame { session: Box<str>, frame: Frame },
    /// Published with [`EventHub::publish_raw`]: already text.
    Raw(Arc<str>),
}

impl Entry {
    /// The event's JSON text, rendered now if no one has read it yet.
    fn data(&self) -> Arc<str> {
        match &self.source {
            Source::Raw(data) => Arc::clone(data),
            Source::Frame { session, frame } => Arc::clone(
                self.json
                    .get_or_init(|| Arc::from(render_envelope(session, frame))),
            ),
        }
    }

    fn numbered(&self) -> Numbered {
        Numbered {
            id: self.id,
            data: self.data(),
        }
    }
}

/// `{"session": …, "frame": {…}}`; a frame that cannot be serialized (a
/// non-string map key in tool arguments, say) still yields an event, with
/// the error in place of the frame.
fn render_envelope(session: &str, frame: &Frame) -> String {
    #[cfg(test)]
    tests::count_render();
    serde_json::to_string(&Envelope { session, frame })
        .unwrap_or_else(|e| json!({"session": session, "error": e.to_string()}).to_string())
}

/// What [`EventHub::read_after`] hands a subscriber: entries, not yet
/// text, so the rendering happens after the ring's lock is released.
enum Pending {
    Gap { from: u64, to: u64 },
    Entry(Arc<Entry>),
}

struct Ring {
    capacity: usize,
    events: VecDeque<Arc<Entry>>,
    /// This run's first id (see [`EventHub::new`]).
    first_id: u64,
    /// The id the next event gets.
    next_id: u64,
}

impl Ring {
    /// The newest id, 0 before the first event.
    fn latest(&self) -> u64 {
        if self.next_id == self.first_id {
            0
        } else {
            self.next_id - 1
        }
    }
}

/// The ring and the head signal. Cheap to clone.
#[derive(Clone)]
pub struct EventHub {
    ring: Arc<Mutex<Ring>>,
    head: watch::Sender<u64>,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("latest", &self.latest())
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    session: &'a str,
    frame: &'a Frame,
}

impl EventHub {
    /// A hub keeping the newest `capacity` events, whose ids begin past
    /// every id an earlier run of the server gave: at the start's Unix
    /// time in milliseconds × 1,000, plus one. A client that reconnects
    /// after a restart with an id of the last run (the dashboard does) is
    /// then never taken to have seen this run's first events. Two runs'
    /// ids could meet only if one sent more than 1,000 events per
    /// millisecond it ran, or the clock went back between them; ids stay
    /// below 2⁵³ (JavaScript's exact integers) for two centuries.
    pub fn new(capacity: usize) -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
        Self::starting_at(capacity, millis.saturating_mul(1000).saturating_add(1))
    }

    /// A hub whose first event gets `first_id` (at least 1).
    pub fn starting_at(capacity: usize, first_id: u64) -> Self {
        let first_id = first_id.max(1);
        let (head, _) = watch::channel(0);
        EventHub {
            ring: Arc::new(Mutex::new(Ring {
                capacity: capacity.max(1),
                events: VecDeque::new(),
                first_id,
                next_id: first_id,
            })),
            head,
        }
    }

    /// The id this run's first event gets (or got).
    pub fn first_id(&self) -> u64 {
        self.ring().first_id
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Every critical section leaves the ring consistent.
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a frame, stores a clone of it (dropping the oldest event
    /// when full) and wakes every subscriber. Returns its id. The frame is
    /// serialized only when a subscriber first reads it.
    pub fn publish(&self, session: &str, frame: &Frame) -> u64 {
        self.push(Source::Frame {
            session: Box::from(session),
            frame: frame.clone(),
        })
    }

    /// Publishes already-serialized event data.
    pub fn publish_raw(&self, data: String) -> u64 {
        self.push(Source::Raw(Arc::from(data)))
    }

    fn push(&self, source: Source) -> u64 {
        let id = {
            let mut ring = self.ring();
            let id = ring.next_id;
            ring.next_id += 1;
            if ring.events.len() == ring.capacity {
                ring.events.pop_front();
            }
            ring.events.push_back(Arc::new(Entry {
                id,
                source,
                json: OnceLock::new(),
            }));
            id
        };
        // With no subscriber there is no one to wake, and the notify is a
        // good part of what a publish costs. A subscriber joining right now
        // cannot miss this event: it registers on `head` before it reads
        // the newest id under the ring's lock (`subscribe`), so either that
        // read sees the event or this count sees the subscriber.
        if self.head.receiver_count() > 0 {
            self.head.send_replace(id);
        }
        id
    }

    /// The id of the newest event (0 before the first).
    pub fn latest(&self) -> u64 {
        self.ring().latest()
    }

    /// How many subscribers are connected now.
    pub fn subscribers(&self) -> usize {
        self.head.receiver_count()
    }

    /// A subscriber that starts after `last_seen` (`None`: after the newest
    /// event, i.e. only what comes next).
    pub fn subscribe(&self, last_seen: Option<u64>) -> Subscriber {
        let head = self.head.subscribe();
        let cursor = last_seen.unwrap_or_else(|| self.latest());
        Subscriber {
            hub: self.clone(),
            head,
            cursor,
            pending: VecDeque::new(),
        }
    }

    /// Everything after `cursor`, with a gap first when some of it is gone.
    /// A cursor that is not one of this run's ids (before its first, or
    /// beyond its newest: a clock that was ahead) is from an earlier run:
    /// it reads from this run's start, and the gap (if any) names this
    /// run's ids the ring no longer keeps.
    fn read_after(&self, cursor: u64, out: &mut VecDeque<Pending>) -> u64 {
        let ring = self.ring();
        let latest = ring.latest();
        let oldest = ring.events.front().map_or(ring.next_id, |e| e.id);
        let before_first = ring.first_id - 1;
        let mut cursor = if cursor > latest || cursor < before_first {
            before_first
        } else {
            cursor
        };
        if cursor + 1 < oldest {
            out.push_back(Pending::Gap {
                from: cursor + 1,
                to: oldest - 1,
            });
            cursor = oldest - 1;
        }
        // Ids are consecutive, so the first wanted event's position is known.
        let skip = usize::try_from((cursor + 1).saturating_sub(oldest)).unwrap_or(usize::MAX);
        for event in ring.events.iter().skip(skip) {
            out.push_back(Pending::Entry(Arc::clone(event)));
        }
        latest
    }
}

/// One reader of the ring.
pub struct Subscriber {
    hub: EventHub,
    head: watch::Receiver<u64>,
    cursor: u64,
    pending: VecDeque<Pending>,
}

impl Subscriber {
    /// The next event (or gap), waiting for one. `None` when the hub is gone.
    pub async fn next(&mut self) -> Option<Read> {
        loop {
            match self.pending.pop_front() {
                Some(Pending::Gap { from, to }) => return Some(Read::Gap { from, to }),
                Some(Pending::Entry(entry)) => return Some(Read::Event(entry.numbered())),
                None => {}
            }
            // Marked seen before reading, so a publish racing the read
            // wakes the next `changed` instead of being lost.
            self.head.borrow_and_update();
            if self.hub.latest() != self.cursor {
                self.cursor = self.hub.read_after(self.cursor, &mut self.pending);
                continue;
            }
            if self.head.changed().await.is_err() {
                return None;
            }
        }
    }
}

/// The subscriber's next event, or `None` once `ended` is cancelled and
/// every event published before that has been read: a subscriber with
/// events to read has them at once, and it is asked first.
async fn next_until(
    subscriber: &mut Subscriber,
    ended: &homeagent_core::CancellationToken,
) -> Option<Read> {
    tokio::select! {
        biased;
        read = subscriber.next() => read,
        () = ended.cancelled() => None,
    }
}

/// `GET /api/v1/events`: SSE of every frame as `{"session", "frame"}` with
/// its `id:`; `Last-Event-ID` resumes after that id (a `gap` event first
/// when some of what followed is gone). Ends when the server shuts down,
/// once the turns it stopped have sent their last frames.
pub async fn stream(
    axum::extract::State(state): axum::extract::State<crate::state::ServerState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use axum::response::sse::{Event, KeepAlive, Sse};

    let last_seen = match headers.get("last-event-id") {
        None => None,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(id) => Some(id),
            None => {
                return crate::error::ApiError::bad_request(
                    "invalid_last_event_id",
                    "Last-Event-ID must be the decimal id of an event this server sent",
                )
                .into_response();
            }
        },
    };
    let subscriber = state.events().subscribe(last_seen);
    let ended = state.turns_ended_token().clone();
    let events =
        futures_util::stream::unfold((subscriber, ended), |(mut subscriber, ended)| async move {
            let read = next_until(&mut subscriber, &ended).await?;
            let event = match read {
                Read::Gap { from, to } => Event::default().event("gap").data(gap_data(from, to)),
                Read::Event(numbered) => Event::default()
                    .id(numbered.id.to_string())
                    .data(&*numbered.data),
            };
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (subscriber, ended),
            ))
        });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
mod tests {
    use std::cell::Cell;

    use homeagent_agent::UsageFrame;

    use super::*;

    thread_local! {
        /// Envelopes rendered on this thread. Per thread, so tests running
        /// in parallel do not see each other's renders (a current-thread
        /// tokio test reads on the test's own thread).
        static RENDERS: Cell<usize> = const { Cell::new(0) };
    }

    pub(super) fn count_render() {
        RENDERS.with(|renders| renders.set(renders.get() + 1));
    }

    fn renders() -> usize {
        RENDERS.with(Cell::get)
    }

    async fn read_events(hub: &EventHub, after: u64, count: usize) -> Vec<Numbered> {
        let mut subscriber = hub.subscribe(Some(after));
        let mut events = Vec::new();
        for _ in 0..count {
            match subscriber.next().await.unwrap() {
                Read::Event(event) => events.push(event),
                gap => panic!("unexpected {gap:?}"),
            }
        }
        events
    }

    /// Lets every other task on the current-thread runtime run.
    async fn let_others_run() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_stream_that_ended_still_reads_what_was_published_before() {
        let hub = EventHub::starting_at(16, 1);
        let ended = homeagent_core::CancellationToken::new();
        let mut subscriber = hub.subscribe(Some(0));
        for n in 0..20 {
            hub.publish(
                "s",
                &Frame::ContentDelta {
                    text: n.to_string(),
                },
            );
        }
        ended.cancel();
        // The ring keeps 16 of the 20: ids 1 to 4 are a gap, then 5 to 20,
        // then the end. (Asked in either order, a cancelled end would win
        // about every other read.)
        let mut reads = Vec::new();
        while let Some(read) = next_until(&mut subscriber, &ended).await {
            reads.push(match read {
                Read::Gap { from, to } => format!("gap {from}-{to}"),
                Read::Event(event) => event.id.to_string(),
            });
        }
        let mut expected = vec!["gap 1-4".to_owned()];
        expected.extend((5..=20).map(|id: u64| id.to_string()));
        assert_eq!(reads, expected);
    }

    #[tokio::test]
    async fn a_subscriber_already_waiting_is_woken_by_the_next_publish() {
        let hub = EventHub::starting_at(8, 1);
        // Published with no subscriber: no one to wake, still numbered.
        assert_eq!(
            hub.publish("s", &Frame::ContentDelta { text: "a".into() }),
            1
        );
        let mut subscriber = hub.subscribe(None);
        let waiter = tokio::spawn(async move { subscriber.next().await });
        let_others_run().await;
        assert!(
            !waiter.is_finished(),
            "nothing was published after it joined"
        );
        hub.publish("s", &Frame::ContentDelta { text: "b".into() });
        let_others_run().await;
        assert!(waiter.is_finished(), "the publish did not wake it");
        match waiter.await.unwrap() {
            Some(Read::Event(event)) => {
                assert_eq!(event.id, 2);
                assert_eq!(
                    &*event.data,
                    r#"{"session":"s","frame":{"type":"content_delta","text":"b"}}"#
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_are_serialized_on_first_read_once_and_to_the_same_text() {
        let hub = EventHub::starting_at(8, 1);
        hub.publish(
            "s1",
            &Frame::ContentDelta {
                text: "say \"hi\"".to_owned(),
            },
        );
        hub.publish_raw(r#"{"session":"raw","note":1}"#.to_owned());
        hub.publish(
            "s2",
            &Frame::Response {
                content: "done".to_owned(),
                turns: 2,
                usage: UsageFrame {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    total_tokens: 3,
                },
                incomplete: None,
            },
        );
        // No subscriber: nothing was rendered, nothing is cached.
        assert_eq!(renders(), 0);
        assert!(hub.ring().events.iter().all(|e| e.json.get().is_none()));

        let first = read_events(&hub, 0, 3).await;
        assert_eq!(renders(), 2, "one render per frame, none for raw data");
        let texts: Vec<&str> = first.iter().map(|e| &*e.data).collect();
        assert_eq!(
            texts,
            [
                r#"{"session":"s1","frame":{"type":"content_delta","text":"say \"hi\""}}"#,
                r#"{"session":"raw","note":1}"#,
                concat!(
                    r#"{"session":"s2","frame":{"type":"response","content":"done","turns":2,"#,
                    r#""usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}}"#
                ),
            ]
        );
        assert_eq!(first.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);

        // A second subscriber gets the cached text: no new render, and the
        // very same allocation.
        let second = read_events(&hub, 0, 3).await;
        assert_eq!(renders(), 2);
        assert_eq!(second, first);
        for (a, b) in first.iter().zip(&second) {
            assert!(Arc::ptr_eq(&a.data, &b.data), "event {} re-rendered", a.id);
        }
    }
}
