//! How one figure spreads across several files (the ranks of a job, or runs): the highest
//! and lowest with their files, the mean, `max / min` and `max - mean`, and the file farthest
//! from the mean. The multi-file page and `memtrace summary` over several files both show it.

use serde::Serialize;

/// How one peak spreads across the files.
#[derive(Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The highest peak, in bytes.
    pub max: u64,
    /// Its file (the first, on a tie).
    pub max_file: usize,
    /// The lowest peak, in bytes.
    pub min: u64,
    /// Its file (the first, on a tie).
    pub min_file: usize,
    /// The mean of the peaks, in bytes.
    pub mean: f64,
    /// `max / min`; `None` when the lowest is 0.
    pub max_over_min: Option<f64>,
    /// `max - mean`, in bytes: what the highest holds beyond the average file.
    pub max_minus_mean: f64,
    /// The file whose peak is farthest from the mean, above or below (the first, on a tie).
    pub outlier: usize,
}

/// The spread of `peaks`, one per file in order.
pub fn spread(peaks: &[u64]) -> Spread {
    let first_of = |value: u64| peaks.iter().position(|&p| p == value).unwrap_or(0);
    let max = peaks.iter().copied().max().unwrap_or(0);
    let min = peaks.iter().copied().min().unwrap_or(0);
    let mean = peaks.iter().map(|&p| p as f64).sum::<f64>() / peaks.len().max(1) as f64;
    let mut outlier = 0;
    for (i, &p) in peaks.iter().enumerate() {
        if (p as f64 - mean).abs() > (peaks[outlier] as f64 - mean).abs() {
            outlier = i;
        }
    }
    Spread {
        max,
        max_file: first_of(max),
        min,
        min_file: first_of(min),
        mean,
        max_over_min: (min > 0).then(|| max as f64 / min as f64),
        max_minus_mean: max as f64 - mean,
        outlier,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_names_the_highest_lowest_and_farthest_files() {
        let s = spread(&[40, 44, 60]);
        assert_eq!(
            (s.max, s.max_file, s.min, s.min_file, s.outlier),
            (60, 2, 40, 0, 2)
        );
        assert_eq!(s.mean, 48.0);
        assert_eq!(s.max_over_min, Some(1.5));
        assert_eq!(s.max_minus_mean, 12.0);
        assert_eq!(spread(&[0, 5]).max_over_min, None);
    }
}
