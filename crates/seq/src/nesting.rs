//! How deep chains of `seq_call` nest, for the check a save makes.
//!
//! At run time a chain may nest at most [`MAX_DEPTH`] levels: running a
//! sequence is one, and every `seq_call`/`seq_when_call` entry is one more
//! (into a whole sequence, `#Name`, or into a group, its own or another
//! sequence's through `sequence`). A deeper level fails every time it is
//! reached, so a save that would make such a chain is refused instead, with
//! the chain spelled the way the run-time error spells it
//! (`#A → #A/g → #B`).
//!
//! Only chains through the sequence being saved count: a chain already too
//! deep elsewhere (a file written by hand or by an older build) is not the
//! save's doing and fails at run time as before.
//!
//! Cycles are refused before this runs (`store::find_cycle`, and the
//! static check's group cycles); a frame met again while it is being
//! walked ends that branch, so a damaged file cannot make this loop.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::engine::MAX_DEPTH;
use crate::model::Sequence;

/// A level of a chain: a sequence run whole, or one of its groups entered
/// by `seq_call`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Frame<'a> {
    sequence: &'a str,
    group: Option<&'a str>,
}

impl Frame<'_> {
    fn label(&self) -> String {
        match self.group {
            None => format!("#{}", self.sequence),
            Some(group) => format!("#{}/{group}", self.sequence),
        }
    }
}

/// The deepest chain over `stored` that passes through a level of
/// `through`, when it is deeper than [`MAX_DEPTH`]: its levels' labels.
pub(crate) fn too_deep_through(
    stored: &BTreeMap<String, Sequence>,
    through: &str,
) -> Option<Vec<String>> {
    let mut walk = Walk {
        stored,
        through,
        deepest: HashMap::new(),
        deepest_through: HashMap::new(),
        walking: HashSet::new(),
    };
    stored
        .keys()
        .filter_map(|name| {
            walk.chain_through(Frame {
                sequence: name,
                group: None,
            })
        })
        .max_by_key(Vec::len)
        .filter(|chain| chain.len() > MAX_DEPTH)
        .map(|chain| chain.iter().map(Frame::label).collect())
}

struct Walk<'a> {
    stored: &'a BTreeMap<String, Sequence>,
    through: &'a str,
    /// The deepest chain from a frame, the frame first.
    deepest: HashMap<Frame<'a>, Vec<Frame<'a>>>,
    /// The deepest chain from a frame that reaches `through`, if any does.
    deepest_through: HashMap<Frame<'a>, Option<Vec<Frame<'a>>>>,
    walking: HashSet<Frame<'a>>,
}

impl<'a> Walk<'a> {
    fn chain(&mut self, frame: Frame<'a>) -> Vec<Frame<'a>> {
        if let Some(known) = self.deepest.get(&frame) {
            return known.clone();
        }
        if !self.walking.insert(frame.clone()) {
            return Vec::new();
        }
        let below = self
            .entries(&frame)
            .into_iter()
            .map(|entry| self.chain(entry))
            .max_by_key(Vec::len)
            .unwrap_or_default();
        self.walking.remove(&frame);
        let chain: Vec<Frame<'a>> = std::iter::once(frame.clone()).chain(below).collect();
        self.deepest.insert(frame, chain.clone());
        chain
    }

    fn chain_through(&mut self, frame: Frame<'a>) -> Option<Vec<Frame<'a>>> {
        if frame.sequence == self.through {
            return Some(self.chain(frame));
        }
        if let Some(known) = self.deepest_through.get(&frame) {
            return known.clone();
        }
        if !self.walking.insert(frame.clone()) {
            return None;
        }
        let below = self
            .entries(&frame)
            .into_iter()
            .filter_map(|entry| self.chain_through(entry))
            .max_by_key(Vec::len);
        self.walking.remove(&frame);
        let chain = below.map(|below| std::iter::once(frame.clone()).chain(below).collect());
        self.deepest_through.insert(frame, chain.clone());
        chain
    }

    /// The frames the calls made at `frame` enter: every group's steps for
    /// a whole sequence, the group's own for a group. A target that is not
    /// stored enters nothing (it fails before it would nest).
    fn entries(&self, frame: &Frame<'a>) -> Vec<Frame<'a>> {
        let Some(seq) = self.stored.get(frame.sequence) else {
            return Vec::new();
        };
        seq.groups
            .iter()
            .filter(|group| frame.group.is_none_or(|name| name == group.name))
            .flat_map(|group| &group.tools)
            .filter_map(|step| {
                let target = step.target()?;
                if let Some(name) = target.strip_prefix('#') {
                    let (name, _) = self.stored.get_key_value(name)?;
                    return Some(Frame {
                        sequence: name,
                        group: None,
                    });
                }
                let sequence = match step.args.get("sequence") {
                    Some(named) => {
                        let (name, _) = self.stored.get_key_value(named.as_str()?)?;
                        name.as_str()
                    }
                    None => frame.sequence,
                };
                let group = self.stored.get(sequence)?.group(target)?;
                Some(Frame {
                    sequence,
                    group: Some(group.name.as_str()),
                })
            })
            .collect()
    }
}
