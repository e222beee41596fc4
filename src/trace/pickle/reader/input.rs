//! The input cursor: opcode bytes, fixed-size arguments, declared lengths and text lines, each
//! read with bounds checked before anything is allocated.

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

/// The bytes of a pickle and the position of the next unread byte.
pub(super) struct Input<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    /// A cursor at the start of `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Input { bytes, pos: 0 }
    }

    /// The offset of the next unread byte.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next byte, or `None` at the end of the input.
    pub(super) fn next_byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(byte)
    }

    /// The next `N` bytes: a fixed-size argument of the opcode `at`.
    pub(super) fn array<const N: usize>(&mut self, at: At) -> Result<[u8; N], PickleError> {
        let array = self
            .pos
            .checked_add(N)
            .and_then(|end| self.bytes.get(self.pos..end))
            .and_then(|bytes| <[u8; N]>::try_from(bytes).ok());
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
    /// before anything is allocated when the input is shorter.
    pub(super) fn declared(&mut self, declared: u64, at: At) -> Result<&'a [u8], PickleError> {
        let slice = usize::try_from(declared)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .and_then(|end| self.bytes.get(self.pos..end).map(|slice| (end, slice)));
        match slice {
            Some((end, slice)) => {
                self.pos = end;
                Ok(slice)
            }
            None => Err(PickleError::LengthBeyondInput {
                opcode: at.opcode(),
                offset: at.offset,
                declared,
                remaining: self.remaining(),
            }),
        }
    }

    /// Checks that `declared` more bytes exist without reading them (`FRAME`).
    pub(super) fn check_declared(&self, declared: u64, at: At) -> Result<(), PickleError> {
        if u64::try_from(self.remaining()).is_ok_and(|remaining| declared <= remaining) {
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
    pub(super) fn line(&mut self, at: At) -> Result<&'a [u8], PickleError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let Some(len) = rest.iter().position(|&b| b == b'\n') else {
            return Err(PickleError::Truncated {
                opcode: at.opcode(),
                offset: at.offset,
                needed: rest.len() + 1,
                remaining: rest.len(),
            });
        };
        self.pos += len + 1;
        Ok(&rest[..len])
    }
}
