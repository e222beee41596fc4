//! Bytes alive at each state of a range, from lifetimes, by a difference array: each lifetime
//! adds its size where it starts and takes it off where it ends, and a running sum over the
//! states gives the bytes alive at each. Sums wrap: a hostile trace's sizes may overflow, and
//! then the sum is wrong but nothing panics.

use super::super::joined;
use super::super::model::Allocation;
use super::{Series, HALVES_FROM};

/// Bytes alive at each state `first..last` (and one more, 0) of the lifetimes `spans`, into
/// `delta` (its values replaced).
pub(super) fn alive_in<'a>(
    spans: impl Iterator<Item = &'a Allocation>,
    first: usize,
    last: usize,
    delta: &mut Vec<u64>,
) {
    zeroed(delta, last - first + 1);
    for a in spans {
        let (lo, hi) = bounds(a, first, last);
        delta[lo] = delta[lo].wrapping_add(a.size);
        delta[hi] = delta[hi].wrapping_sub(a.size);
    }
    running_sum(delta, 0);
}

/// The buffers a device keeps for [`kept_and_alive`] between requests: their pages are
/// mapped already, where new ones' would each fault in afresh.
pub type Sums = [Vec<u64>; 2];

/// The lifetimes of `spans` alive in the states `first..last` that `keeps` keeps (their
/// indices, ascending), and in `sums[0]` their bytes alive at each state `first..=last`, as
/// [`alive_in`] gives them. One pass over the lifetimes, in two halves at once when there are
/// many lifetimes and states (a filtered window of a ten-million-event trace keeps millions
/// of lifetimes over millions of states): each half sums its own into a buffer of its own,
/// and the two are then added up over the states, in two halves again, the second starting
/// from the bytes alive across the middle.
pub(super) fn kept_and_alive(
    spans: &[Allocation],
    first: usize,
    last: usize,
    keeps: impl Fn(&Allocation) -> bool + Sync,
    sums: &mut Sums,
) -> Vec<usize> {
    let kept_in_window = |a: &Allocation| a.start < last && a.end > first && keeps(a);
    let len = last - first + 1;
    if spans.len() < HALVES_FROM || len < HALVES_FROM {
        let kept: Vec<usize> = (0..spans.len())
            .filter(|&id| kept_in_window(&spans[id]))
            .collect();
        alive_in(kept.iter().map(|&id| &spans[id]), first, last, &mut sums[0]);
        return kept;
    }
    let middle = len / 2;
    // A part of the lifetimes from `offset`: the ids it keeps, its sizes added where they
    // start and taken off where they end in `delta`, and its bytes alive across the middle.
    let sum_part = |offset: usize, part: &[Allocation], delta: &mut Vec<u64>| {
        zeroed(delta, len);
        // Room for every lifetime: only the pages written are ever mapped.
        let mut kept = Vec::with_capacity(part.len());
        let mut across = 0u64;
        for (i, a) in part.iter().enumerate() {
            if !kept_in_window(a) {
                continue;
            }
            kept.push(offset + i);
            let (lo, hi) = bounds(a, first, last);
            delta[lo] = delta[lo].wrapping_add(a.size);
            delta[hi] = delta[hi].wrapping_sub(a.size);
            if lo < middle && hi >= middle {
                across = across.wrapping_add(a.size);
            }
        }
        (kept, across)
    };
    let half = spans.len() / 2;
    let (left_spans, right_spans) = spans.split_at(half);
    let [into, other] = sums;
    let ((mut kept, left_across), (right_kept, right_across)) = std::thread::scope(|scope| {
        let right = scope.spawn(|| sum_part(half, right_spans, other));
        let left = sum_part(0, left_spans, into);
        (left, joined(right))
    });
    kept.extend(right_kept);
    let (into_first, into_second) = into.split_at_mut(middle);
    let (other_first, other_second) = other.split_at(middle);
    let across = left_across.wrapping_add(right_across);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| add_up(into_second, other_second, across));
        add_up(into_first, other_first, 0);
        joined(second);
    });
    kept
}

/// Bytes alive at each of a device's `states` states of all the lifetimes `spans`: what
/// [`Layout`](super::Layout) sums for a window when nothing is filtered out, made once per
/// device.
pub fn alive_bytes(spans: &[Allocation], states: usize) -> Series {
    let mut alive = Vec::new();
    alive_in(spans.iter(), 0, states, &mut alive);
    alive.truncate(states);
    Series::from(alive)
}

/// Makes `buffer` `len` zeros. A buffer that must grow is allocated anew, and on Linux the
/// kernel is asked to back it with huge pages where it can: the sums write to random states
/// of tens of megabytes, and with small pages nearly every write misses the address cache.
fn zeroed(buffer: &mut Vec<u64>, len: usize) {
    if buffer.capacity() < len {
        *buffer = Vec::with_capacity(len);
        advise_huge_pages(buffer.as_ptr(), len);
    }
    buffer.clear();
    buffer.resize(len, 0);
}

/// Asks the kernel to back the `len` values from `start`, allocated and not yet touched, with
/// huge pages (`MADV_HUGEPAGE`); a request it refuses changes nothing.
fn advise_huge_pages(start: *const u64, len: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const PAGE: usize = 4096;
        let begin = (start as usize).next_multiple_of(PAGE);
        let end = start as usize + len * std::mem::size_of::<u64>();
        if end > begin + PAGE {
            // SAFETY: the range lies within one live allocation of this process, and
            // `MADV_HUGEPAGE` only advises how its pages are backed: their contents and
            // their mapping stay as they are, whatever the answer.
            unsafe {
                libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (start, len);
}

/// Where `a` starts and ends among the states `first..=last`, from `first`.
fn bounds(a: &Allocation, first: usize, last: usize) -> (usize, usize) {
    (
        a.start.clamp(first, last) - first,
        a.end.clamp(first, last) - first,
    )
}

/// The differences in `delta` and `other` added up and summed into `delta` from `start`.
fn add_up(delta: &mut [u64], other: &[u64], start: u64) {
    let mut running = start;
    for (d, o) in delta.iter_mut().zip(other) {
        running = running.wrapping_add(d.wrapping_add(*o));
        *d = running;
    }
}

/// The differences in `delta` summed in place from `start`: the bytes alive at each state.
fn running_sum(delta: &mut [u64], start: u64) {
    let mut running = start;
    for d in delta.iter_mut() {
        running = running.wrapping_add(*d);
        *d = running;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::random;
    use super::*;
    use blockpool::trace::ContextId;

    #[test]
    fn kept_and_summed_in_halves_is_kept_and_summed_whole() {
        let mut next = random(0x5eed_a11e);
        let states = 3 * HALVES_FROM;
        let spans: Vec<Allocation> = (0..2 * HALVES_FROM)
            .map(|_| {
                let start = next(states);
                Allocation {
                    addr: 0,
                    // Now and then a size that wraps the sums.
                    size: if next(1000) == 0 {
                        u64::MAX - 7
                    } else {
                        next(1 << 20) as u64
                    },
                    requested: 0,
                    stream: 0,
                    context: ContextId::NONE,
                    start,
                    end: start + 1 + next(states / 2),
                }
            })
            .collect();
        let kept = |a: &Allocation| a.size & 3 != 0;
        // The whole range, a window inside it, and one too small to split.
        for (first, last) in [(0, states), (HALVES_FROM / 3, states - 5000), (100, 900)] {
            let ids: Vec<usize> = (0..spans.len())
                .filter(|&id| spans[id].start < last && spans[id].end > first && kept(&spans[id]))
                .collect();
            let mut whole = Vec::new();
            alive_in(ids.iter().map(|&id| &spans[id]), first, last, &mut whole);
            // Kept buffers, longer than the range and holding stale sums.
            let mut sums: Sums = [vec![7; states + 10], vec![9; 3]];
            assert_eq!(kept_and_alive(&spans, first, last, kept, &mut sums), ids);
            assert_eq!(sums[0], whole, "{first}..{last}");
        }
    }
}
