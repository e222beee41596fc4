//! Protocol 4's frames, cut where CPython's C pickler (`_pickle.c`) cuts them.
//!
//! Protocol 4 groups opcodes into frames (`FRAME` + eight-byte length) so a reader can fetch
//! one frame with one read. CPython opens a frame at the first write after the previous one
//! closed, closes it when a new object starts while the open frame holds 64 KiB or more, drops
//! the header of a frame shorter than 4 bytes, and writes a `str` or `bytes` payload of 64 KiB
//! or more outside any frame. [`FramedOutput`] follows those rules, so the bytes equal
//! `pickle.dumps(obj, protocol=4)`, and hands every closed frame to the sink at once, so
//! writing a large snapshot to a file holds one frame in memory, not the whole file.

use std::io::{self, Write};

use super::opcodes::FRAME;

/// Bytes of a frame header: `FRAME` and a `u64` length.
const FRAME_HEADER_BYTES: usize = 9;
/// A frame holding fewer bytes than this loses its header (CPython's `FRAME_SIZE_MIN`).
const FRAME_MIN_BYTES: usize = 4;
/// A frame is closed before the next object once it holds this many bytes, and payloads this
/// long are written outside frames (CPython's `FRAME_SIZE_TARGET`).
pub(super) const FRAME_TARGET_BYTES: usize = 64 * 1024;

/// A sink that receives a pickle frame by frame.
pub(super) struct FramedOutput<W> {
    /// Where closed frames go.
    sink: W,
    /// Bytes not yet handed to `sink`: unframed bytes and the open frame, if any.
    pending: Vec<u8>,
    /// Offset in `pending` of the open frame's header, if a frame is open.
    frame_start: Option<usize>,
}

impl<W: Write> FramedOutput<W> {
    /// An output with nothing written.
    pub(super) fn new(sink: W) -> Self {
        Self {
            sink,
            pending: Vec::with_capacity(FRAME_TARGET_BYTES + FRAME_HEADER_BYTES + 64),
            frame_start: None,
        }
    }

    /// Writes bytes outside any frame; only the protocol header goes this way.
    pub(super) fn write_unframed(&mut self, bytes: &[u8]) {
        debug_assert!(
            self.frame_start.is_none(),
            "unframed write inside an open frame"
        );
        self.pending.extend_from_slice(bytes);
    }

    /// Writes opcode bytes into the open frame, opening one if none is.
    pub(super) fn write(&mut self, bytes: &[u8]) {
        if self.frame_start.is_none() {
            self.frame_start = Some(self.pending.len());
            self.pending.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
        }
        self.pending.extend_from_slice(bytes);
    }

    /// Writes an opcode with its header and a `str` or `bytes` payload: in the open frame when
    /// the payload is short, else after closing the open frame, outside any frame.
    pub(super) fn write_payload(&mut self, header: &[u8], payload: &[u8]) -> io::Result<()> {
        if payload.len() < FRAME_TARGET_BYTES {
            self.write(header);
            self.write(payload);
            return Ok(());
        }
        self.close_frame();
        self.pending.extend_from_slice(header);
        self.hand_over()?;
        self.sink.write_all(payload)
    }

    /// Called before each object: closes the open frame once it holds a full frame's worth.
    pub(super) fn object_boundary(&mut self) -> io::Result<()> {
        match self.frame_start {
            Some(start)
                if self.pending.len() - start - FRAME_HEADER_BYTES >= FRAME_TARGET_BYTES =>
            {
                self.close_frame();
                self.hand_over()
            }
            _ => Ok(()),
        }
    }

    /// Closes the open frame and hands everything to the sink; returns the sink.
    pub(super) fn finish(mut self) -> io::Result<W> {
        self.close_frame();
        self.hand_over()?;
        Ok(self.sink)
    }

    /// Fills in the open frame's header, or removes it when the frame is too short to deserve
    /// one.
    fn close_frame(&mut self) {
        let Some(start) = self.frame_start.take() else {
            return;
        };
        let frame_bytes = self.pending.len() - start - FRAME_HEADER_BYTES;
        if frame_bytes >= FRAME_MIN_BYTES {
            self.pending[start] = FRAME;
            // usize -> u64 is lossless on every platform Rust supports.
            self.pending[start + 1..start + FRAME_HEADER_BYTES]
                .copy_from_slice(&(frame_bytes as u64).to_le_bytes());
        } else {
            self.pending.drain(start..start + FRAME_HEADER_BYTES);
        }
    }

    /// Writes the pending bytes, which hold no open frame, to the sink.
    fn hand_over(&mut self) -> io::Result<()> {
        debug_assert!(self.frame_start.is_none(), "handing over an open frame");
        self.sink.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }
}
