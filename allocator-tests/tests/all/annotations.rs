//! Annotation tags under history recording cost what the tag costs, not the stack's depth
//! times its tags' sizes, and a dump writes each tag stack once: tags are cut to
//! `MAX_TAG_BYTES`, contexts keep the outermost `MAX_TAG_DEPTH`, and the PyTorch pickle
//! shares every tag stack between the entries that have it.

use blockpool::event::{MAX_TAG_BYTES, MAX_TAG_DEPTH};
use blockpool::trace::pytorch::write_pytorch_snapshot;
use blockpool::trace::Action;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};

const MIB: usize = 1 << 20;

/// Two 1 MiB tags pushed alternately 2,000 deep (the stack the issue measured at 17 s and a
/// 1.05 GB pickle), an allocation at every level: the dump stays small, and every context's
/// tags are bounded in number and size.
#[test]
fn deep_stacks_of_huge_tags_are_bounded_and_dumped_once() {
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .unwrap();
    let (a, b) = ("a".repeat(MIB), "b".repeat(MIB));
    let mut guards = Vec::new();
    let mut held = Vec::new();
    for i in 0..2_000 {
        guards.push(annotate(if i % 2 == 0 { &a } else { &b }));
        held.push(alloc.allocate(0, 512, StreamId::DEFAULT).unwrap());
    }
    while let Some(guard) = guards.pop() {
        drop(guard);
    }
    drop(held);
    let snapshot = alloc.snapshot();
    // Every recording allocator hears every thread's annotations: count this thread's, the
    // stacks under the first tag (2,000 pushes, and the pops but the last, which empties it).
    let ours = snapshot
        .events
        .iter()
        .filter(|e| e.action == Action::Annotate)
        .filter(|e| {
            snapshot
                .contexts
                .get(e.context)
                .and_then(|c| c.tags.first())
                .is_some_and(|t| t.starts_with("aaaa"))
        })
        .count();
    assert_eq!(ours, 3_999, "each push and pop is recorded");
    let (mut deepest, mut stacks) = (0, 0);
    let mine = snapshot
        .contexts
        .iter()
        .filter(|(_, c)| c.tags.first().is_some_and(|t| t.starts_with("aaaa")));
    for (_, context) in mine {
        stacks += 1;
        deepest = deepest.max(context.tags.len());
        for tag in &context.tags {
            assert!(tag.len() <= MAX_TAG_BYTES, "a tag of {} bytes", tag.len());
            assert!(tag.ends_with('…'), "a cut tag says so");
        }
    }
    assert_eq!(deepest, MAX_TAG_DEPTH, "contexts keep the outermost tags");
    assert_eq!(stacks, MAX_TAG_DEPTH, "one context per distinct stack");
    let mut pickle = Vec::new();
    write_pytorch_snapshot(&snapshot, &mut pickle).unwrap();
    assert!(
        pickle.len() < 8 * MIB,
        "the dump writes each stack once: {} bytes",
        pickle.len()
    );
}

/// 16,384 distinct tags pushed and popped one at a time on 4 threads with history on: each
/// stack is interned once, so the allocator keeps one context per distinct stack.
#[test]
fn many_distinct_tags_are_interned_once_each() {
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let alloc = &alloc;
            scope.spawn(move || {
                let _outer = annotate(&format!("thread {t}"));
                for i in 0..4_096 {
                    let _tag = annotate(&format!("step {i}"));
                    drop(alloc.allocate(0, 512, StreamId::DEFAULT).unwrap());
                }
            });
        }
    });
    let snapshot = alloc.snapshot();
    let with_steps = snapshot
        .contexts
        .iter()
        .filter(|(_, c)| {
            c.tags.len() == 2 && c.tags[0].starts_with("thread ") && c.tags[1].starts_with("step ")
        })
        .count();
    assert_eq!(
        with_steps,
        4 * 4_096,
        "one context per (thread, step) stack"
    );
    assert_eq!(alloc.dropped_contexts(), 0);
}
