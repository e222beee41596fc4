//! Property tests of state rebuilding: random (mostly contradictory) traces never panic and
//! walk consistently; consistent traces from a small forward model, cut as a ring buffer cuts
//! them, rebuild every state exactly.

use super::tests::{block, event, segment, snapshot, A, I, P};
use crate::backend::StreamId;
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{Action, BlockState, ContextId, Snapshot, TraceEvent};
use proptest::prelude::*;

fn arb_action() -> impl Strategy<Value = Action> {
    prop::sample::select(Action::ALL.to_vec())
}

fn arb_event() -> impl Strategy<Value = TraceEvent> {
    (arb_action(), 0u64..16, 0u64..6, 0u64..3, any::<bool>()).prop_map(
        |(action, slot, size, stream, huge)| {
            let addr = if huge { u64::MAX - slot } else { slot * 0x100 };
            TraceEvent {
                action,
                device: 0,
                stream: StreamId::from_raw(stream),
                addr,
                size: size * 0x100,
                requested: size * 0x80,
                time_us: 0,
                context: ContextId::NONE,
            }
        },
    )
}

fn arb_end_state() -> impl Strategy<Value = Vec<Segment>> {
    prop::collection::vec(
        (0u64..4, prop::collection::vec((1u64..4, 0u8..3), 1..4)),
        0..3,
    )
    .prop_map(|segments| {
        segments
            .into_iter()
            .map(|(slot, blocks)| {
                let address = slot * 0x400;
                let mut next = address;
                let blocks: Vec<Block> = blocks
                    .into_iter()
                    .map(|(size, state)| {
                        let state = BlockState::ALL[usize::from(state)];
                        let b = block(next, size * 0x100, size * 0x80, state);
                        next += size * 0x100;
                        b
                    })
                    .collect();
                segment(address, next - address, blocks)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn random_traces_never_panic_and_walk_consistently(
        end in arb_end_state(),
        events in prop::collection::vec(arb_event(), 0..40),
    ) {
        let trace = snapshot(end, events);
        let Ok(mut walker) = trace.state_walker(0) else { return Ok(()) };
        let start = walker.state();
        let ahead: Vec<_> = walker.totals_ahead().collect();
        prop_assert_eq!(ahead.len(), walker.len());
        let blocks: Vec<_> = walker.blocks_ahead().collect();
        let totals: Vec<_> = blocks.iter().map(|(totals, _)| *totals).collect();
        prop_assert_eq!(&totals, &ahead, "blocks ahead carry the same totals");
        for index in 0..=walker.len() {
            if index > 0 {
                prop_assert_eq!(walker.totals(), ahead[index - 1], "totals ahead, {}", index);
            }
            prop_assert_eq!(walker.position(), index);
            let state = walker.state();
            prop_assert_eq!(walker.totals(), state.totals(), "totals at {}", index);
            let tiled = Snapshot { segments: state.segments.clone(), ..Snapshot::default() };
            prop_assert_eq!(tiled.validate(), Ok(()), "tiling at {}", index);
            let Some(&(_, size)) = blocks.get(index) else { break };
            // The size given is that of the block the event changed: there before it, or
            // after it.
            let addr = walker.events()[index].addr;
            let before = walker.active_block(addr).map(|b| b.size);
            walker.step();
            let after = walker.active_block(addr).map(|b| b.size);
            if let Some(size) = size {
                prop_assert!(before == Some(size) || after == Some(size), "block size at {}", index);
            }
        }
        walker.seek(0).unwrap();
        prop_assert_eq!(walker.state(), start, "walking back returns to the start");
    }
}

/// A tiny forward model for generating consistent traces: four 0x1000-byte segment slots with
/// eight 0x200-byte block slots each.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    segments: std::collections::BTreeSet<u64>,
    blocks: std::collections::BTreeMap<u64, (u64, BlockState)>,
}

impl Model {
    /// Applies `op` when it is valid here, returning the event it records.
    fn apply(&mut self, (kind, slot, sub, len): (u8, u64, u64, u64)) -> Option<TraceEvent> {
        let seg = slot * 0x1000;
        let addr = seg + sub * 0x200;
        let size = len.min(8 - sub) * 0x200;
        let in_segment = |a: &u64| (seg..seg + 0x1000).contains(a);
        match kind {
            0 if !self.segments.contains(&seg) => {
                self.segments.insert(seg);
                Some(event(Action::SegmentAlloc, seg, 0x1000, 0))
            }
            1 if self.segments.contains(&seg) && !self.blocks.keys().any(in_segment) => {
                self.segments.remove(&seg);
                Some(event(Action::SegmentFree, seg, 0x1000, 0))
            }
            2 if self.segments.contains(&seg)
                && !self
                    .blocks
                    .iter()
                    .any(|(&a, &(s, _))| a < addr + size && addr < a + s) =>
            {
                self.blocks.insert(addr, (size, A));
                Some(event(Action::Alloc, addr, size, size - 1))
            }
            3 => {
                let (&a, &(s, _)) = self.blocks.iter().find(|(_, (_, st))| *st == A)?;
                self.blocks.insert(a, (s, P));
                Some(event(Action::FreeRequested, a, s, s - 1))
            }
            4 => {
                let (&a, &(s, _)) = self.blocks.iter().find(|(_, (_, st))| *st == P)?;
                self.blocks.remove(&a);
                Some(event(Action::FreeCompleted, a, s, s - 1))
            }
            5 => Some(event(Action::Oom, u64::MAX, 0x1000, 0)),
            _ => None,
        }
    }

    /// The model as a snapshot's segments, tiled by hand.
    fn end_state(&self) -> Vec<Segment> {
        let mut segments = Vec::new();
        for &address in &self.segments {
            let end = address + 0x1000;
            let mut blocks = Vec::new();
            let mut next = address;
            for (&a, &(s, state)) in self.blocks.range(address..end) {
                if a > next {
                    blocks.push(block(next, a - next, 0, I));
                }
                blocks.push(block(a, s, s - 1, state));
                next = a + s;
            }
            if next < end {
                blocks.push(block(next, end - next, 0, I));
            }
            segments.push(segment(address, 0x1000, blocks));
        }
        segments
    }
}

proptest! {
    #[test]
    fn consistent_traces_rebuild_every_state_exactly_even_truncated(
        ops in prop::collection::vec((0u8..7, 0u64..4, 0u64..8, 1u64..4), 0..80),
        cut in 0usize..80,
    ) {
        let mut model = Model::default();
        let mut states = vec![model.end_state()];
        let mut events = Vec::new();
        for op in ops {
            if let Some(e) = model.apply(op) {
                events.push(e);
                states.push(model.end_state());
            }
        }
        // A ring buffer that kept only the events from `cut` on.
        let cut = cut.min(events.len());
        let trace = snapshot(model.end_state(), events[cut..].to_vec());
        let mut walker = trace.state_walker(0).expect("a consistent trace rebuilds");
        let ahead: Vec<_> = walker.totals_ahead().collect();
        for (index, want) in states[cut..].iter().enumerate() {
            walker.seek(index).unwrap();
            let state = walker.state();
            prop_assert_eq!(&state.segments, want, "state after {} of the kept events", index);
            prop_assert_eq!(walker.totals(), state.totals());
            if index > 0 {
                prop_assert_eq!(walker.totals(), ahead[index - 1], "totals ahead, {}", index);
            }
        }
    }
}

proptest! {
    #[test]
    fn a_walker_taking_its_events_walks_as_one_copying_them(
        end in arb_end_state(),
        events in prop::collection::vec((arb_event(), any::<bool>()), 0..40),
    ) {
        // Every other device's events and segments are there to be left out.
        let mut trace = snapshot(end.clone(), Vec::new());
        for (mut e, other) in events {
            e.device = u32::from(other);
            trace.events.push(e);
        }
        trace.segments.extend(end.into_iter().map(|mut s| {
            s.device = 1;
            s
        }));
        let copied = trace.state_walker(0);
        let taken =
            crate::trace::StateWalker::from_events(0, trace.segments.iter(), trace.events.clone());
        match (copied, taken) {
            (Ok(mut copied), Ok(mut taken)) => {
                prop_assert_eq!(copied.len(), taken.len());
                for index in 0..=copied.len() {
                    copied.seek(index).unwrap();
                    taken.seek(index).unwrap();
                    prop_assert_eq!(copied.state(), taken.state());
                }
            }
            (copied, taken) => {
                prop_assert_eq!(copied.err().map(|e| e.to_string()), taken.err().map(|e| e.to_string()));
            }
        }
    }
}

proptest! {
    #[test]
    fn seeking_in_any_order_gives_the_states_stepping_gives(
        end in arb_end_state(),
        events in prop::collection::vec(arb_event(), 0..40),
        order in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let trace = snapshot(end, events);
        let Ok(mut stepped) = trace.state_walker(0) else { return Ok(()) };
        let mut states = vec![(stepped.state(), stepped.totals())];
        while stepped.step().is_some() {
            states.push((stepped.state(), stepped.totals()));
        }
        let mut sought = trace.state_walker(0).unwrap();
        for index in order.iter().map(|i| i.index(states.len())) {
            sought.seek(index).unwrap();
            prop_assert_eq!(sought.position(), index);
            prop_assert_eq!((sought.state(), sought.totals()), states[index].clone(), "at {}", index);
        }
    }
}
