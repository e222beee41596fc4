//! Traces: allocation history, snapshots and trace files, ours and PyTorch's.
//!
//! So far: the restricted pickle reader and writer for PyTorch's snapshot files
//! ([`pickle`]) and RMM's CSV allocation log ([`rmm`]).

pub mod pickle;
pub mod rmm;
