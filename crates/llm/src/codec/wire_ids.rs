//! Call ids rewritten for a wire that restricts them.
//!
//! A stored history keeps every call id as the provider that made the call
//! wrote it. Some wires refuse ids of another shape, and the refusal (a 400)
//! sticks to the session: every later request still holds the id. An
//! encoder for such a wire maps each id it cannot send to one it can, the
//! same on the call and on its result, without colliding with any other id
//! of the request. Ids the wire accepts, the usual case, are sent as they
//! are, and a request where all are accepted builds no map at all.

use std::collections::{HashMap, HashSet};

use homeagent_core::Message;

/// What a wire accepts as a call id, and how to make one from another id.
pub(crate) trait IdRule {
    fn accepts(&self, id: &str) -> bool;
    /// A candidate for `id`; `attempt` counts up from 0 while candidates
    /// collide with ids already in the request. Every candidate must be
    /// accepted by [`IdRule::accepts`].
    fn candidate(&self, id: &str, attempt: u32) -> String;
}

/// The ids of one request that had to change, original to sent.
pub(crate) struct WireIds<'a> {
    renamed: HashMap<&'a str, String>,
}

impl<'a> WireIds<'a> {
    pub(crate) fn of(messages: &'a [Message], rule: &impl IdRule) -> Self {
        let calls = || {
            messages.iter().flat_map(|m| match m {
                Message::Assistant(a) => a.tool_calls.as_slice(),
                _ => &[],
            })
        };
        let mut renamed = HashMap::new();
        if calls().all(|c| rule.accepts(&c.id)) {
            return WireIds { renamed };
        }
        let mut taken: HashSet<String> = calls()
            .filter(|c| rule.accepts(&c.id))
            .map(|c| c.id.clone())
            .collect();
        for call in calls() {
            let id = call.id.as_str();
            if rule.accepts(id) || renamed.contains_key(id) {
                continue;
            }
            let mut attempt = 0;
            let mut sent = rule.candidate(id, attempt);
            while taken.contains(&sent) {
                attempt += 1;
                sent = rule.candidate(id, attempt);
            }
            taken.insert(sent.clone());
            renamed.insert(id, sent);
        }
        WireIds { renamed }
    }

    /// The id to send for `id` (a call's, or the one a result answers).
    pub(crate) fn get<'b>(&'b self, id: &'b str) -> &'b str {
        self.renamed.get(id).map_or(id, String::as_str)
    }
}

/// Anthropic: `^[a-zA-Z0-9_-]+$`. Kimi writes `functions.ls:0`. Every other
/// character becomes `_`, so the id stays recognisable; a collision gets a
/// suffix.
pub(crate) struct AnthropicIds;

impl AnthropicIds {
    fn is_wire_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_' || c == '-'
    }
}

impl IdRule for AnthropicIds {
    fn accepts(&self, id: &str) -> bool {
        !id.is_empty() && id.chars().all(Self::is_wire_char)
    }

    fn candidate(&self, id: &str, attempt: u32) -> String {
        let base: String = id
            .chars()
            .map(|c| if Self::is_wire_char(c) { c } else { '_' })
            .collect();
        let base = if base.is_empty() { "call".into() } else { base };
        match attempt {
            0 => base,
            n => format!("{base}_{}", n + 1),
        }
    }
}

/// Mistral: exactly nine ASCII letters and digits, on its own API and in
/// vLLM's Mistral mode. Nothing of a longer id fits, so the id is hashed
/// (FNV-1a, fixed, so a session's next request sends the same ids) into
/// nine base-62 digits; a collision hashes again with the attempt number.
pub(crate) struct MistralIds;

const MISTRAL_ID_LEN: usize = 9;

impl IdRule for MistralIds {
    fn accepts(&self, id: &str) -> bool {
        id.len() == MISTRAL_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric())
    }

    fn candidate(&self, id: &str, attempt: u32) -> String {
        const DIGITS: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in id.bytes().chain(attempt.to_le_bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut out = String::with_capacity(MISTRAL_ID_LEN);
        for _ in 0..MISTRAL_ID_LEN {
            // 62^9 < 2^64: the nine digits use most of the hash.
            let digit = usize::try_from(hash % 62).unwrap_or(0);
            out.push(char::from(DIGITS[digit]));
            hash /= 62;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    #[test]
    fn every_candidate_is_accepted_by_its_rule() {
        for id in [
            "",
            "call_0",
            "functions.ls:0",
            "é",
            "toolu_01A09q90qw90lq917835lq9",
        ] {
            for attempt in 0..5 {
                let mistral = MistralIds.candidate(id, attempt);
                assert!(MistralIds.accepts(&mistral), "{id} {attempt}: {mistral}");
                let anthropic = AnthropicIds.candidate(id, attempt);
                assert!(
                    AnthropicIds.accepts(&anthropic),
                    "{id} {attempt}: {anthropic}"
                );
            }
        }
        // Attempts give different candidates.
        assert_ne!(
            MistralIds.candidate("call_0", 0),
            MistralIds.candidate("call_0", 1)
        );
        assert_eq!(AnthropicIds.candidate("a.b", 1), "a_b_2");
    }

    /// Nine digits from most of the hash: a thousand ids (as a long
    /// session's calls) get a thousand different candidates, and each
    /// candidate's digits vary, rather than repeat one.
    #[test]
    fn mistral_candidates_spread_over_the_whole_id_space() {
        let candidates: std::collections::HashSet<String> = (0..1_000)
            .map(|n| MistralIds.candidate(&format!("call_{n}"), 0))
            .collect();
        assert_eq!(candidates.len(), 1_000);
        let distinct_digits: std::collections::HashSet<char> =
            MistralIds.candidate("call_0", 0).chars().collect();
        assert!(distinct_digits.len() > 1, "{distinct_digits:?}");
    }

    #[test]
    fn the_rules_accept_exactly_their_wires_ids() {
        assert!(MistralIds.accepts("D681PevKs"));
        for id in ["D681PevK", "D681PevKs1", "D681Pev_s", "D681PevKé"] {
            assert!(!MistralIds.accepts(id), "{id}");
        }
        assert!(AnthropicIds.accepts("toolu_01-x"));
        for id in ["", "functions.ls:0", "a b"] {
            assert!(!AnthropicIds.accepts(id), "{id}");
        }
    }
}
