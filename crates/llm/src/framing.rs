//! Cutting a streamed body into frames (being written).

use crate::codec::{Frame, Framing};

/// Incremental framer: feed it bytes as they arrive, get whole frames out.
pub struct FrameReader {
    framing: Framing,
}

impl FrameReader {
    pub fn new(framing: Framing) -> Self {
        FrameReader { framing }
    }

    /// Appends every frame completed by `bytes` to `out`.
    pub fn feed(&mut self, _bytes: &[u8], _out: &mut Vec<Frame>) {
        let _ = self.framing;
    }

    /// Flushes a last frame that the body ended without terminating.
    pub fn finish(&mut self, _out: &mut Vec<Frame>) {}
}
