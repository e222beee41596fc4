//! Tests of the free lists: best fit and ordering per stream, size classes, and a property
//! test that every query answers as an ordered set would.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

fn key(stream: u64, size: usize, addr: u64) -> FreeKey {
    FreeKey {
        stream: StreamId::from_raw(stream),
        size,
        addr,
        id: BlockId::from_index(addr as usize),
    }
}

#[test]
fn best_fit_prefers_smallest_then_lowest_address_on_the_same_stream() {
    let mut list = FreeList::default();
    list.insert(key(0, 4096, 300));
    list.insert(key(0, 2048, 200));
    list.insert(key(0, 2048, 100));
    list.insert(key(1, 1024, 400));
    assert_eq!(
        list.best_fit(StreamId::from_raw(0), 1024),
        Some(key(0, 2048, 100))
    );
    assert_eq!(
        list.best_fit(StreamId::from_raw(0), 3000),
        Some(key(0, 4096, 300))
    );
    assert_eq!(
        list.best_fit(StreamId::from_raw(0), 8192),
        None,
        "never a block of stream 1"
    );
    assert_eq!(
        list.best_fit(StreamId::from_raw(1), 512),
        Some(key(1, 1024, 400))
    );
    assert_eq!(list.best_fit(StreamId::from_raw(2), 512), None);
    assert_eq!(list.len(), 4);
}

#[test]
fn largest_below_stays_on_the_stream() {
    let mut list = FreeList::default();
    list.insert(key(0, 4096, 300));
    list.insert(key(1, 1024, 400));
    assert_eq!(
        list.largest_below(StreamId::from_raw(1), 8192),
        Some(key(1, 1024, 400))
    );
    assert_eq!(list.largest_below(StreamId::from_raw(0), 4096), None);
    assert_eq!(
        list.largest_below(StreamId::from_raw(0), 4097),
        Some(key(0, 4096, 300))
    );
}

#[test]
fn iteration_follows_stream_size_address_order_and_removal_counts() {
    let mut list = FreeList::default();
    list.insert(key(2, 512, 10));
    list.insert(key(0, 40 << 20, 30));
    list.insert(key(0, 1024, 20));
    let order: Vec<FreeKey> = list.iter().collect();
    assert_eq!(
        order,
        [key(0, 1024, 20), key(0, 40 << 20, 30), key(2, 512, 10)]
    );
    assert!(list.remove(&key(0, 1024, 20)));
    assert!(
        !list.remove(&key(0, 1024, 20)),
        "a second removal finds nothing"
    );
    assert!(
        !list.remove(&key(5, 1024, 20)),
        "an unknown stream finds nothing"
    );
    assert_eq!(list.len(), 2);
    assert!(list.contains(&key(2, 512, 10)));
    assert!(!list.contains(&key(0, 1024, 20)));
}

/// Lists with nothing cached, counted from the lists themselves.
fn empty_lists(list: &FreeList) -> usize {
    list.streams.iter().filter(|(_, l)| l.len == 0).count()
}

#[test]
fn lists_of_idle_streams_are_dropped_past_a_bound() {
    let mut list = FreeList::default();
    for stream in 0..200u64 {
        list.insert(key(stream, 512, stream));
        assert!(list.remove(&key(stream, 512, stream)));
        assert_eq!(list.idle, empty_lists(&list), "after stream {stream}");
    }
    assert_eq!(
        list.streams.len(),
        MAX_IDLE_STREAM_LISTS,
        "the first 8 emptied stay"
    );
    assert_eq!(list.idle, MAX_IDLE_STREAM_LISTS);
    // An idle list in use again is no longer idle; emptied, it is idle again.
    list.insert(key(7, 1024, 1));
    assert_eq!(list.idle, MAX_IDLE_STREAM_LISTS - 1);
    assert_eq!(
        list.best_fit(StreamId::from_raw(7), 512),
        Some(key(7, 1024, 1))
    );
    assert!(list.remove(&key(7, 1024, 1)));
    assert_eq!(list.idle, MAX_IDLE_STREAM_LISTS);
}

#[test]
fn the_state_of_many_streams_is_released_when_their_caches_empty() {
    // 10,000 streams with a block cached each, as a program that makes a stream per call
    // leaves them; then every block is taken (or released by empty_cache).
    let mut list = FreeList::default();
    for stream in 0..10_000u64 {
        list.insert(key(stream, 4096, stream));
    }
    assert_eq!(list.streams.len(), 10_000);
    assert_eq!(
        list.best_fit(StreamId::from_raw(9_999), 4096),
        Some(key(9_999, 4096, 9_999))
    );
    for stream in 0..10_000u64 {
        assert!(list.remove(&key(stream, 4096, stream)));
    }
    assert_eq!(list.len(), 0);
    assert_eq!(list.streams.len(), MAX_IDLE_STREAM_LISTS);
    assert_eq!(list.idle, empty_lists(&list));
    assert_eq!(
        list.spare.len(),
        MAX_IDLE_STREAM_LISTS,
        "as many spares kept, the rest dropped"
    );
}

#[test]
fn a_new_stream_takes_a_spare_list_emptied_by_another() {
    let mut list = FreeList::default();
    for stream in 0..=MAX_IDLE_STREAM_LISTS as u64 {
        list.insert(key(stream, 12 << 20, stream));
        assert!(list.remove(&key(stream, 12 << 20, stream)));
    }
    assert_eq!(
        list.spare.len(),
        1,
        "the ninth emptied list left as a spare"
    );
    let grown = list.spare[0].classes.len();
    assert!(grown > 0, "it grew its classes for a 12 MiB block");
    list.insert(key(100, 12 << 20, 0));
    assert_eq!(list.spare.len(), 0, "stream 100 took it");
    assert_eq!(
        list.stream(StreamId::from_raw(100))
            .map(|l| l.classes.len()),
        Some(grown)
    );
    assert_eq!(
        list.best_fit(StreamId::from_raw(100), 4096),
        Some(key(100, 12 << 20, 0))
    );
    assert_eq!(list.len(), 1);
    // A spare taken by a stream caching a much smaller block starts over at its class, not
    // with every class between the two sizes.
    assert!(list.remove(&key(100, 12 << 20, 0)));
    for stream in 200..=200 + MAX_IDLE_STREAM_LISTS as u64 {
        list.insert(key(stream, 12 << 20, stream));
        assert!(list.remove(&key(stream, 12 << 20, stream)));
    }
    assert!(!list.spare.is_empty());
    list.insert(key(300, 4096, 0));
    assert_eq!(
        list.stream(StreamId::from_raw(300))
            .map(|l| l.classes.len()),
        Some(1)
    );
    assert_eq!(
        list.best_fit(StreamId::from_raw(300), 512),
        Some(key(300, 4096, 0))
    );
}

#[test]
fn a_stream_holds_the_classes_between_its_blocks_sizes_only() {
    // A stream per call caching one 20 MiB block each: one class per stream, not the 673 up
    // to its size (21 KiB a stream).
    let mut list = FreeList::default();
    for stream in 0..100u64 {
        list.insert(key(stream, 20 << 20, stream << 30));
    }
    let held: Vec<usize> = (0..100)
        .filter_map(|s| list.stream(StreamId::from_raw(s)).map(|l| l.classes.len()))
        .collect();
    assert_eq!(held, vec![1; 100]);
    // A smaller block grows the list down to its class, a larger one up to its own; the order
    // and every lookup are as before.
    let (small, large) = (key(7, 1 << 20, 1), key(7, 64 << 20, 2));
    list.insert(small);
    list.insert(large);
    let seven = list.stream(StreamId::from_raw(7)).expect("stream 7");
    assert_eq!(
        seven.classes.len(),
        class_of(64 << 20) - class_of(1 << 20) + 1
    );
    assert_eq!(list.best_fit(StreamId::from_raw(7), 4096), Some(small));
    assert_eq!(
        list.best_fit(StreamId::from_raw(7), 2 << 20),
        Some(key(7, 20 << 20, 7 << 30))
    );
    assert_eq!(list.best_fit(StreamId::from_raw(7), 30 << 20), Some(large));
    assert_eq!(
        list.largest_below(StreamId::from_raw(7), 20 << 20),
        Some(small)
    );
    assert!(list.contains(&small) && list.contains(&large));
    assert!(
        !list.contains(&key(7, 512, 1)),
        "a class below the list's first"
    );
    assert!(list.remove(&small));
    assert!(!list.remove(&key(7, 512, 1)));
    assert_eq!(
        list.best_fit(StreamId::from_raw(7), 4096),
        Some(key(7, 20 << 20, 7 << 30))
    );
}

#[test]
fn classes_are_monotonic_in_size() {
    let mut previous = 0;
    for units in 1..100_000usize {
        let class = class_of(units * 512);
        assert!(class >= previous, "class of {} units went down", units);
        previous = class;
    }
    assert!(class_of(usize::MAX & !511) < CLASSES);
    assert_eq!(class_of(512), 0);
    assert_eq!(class_of(64 * 512), 63);
    assert_eq!(class_of(65 * 512), 64);
    assert_eq!(class_of(129 * 512), 128);
    assert_eq!(
        class_of(131 * 512),
        129,
        "two units per class above 128 units"
    );
    assert_eq!(
        class_of(2 << 20),
        class_of((2 << 20) - 4096),
        "a power of two tops its class"
    );
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, usize, u64),
    Remove(usize),
    BestFit(u64, usize),
    LargestBelow(u64, usize),
    Replace(usize, usize, u64),
    NextAfter(usize),
    Before(usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..200, 1usize..5000, 60_000usize..70_000, Just(40_960)]
        .prop_map(|units| units * 512)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3, size(), 0u64..1_000).prop_map(|(s, z, a)| Op::Insert(s, z, a * 4096)),
        2 => any::<usize>().prop_map(Op::Remove),
        3 => (0u64..3, size()).prop_map(|(s, z)| Op::BestFit(s, z)),
        1 => (0u64..3, size()).prop_map(|(s, z)| Op::LargestBelow(s, z)),
        2 => (any::<usize>(), size(), 0u64..1_000).prop_map(|(i, z, a)| Op::Replace(i, z, a * 4096)),
        1 => any::<usize>().prop_map(Op::NextAfter),
        1 => any::<usize>().prop_map(Op::Before),
    ]
}

proptest! {
    /// The segregated index answers exactly as an ordered set of (stream, size, address)
    /// does, including classes that grow long enough to become B-trees.
    #[test]
    fn answers_like_an_ordered_set(ops in proptest::collection::vec(op(), 1..400)) {
        let mut list = FreeList::default();
        let mut reference: BTreeSet<FreeKey> = BTreeSet::new();
        for op in ops {
            match op {
                Op::Insert(s, z, a) => {
                    if reference.iter().any(|k| k.stream.raw() == s && k.addr == a) {
                        continue;
                    }
                    let k = FreeKey { stream: StreamId::from_raw(s), size: z, addr: a, id: BlockId::from_index(reference.len()) };
                    reference.insert(k);
                    list.insert(k);
                }
                Op::Remove(i) => {
                    if reference.is_empty() { continue; }
                    let k = *reference.iter().nth(i % reference.len()).unwrap();
                    reference.remove(&k);
                    prop_assert!(list.remove(&k));
                }
                Op::BestFit(s, z) => {
                    let want = reference.iter().find(|k| k.stream.raw() == s && k.size >= z).copied();
                    prop_assert_eq!(list.best_fit(StreamId::from_raw(s), z), want);
                }
                Op::Replace(i, z, a) => {
                    if reference.is_empty() { continue; }
                    let old = *reference.iter().nth(i % reference.len()).unwrap();
                    if reference.iter().any(|k| k.stream == old.stream && k.addr == a && k.addr != old.addr) {
                        continue;
                    }
                    let new = FreeKey { size: z, addr: a, ..old };
                    reference.remove(&old);
                    reference.insert(new);
                    prop_assert!(list.replace(&old, new));
                }
                Op::NextAfter(i) => {
                    if reference.is_empty() { continue; }
                    let k = *reference.iter().nth(i % reference.len()).unwrap();
                    let want = reference.range(k..).nth(1).filter(|n| n.stream == k.stream).copied();
                    prop_assert_eq!(list.next_after(&k).map(|n| (n.size, n.addr)), want.map(|n| (n.size, n.addr)));
                }
                Op::Before(i) => {
                    if reference.is_empty() { continue; }
                    let k = *reference.iter().nth(i % reference.len()).unwrap();
                    let want = reference.range(..k).next_back().filter(|p| p.stream == k.stream).copied();
                    prop_assert_eq!(list.before(&k).map(|p| (p.size, p.addr)), want.map(|p| (p.size, p.addr)));
                }
                Op::LargestBelow(s, z) => {
                    let want = reference.iter().rev().find(|k| k.stream.raw() == s && k.size < z).copied();
                    prop_assert_eq!(list.largest_below(StreamId::from_raw(s), z), want);
                }
            }
            prop_assert_eq!(list.len(), reference.len());
        }
        let all: Vec<FreeKey> = list.iter().collect();
        let want: Vec<FreeKey> = reference.iter().copied().collect();
        prop_assert_eq!(all, want);
    }
}
