//! The input cursor: opcode bytes, fixed-size arguments, declared lengths and text lines, each
//! read with bounds checked before anything is allocated.
//!
//! The input is pulled from a reader as the machine asks for it, so a gzip-compressed file is
//! parsed while it is inflated: a file that goes wrong at byte 2 is refused after reading a few
//! kilobytes, however much it would inflate to. Bytes already consumed are dropped from the
//! buffer (every argument is copied into its value before the next read), so the buffer holds
//! about one chunk, or the largest single argument.

use std::io::{self, Read};

use super::error::PickleError;
use super::opcodes;

/// The opcode being executed, for error messages: its byte and where it starts.
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    /// The opcode's byte.
    pub(super) byte: u8,
    /// The byte offset of the opcode.
    pub(super) offset: usize,
}

impl At {
    /// The opcode's name; looked up only for errors, off the hot path.
    pub(super) fn opcode(self) -> &'static str {
        opcodes::name(self.byte).unwrap_or("?")
    }

    /// The error for a byte the machine does not execute: a refused or an unknown opcode.
    pub(super) fn not_executed(self) -> PickleError {
        match (opcodes::name(self.byte), opcodes::refusal(self.byte)) {
            (Some(opcode), Some(reason)) => PickleError::Refused {
                opcode,
                byte: self.byte,
                offset: self.offset,
                reason,
            },
            _ => PickleError::UnknownOpcode {
                byte: self.byte,
                offset: self.offset,
            },
        }
    }

    /// A [`PickleError::BadArgument`] for this opcode.
    pub(super) fn bad(self, problem: &'static str) -> PickleError {
        PickleError::BadArgument {
            opcode: self.opcode(),
            offset: self.offset,
            problem,
        }
    }

    /// A [`PickleError::InvalidString`] for this opcode.
    pub(super) fn bad_string(self, problem: &'static str) -> PickleError {
        PickleError::InvalidString {
            opcode: self.opcode(),
            offset: self.offset,
            problem,
        }
    }
}

/// How many bytes are asked of the reader at a time.
const CHUNK: usize = 1 << 16;

/// The bytes of a pickle read so far, and the position of the next unread byte.
pub(super) struct Input<'r> {
    source: &'r mut dyn Read,
    /// The total length when the whole input is known up front (a byte slice), so that a
    /// declared length past the end is refused before anything is read.
    known_len: Option<usize>,
    /// Bytes read and not yet dropped; `buf[0]` is byte `start` of the input.
    buf: Vec<u8>,
    start: usize,
    /// Index in `buf` of the next unread byte.
    pos: usize,
    /// The reader has no more bytes.
    eof: bool,
    /// The longest argument taken ([`ReadLimits::max_argument_bytes`](super::ReadLimits)).
    max_argument: usize,
}

impl<'r> Input<'r> {
    /// A cursor at the start of what `source` yields; `known_len` is its length when known.
    /// Arguments longer than `max_argument` bytes are refused.
    pub(super) fn new(
        source: &'r mut dyn Read,
        known_len: Option<usize>,
        max_argument: usize,
    ) -> Self {
        Input {
            source,
            known_len,
            buf: Vec::new(),
            start: 0,
            pos: 0,
            eof: false,
            max_argument,
        }
    }

    /// The error for an argument of `declared` bytes past the limit.
    fn too_long(&self, declared: u64, at: At) -> PickleError {
        PickleError::ArgumentTooLong {
            opcode: at.opcode(),
            offset: at.offset,
            declared,
            limit: self.max_argument,
        }
    }

    /// The offset of the next unread byte.
    pub(super) fn pos(&self) -> usize {
        self.start + self.pos
    }

    /// Bytes not yet read: known up front for a slice, else those buffered (all that is left
    /// once a read has hit the end, which is when errors ask).
    pub(super) fn remaining(&self) -> usize {
        match self.known_len {
            Some(len) => len.saturating_sub(self.pos()),
            None => self.buf.len() - self.pos,
        }
    }

    /// Reads until `buf` holds at least `want` unread bytes or the reader ends; whether it
    /// holds them. Consumed bytes are dropped first.
    #[inline]
    fn fill(&mut self, want: usize) -> Result<bool, PickleError> {
        if self.buf.len() - self.pos >= want {
            return Ok(true);
        }
        self.refill(want)
    }

    /// [`fill`](Self::fill) when the buffer holds too little: drops what was consumed and
    /// reads more.
    #[cold]
    fn refill(&mut self, want: usize) -> Result<bool, PickleError> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.start += self.pos;
            self.pos = 0;
        }
        while self.buf.len() < want && !self.eof {
            let have = self.buf.len();
            let chunk = CHUNK.max(want - have).min(CHUNK * 16);
            self.buf.resize(have + chunk, 0);
            let read = loop {
                match self.source.read(&mut self.buf[have..]) {
                    Ok(read) => break read,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.buf.truncate(have);
                        return Err(PickleError::Read {
                            offset: self.start + have,
                            message: e.to_string(),
                        });
                    }
                }
            };
            self.buf.truncate(have + read);
            self.eof = read == 0;
        }
        Ok(self.buf.len() >= want)
    }

    /// The next byte, or `None` at the end of the input.
    pub(super) fn next_byte(&mut self) -> Result<Option<u8>, PickleError> {
        if !self.fill(1)? {
            return Ok(None);
        }
        let byte = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(byte))
    }

    /// The next `N` bytes: a fixed-size argument of the opcode `at`.
    pub(super) fn array<const N: usize>(&mut self, at: At) -> Result<[u8; N], PickleError> {
        let array = if self.fill(N)? {
            <[u8; N]>::try_from(&self.buf[self.pos..self.pos + N]).ok()
        } else {
            None
        };
        match array {
            Some(array) => {
                self.pos += N;
                Ok(array)
            }
            None => Err(PickleError::Truncated {
                opcode: at.opcode(),
                offset: at.offset,
                needed: N,
                remaining: self.remaining(),
            }),
        }
    }

    /// The next `declared` bytes, a length the opcode `at` read from the input; refused
    /// before anything is allocated when the input is known to be shorter, and otherwise
    /// read a chunk at a time, so a length the input does not back costs only the input.
    pub(super) fn declared(&mut self, declared: u64, at: At) -> Result<&[u8], PickleError> {
        let beyond = |input: &Self| PickleError::LengthBeyondInput {
            opcode: at.opcode(),
            offset: at.offset,
            declared,
            remaining: input.remaining(),
        };
        let Ok(len) = usize::try_from(declared) else {
            return Err(beyond(self));
        };
        if self.known_len.is_some() && declared > self.remaining() as u64 {
            return Err(beyond(self));
        }
        if len > self.max_argument {
            return Err(self.too_long(declared, at));
        }
        if !self.fill(len)? {
            return Err(beyond(self));
        }
        let slice = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }

    /// Checks that `declared` more bytes exist without reading them (`FRAME`). Only a slice's
    /// length is known up front; a stream is not read ahead (a frame only groups the opcodes
    /// in it, and one cut short is found at the opcode that runs past the end).
    pub(super) fn check_declared(&self, declared: u64, at: At) -> Result<(), PickleError> {
        if self.known_len.is_none()
            || u64::try_from(self.remaining()).is_ok_and(|remaining| declared <= remaining)
        {
            Ok(())
        } else {
            Err(PickleError::LengthBeyondInput {
                opcode: at.opcode(),
                offset: at.offset,
                declared,
                remaining: self.remaining(),
            })
        }
    }

    /// The text argument of the opcode `at`: the bytes up to the next `\n`, which is consumed
    /// but not returned.
    pub(super) fn line(&mut self, at: At) -> Result<&[u8], PickleError> {
        let mut scanned = 0;
        let len = loop {
            let rest = &self.buf[self.pos..];
            if let Some(len) = rest[scanned..].iter().position(|&b| b == b'\n') {
                break scanned + len;
            }
            scanned = rest.len();
            if scanned > self.max_argument {
                return Err(self.too_long(scanned as u64, at));
            }
            if !self.fill(scanned + 1)? {
                return Err(PickleError::Truncated {
                    opcode: at.opcode(),
                    offset: at.offset,
                    needed: scanned + 1,
                    remaining: scanned,
                });
            }
        };
        if len > self.max_argument {
            return Err(self.too_long(len as u64, at));
        }
        let line = &self.buf[self.pos..self.pos + len];
        self.pos += len + 1;
        Ok(line)
    }
}
