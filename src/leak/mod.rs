//! Lifetime tracking and leak detection: the step detector, which flags allocation sites whose
//! live memory grows step after step and sets apart persistent memory (weights, optimizer
//! state), and the analysis of a whole recorded run that `memtrace leaks` and the viewer run
//! on trace files with the same code.
//!
//! | file | what lives there |
//! |---|---|
//! | `growth.rs` | [`SiteTotal`], [`site_totals`], [`StepDetector`] and its rules, [`GrowthSettings`], [`GrowthError`] |
//! | `findings.rs` | what the detector concludes: [`GrowingSite`], [`PersistentSite`], [`StepFindings`] and its text |
//! | `steps.rs` | a whole run at once with each site's series: [`analyze_steps`], [`StepAnalysis`] |

mod findings;
mod growth;
mod steps;

pub use findings::{GrowingSite, PersistentSite, StepFindings};
pub use growth::{site_totals, GrowthError, GrowthSettings, SiteTotal, StepDetector};
pub use steps::{analyze_steps, SiteSeries, StepAnalysis};
