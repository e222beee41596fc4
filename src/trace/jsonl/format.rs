//! The values that describe a trace file as a whole: its version, the header, the line-length
//! limit, and what a reader found ([`ReadReport`]).

/// The format version this blockpool writes and reads (the header's `blockpool_trace`).
/// Additions that older readers can skip (new keys, new line kinds they ignore) keep the
/// version; anything else raises it, and readers refuse versions they do not know.
pub const FORMAT_VERSION: u64 = 1;

/// The longest line the reader accepts, in bytes (16 MiB). Event lines are about 100 bytes;
/// only a segment with hundreds of thousands of blocks or a huge context comes near it, and the
/// limit keeps a file that is not a trace from being read whole into one line.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// What the header line (line 1) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The format version ([`FORMAT_VERSION`] when written by this blockpool).
    pub version: u64,
    /// The program that wrote the file (`blockpool 0.1.0`), when given.
    pub created_by: Option<String>,
    /// When event time 0 was, in microseconds since the Unix epoch, when known.
    pub time_origin_unix_us: Option<u64>,
    /// The allocator's configuration in `PYTORCH_CUDA_ALLOC_CONF` syntax, when known.
    pub allocator_config: Option<String>,
}

impl Header {
    /// A header of this version, written by this blockpool, with the given origin and
    /// configuration.
    pub fn new(time_origin_unix_us: Option<u64>, allocator_config: Option<String>) -> Header {
        Header {
            version: FORMAT_VERSION,
            created_by: Some(concat!("blockpool ", env!("CARGO_PKG_VERSION")).to_string()),
            time_origin_unix_us,
            allocator_config,
        }
    }
}

/// What reading a trace found besides its contents: whether it was closed cleanly, and what
/// was dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Lines read, including the header and any dropped torn line.
    pub lines: u64,
    /// Event lines read.
    pub events: u64,
    /// Segment lines read.
    pub segments: u64,
    /// Whether the file ends with its end line, as a cleanly closed writer leaves it. A stream
    /// cut short by a crash has none and holds what was flushed before it.
    pub complete: bool,
    /// Events the writer could not keep up with and dropped, as its end line says.
    pub dropped_events: u64,
    /// The line number of a last line that was cut short (no line ending and not valid JSON,
    /// as a crash mid-write leaves it), which was dropped.
    pub torn_line: Option<u64>,
    /// Whether gzip input ended before the compressed stream did (a crash mid-write); every
    /// complete line before the cut was read.
    pub gzip_cut_short: bool,
}
