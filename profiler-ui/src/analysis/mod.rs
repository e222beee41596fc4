//! What the commands and the viewer compute from a trace: where memory was at a point
//! ([`sites`]), how it moved over time ([`timeline`]), and what was never given back
//! ([`leaks`]).

pub mod leaks;
pub mod sites;
pub mod timeline;
