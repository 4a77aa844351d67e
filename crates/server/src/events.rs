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
//! the turn) takes a short lock, serializes the frame once and bumps a
//! `watch` channel; it never waits for a subscriber.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use homeagent_agent::Frame;
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;

/// The default number of events the ring keeps.
pub const DEFAULT_RING_CAPACITY: usize = 4096;

/// One published event: its id and its JSON text
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

struct Ring {
    capacity: usize,
    events: VecDeque<Numbered>,
    /// The id the next event gets; ids start at 1, so 0 means "none yet".
    next_id: u64,
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
    pub fn new(capacity: usize) -> Self {
        let (head, _) = watch::channel(0);
        EventHub {
            ring: Arc::new(Mutex::new(Ring {
                capacity: capacity.max(1),
                events: VecDeque::new(),
                next_id: 1,
            })),
            head,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Every critical section leaves the ring consistent.
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a frame, stores it (dropping the oldest when full) and wakes
    /// every subscriber. Returns its id.
    pub fn publish(&self, session: &str, frame: &Frame) -> u64 {
        let data = serde_json::to_string(&Envelope { session, frame })
            .unwrap_or_else(|e| json!({"session": session, "error": e.to_string()}).to_string());
        self.publish_raw(data)
    }

    /// Publishes already-serialized event data.
    pub fn publish_raw(&self, data: String) -> u64 {
        let id = {
            let mut ring = self.ring();
            let id = ring.next_id;
            ring.next_id += 1;
            if ring.events.len() == ring.capacity {
                ring.events.pop_front();
            }
            ring.events.push_back(Numbered {
                id,
                data: Arc::from(data),
            });
            id
        };
        self.head.send_replace(id);
        id
    }

    /// The id of the newest event (0 before the first).
    pub fn latest(&self) -> u64 {
        self.ring().next_id - 1
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
    /// A cursor beyond the newest id (a server restart reset the ids) is a
    /// gap too: the client cannot know what it missed.
    fn read_after(&self, cursor: u64, out: &mut VecDeque<Read>) -> u64 {
        let ring = self.ring();
        let latest = ring.next_id - 1;
        let oldest = ring.events.front().map_or(ring.next_id, |e| e.id);
        let mut cursor = cursor;
        if cursor > latest {
            out.push_back(Read::Gap {
                from: latest + 1,
                to: cursor,
            });
            cursor = oldest.saturating_sub(1);
        } else if cursor + 1 < oldest {
            out.push_back(Read::Gap {
                from: cursor + 1,
                to: oldest - 1,
            });
            cursor = oldest - 1;
        }
        // Ids are consecutive, so the first wanted event's position is known.
        let skip = usize::try_from((cursor + 1).saturating_sub(oldest)).unwrap_or(usize::MAX);
        for event in ring.events.iter().skip(skip) {
            out.push_back(Read::Event(event.clone()));
        }
        latest
    }
}

/// One reader of the ring.
pub struct Subscriber {
    hub: EventHub,
    head: watch::Receiver<u64>,
    cursor: u64,
    pending: VecDeque<Read>,
}

impl Subscriber {
    /// The next event (or gap), waiting for one. `None` when the hub is gone.
    pub async fn next(&mut self) -> Option<Read> {
        loop {
            if let Some(read) = self.pending.pop_front() {
                return Some(read);
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

/// `GET /api/v1/events`: SSE of every frame as `{"session", "frame"}` with
/// its `id:`; `Last-Event-ID` resumes after that id (a `gap` event first
/// when some of what followed is gone). Ends when the server shuts down.
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
    let shutdown = state.shutdown_token().clone();
    let events = futures_util::stream::unfold(
        (subscriber, shutdown),
        |(mut subscriber, shutdown)| async move {
            let read = tokio::select! {
                read = subscriber.next() => read?,
                () = shutdown.cancelled() => return None,
            };
            let event = match read {
                Read::Gap { from, to } => Event::default().event("gap").data(gap_data(from, to)),
                Read::Event(numbered) => Event::default()
                    .id(numbered.id.to_string())
                    .data(&*numbered.data),
            };
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (subscriber, shutdown),
            ))
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
