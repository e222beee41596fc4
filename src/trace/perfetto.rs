//! Export to Perfetto / Chrome trace-event JSON (work in progress).
