//! The memory curves of a window: each column's highest allocated, reserved, requested and
//! active bytes, from a sparse table of range maxima.

use super::super::model::DeviceModel;
use super::{clamped, columns, Series, Window};
use serde::Serialize;

/// The highest of a slice's values over any range of it, in constant time: a sparse table,
/// `log2(len)` levels of the maxima of spans of `2^level` values.
pub(super) struct RangeMax {
    levels: Vec<Vec<u64>>,
}

impl RangeMax {
    pub(super) fn new(values: &[u64]) -> RangeMax {
        let mut levels = vec![values.to_vec()];
        let mut span = 1;
        while span * 2 <= values.len() {
            let previous = levels.last().map_or(&[][..], Vec::as_slice);
            let next: Vec<u64> = (0..=values.len() - span * 2)
                .map(|i| previous[i].max(previous[i + span]))
                .collect();
            levels.push(next);
            span *= 2;
        }
        RangeMax { levels }
    }

    /// The highest value in `[lo, hi)`; 0 for an empty range.
    pub(super) fn max(&self, lo: usize, hi: usize) -> u64 {
        if hi <= lo {
            return 0;
        }
        let level = (usize::BITS - 1 - (hi - lo).leading_zeros()) as usize;
        let Some(values) = self.levels.get(level) else {
            return 0;
        };
        let span = 1 << level;
        let left = values.get(lo).copied().unwrap_or(0);
        let right = values.get(hi - span).copied().unwrap_or(0);
        left.max(right)
    }
}

/// Allocated, reserved, requested and active memory of a window: the highest value of each
/// in each column, and the fragmentation `(reserved - allocated) / reserved` in the state
/// where allocated memory peaks in the column.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CurvesWindow {
    /// The window.
    pub window: Window,
    /// Per column, the state where allocated memory peaks.
    pub states: Vec<usize>,
    /// Highest allocated bytes per column.
    pub allocated: Vec<u64>,
    /// Highest reserved bytes per column.
    pub reserved: Vec<u64>,
    /// Highest requested bytes per column.
    pub requested: Vec<u64>,
    /// Highest active bytes per column.
    pub active: Vec<u64>,
    /// Fragmentation per column, 0 to 1.
    pub fragmentation: Vec<f64>,
}

/// The curves of `device` in `window`.
pub fn curves(device: &DeviceModel, window: Window) -> CurvesWindow {
    let cols = columns(device, &window);
    let c = &device.curves;
    let max_of =
        |series: &Series| -> Vec<u64> { cols.iter().map(|&(lo, hi)| series.max(lo, hi)).collect() };
    let states: Vec<usize> = cols
        .iter()
        .map(|&(lo, hi)| c.allocated.peak(lo, hi))
        .collect();
    let fragmentation = states
        .iter()
        .map(|&s| {
            let reserved = c.reserved.get(s).copied().unwrap_or(0);
            let allocated = c.allocated.get(s).copied().unwrap_or(0);
            if reserved == 0 {
                0.0
            } else {
                reserved.saturating_sub(allocated) as f64 / reserved as f64
            }
        })
        .collect();
    let (first, last) = match (cols.first(), cols.last()) {
        (Some(f), Some(l)) => (f.0, l.1),
        _ => (0, 1),
    };
    CurvesWindow {
        window: clamped(window, first, last),
        allocated: max_of(&c.allocated),
        reserved: max_of(&c.reserved),
        requested: max_of(&c.requested),
        active: max_of(&c.active),
        states,
        fragmentation,
    }
}
