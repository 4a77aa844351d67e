//! Reading a response body: bytes → frames → events, under the idle timeout
//! and the cancel token, deciding how the stream ended.

use super::*;
use homeagent_core::WaitForCancellationFutureOwned;
use http_body::Body as _;
use std::future::Future as _;

/// The events of one streamed response, in wire order.
///
/// Pull them with [`EventStream::next`], or use it as a
/// [`futures_util::Stream`]. An item is either an event or the error that
/// ended the stream; after an error (or the wire's end), `next` gives
/// `None`. Dropping the stream drops the connection.
pub struct EventStream {
    pub(super) inner: Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl EventStream {
    /// A stream of events that are already at hand (an in-process model).
    pub fn from_events(events: Vec<StreamEvent>) -> Self {
        EventStream {
            inner: Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))),
        }
    }

    /// The next event, the error that ended the stream, or `None` at its end.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        futures_util::StreamExt::next(&mut self.inner).await
    }

    /// Reads the stream to its end: all its events, or its error.
    pub async fn collect(mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        let mut events = Vec::new();
        while let Some(item) = self.next().await {
            events.push(item?);
        }
        Ok(events)
    }
}

impl Stream for EventStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Reads a streamed body: bytes → frames → events, one network read at a
/// time, and decides how the stream ended.
///
/// A [`Stream`] polled by hand, not an `async fn` turned into one: every
/// event of a turn passes through here (two or three for each tool call),
/// and a stream made with `unfold` built a fresh future and moved the
/// whole reader into and out of it for each of them.
pub(super) struct BodyReader {
    /// `None` once reading is over: dropping it drops the connection.
    pub(super) body: Option<reqwest::Body>,
    pub(super) frames: FrameReader,
    pub(super) decoder: Box<dyn StreamDecoder>,
    pub(super) has_end_marker: bool,
    pub(super) protocol: Protocol,
    pub(super) watch: BodyWatch,
    pub(super) frame_buf: Vec<Frame>,
    /// Decoded, not yet handed out.
    pub(super) events: VecDeque<StreamEvent>,
    /// Handed out after `events`, then the stream ends.
    pub(super) error: Option<ProviderError>,
    pub(super) ended: bool,
    pub(super) any_content: bool,
    /// A non-empty finish reason was seen.
    pub(super) finished: bool,
}

impl Stream for BodyReader {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.events.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(error) = this.error.take() {
                return Poll::Ready(Some(Err(error)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let Some(body) = this.body.as_mut() else {
                this.ended = true;
                continue;
            };
            let read = std::task::ready!(this.watch.poll_chunk(body, cx));
            this.absorb(read);
        }
    }
}

impl BodyReader {
    /// Decodes what one read of the body completes. Sets `ended` (and
    /// maybe `error`) when the stream is over.
    fn absorb(&mut self, read: Result<Option<Bytes>, ProviderError>) {
        let mut frames = std::mem::take(&mut self.frame_buf);
        let oversized = self.frames.oversized_frames();
        let body_ended = match read {
            Ok(Some(bytes)) => {
                self.frames.feed(&bytes, &mut frames);
                false
            }
            Ok(None) => {
                self.frames.finish(&mut frames);
                true
            }
            Err(error) => {
                self.stop(Some(error));
                return;
            }
        };
        // A frame too big to keep was dropped: what follows it would read
        // as if it had never been (a tool call whose whole input it held
        // would close as `{}`, runnable). The answer cannot be whole.
        if self.frames.oversized_frames() > oversized {
            frames.clear();
            self.frame_buf = frames;
            self.stop(Some(ProviderError::Codec(CodecError::MalformedResponse {
                protocol: self.protocol.as_str(),
                detail: format!(
                    "a streamed frame exceeded the {}-byte bound and was dropped, so the answer \
                     would be incomplete",
                    self.frames.max_frame_bytes()
                ),
            })));
            return;
        }
        let mut wire_done = false;
        let mut out = Vec::new();
        for frame in frames.drain(..) {
            match self.decoder.decode(&frame, &mut out) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Done) => {
                    wire_done = true;
                    break;
                }
                Err(error) => {
                    self.take_events(out);
                    self.stop(Some(error.into()));
                    return;
                }
            }
        }
        frames.clear();
        self.frame_buf = frames;
        self.take_events(out);
        if wire_done {
            let error = (!self.any_content).then(|| ProviderError::Cut {
                detail: "the stream ended before any content".into(),
            });
            self.stop(error);
        } else if body_ended {
            let error = if !self.any_content {
                Some(ProviderError::Cut {
                    detail: "the body ended before any content".into(),
                })
            } else if self.has_end_marker {
                Some(ProviderError::Cut {
                    detail: format!(
                        "the body ended before the {} end marker",
                        self.protocol.as_str()
                    ),
                })
            } else if !self.finished {
                Some(ProviderError::Cut {
                    detail: "the body ended without a finish reason".into(),
                })
            } else {
                None
            };
            self.stop(error);
        }
    }

    fn take_events(&mut self, events: Vec<StreamEvent>) {
        for event in events {
            self.any_content = true;
            if let StreamEvent::Finish { reason } = &event
                && FinishReason::parse(reason).is_some()
            {
                self.finished = true;
            }
            self.events.push_back(event);
        }
    }

    /// Ends reading: drops the connection, and queues `error` after the
    /// events already decoded.
    fn stop(&mut self, error: Option<ProviderError>) {
        self.body = None;
        self.ended = true;
        tracing::debug!(
            protocol = self.protocol.as_str(),
            skipped_frames = self.decoder.skipped_frames(),
            oversized_frames = self.frames.oversized_frames(),
            error = error.as_ref().map(tracing::field::display),
            "model stream ended"
        );
        self.error = error;
    }
}

/// Watches the reading of one body: the idle timeout between its pieces
/// and the cancel token.
///
/// One timer and one cancellation waiter serve the whole body. A fresh
/// timer and waiter for every network read put the timer wheel's insert
/// and removal and the token's waiter list in every read, a few hundred
/// instructions each time, and a streamed tool call takes about three
/// reads. The timer moves lazily instead: a piece only notes when it came,
/// and when the timer fires it is set again to the real deadline (the
/// last piece plus the timeout) unless that has passed.
pub(super) struct BodyWatch {
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
    timer: Pin<Box<tokio::time::Sleep>>,
    idle: Duration,
    last_piece: tokio::time::Instant,
    /// The whole body's time (see [`ProviderError::RequestTimeout`]), and
    /// when it runs out: the same timer waits for the nearer of the two.
    total: Duration,
    ends_at: tokio::time::Instant,
}

impl BodyWatch {
    pub(super) fn new(cancel: CancellationToken, idle: Duration, total: Duration) -> BodyWatch {
        let now = tokio::time::Instant::now();
        let ends_at = deadline(now, total);
        BodyWatch {
            cancelled: Box::pin(cancel.cancelled_owned()),
            timer: Box::pin(tokio::time::sleep_until(deadline(now, idle).min(ends_at))),
            idle,
            last_piece: now,
            total,
            ends_at,
        }
    }

    /// The next piece of `body` (`None` at its end), or the error that
    /// stops reading it: cancelled, silent for the idle timeout since the
    /// last piece, or broken.
    pub(super) async fn next_chunk(
        &mut self,
        body: &mut reqwest::Body,
    ) -> Result<Option<Bytes>, ProviderError> {
        std::future::poll_fn(|cx| self.poll_chunk(body, cx)).await
    }

    /// [`BodyWatch::next_chunk`], polled: the cancel token first, then
    /// the body, then the timer.
    pub(super) fn poll_chunk(
        &mut self,
        body: &mut reqwest::Body,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, ProviderError>> {
        if self.cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(ProviderError::Cancelled));
        }
        loop {
            let read = match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => Ok(None),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(bytes) => Ok(Some(bytes)),
                    // Trailers: not a piece of the body (as reqwest's
                    // own `chunk` treats them).
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(err))) => Err(ProviderError::Cut {
                    detail: format!(
                        "the connection broke mid-body: {}",
                        describe_request_error(err)
                    ),
                }),
            };
            self.last_piece = tokio::time::Instant::now();
            return Poll::Ready(read);
        }
        loop {
            std::task::ready!(self.timer.as_mut().poll(cx));
            let now = tokio::time::Instant::now();
            if now >= self.ends_at {
                return Poll::Ready(Err(ProviderError::RequestTimeout { after: self.total }));
            }
            let due = deadline(self.last_piece, self.idle);
            if now >= due {
                return Poll::Ready(Err(ProviderError::IdleTimeout { after: self.idle }));
            }
            // A piece came since the timer was set.
            self.timer.as_mut().reset(due.min(self.ends_at));
        }
    }
}

/// `idle` after `from`; a timeout too long to add is one that never comes
/// (as `tokio::time::timeout` treats it).
fn deadline(from: tokio::time::Instant, idle: Duration) -> tokio::time::Instant {
    const NEVER: Duration = Duration::from_secs(86_400 * 365 * 30);
    from.checked_add(idle).unwrap_or_else(|| from + NEVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout too long to add to the clock (a config's "never") waits
    /// as long as the clock allows instead of panicking.
    #[test]
    fn a_timeout_too_long_to_add_is_far_away() {
        let now = tokio::time::Instant::now();
        let far = deadline(now, Duration::MAX);
        // As far as tokio's own "never": thirty years.
        assert_eq!(far - now, Duration::from_secs(30 * 365 * 86_400));
        assert_eq!(
            deadline(now, Duration::from_millis(5)),
            now + Duration::from_millis(5)
        );
    }
}
