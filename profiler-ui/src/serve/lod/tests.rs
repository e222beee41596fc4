//! Columns, bands, the summarized band and curves on small devices built by hand.

use super::alive::alive_in;
use super::*;
use crate::serve::testing::random;
use blockpool::trace::{Action, Context, ContextId, Snapshot, TraceEvent};
use blockpool::StreamId;
use std::path::Path;

/// A(100) from event 0 until its free completes at 3, B(200) from 1 to 6, C(50) from 4
/// on; A tagged `step0/attn`. Active bytes per state 0..=7: 0, 100, 300, 300, 200, 250,
/// 250, 50 (allocated: 0, 100, 300, 200, 200, 250, 50, 50).
fn model() -> TraceModel {
    let mut snapshot = Snapshot::default();
    let attn = snapshot.contexts.intern(Context {
        tags: vec!["step0".into(), "attn".into()],
        frames: Vec::new(),
    });
    let event = |action, addr, size, time_us, context| TraceEvent {
        action,
        device: 0,
        stream: StreamId::DEFAULT,
        addr,
        size,
        requested: size,
        time_us,
        context,
    };
    snapshot.events = vec![
        event(Action::Alloc, 0x1000, 100, 10, attn),
        event(Action::Alloc, 0x2000, 200, 20, ContextId::NONE),
        event(Action::FreeRequested, 0x1000, 100, 30, attn),
        event(Action::FreeCompleted, 0x1000, 100, 30, attn),
        event(Action::Alloc, 0x3000, 50, 40, ContextId::NONE),
        event(Action::FreeRequested, 0x2000, 200, 50, ContextId::NONE),
        event(Action::FreeCompleted, 0x2000, 200, 50, ContextId::NONE),
    ];
    TraceModel::build(Path::new("t.jsonl"), "jsonl", snapshot).expect("the model builds")
}

fn window(axis: Axis, from: u64, to: u64, width: usize) -> Window {
    Window {
        axis,
        from,
        to,
        width,
    }
}

fn runs(timeline: &Timeline) -> Vec<(usize, Vec<[u64; 3]>)> {
    timeline
        .bands
        .iter()
        .map(|b| (b.id, b.runs.clone()))
        .collect()
}

#[test]
fn one_column_per_state_stacks_every_allocation_oldest_at_the_bottom() {
    let model = model();
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, 8, 8),
        &Filter::default(),
        10,
    );
    assert_eq!(t.states, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(t.total, [0, 100, 300, 300, 200, 250, 250, 50]);
    assert_eq!(t.other, [0; 8], "every allocation is shown on its own");
    assert_eq!(
        runs(&t),
        [
            (0, vec![[1, 4, 0]]),
            (1, vec![[2, 4, 100], [4, 7, 0]]),
            (2, vec![[5, 7, 200], [7, 8, 0]]),
        ],
        "B sits on A until A's free completes, then drops to the floor"
    );
    assert_eq!(t.bands[0].site, "step0/attn");
    assert_eq!(
        (t.bands[2].start, t.bands[2].end),
        (5, 8),
        "C is alive at the end"
    );
}

#[test]
fn past_the_limit_the_rest_is_one_summarized_band() {
    let model = model();
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, 8, 8),
        &Filter::default(),
        1,
    );
    assert_eq!(
        runs(&t),
        [(1, vec![[2, 7, 0]])],
        "only the largest, B, on its own"
    );
    assert_eq!(t.other, [0, 100, 100, 100, 0, 50, 50, 50]);
    assert_eq!(t.matched, 3);
}

#[test]
fn a_column_shows_the_state_where_its_memory_peaks() {
    let model = model();
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, 8, 2),
        &Filter::default(),
        10,
    );
    assert_eq!(t.states, [2, 5], "300 bytes first at 2, 250 first at 5");
    assert_eq!(t.total, [300, 250]);
    let c = curves(device, window(Axis::Event, 0, 8, 2));
    assert_eq!(c.states, [2, 5]);
    assert_eq!(c.allocated, [300, 250]);
    assert_eq!(c.reserved, [0, 0]);
    assert_eq!(
        c.fragmentation,
        [0.0, 0.0],
        "nothing reserved: no fragmentation"
    );
}

#[test]
fn time_columns_without_events_show_the_state_in_effect() {
    let model = model();
    let device = &model.devices[0];
    assert_eq!(device.state_time_us, [10, 10, 20, 30, 30, 40, 50, 50]);
    let cols = columns(device, &window(Axis::Time, 0, 60, 6));
    assert_eq!(cols, [(0, 1), (0, 2), (2, 3), (3, 5), (5, 6), (6, 8)]);
    let t = timeline(
        &model,
        device,
        window(Axis::Time, 0, 60, 6),
        &Filter::default(),
        10,
    );
    assert_eq!(t.states, [0, 1, 2, 3, 5, 6]);
    let late = columns(device, &window(Axis::Time, 1000, 2000, 3));
    assert_eq!(late, [(7, 8); 3], "after the last event: the end state");
}

#[test]
fn a_filter_narrows_the_bands_and_the_total() {
    let model = model();
    let device = &model.devices[0];
    let big = Filter {
        min_size: Some(150),
        ..Filter::default()
    };
    let t = timeline(&model, device, window(Axis::Event, 0, 8, 8), &big, 10);
    assert_eq!(runs(&t), [(1, vec![[2, 7, 0]])]);
    assert_eq!(t.total, [0, 0, 200, 200, 200, 200, 200, 0]);
    let attn = Filter {
        text: Some("attn".into()),
        ..Filter::default()
    };
    let t = timeline(&model, device, window(Axis::Event, 0, 8, 8), &attn, 10);
    assert_eq!(runs(&t), [(0, vec![[1, 4, 0]])]);
    assert_eq!(t.matched, 1);
}

#[test]
fn the_summarized_band_of_a_column_lists_what_is_not_drawn_by_site() {
    let model = model();
    let device = &model.devices[0];
    let w = window(Axis::Event, 0, 8, 8);
    let s = summarized(&model, device, w, &Filter::default(), 1, 2).expect("column 2 exists");
    assert_eq!(
        s,
        Summarized {
            column: 2,
            state: 2,
            allocations: 1,
            bytes: 100,
            sites: vec![SummarizedSite {
                site: "step0/attn".into(),
                bytes: 100,
                allocations: 1,
            }],
            more_sites: 0,
        },
        "B is drawn; A is the grey band at state 2"
    );
    let t = timeline(&model, device, w, &Filter::default(), 1);
    assert_eq!(t.other[2], s.bytes, "the band's height is what it holds");
    assert_eq!(
        summarized(&model, device, w, &Filter::default(), 1, 8),
        None
    );
}

#[test]
fn a_band_is_stacked_only_over_the_columns_it_is_alive_in() {
    // Two columns of four states each: A (100) is alive in the first column's peak state
    // only; B and C keep their heights over A's gap.
    let model = model();
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, 8, 4),
        &Filter::default(),
        10,
    );
    assert_eq!(t.states, [1, 2, 5, 6]);
    assert_eq!(
        runs(&t),
        [
            (0, vec![[0, 2, 0]]),
            (1, vec![[1, 2, 100], [2, 4, 0]]),
            (2, vec![[2, 4, 200]]),
        ]
    );
    assert_eq!(t.limit, 10);
}

#[test]
fn hostile_windows_are_clamped_not_panics() {
    let model = model();
    let device = &model.devices[0];
    for w in [
        window(Axis::Event, u64::MAX - 1, u64::MAX, 4000),
        window(Axis::Event, 3, 4, 4000),
        window(Axis::Time, u64::MAX - 1, u64::MAX, 7),
        window(Axis::Time, 0, u64::MAX, 1),
    ] {
        let t = timeline(&model, device, w, &Filter::default(), 2000);
        assert_eq!(t.states.len(), w.width, "{w:?}: one state per column");
        assert!(t.states.iter().all(|&s| s <= 7), "{w:?}: states exist");
        let c = curves(device, w);
        assert_eq!(c.allocated.len(), w.width);
    }
}

/// A device whose events are `(alloc?, addr, size)` in order, one microsecond apart: an
/// allocation, or the free (requested, then completed) of the block at `addr`.
fn model_of(steps: &[(bool, u64, u64)]) -> TraceModel {
    let mut snapshot = Snapshot::default();
    let mut time_us = 0;
    for &(alloc, addr, size) in steps {
        let actions: &[Action] = if alloc {
            &[Action::Alloc]
        } else {
            &[Action::FreeRequested, Action::FreeCompleted]
        };
        for &action in actions {
            time_us += 1;
            snapshot.events.push(TraceEvent {
                action,
                device: 0,
                stream: StreamId::DEFAULT,
                addr,
                size,
                requested: size,
                time_us,
                context: ContextId::NONE,
            });
        }
    }
    TraceModel::build(Path::new("t.jsonl"), "jsonl", snapshot).expect("the model builds")
}

#[test]
fn an_allocation_no_column_shows_does_not_use_up_the_limit() {
    // One column: its state is the peak, 20 blocks of 100 bytes; a block of 1000 bytes was
    // allocated and freed before it, so no column shows it.
    let mut steps = vec![(true, 0x5000, 1000), (false, 0x5000, 1000)];
    steps.extend((0..20).map(|i| (true, 0x9000 + i * 0x100, 100)));
    let model = model_of(&steps);
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, device.events as u64 + 1, 1),
        &Filter::default(),
        1,
    );
    assert_eq!(t.states, [device.events], "the column shows the peak");
    let sizes: Vec<u64> = t.bands.iter().map(|b| b.size).collect();
    assert_eq!(
        sizes,
        [100],
        "the one band the limit allows is one that draws"
    );
}

#[test]
fn every_stretch_of_the_window_shows_its_own_largest_allocations() {
    const MIB: u64 = 1 << 20;
    // Weights of 1000 MiB and 100 MiB of activations, then both freed and a quiet stretch of
    // 1 MiB buffers: by size alone both bands would come from the first stretch.
    let mut steps = vec![
        (true, 0x1000_0000, 1000 * MIB),
        (true, 0x8000_0000, 100 * MIB),
    ];
    steps.extend((0..20).map(|i| (true, 0x100 + i * 0x10, 16)));
    steps.push((false, 0x8000_0000, 100 * MIB));
    steps.push((false, 0x1000_0000, 1000 * MIB));
    steps.push((true, 0xa000_0000, MIB));
    steps.extend((0..20).map(|i| (false, 0x100 + i * 0x10, 16)));
    let model = model_of(&steps);
    let device = &model.devices[0];
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, device.events as u64 + 1, 16),
        &Filter::default(),
        2,
    );
    let mut sizes: Vec<u64> = t.bands.iter().map(|b| b.size).collect();
    sizes.sort_unstable();
    assert_eq!(
        sizes,
        [MIB, 1000 * MIB],
        "the late stretch's largest (all of its memory) beside the weights (91% of theirs)"
    );
}

#[test]
fn past_the_runs_bound_the_best_ranked_bands_that_fit_are_drawn() {
    // 1000 one-byte blocks, then 120 blocks of 1000 bytes alive to the end, then the small
    // ones freed newest first: every large band's runs break at each free below it (1001
    // runs), and each small one has one run.
    let small = |i: u64| 0x10_0000 + i * 0x10;
    let mut steps: Vec<(bool, u64, u64)> = (0..1000).map(|i| (true, small(i), 1)).collect();
    steps.extend((0..120).map(|i| (true, 0x100_0000 + i * 0x1000, 1000)));
    steps.extend((0..1000).rev().map(|i| (false, small(i), 1)));
    let model = model_of(&steps);
    let device = &model.devices[0];
    let width = device.events + 1;
    let t = timeline(
        &model,
        device,
        window(Axis::Event, 0, width as u64, width),
        &Filter::default(),
        2000,
    );
    // All of them would make 120 * 1001 + 1000 runs, past MAX_RUNS. The large ones rank
    // first (each is 1000 / 121000 of the memory where it lives), then the small ones oldest
    // first; with the oldest m small ones, the small bands have a run each and the large ones
    // m + 1: 121 m + 120 runs, so m = 825 is the most that fit.
    assert_eq!(MAX_RUNS, 100_000);
    assert_eq!(t.limit, 945);
    let mut shapes: Vec<(u64, usize)> = t.bands.iter().map(|b| (b.size, b.runs.len())).collect();
    shapes.dedup();
    assert_eq!(shapes, [(1, 1), (1000, 826)]);
    let ids: Vec<usize> = t.bands.iter().map(|b| b.id).collect();
    let expected: Vec<usize> = (0..825).chain(1000..1120).collect();
    assert_eq!(ids, expected);
    let runs: usize = t.bands.iter().map(|b| b.runs.len()).sum();
    assert_eq!(runs, 99_945);
    // The summarized band holds the rest: at the peak, the other 175 small blocks.
    let peak = t
        .states
        .iter()
        .position(|&s| s == 1120)
        .expect("the peak's column");
    assert_eq!(t.total[peak], 121_000);
    assert_eq!(t.other[peak], 175);
}

/// A lifetime of `size` bytes over states `[start, end)`.
fn lifetime(start: usize, end: usize, size: u64) -> Allocation {
    Allocation {
        addr: 0,
        size,
        requested: 0,
        stream: 0,
        context: ContextId::NONE,
        start,
        end,
    }
}

#[test]
fn counting_runs_agrees_with_stacking_them() {
    // Lifetimes over 0..60 states, sizes that repeat (so bytes below can return to an earlier
    // value), columns that skip states.
    let mut next = random(0x2545_f491_4f6c_dd1d);
    for _ in 0..500 {
        let spans: Vec<Allocation> = (0..next(40) + 1)
            .map(|_| {
                let start = next(60);
                lifetime(start, start + 1 + next(30), [0, 1, 2, 3, 64][next(5)])
            })
            .collect();
        let mut states: Vec<usize> = (0..next(30) + 1).map(|_| next(90)).collect();
        states.sort_unstable();
        let chosen: Vec<usize> = (0..spans.len()).filter(|_| next(3) > 0).collect();
        assert_eq!(
            count_runs(&spans, &chosen, &states),
            stack(&spans, &chosen, &states).runs,
            "{spans:?} {states:?} {chosen:?}"
        );
    }
}

#[test]
fn the_column_finder_finds_the_columns_binary_search_does() {
    // Lifetimes mostly in order of their start, now and then one out of order; states spread
    // or bunched (many columns on a few states, as on a time axis with gaps), far from 0.
    let mut next = random(0x9e37_79b9_7f4a_7c15);
    for _ in 0..500 {
        let (spread, offset) = (1 + next(100), next(3) * 1_000_000);
        let mut states: Vec<usize> = (0..next(40)).map(|_| offset + next(spread)).collect();
        states.sort_unstable();
        let finder = ColumnFinder::new(&states);
        let mut start = 0;
        for _ in 0..next(30) {
            start = if next(5) == 0 {
                offset.saturating_sub(5) + next(spread + 10)
            } else {
                start + next(8)
            };
            let a = lifetime(start, start + 1 + next(50), 1);
            let exact = (
                states.partition_point(|&s| s < a.start),
                states.partition_point(|&s| s < a.end),
            );
            assert_eq!(finder.of(&a), exact, "{states:?} {a:?}");
        }
    }
}

#[test]
fn the_bytes_made_once_per_device_are_what_each_window_sums() {
    // Random allocations and frees, windows of every shape: the layout from the device's
    // bytes alive per state equals the one summed over the window's lifetimes.
    let mut next = random(0x1234_5678_9abc_def1);
    for _ in 0..40 {
        let mut live: Vec<u64> = Vec::new();
        let mut steps = Vec::new();
        for _ in 0..next(60) + 1 {
            if live.is_empty() || next(3) > 0 {
                let addr = 0x1000 * (steps.len() as u64 + 1);
                live.push(addr);
                steps.push((true, addr, [512, 1024, 4096][next(3)] as u64));
            } else {
                let addr = live.swap_remove(next(live.len()));
                steps.push((false, addr, 512));
            }
        }
        let model = model_of(&steps);
        let device = &model.devices[0];
        let states = device.state_time_us.len() as u64;
        for _ in 0..10 {
            let from = next(states as usize) as u64;
            let to = from + 1 + next(states as usize) as u64;
            let w = window(Axis::Event, from, to, next(20) + 1);
            for (spans, made) in [
                (&device.allocations, &device.allocation_bytes),
                (&device.segments, &device.segment_bytes),
            ] {
                let once = Layout::new(device, spans, w, |_| true, Some(made));
                let summed = Layout::new(device, spans, w, |_| true, None);
                assert_eq!((once.first, once.last), (summed.first, summed.last));
                assert_eq!(once.states, summed.states, "{w:?}");
                assert_eq!(once.total, summed.total, "{w:?}");
                assert_eq!(once.candidates, summed.candidates);
            }
        }
    }
}

#[test]
fn work_split_in_halves_is_the_work_done_whole() {
    let items: Vec<usize> = (0..1000).map(|i| i * 7 % 13).collect();
    let work = |offset: usize, part: &[usize]| -> Vec<(usize, usize)> {
        (part.iter().enumerate())
            .filter(|(_, &v)| v % 3 == 0)
            .map(|(i, &v)| (offset + i, v))
            .collect()
    };
    for len in [0, 1, 2, 3, 500, 999, 1000] {
        let whole = work(0, &items[..len]);
        for split in [false, true] {
            assert_eq!(
                in_halves_if(split, &items[..len], work),
                whole,
                "{len} {split}"
            );
        }
    }
    assert!(in_halves_if(true, &items[..0], work).is_empty());
}

#[test]
fn a_window_of_many_lifetimes_lays_out_as_one_of_few() {
    // More allocations and states than a request works through in one piece.
    let steps: Vec<(bool, u64, u64)> = (0..HALVES_FROM as u64 + 5000)
        .flat_map(|i| {
            let addr = 0x1000 * (i + 1);
            let size = 512 * (1 + i % 7);
            // Every third allocation lives on; the others are freed right away.
            let free = (i % 3 != 0).then_some((false, addr, size));
            std::iter::once((true, addr, size)).chain(free)
        })
        .collect();
    let model = model_of(&steps);
    let device = &model.devices[0];
    let spans = &device.allocations;
    assert!(spans.len() > HALVES_FROM);
    let states = device.state_time_us.len() as u64;
    for (w, min) in [
        (window(Axis::Event, 0, states, 1400), 0),
        (window(Axis::Event, states / 3, states / 2, 333), 1024),
    ] {
        let layout = Layout::new(device, spans, w, |a| a.size >= min, None);
        let (first, last) = (layout.first, layout.last);
        let expected: Vec<usize> = (0..spans.len())
            .filter(|&id| spans[id].start < last && spans[id].end > first && spans[id].size >= min)
            .collect();
        assert_eq!(layout.candidates, expected);
        let mut alive = Vec::new();
        alive_in(
            expected.iter().map(|&id| &spans[id]),
            first,
            last,
            &mut alive,
        );
        let cols = columns(device, &w);
        let peaks: Vec<usize> = cols
            .iter()
            .map(|&(lo, hi)| first + peak_in(&alive, lo - first, hi - first))
            .collect();
        assert_eq!(layout.states, peaks);
        // The ranking, the best 300 kept in heaps, equals a sort of every visible candidate.
        let mut all: Vec<(u64, usize, u64)> = Vec::new();
        for &id in &layout.candidates {
            let a = &spans[id];
            let cols = layout.states.iter().zip(&layout.total);
            let alive = cols
                .filter(|(&s, _)| a.start <= s && s < a.end)
                .map(|(_, &t)| t);
            if let Some(most) = alive.max() {
                all.push((a.size, id, most.max(a.size).max(1)));
            }
        }
        all.sort_by(|x, y| {
            let left = u128::from(y.0) * u128::from(x.2);
            let right = u128::from(x.0) * u128::from(y.2);
            left.cmp(&right).then(y.0.cmp(&x.0)).then(x.1.cmp(&y.1))
        });
        let best: Vec<usize> = all.iter().take(300).map(|x| x.1).collect();
        assert_eq!(layout.ranked(spans, 300), best);
        let timeline = layout.timeline(&model, spans, 300).0;
        assert_eq!(timeline.bands.len(), 300);
    }
}

#[test]
fn the_model_keeps_the_curves_and_the_first_peak_the_series_gives() {
    use crate::analysis::timeline::{allocated_peak, memory_series};
    // Two equal peaks (the first is the one), a dip between, and a block freed twice over.
    let model = model_of(&[
        (true, 0, 100),
        (true, 100, 50),
        (false, 100, 50),
        (true, 200, 50),
        (false, 0, 100),
        (true, 300, 100),
    ]);
    let device = &model.devices[0];
    let series = memory_series(&model.snapshot, 0).expect("the series walks");
    let column = |f: fn(&crate::analysis::timeline::Sample) -> u64| -> Vec<u64> {
        series.iter().map(f).collect()
    };
    assert_eq!(device.curves.allocated[..], column(|s| s.allocated)[..]);
    assert_eq!(device.curves.reserved[..], column(|s| s.reserved)[..]);
    assert_eq!(device.curves.requested[..], column(|s| s.requested)[..]);
    assert_eq!(device.curves.active[..], column(|s| s.active)[..]);
    assert_eq!(device.peak_index, allocated_peak(&series).index);
    assert_eq!(
        device.peak_index, 2,
        "150 bytes first after the second alloc"
    );
}
