//! The operations a case is made of, and the proptest strategies that generate them: the two
//! simulated devices and their streams, the allocator configurations, request sizes at every
//! boundary of the sizing rules, injected faults, and ways to misuse a raw pointer.

use blockpool::backend::SimFault;
use blockpool::StreamId;
use proptest::prelude::*;
use proptest::sample::{select, Index};

pub(super) const MIB: usize = 1 << 20;
pub(super) const DEVICES: usize = 2;
/// Small devices, so that out-of-memory and the release ladder happen often.
pub(super) const CAPACITY: [usize; DEVICES] = [256 * MIB, 192 * MIB];
pub(super) const STREAMS: [StreamId; 3] = [
    StreamId::DEFAULT,
    StreamId::from_raw(1),
    StreamId::from_raw(2),
];

/// Configurations the model runs under; each case picks one.
pub(super) const CONFIGS: &[&str] = &[
    "",
    "max_split_size_mb:32",
    "max_split_size_mb:20",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[2:8,16:4,>:2]",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.75",
    "max_split_size_mb:24,roundup_power2_divisions:2,garbage_collection_threshold:0.5,\
     per_process_memory_fraction:0.9",
];

#[derive(Clone, Copy, Debug)]
pub(super) enum RawCall {
    Free,
    RecordStream(usize),
}

/// Ways to hand the raw-pointer API a pointer it must refuse.
#[derive(Clone, Copy, Debug)]
pub(super) enum BadPointer {
    /// An address no segment holds.
    Unknown,
    /// 512 bytes into a live allocation.
    Interior,
    /// A raw pointer freed earlier.
    AlreadyFreed,
    /// A live raw pointer, named with the other device.
    WrongDevice,
    /// The pointer of a live handle, named with the device given in the operation.
    HandleOwned,
    /// A live pointer, named with a device that does not exist.
    InvalidDevice,
}

/// Which statistics a `Stats` step resets after reading them.
#[derive(Clone, Copy, Debug)]
pub(super) enum Reset {
    Nothing,
    /// `reset_peak_memory_stats`: every peak becomes its current value.
    Peaks,
    /// `reset_accumulated_memory_stats`: every total and counter becomes 0.
    Accumulated,
}

#[derive(Clone, Debug)]
pub(super) enum Op {
    Stats {
        device: usize,
        reset: Reset,
    },
    Allocate {
        device: usize,
        size: usize,
        stream: usize,
    },
    Malloc {
        device: usize,
        size: usize,
        stream: usize,
    },
    Free {
        which: Index,
    },
    RecordStream {
        which: Index,
        stream: usize,
    },
    AdvanceStream {
        device: usize,
        stream: usize,
        events: u64,
    },
    CompleteStream {
        device: usize,
        stream: usize,
    },
    EmptyCache,
    SetFraction {
        device: usize,
        fraction: f64,
    },
    Inject {
        device: usize,
        fault: SimFault,
    },
    ClearFaults {
        device: usize,
    },
    BadPointer {
        call: RawCall,
        bad: BadPointer,
        device: usize,
        which: Index,
    },
}

/// Request sizes: every boundary of the sizing rules, ranges in each tier, and sizes that can
/// never fit.
fn request_size() -> impl Strategy<Value = usize> {
    let boundaries = vec![
        0,
        1,
        511,
        512,
        513,
        MIB - 512,
        MIB,
        MIB + 1,
        10 * MIB - 1,
        10 * MIB,
        10 * MIB + 1,
        20 * MIB - 1,
        20 * MIB,
        20 * MIB + 1,
        24 * MIB - 1,
        24 * MIB + 1,
        32 * MIB - 1,
        32 * MIB,
        32 * MIB + 1,
    ];
    let never_fits = vec![200 * MIB, 300 * MIB, usize::MAX - 600, usize::MAX];
    prop_oneof![
        8 => select(boundaries),
        8 => 1..=MIB,
        5 => MIB + 1..10 * MIB,
        3 => 10 * MIB..=48 * MIB,
        1 => select(never_fits),
    ]
}

/// A device index: usually valid, sometimes one past the last.
fn device() -> impl Strategy<Value = usize> {
    prop_oneof![20 => 0..DEVICES, 1 => Just(DEVICES)]
}

fn stream() -> impl Strategy<Value = usize> {
    0..STREAMS.len()
}

fn fault() -> impl Strategy<Value = SimFault> {
    prop_oneof![
        (1..=3u64).prop_map(|nth| SimFault::AllocOutOfMemory { nth }),
        (1..=3u64).prop_map(|nth| SimFault::AllocError { nth }),
        stream().prop_map(|s| SimFault::HangStream { stream: STREAMS[s] }),
        select(vec![64 * MIB, 128 * MIB, 200 * MIB])
            .prop_map(|limit_bytes| SimFault::OutOfMemoryAbove { limit_bytes }),
    ]
}

fn bad_pointer() -> impl Strategy<Value = BadPointer> {
    select(vec![
        BadPointer::Unknown,
        BadPointer::Interior,
        BadPointer::AlreadyFreed,
        BadPointer::WrongDevice,
        BadPointer::HandleOwned,
        BadPointer::InvalidDevice,
    ])
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    let raw_call = prop_oneof![
        Just(RawCall::Free),
        stream().prop_map(RawCall::RecordStream)
    ];
    let fraction = select(vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.0, -0.5, 1.5, f64::NAN]);
    // The first alternative is harmless, so that shrinking turns irrelevant steps into it.
    prop_oneof![
        2 => (device(), select(vec![Reset::Nothing, Reset::Peaks, Reset::Accumulated]))
            .prop_map(|(device, reset)| Op::Stats { device, reset }),
        30 => (device(), request_size(), stream())
            .prop_map(|(device, size, stream)| Op::Allocate { device, size, stream }),
        10 => (device(), request_size(), stream())
            .prop_map(|(device, size, stream)| Op::Malloc { device, size, stream }),
        30 => any::<Index>().prop_map(|which| Op::Free { which }),
        10 => (any::<Index>(), stream())
            .prop_map(|(which, stream)| Op::RecordStream { which, stream }),
        8 => (0..DEVICES, stream(), 1..=3u64)
            .prop_map(|(device, stream, events)| Op::AdvanceStream { device, stream, events }),
        3 => (0..DEVICES, stream()).prop_map(|(device, stream)| Op::CompleteStream { device, stream }),
        2 => Just(Op::EmptyCache),
        2 => (device(), fraction).prop_map(|(device, fraction)| Op::SetFraction { device, fraction }),
        3 => (0..DEVICES, fault()).prop_map(|(device, fault)| Op::Inject { device, fault }),
        // Often enough that hung streams and lowered limits do not last long.
        6 => (0..DEVICES).prop_map(|device| Op::ClearFaults { device }),
        4 => (raw_call, bad_pointer(), 0..DEVICES, any::<Index>())
            .prop_map(|(call, bad, device, which)| Op::BadPointer { call, bad, device, which }),
    ]
}
