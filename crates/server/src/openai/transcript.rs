//! Which session a stateless request continues.
//!
//! A stateless client sends the whole conversation each time. Run each
//! request in a fresh session seeded with it, and a conversation of n
//! exchanges leaves n sessions holding 1, 2, … n exchanges (its history
//! stored again with every request, the dashboard's list one row per
//! request), while the agent never sees its own tool calls of the earlier
//! exchanges: the client never had them.
//!
//! So every answer leaves a note here: the fingerprint of the transcript
//! the client now holds (its earlier messages, its input, the answer's
//! text exactly as it was sent, whole or streamed) → the session. A
//! request whose earlier messages have that fingerprint takes the note and
//! continues the session; anything else (a regenerated or edited answer,
//! a note another request took first) runs in a fresh session seeded with
//! what the client sent, as before.
//!
//! A note stands only while the session is where the answer left it: a
//! session has one note, its newest; a turn that begins on the session
//! (any route of this server) forgets it, and an answer is not noted while
//! another turn waits on its session (`ServerState::continue_turn` and
//! `note_answer` keep both under the turns' lock). Of the store, a
//! continuation reads only that the session still exists: an input a
//! *separate process* runs on the same data directory's session
//! (`homeagent run --session …`) goes unseen, and the client's next
//! request continues the session with that exchange in it.
//!
//! Notes live in memory and are bounded ([`KEPT`], oldest forgotten
//! first): after a restart a conversation goes on in a fresh session once,
//! then continues that one. The fingerprint is SHA-256 over the agent's
//! name, the end user the client names (`user`) if any, and each
//! message's role and text (blanks around a text do not
//! count, as clients trim what they show), each length-prefixed, so two
//! transcripts share one only if they are the same.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use homeagent_core::Message;
use sha2::{Digest, Sha256};

/// Notes kept: the conversations most recently answered.
pub const KEPT: usize = 4096;

/// A transcript as the client holds it, being hashed.
#[derive(Clone)]
pub struct Transcript(Sha256);

/// The fingerprint of a whole transcript.
pub type Fingerprint = [u8; 32];

impl Transcript {
    /// The transcript of `agent`, for the end user `user` when the client
    /// names one, made of `messages` (the request's earlier messages:
    /// system, user and assistant text).
    pub fn new(agent: &str, user: Option<&str>, messages: &[Message]) -> Self {
        let mut transcript = Transcript(Sha256::new());
        transcript.part(b"agent", agent);
        if let Some(user) = user {
            transcript.part(b"end user", user);
        }
        for message in messages {
            match message {
                Message::System { content } => transcript.part(b"system", content),
                Message::User { content } => transcript.part(b"user", content),
                Message::Assistant(assistant) => transcript.part(b"assistant", &assistant.content),
                // A stateless request carries none (they are refused).
                Message::Tool(tool) => transcript.part(b"tool", &tool.content),
            }
        }
        transcript
    }

    /// This transcript with the client's input and the answer it got.
    pub fn answered(mut self, input: &str, answer: &str) -> Self {
        self.part(b"user", input);
        self.part(b"assistant", answer);
        self
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.0.clone().finalize().into()
    }

    fn part(&mut self, role: &[u8], text: &str) {
        let text = text.trim();
        self.0.update(role);
        self.0.update((text.len() as u64).to_le_bytes());
        self.0.update(text.as_bytes());
    }
}

/// The notes, by fingerprint.
#[derive(Default)]
pub struct Transcripts {
    inner: Mutex<Notes>,
}

#[derive(Default)]
struct Notes {
    /// Each note's session, with the number it was noted under.
    by_fingerprint: HashMap<Fingerprint, (u64, String)>,
    /// Each noted session's note.
    by_session: HashMap<String, Fingerprint>,
    /// Notes in the order they were made (some gone since: the number
    /// tells the note still there from an older one).
    order: VecDeque<(u64, Fingerprint)>,
    noted: u64,
}

impl Notes {
    fn remove(&mut self, fingerprint: &Fingerprint) -> Option<String> {
        let (_, session) = self.by_fingerprint.remove(fingerprint)?;
        self.by_session.remove(&session);
        Some(session)
    }

    /// A note gone leaves its old place in `order`: drop such places once
    /// they are most of it.
    fn compact(&mut self) {
        if self.order.len() > 2 * KEPT {
            let by_fingerprint = &self.by_fingerprint;
            self.order
                .retain(|(number, fp)| by_fingerprint.get(fp).is_some_and(|(n, _)| n == number));
        }
    }
}

impl Transcripts {
    /// Takes the note for `fingerprint`: one request continues its session.
    pub fn take(&self, fingerprint: &Fingerprint) -> Option<String> {
        let mut notes = self.notes();
        let taken = notes.remove(fingerprint);
        notes.compact();
        taken
    }

    /// Notes that an answer left its client holding `fingerprint` in
    /// `session` (replacing the session's older note), forgetting the
    /// oldest beyond `KEPT`.
    pub fn note(&self, fingerprint: Fingerprint, session: String) {
        let mut notes = self.notes();
        if let Some(older) = notes.by_session.get(&session).copied() {
            notes.remove(&older);
        }
        // Two sessions with one transcript (two clients said the same):
        // the newer answer is the one continued.
        notes.remove(&fingerprint);
        notes.noted += 1;
        let number = notes.noted;
        notes.by_session.insert(session.clone(), fingerprint);
        notes.by_fingerprint.insert(fingerprint, (number, session));
        notes.order.push_back((number, fingerprint));
        while notes.by_fingerprint.len() > KEPT {
            let Some((number, oldest)) = notes.order.pop_front() else {
                break;
            };
            if notes
                .by_fingerprint
                .get(&oldest)
                .is_some_and(|(n, _)| *n == number)
            {
                notes.remove(&oldest);
            }
        }
        notes.compact();
    }

    /// A turn begins on `session`: its transcript moves on, so no client's
    /// may continue it. The note forgotten, for a turn that may end having
    /// stored nothing (`TurnGuard::finish`).
    pub fn forget_session(&self, session: &str) -> Option<Fingerprint> {
        let mut notes = self.notes();
        let fingerprint = notes.by_session.get(session).copied()?;
        notes.remove(&fingerprint);
        notes.compact();
        Some(fingerprint)
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        // Every critical section leaves the notes consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u64) -> String {
        format!("s{n}")
    }

    fn fingerprint(n: u64) -> Fingerprint {
        let mut fingerprint = [0; 32];
        fingerprint[..8].copy_from_slice(&n.to_le_bytes());
        fingerprint
    }

    #[test]
    fn a_transcript_is_its_messages_roles_and_trimmed_texts_in_order() {
        let base = |agent: &str, messages: &[Message]| {
            Transcript::new(agent, None, messages).fingerprint()
        };
        let hi = [Message::user("hi")];
        assert_eq!(base("main", &hi), base("main", &[Message::user("  hi\n")]));
        assert_ne!(base("main", &hi), base("other", &hi));
        // Two end users' same words are two transcripts.
        let of = |user| Transcript::new("main", user, &hi).fingerprint();
        assert_ne!(of(Some("ann")), of(Some("bob")));
        assert_ne!(of(Some("ann")), of(None));
        assert_ne!(base("main", &hi), base("main", &[Message::system("hi")]));
        // Lengths keep the parts apart: "ab" + "c" is not "a" + "bc".
        assert_ne!(
            base("main", &[Message::user("ab"), Message::user("c")]),
            base("main", &[Message::user("a"), Message::user("bc")])
        );
        // An answered transcript is the next request's earlier messages.
        let answered = Transcript::new("main", None, &hi).answered("go", "done");
        let sent = [
            Message::user("hi"),
            Message::user("go"),
            Message::Assistant(homeagent_core::AssistantMessage {
                content: "done".into(),
                ..Default::default()
            }),
        ];
        assert_eq!(answered.fingerprint(), base("main", &sent));
    }

    #[test]
    fn a_note_is_taken_once_and_the_oldest_are_forgotten() {
        let notes = Transcripts::default();
        notes.note([1; 32], session(1));
        assert_eq!(notes.take(&[1; 32]), Some(session(1)));
        assert_eq!(notes.take(&[1; 32]), None);
        for n in 0..=KEPT as u64 {
            notes.note(fingerprint(n), session(n));
        }
        assert_eq!(
            notes.take(&fingerprint(0)),
            None,
            "the oldest was forgotten"
        );
        assert_eq!(
            notes.take(&fingerprint(KEPT as u64)),
            Some(session(KEPT as u64))
        );
        // A note made again after it was taken is the newest, not the
        // oldest it once was.
        notes.note([7; 32], session(7));
        assert!(notes.take(&[7; 32]).is_some());
        notes.note([7; 32], session(8));
        for n in 0..KEPT as u64 - 1 {
            notes.note(fingerprint(n + 10_000), session(n + 10_000));
        }
        assert_eq!(notes.take(&[7; 32]), Some(session(8)));
        // Places of notes gone do not pile up.
        for _ in 0..3 * KEPT {
            notes.note([5; 32], session(5));
            notes.take(&[5; 32]);
            notes.note([6; 32], session(6));
        }
        {
            let inner = notes.notes();
            assert!(inner.order.len() <= 2 * KEPT);
            assert_eq!(inner.by_session.len(), inner.by_fingerprint.len());
        }
        // Compacting kept the live notes' places: the churned note is
        // still the oldest, and the first to go.
        for n in 0..KEPT as u64 {
            notes.note(fingerprint(n + 50_000), session(n + 50_000));
        }
        assert!(notes.notes().by_fingerprint.len() <= KEPT);
        assert_eq!(notes.take(&[6; 32]), None);
        assert_eq!(
            notes.take(&fingerprint(50_000)),
            Some(session(50_000)),
            "the newer stay"
        );
    }

    #[test]
    fn a_session_has_one_note_and_a_turn_beginning_on_it_forgets_it() {
        let notes = Transcripts::default();
        notes.note([1; 32], session(1));
        notes.note([2; 32], session(1));
        assert_eq!(notes.take(&[1; 32]), None, "replaced by the newer");
        assert_eq!(notes.take(&[2; 32]), Some(session(1)));
        notes.note([3; 32], session(1));
        notes.note([4; 32], session(2));
        notes.forget_session("s1");
        assert_eq!(notes.take(&[3; 32]), None);
        assert_eq!(notes.take(&[4; 32]), Some(session(2)), "others stay");
        // One transcript in two sessions: the newer answer's.
        notes.note([5; 32], session(5));
        notes.note([5; 32], session(6));
        assert_eq!(notes.take(&[5; 32]), Some(session(6)));
        notes.forget_session("s5");
        let inner = notes.notes();
        assert!(inner.by_session.is_empty() && inner.by_fingerprint.is_empty());
    }
}
