//! [`EventNumbers`]: the one numbering memtrace names events and states by.
//!
//! An event's number is its index in its device's list as the file has it: for a PyTorch
//! snapshot the index in `device_traces[device]` (0-based, as `_memory_viz` and
//! `snapshot['device_traces'][d][i]` count), for other formats its 0-based index among the
//! device's events. Events the import inserted among the file's entries (PyTorch's
//! `external_annotations`, listed in [`PytorchDetails::inserted_events`]) have no number.
//! A state is named by the last numbered event it follows: "after event N" is the state once
//! event N has happened; an inserted event changes no memory, so the state after it is the
//! state after the numbered event before it.
//!
//! [`PytorchDetails::inserted_events`]: crate::trace::PytorchDetails::inserted_events

use crate::trace::Snapshot;

/// The numbers of one device's events: from a position among the device's events in a
/// [`Snapshot`] (what a [`StateWalker`](crate::trace::StateWalker) counts) to the event's
/// number in the file, and back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventNumbers {
    /// Positions, among the device's events, of the inserted events, in order.
    inserted: Vec<usize>,
    /// How many events the device has.
    len: usize,
}

impl Snapshot {
    /// The numbers of `device`'s events (see [`EventNumbers`]). One pass over the events when
    /// the import inserted any, none otherwise.
    pub fn event_numbers(&self, device: u32) -> EventNumbers {
        let mut inserted_at = self.pytorch.inserted_events.iter().peekable();
        let mut inserted = Vec::new();
        let mut len = 0;
        for (index, event) in self.events.iter().enumerate() {
            let is_inserted = inserted_at.next_if_eq(&&index).is_some();
            if event.device == device {
                if is_inserted {
                    inserted.push(len);
                }
                len += 1;
            }
        }
        EventNumbers { inserted, len }
    }
}

impl EventNumbers {
    /// The number of the event at `position` among the device's events; `None` for an event
    /// the import inserted (or a position past the end).
    ///
    /// ```
    /// use blockpool::trace::EventNumbers;
    ///
    /// let numbers = EventNumbers::new(4, vec![1]);
    /// assert_eq!(numbers.number(0), Some(0));
    /// assert_eq!(numbers.number(1), None);
    /// assert_eq!(numbers.number(2), Some(1));
    /// assert_eq!(numbers.position(1), Some(2));
    /// assert_eq!(numbers.state(2), Some(0), "after the inserted event is after event 0");
    /// assert_eq!(numbers.state(0), None, "before the first event");
    /// ```
    pub fn number(&self, position: usize) -> Option<usize> {
        if position >= self.len {
            return None;
        }
        match self.inserted.binary_search(&position) {
            Ok(_) => None,
            Err(before) => Some(position - before),
        }
    }

    /// The numbers of `len` events, of which those at the positions `inserted` (ascending)
    /// were inserted on import.
    pub fn new(len: usize, inserted: Vec<usize>) -> EventNumbers {
        debug_assert!(inserted.windows(2).all(|w| w[0] < w[1]));
        EventNumbers { inserted, len }
    }

    /// The position among the device's events of the event numbered `number`; `None` when
    /// the device has no such event.
    pub fn position(&self, number: usize) -> Option<usize> {
        if number >= self.count() {
            return None;
        }
        // The position is number plus the inserted events before it: the smallest p with
        // p - inserted_before(p) == number, found by walking the (few) inserted positions.
        let mut position = number;
        for &at in &self.inserted {
            if at <= position {
                position += 1;
            } else {
                break;
            }
        }
        Some(position)
    }

    /// The state after the first `state` of the device's events (what a walker at `state`
    /// shows), named by the last numbered event among them: `Some(N)` is "after event N",
    /// `None` is before the first numbered event.
    pub fn state(&self, state: usize) -> Option<usize> {
        let last = state.min(self.len).checked_sub(1)?;
        let inserted_upto = self.inserted.partition_point(|&at| at <= last);
        (last + 1 - inserted_upto).checked_sub(1)
    }

    /// The walker position of the state after event `number` (one past the event), `None`
    /// when the device has no such event.
    pub fn state_after(&self, number: usize) -> Option<usize> {
        self.position(number).map(|p| p + 1)
    }

    /// The positions of the events inserted on import, ascending (they have no number).
    pub fn inserted(&self) -> &[usize] {
        &self.inserted
    }

    /// How many events are numbered (the file's own entries).
    pub fn count(&self) -> usize {
        self.len - self.inserted.len()
    }

    /// How many events the device has, inserted ones included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the device has no events.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The event at `position` as people read it: `event 7`, or for an inserted event
    /// `annotation after event 7` (`annotation before event 0` when no numbered event comes
    /// before it).
    pub fn label(&self, position: usize) -> String {
        match self.number(position) {
            Some(number) => format!("event {number}"),
            None => match self.state(position + 1) {
                Some(before) => format!("annotation after event {before}"),
                None => "annotation before event 0".to_string(),
            },
        }
    }

    /// The state after the first `state` events as people read it: `after event 7`, or
    /// `before event 0` for the state before any numbered event.
    pub fn state_label(&self, state: usize) -> String {
        match self.state(state) {
            Some(number) => format!("after event {number}"),
            None => "before event 0".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_skip_inserted_events_both_ways() {
        // Positions 0..6; 0 and 3 inserted: numbers -, 0, 1, -, 2, 3.
        let numbers = EventNumbers::new(6, vec![0, 3]);
        let got: Vec<Option<usize>> = (0..6).map(|p| numbers.number(p)).collect();
        assert_eq!(got, [None, Some(0), Some(1), None, Some(2), Some(3)]);
        let back: Vec<Option<usize>> = (0..5).map(|n| numbers.position(n)).collect();
        assert_eq!(back, [Some(1), Some(2), Some(4), Some(5), None]);
        let states: Vec<Option<usize>> = (0..=6).map(|s| numbers.state(s)).collect();
        assert_eq!(
            states,
            [None, None, Some(0), Some(1), Some(1), Some(2), Some(3)]
        );
        assert_eq!(numbers.label(3), "annotation after event 1");
        assert_eq!(numbers.label(0), "annotation before event 0");
        assert_eq!(numbers.state_label(0), "before event 0");
        assert_eq!(numbers.state_after(2), Some(5));
    }

    #[test]
    fn without_inserted_events_numbers_are_positions() {
        let numbers = EventNumbers::new(3, Vec::new());
        assert_eq!(numbers.number(2), Some(2));
        assert_eq!(numbers.position(2), Some(2));
        assert_eq!(numbers.state(3), Some(2));
        assert_eq!(numbers.number(3), None);
    }
}
