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
    prepare(delta, last - first + 1);
    delta.fill(0);
    for a in spans {
        let (lo, hi) = bounds(a, first, last);
        delta[lo] = delta[lo].wrapping_add(a.size);
        delta[hi] = delta[hi].wrapping_sub(a.size);
    }
    running_sum(delta, 0);
}

/// [`alive_in`] of the lifetimes `ids` of `spans`, the states in two halves at once when
/// there are many of both: each half reads every lifetime and writes its own states alone,
/// the second starting from the bytes alive across the middle. A filtered window of a
/// ten-million-event trace sums millions of lifetimes over millions of states per request.
pub(super) fn alive_of(
    spans: &[Allocation],
    ids: &[usize],
    first: usize,
    last: usize,
    delta: &mut Vec<u64>,
) {
    let len = last - first + 1;
    if len < HALVES_FROM || ids.len() < HALVES_FROM {
        return alive_in(ids.iter().map(|&id| &spans[id]), first, last, delta);
    }
    // Each half zeroes its own states.
    prepare(delta, len);
    let middle = len / 2;
    let (left, right) = delta.split_at_mut(middle);
    let lifetimes = || {
        ids.iter()
            .map(|&id| (&spans[id], bounds(&spans[id], first, last)))
    };
    std::thread::scope(|scope| {
        let right_half = scope.spawn(|| {
            right.fill(0);
            // Bytes alive at the middle of the lifetimes that started before it.
            let mut across = 0u64;
            for (a, (lo, hi)) in lifetimes() {
                if lo >= middle {
                    right[lo - middle] = right[lo - middle].wrapping_add(a.size);
                } else if hi >= middle {
                    across = across.wrapping_add(a.size);
                }
                if hi >= middle {
                    right[hi - middle] = right[hi - middle].wrapping_sub(a.size);
                }
            }
            running_sum(right, across);
        });
        left.fill(0);
        for (a, (lo, hi)) in lifetimes() {
            if lo < middle {
                left[lo] = left[lo].wrapping_add(a.size);
            }
            if hi < middle {
                left[hi] = left[hi].wrapping_sub(a.size);
            }
        }
        running_sum(left, 0);
        joined(right_half);
    });
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

/// Makes `buffer` `len` long, its values left as they are (the caller sets them). A buffer
/// that must grow is allocated anew, and on Linux the kernel is asked to back it with huge
/// pages where it can: the sums write to random states of tens of megabytes, and with small
/// pages nearly every write misses the address cache.
fn prepare(buffer: &mut Vec<u64>, len: usize) {
    if buffer.capacity() < len {
        *buffer = Vec::with_capacity(len);
        advise_huge_pages(buffer.as_ptr(), len);
    }
    buffer.resize(len, 0);
    buffer.truncate(len);
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
    fn summed_in_halves_is_summed_whole() {
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
        let ids: Vec<usize> = (0..spans.len()).filter(|_| next(4) > 0).collect();
        // The whole range, a window inside it, and one too small to split.
        for (first, last) in [(0, states), (HALVES_FROM / 3, states - 5000), (100, 900)] {
            let mut whole = Vec::new();
            alive_in(ids.iter().map(|&id| &spans[id]), first, last, &mut whole);
            // A kept buffer, longer than the range and holding stale sums.
            let mut halves = vec![7; states + 10];
            alive_of(&spans, &ids, first, last, &mut halves);
            assert_eq!(halves, whole, "{first}..{last}");
        }
    }
}
