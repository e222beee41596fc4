//! blockpool's native trace file: JSON Lines (work in progress).
