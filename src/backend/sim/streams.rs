//! The streams of one simulated device: the events recorded on each, how far each has run,
//! and the waits between them (`stream_wait_event`).
//!
//! A stream's work is counted in events: the `n`-th event recorded on a stream has ticket `n`,
//! and work queued between events `p` and `p + 1` sits at *position* `p`. A stream completes
//! its events in order, when a test advances it (or something synchronizes on it). A wait
//! makes the work queued after it depend on another stream's event, as `cuStreamWaitEvent`
//! does: the waiting stream cannot complete an event recorded after the wait before the
//! awaited event has completed, and synchronizing on it runs the awaited stream first.

use std::collections::{HashMap, VecDeque};

use crate::backend::StreamId;

/// Every stream of one device that has been named, by id.
#[derive(Default)]
pub(super) struct Streams {
    streams: HashMap<StreamId, Stream>,
}

#[derive(Default)]
struct Stream {
    /// Events recorded so far: the last one's ticket.
    recorded: u64,
    /// Ticket of the last completed event; every event up to it has completed.
    completed: u64,
    hung: bool,
    /// Waits whose event has not been seen complete yet, oldest first.
    waits: VecDeque<Wait>,
}

/// Work queued on a stream after its event `after` waits for event `ticket` of `on`.
#[derive(Clone, Copy, Debug)]
struct Wait {
    after: u64,
    on: StreamId,
    ticket: u64,
}

impl Streams {
    /// Makes `stream` hang: its pending events never complete until [`Streams::unhang_all`].
    pub(super) fn hang(&mut self, stream: StreamId) {
        self.streams.entry(stream).or_default().hung = true;
    }

    pub(super) fn unhang_all(&mut self) {
        for stream in self.streams.values_mut() {
            stream.hung = false;
        }
    }

    /// Records an event on `stream` and returns its ticket.
    pub(super) fn record(&mut self, stream: StreamId) -> u64 {
        let state = self.streams.entry(stream).or_default();
        state.recorded = state.recorded.saturating_add(1);
        state.recorded
    }

    /// Events recorded on `stream` so far: the position of work queued on it now.
    pub(super) fn position(&self, stream: StreamId) -> u64 {
        self.streams.get(&stream).map_or(0, |s| s.recorded)
    }

    /// Whether event `ticket` of `stream` has completed.
    pub(super) fn is_complete(&self, stream: StreamId, ticket: u64) -> bool {
        self.streams
            .get(&stream)
            .is_some_and(|s| s.completed >= ticket)
    }

    /// Makes the work queued on `stream` from now on wait for event `ticket` of `on`. A wait on
    /// the stream's own event, or on one that has completed, changes nothing.
    pub(super) fn wait(&mut self, stream: StreamId, on: StreamId, ticket: u64) {
        if stream == on || self.is_complete(on, ticket) {
            return;
        }
        let state = self.streams.entry(stream).or_default();
        let after = state.recorded;
        state.waits.push_back(Wait { after, on, ticket });
    }

    /// The last ticket `stream` may complete now: all of them up to its first wait whose event
    /// has not completed (waits seen complete are dropped).
    fn limit(&mut self, stream: StreamId) -> u64 {
        loop {
            let Some(wait) = self.streams.get(&stream).and_then(|s| s.waits.front()) else {
                return u64::MAX;
            };
            let wait = *wait;
            if !self.is_complete(wait.on, wait.ticket) {
                return wait.after;
            }
            if let Some(state) = self.streams.get_mut(&stream) {
                state.waits.pop_front();
            }
        }
    }

    /// Completes up to `n` pending events of `stream` that its waits allow, unless it hangs;
    /// returns how many completed.
    pub(super) fn advance(&mut self, stream: StreamId, n: u64) -> u64 {
        let limit = self.limit(stream);
        let Some(state) = self.streams.get_mut(&stream) else {
            return 0;
        };
        if state.hung {
            return 0;
        }
        let target = state
            .completed
            .saturating_add(n)
            .min(state.recorded)
            .min(limit);
        let done = target.saturating_sub(state.completed);
        state.completed = state.completed.max(target);
        done
    }

    /// Completes every pending event that can complete, on every stream that does not hang
    /// (running again while completing one stream lets a stream waiting on it go on); returns
    /// how many completed.
    pub(super) fn complete_all(&mut self) -> u64 {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        let mut total: u64 = 0;
        loop {
            let done = ids.iter().fold(0u64, |done, &s| {
                done.saturating_add(self.advance(s, u64::MAX))
            });
            if done == 0 {
                return total;
            }
            total = total.saturating_add(done);
        }
    }

    /// Runs `stream` up to `ticket`, and first every stream it waits on up to the awaited
    /// event. Fails with the stream that cannot get there (it hangs, or never recorded the
    /// event asked for).
    pub(super) fn synchronize(&mut self, stream: StreamId, ticket: u64) -> Result<(), StreamId> {
        // Each entry's waits point to events recorded before it, so this ends.
        let mut todo = vec![(stream, ticket)];
        while let Some(&(stream, ticket)) = todo.last() {
            let limit = self.limit(stream);
            let Some(state) = self.streams.get_mut(&stream) else {
                return Err(stream);
            };
            if state.completed >= ticket {
                todo.pop();
            } else if state.hung || ticket > state.recorded {
                return Err(stream);
            } else if limit < ticket {
                // Blocked by the first wait still open: run what it waits for first.
                let Some(wait) = state.waits.front() else {
                    return Err(stream);
                };
                todo.push((wait.on, wait.ticket));
            } else {
                state.completed = ticket;
                todo.pop();
            }
        }
        Ok(())
    }

    /// Whether the work queued on `from` at `position` (after its event `position`, before
    /// the next) has completed, or is ordered before all work queued on `to` from now on:
    /// it is `to`'s own earlier work, or a chain of waits leads from `to` back to an event of
    /// `from` recorded after it.
    pub(super) fn is_ordered(&self, from: StreamId, position: u64, to: StreamId) -> bool {
        if from == to || self.is_complete(from, position.saturating_add(1)) {
            return true;
        }
        // Depth-first over the waits: (stream, events of it that are before `to`'s new work).
        let mut reached: HashMap<StreamId, u64> = HashMap::new();
        let mut todo = vec![(to, u64::MAX)];
        while let Some((stream, before)) = todo.pop() {
            if stream == from && before > position {
                return true;
            }
            let Some(state) = self.streams.get(&stream) else {
                continue;
            };
            for wait in state.waits.iter().filter(|w| w.after < before) {
                let best = reached.entry(wait.on).or_insert(0);
                if wait.ticket > *best {
                    *best = wait.ticket;
                    todo.push((wait.on, wait.ticket));
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: StreamId = StreamId::from_raw(1);
    const B: StreamId = StreamId::from_raw(2);
    const C: StreamId = StreamId::from_raw(3);

    #[test]
    fn a_stream_cannot_complete_past_a_wait_before_the_event_it_waits_for() {
        let mut s = Streams::default();
        let on_a = s.record(A);
        s.record(B); // before the wait: free to complete
        s.wait(B, A, on_a);
        s.record(B);
        assert_eq!(
            s.advance(B, 5),
            1,
            "only B's event before the wait completes"
        );
        assert!(!s.is_complete(B, 2));
        assert_eq!(s.advance(A, 1), 1);
        assert_eq!(s.advance(B, 5), 1, "A's event has completed, so B goes on");
        assert!(s.is_complete(B, 2));
    }

    #[test]
    fn synchronizing_on_a_waiting_stream_runs_what_it_waits_for_first() {
        let mut s = Streams::default();
        let on_c = s.record(C);
        s.wait(A, C, on_c);
        let on_a = s.record(A);
        s.wait(B, A, on_a);
        let on_b = s.record(B);
        assert_eq!(s.synchronize(B, on_b), Ok(()));
        assert!(s.is_complete(C, on_c) && s.is_complete(A, on_a) && s.is_complete(B, on_b));
    }

    #[test]
    fn a_hung_stream_holds_back_the_streams_that_wait_on_it() {
        let mut s = Streams::default();
        let on_a = s.record(A);
        s.hang(A);
        s.wait(B, A, on_a);
        let on_b = s.record(B);
        assert_eq!(s.synchronize(B, on_b), Err(A));
        assert_eq!(s.complete_all(), 0);
        s.unhang_all();
        assert_eq!(s.complete_all(), 2, "A's event, then B's behind it");
    }

    #[test]
    fn order_follows_chains_of_waits_and_nothing_else() {
        let mut s = Streams::default();
        s.record(A); // work on A at position 1 comes after this event
        let position = s.position(A);
        assert!(!s.is_ordered(A, position, B), "B never waited on A");
        let on_a = s.record(A);
        s.wait(C, A, on_a);
        assert!(s.is_ordered(A, position, C));
        assert!(!s.is_ordered(A, position, B), "C's wait does not order B");
        let on_c = s.record(C);
        s.wait(B, C, on_c);
        assert!(
            s.is_ordered(A, position, B),
            "B waits on C, which waited on A"
        );
        let later = s.position(A);
        assert!(
            !s.is_ordered(A, later, B),
            "work on A after the awaited event is not"
        );
        assert!(s.is_ordered(B, 0, B), "a stream's own work is in order");
        s.advance(A, u64::MAX);
        assert!(s.is_ordered(A, later - 1, B) && !s.is_ordered(A, later, B));
    }
}
