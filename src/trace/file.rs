//! Trace files of every format, detected from their content: [`load_trace`] reads blockpool's
//! JSON Lines traces, PyTorch's memory snapshot pickles and RMM's CSV logs, gzip-compressed or
//! not, into a [`Snapshot`]; [`save_trace`] writes one in any format blockpool writes.

use super::limits::{ImportLimits, MAX_DECOMPRESSION_RATIO_ENV, MAX_VALUES_PER_BYTE_ENV};
use super::snapshot::Snapshot;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The formats blockpool reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TraceFormat {
    /// blockpool's JSON Lines trace ([`jsonl`](super::jsonl)).
    Jsonl,
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`), a pickle.
    PytorchPickle,
    /// RMM's CSV allocation log ([`rmm`](super::rmm)).
    RmmCsv,
}

impl TraceFormat {
    /// A short name: `jsonl`, `pytorch` or `rmm-csv`.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Jsonl => "jsonl",
            TraceFormat::PytorchPickle => "pytorch",
            TraceFormat::RmmCsv => "rmm-csv",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceFormat::Jsonl => "blockpool trace (JSON Lines)",
            TraceFormat::PytorchPickle => "PyTorch memory snapshot (pickle)",
            TraceFormat::RmmCsv => "RMM allocation log (CSV)",
        })
    }
}

/// The formats blockpool writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    /// blockpool's JSON Lines trace.
    Jsonl,
    /// A PyTorch memory snapshot pickle, which PyTorch's viewer loads.
    PytorchPickle,
    /// Perfetto / Chrome trace-event JSON.
    Perfetto,
    /// RMM's CSV allocation log.
    RmmCsv,
}

impl OutputFormat {
    /// The format a file named `path` would be expected to have: `.pickle`/`.pkl`: PyTorch,
    /// `.csv`: RMM, `.json`: Perfetto, `.jsonl` or no extension: JSON Lines (a trailing `.gz`
    /// is ignored). `None` for any other extension (`.parquet`, a typo): a file is never
    /// written in a format its name does not say.
    pub fn from_path(path: &Path) -> Option<OutputFormat> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        let extension = match name.rsplit_once('.') {
            // A leading dot is a hidden file's name, not an extension.
            Some((stem, extension)) if !stem.is_empty() => extension,
            _ => return Some(OutputFormat::Jsonl),
        };
        match extension {
            "pickle" | "pkl" => Some(OutputFormat::PytorchPickle),
            "csv" => Some(OutputFormat::RmmCsv),
            "json" => Some(OutputFormat::Perfetto),
            "jsonl" => Some(OutputFormat::Jsonl),
            _ => None,
        }
    }

    /// The extensions [`from_path`](Self::from_path) knows, for an error that lists them.
    pub const EXTENSIONS: &'static str =
        ".jsonl (blockpool), .pickle or .pkl (PyTorch), .json (Perfetto), .csv (RMM), each \
         optionally .gz";
}

/// What a file's first bytes say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// gzip-compressed; look again after decompressing.
    Gzip,
    /// A format blockpool reads.
    Trace(TraceFormat),
    /// Perfetto / Chrome trace-event JSON, which blockpool writes but does not read.
    Perfetto,
    /// Something else.
    Unknown,
}

/// The gzip magic number.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What `head`, the first bytes of a file (a few hundred are plenty), says the file is.
///
/// ```
/// use blockpool::trace::file::{sniff, Sniffed, TraceFormat};
///
/// assert_eq!(sniff(b"\x80\x04\x95"), Sniffed::Trace(TraceFormat::PytorchPickle));
/// assert_eq!(sniff(b"{\"blockpool_trace\":1}\n"), Sniffed::Trace(TraceFormat::Jsonl));
/// assert_eq!(sniff(b"Thread,Time,Action,Pointer,Size,Stream\n"), Sniffed::Trace(TraceFormat::RmmCsv));
/// assert_eq!(sniff(b"\x1f\x8b\x08"), Sniffed::Gzip);
/// assert_eq!(sniff(b"hello"), Sniffed::Unknown);
/// ```
pub fn sniff(head: &[u8]) -> Sniffed {
    if head.starts_with(&GZIP_MAGIC) {
        return Sniffed::Gzip;
    }
    // Pickles: protocol 2+ starts with PROTO; protocols 0 and 1 with a container opcode
    // (`(` MARK, `]` EMPTY_LIST, `}` EMPTY_DICT, `l`/`d` LIST/DICT after a mark).
    if let [0x80, protocol, ..] = head {
        return if (2..=5).contains(protocol) {
            Sniffed::Trace(TraceFormat::PytorchPickle)
        } else {
            Sniffed::Unknown
        };
    }
    if matches!(head.first(), Some(b'(' | b']' | b'}')) {
        return Sniffed::Trace(TraceFormat::PytorchPickle);
    }
    let text = head.strip_prefix("\u{feff}".as_bytes()).unwrap_or(head);
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let text = &text[start..];
    if text.starts_with(b"Thread,Time,Action") {
        return Sniffed::Trace(TraceFormat::RmmCsv);
    }
    if text.starts_with(b"{") {
        let compact: Vec<u8> = text
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .take(64)
            .collect();
        if compact.starts_with(b"{\"blockpool_trace\"") {
            return Sniffed::Trace(TraceFormat::Jsonl);
        }
        if compact.starts_with(b"{\"traceEvents\"") || compact.starts_with(b"{\"displayTimeUnit\"")
        {
            return Sniffed::Perfetto;
        }
    }
    Sniffed::Unknown
}

/// A trace read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedTrace {
    /// The format the content had.
    pub format: TraceFormat,
    /// Whether the file was gzip-compressed.
    pub gzip: bool,
    /// What the file held.
    pub snapshot: Snapshot,
}

/// Why a trace file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceFileError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The content is not a format blockpool reads.
    #[error(
        "{path}: not a trace blockpool reads ({what}); expected a blockpool .jsonl trace, \
         a PyTorch memory snapshot pickle or an RMM CSV log"
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// What it looked like instead.
        what: String,
    },
    /// The machine could not give the memory that holding the trace takes.
    #[error(
        "{path}: memory ran out holding {what}: the trace needs more memory than this \
         machine could give; read it on a machine with more, or cut it into parts"
    )]
    OutOfMemory {
        /// The file.
        path: PathBuf,
        /// How far reading got.
        what: String,
    },
    /// The content was recognized but is malformed.
    #[error("{path}: {format}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The format it was read as.
        format: TraceFormat,
        /// What is wrong, and where.
        message: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> TraceFileError + '_ {
    move |source| TraceFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens `path` and tells what it holds, looking through gzip: the format, whether it was
/// compressed, and a reader positioned at the start of the (decompressed) content. What a
/// compressed file may decompress to is bounded by [`ImportLimits::from_env`].
pub fn open_trace(path: &Path) -> Result<(Sniffed, bool, Box<dyn BufRead>), TraceFileError> {
    open_trace_with(path, &ImportLimits::from_env())
}

/// As [`open_trace`], with what a compressed file may decompress to bounded by `limits`
/// ([`ImportLimits::max_decompressed_bytes`]): reading past it fails with an error that
/// names the limit and the variable that raises it.
pub fn open_trace_with(
    path: &Path,
    limits: &ImportLimits,
) -> Result<(Sniffed, bool, Box<dyn BufRead>), TraceFileError> {
    let file = std::fs::File::open(path).map_err(io_error(path))?;
    let compressed_bytes = file.metadata().map_err(io_error(path))?.len();
    let mut reader: Box<dyn BufRead> = Box::new(BufReader::with_capacity(1 << 16, file));
    let mut sniffed = sniff(reader.fill_buf().map_err(io_error(path))?);
    let gzip = sniffed == Sniffed::Gzip;
    if gzip {
        let decoder = Capped {
            inner: flate2::bufread::MultiGzDecoder::new(reader),
            left: limits.max_decompressed_bytes(compressed_bytes),
            compressed_bytes,
            limits: limits.clone(),
        };
        reader = Box::new(BufReader::with_capacity(1 << 16, decoder));
        sniffed = sniff(reader.fill_buf().map_err(io_error(path))?);
        if sniffed == Sniffed::Gzip {
            sniffed = Sniffed::Unknown;
        }
    }
    Ok((sniffed, gzip, reader))
}

/// A decompressing reader of a file of `compressed_bytes` that fails once more than
/// `limits` allow have come out of it ([`ImportLimits::max_decompressed_bytes`]).
struct Capped<R> {
    inner: R,
    /// Bytes it may still give.
    left: u64,
    compressed_bytes: u64,
    limits: ImportLimits,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream of exactly the limit from a longer one.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "its {} compressed bytes decompress to more than {} bytes, the limit \
                         for a compressed trace ({} times its size, at least {} bytes); real \
                         traces compress far less. If the file is trusted, raise the ratio \
                         with {MAX_DECOMPRESSION_RATIO_ENV}=<ratio>",
                        self.compressed_bytes,
                        self.limits.max_decompressed_bytes(self.compressed_bytes),
                        self.limits.max_decompression_ratio,
                        self.limits.min_decompressed_bytes
                    ),
                )),
            };
        }
        let len = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = self.inner.read(&mut buf[..len])?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// Describes an unrecognized head for [`TraceFileError::UnknownFormat`].
pub(crate) fn describe_head(sniffed: Sniffed, head: &[u8]) -> String {
    if sniffed == Sniffed::Perfetto {
        return "Perfetto trace-event JSON, which blockpool writes but does not read".into();
    }
    if head.is_empty() {
        return "the file is empty".into();
    }
    let shown: String = head
        .iter()
        .take(16)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect();
    format!("it starts with \"{shown}\"")
}

/// A trace file being written: plain, or gzip when its name ends in `.gz`.
pub(crate) enum FileOut {
    Plain(BufWriter<File>),
    Gzip(BufWriter<GzEncoder<File>>),
}

impl FileOut {
    /// Creates (or truncates) the file at `path`.
    pub(crate) fn create(path: &Path) -> io::Result<FileOut> {
        let file = File::create(path)?;
        // Fast compression: traces compress well even so, and writing keeps up with events.
        let gzip = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
        Ok(if gzip {
            FileOut::Gzip(BufWriter::with_capacity(
                1 << 16,
                GzEncoder::new(file, Compression::fast()),
            ))
        } else {
            FileOut::Plain(BufWriter::with_capacity(1 << 16, file))
        })
    }

    /// Flushes everything and ends the gzip stream, reporting any error (dropping instead
    /// would lose them).
    pub(crate) fn close(self) -> io::Result<()> {
        match self {
            FileOut::Plain(out) => out.into_inner().map_err(|e| e.into_error())?.sync_data(),
            FileOut::Gzip(out) => out
                .into_inner()
                .map_err(|e| e.into_error())?
                .finish()?
                .sync_data(),
        }
    }
}

impl Write for FileOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            FileOut::Plain(out) => out.write(buf),
            FileOut::Gzip(out) => out.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            FileOut::Plain(out) => out.write_all(buf),
            FileOut::Gzip(out) => out.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            FileOut::Plain(out) => out.flush(),
            FileOut::Gzip(out) => out.flush(),
        }
    }
}

impl OutputFormat {
    /// A short name: `jsonl`, `pytorch`, `perfetto` or `rmm-csv`.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Jsonl => "jsonl",
            OutputFormat::PytorchPickle => "pytorch",
            OutputFormat::Perfetto => "perfetto",
            OutputFormat::RmmCsv => "rmm-csv",
        }
    }
}

/// Reads the trace in `path`, whatever its format (detected from the content, through gzip).
///
/// Every reader is bounded and refuses malformed input with a message that says where;
/// nothing in a file can make this panic or run code. What the file may expand to is bounded
/// by [`ImportLimits::from_env`].
pub fn load_trace(path: &Path) -> Result<LoadedTrace, TraceFileError> {
    load_trace_with(path, &ImportLimits::from_env())
}

/// As [`load_trace`], with the expansion bounded by `limits`.
pub fn load_trace_with(path: &Path, limits: &ImportLimits) -> Result<LoadedTrace, TraceFileError> {
    let (sniffed, gzip, mut reader) = open_trace_with(path, limits)?;
    let malformed = |format: TraceFormat, message: String| TraceFileError::Malformed {
        path: path.to_path_buf(),
        format,
        message,
    };
    let format = match sniffed {
        Sniffed::Trace(format) => format,
        other => {
            let head = reader.fill_buf().map_err(io_error(path))?.to_vec();
            return Err(TraceFileError::UnknownFormat {
                path: path.to_path_buf(),
                what: describe_head(other, &head),
            });
        }
    };
    let snapshot = match format {
        TraceFormat::Jsonl => {
            let (snapshot, _report) = super::jsonl::read_snapshot_with(reader, limits)
                .map_err(|e| malformed(format, e.to_string()))?;
            snapshot
        }
        TraceFormat::PytorchPickle => {
            // Parsed as it is read (and inflated): a file that goes wrong at byte 2 is refused
            // after a chunk, however far it would inflate.
            let file_bytes = std::fs::metadata(path).map_err(io_error(path))?.len();
            let mut read_limits = super::pickle::ReadLimits::default();
            let max_values = limits.max_pickle_values(file_bytes);
            read_limits.max_items = usize::try_from(max_values)
                .unwrap_or(usize::MAX)
                .min(read_limits.max_items);
            let pickle_error = |e| {
                let message = match e {
                    super::pickle::PickleError::TooManyItems { limit, offset }
                        if limit as u64 == max_values =>
                    {
                        too_many_values(file_bytes, limit, offset, limits)
                    }
                    other => super::pytorch::SnapshotError::from(other).to_string(),
                };
                malformed(format, message)
            };
            let mut reader = reader;
            if !limits.whole_pickle_tree {
                use super::pytorch::Streamed;
                match super::pytorch::read_pytorch_pickle(&mut reader, &read_limits, limits) {
                    Streamed::Read(snapshot) => return finish_load(path, format, gzip, snapshot),
                    Streamed::Failed(e) => return Err(pickle_error(e)),
                    Streamed::Again => {}
                }
            }
            // The streaming read could not take this file the same way: read it whole,
            // which gives the same snapshot or the error with its place.
            let (_, _, mut reader) = open_trace_with(path, limits)?;
            let value =
                super::pickle::read_from(&mut reader, &read_limits).map_err(pickle_error)?;
            super::pytorch::snapshot_from_owned_pytorch_value(value, limits)
                .map_err(|e| malformed(format, e.to_string()))?
        }
        TraceFormat::RmmCsv => {
            let mut import = super::rmm::RmmImport::default();
            let mut records =
                super::rmm::RmmReader::new(reader).map_err(|e| malformed(format, e.to_string()))?;
            while let Some(record) = records.next() {
                let record = record.map_err(|e| malformed(format, e.to_string()))?;
                import
                    .push(&record)
                    .map_err(|_| TraceFileError::OutOfMemory {
                        path: path.to_path_buf(),
                        what: format!(
                            "{} events, at line {} of the log",
                            import.events(),
                            records.line_number()
                        ),
                    })?;
            }
            import.finish()
        }
    };
    finish_load(path, format, gzip, snapshot)
}

/// A loaded trace, once its snapshot is checked.
fn finish_load(
    path: &Path,
    format: TraceFormat,
    gzip: bool,
    snapshot: Snapshot,
) -> Result<LoadedTrace, TraceFileError> {
    snapshot.validate().map_err(|e| TraceFileError::Malformed {
        path: path.to_path_buf(),
        format,
        message: e.to_string(),
    })?;
    Ok(LoadedTrace {
        format,
        gzip,
        snapshot,
    })
}

/// Why a pickle of `file_bytes` that pushed more than `limit` values is refused, and how to
/// raise the limit.
fn too_many_values(file_bytes: u64, limit: usize, offset: usize, limits: &ImportLimits) -> String {
    format!(
        "its {file_bytes} bytes push more than {limit} values by byte {offset} of the pickle, \
         the limit for a file of its size ({} values per byte of the file, at least {}); real \
         snapshots push at most about 20 per byte of gzip. If the file is trusted, raise it \
         with {MAX_VALUES_PER_BYTE_ENV}=<values>",
        limits.max_values_per_byte, limits.min_values
    )
}

/// Writes `snapshot` to `path` as `format`, gzip-compressed when the name ends in `.gz`.
pub fn save_trace(
    snapshot: &Snapshot,
    path: &Path,
    format: OutputFormat,
) -> Result<(), TraceFileError> {
    let mut out = FileOut::create(path).map_err(io_error(path))?;
    match format {
        OutputFormat::Jsonl => super::jsonl::write_snapshot(snapshot, &mut out),
        OutputFormat::PytorchPickle => super::pytorch::write_pytorch_snapshot(snapshot, &mut out),
        OutputFormat::Perfetto => super::perfetto::write_perfetto(snapshot, &mut out),
        OutputFormat::RmmCsv => {
            super::rmm::write_rmm_csv(&super::rmm::snapshot_to_rmm(snapshot), &mut out)
        }
    }
    .and_then(|()| out.close())
    .map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_tells_each_format_apart() {
        assert_eq!(
            sniff(b"\x80\x02}q\x00"),
            Sniffed::Trace(TraceFormat::PytorchPickle)
        );
        assert_eq!(sniff(b"\x80\x06"), Sniffed::Unknown, "no protocol 6 yet");
        assert_eq!(sniff(b"]q\x00"), Sniffed::Trace(TraceFormat::PytorchPickle));
        assert_eq!(
            sniff(b"\xef\xbb\xbfThread,Time,Action,Pointer,Size,Stream\r\n"),
            Sniffed::Trace(TraceFormat::RmmCsv)
        );
        assert_eq!(
            sniff(b" { \"blockpool_trace\" : 1 }"),
            Sniffed::Trace(TraceFormat::Jsonl)
        );
        assert_eq!(sniff(b"{\"traceEvents\":[]}"), Sniffed::Perfetto);
        assert_eq!(sniff(b"{\"other\":1}"), Sniffed::Unknown);
        assert_eq!(sniff(b""), Sniffed::Unknown);
    }

    #[test]
    fn output_format_follows_the_name() {
        let of = |name: &str| OutputFormat::from_path(Path::new(name));
        assert_eq!(of("a.pickle"), Some(OutputFormat::PytorchPickle));
        assert_eq!(of("a.PKL.gz"), Some(OutputFormat::PytorchPickle));
        assert_eq!(of("a.csv"), Some(OutputFormat::RmmCsv));
        assert_eq!(of("a.json"), Some(OutputFormat::Perfetto));
        assert_eq!(of("a.jsonl.gz"), Some(OutputFormat::Jsonl));
        assert_eq!(of("dir.v2/trace"), Some(OutputFormat::Jsonl));
        assert_eq!(of(".trace.gz"), Some(OutputFormat::Jsonl));
        assert_eq!(of("out.parquet"), None);
        assert_eq!(of("out.pickel"), None);
    }

    #[test]
    fn unknown_heads_are_described_safely() {
        assert_eq!(describe_head(Sniffed::Unknown, b""), "the file is empty");
        assert_eq!(
            describe_head(Sniffed::Unknown, b"PK\x03\x04zip"),
            "it starts with \"PK\\x03\\x04zip\""
        );
    }
}
