//! What the commands and the viewer compute from a trace: where memory was at a point
//! ([`sites`], named from whose code each frame is, [`frames`]; as a stack tree, [`tree`]), how
//! it moved over time ([`timeline`]), what was never given back or grows step after step ([`leaks`], steps as [`steps`] finds them), the peaks,
//! fragmentation ([`fragmentation`], one definition) and out-of-memory events of each device
//! ([`summary`]), where a device's memory was at an out-of-memory event, split so the parts add
//! up ([`explain`], live memory by what it holds, [`category`]), two traces site by site
//! ([`diff`]) and the CI gate on them ([`gate`]), memory by stream: cached, stranded, waiting on
//! other streams ([`streams`]), and a figure across several files ([`spread`]).

pub mod category;
pub mod diff;
pub mod explain;
pub mod forward;
pub mod fragmentation;
pub mod frames;
pub mod gate;
pub mod leaks;
pub mod settings;
pub mod sites;
pub mod spread;
pub mod steps;
pub mod streams;
pub mod summary;
pub mod timeline;
pub mod tree;
