//! Decoding of scalar arguments: integers from two's complement bytes (`LONG1`, `LONG4`) and
//! from decimal text (`INT`, `LONG`), text floats, and the two text string encodings of
//! protocol 0 (`STRING`'s escaped Python 2 `repr`, `UNICODE`'s raw-unicode-escape).
//!
//! Every function returns the problem in words, which the caller wraps with the opcode and
//! offset. Integers are normalized: one that fits in 64 bits is always a [`Value::Int`], and a
//! [`Value::BigInt`] has no redundant sign bytes, so equal integers have one representation.

use std::sync::Arc;

use super::super::Value;

/// The most decimal digits accepted in a text integer, as Python's default
/// `sys.get_int_max_str_digits()`; it keeps the quadratic conversion below a millisecond.
const MAX_DECIMAL_DIGITS: usize = 4300;

/// An integer from little-endian two's complement bytes; no bytes is zero.
pub(super) fn int_from_le(bytes: &[u8]) -> Value {
    let mut len = bytes.len();
    // A top byte that only repeats the sign of the byte below it is redundant.
    while len >= 2 {
        let (top, below) = (bytes[len - 1], bytes[len - 2]);
        let redundant = (top == 0x00 && below & 0x80 == 0) || (top == 0xff && below & 0x80 != 0);
        if !redundant {
            break;
        }
        len -= 1;
    }
    let bytes = &bytes[..len];
    if bytes.len() > 8 {
        return Value::BigInt(Arc::from(bytes));
    }
    let negative = bytes.last().is_some_and(|&top| top & 0x80 != 0);
    let mut word = if negative { [0xff; 8] } else { [0; 8] };
    word[..bytes.len()].copy_from_slice(bytes);
    Value::Int(i64::from_le_bytes(word))
}

/// An integer written in decimal, with an optional sign and surrounding ASCII whitespace.
pub(super) fn int_from_decimal(text: &[u8]) -> Result<Value, &'static str> {
    let text = text.trim_ascii();
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("the argument is not a decimal integer");
    }
    if digits.len() > MAX_DECIMAL_DIGITS {
        return Err("the integer has more than 4300 decimal digits, Python's default limit");
    }
    // Little-endian base-2^32 magnitude.
    let mut limbs: Vec<u32> = Vec::new();
    for &digit in digits {
        let mut carry = u64::from(digit - b'0');
        for limb in &mut limbs {
            let wide = u64::from(*limb) * 10 + carry;
            *limb = wide as u32; // the low 32 bits; the rest carries
            carry = wide >> 32;
        }
        if carry != 0 {
            limbs.push(carry as u32); // below 10, so it fits
        }
    }
    let mut bytes: Vec<u8> = limbs.iter().flat_map(|limb| limb.to_le_bytes()).collect();
    bytes.push(0); // room for the sign bit
    if negative {
        // Two's complement: invert and add one.
        let mut carry = true;
        for byte in &mut bytes {
            let (sum, overflow) = (!*byte).overflowing_add(u8::from(carry));
            *byte = sum;
            carry = overflow;
        }
    }
    Ok(int_from_le(&bytes))
}

/// A float written as text (`repr` of a Python float, `inf` and `nan` included). As in
/// CPython's unpickler, a finite number too large for a float is an error, not infinity.
pub(super) fn float_from_text(text: &[u8]) -> Result<f64, &'static str> {
    let text = std::str::from_utf8(text.trim_ascii()).map_err(|_| "the argument is not a float")?;
    let value: f64 = text.parse().map_err(|_| "the argument is not a float")?;
    if value.is_infinite() && !text.to_ascii_lowercase().contains("inf") {
        return Err("the float is too large to represent");
    }
    Ok(value)
}

/// A memo index written as decimal text (`GET`, `PUT`).
pub(super) fn memo_index_from_text(text: &[u8]) -> Result<u64, &'static str> {
    let text = text.trim_ascii();
    if text.first() == Some(&b'-') {
        return Err("the memo index is negative");
    }
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or("the memo index is not a decimal integer below 2^64")
}

/// The bytes of a Python 2 `str` written by `STRING`: a quoted `repr` with backslash escapes,
/// decoded as Python's `codecs.escape_decode` does.
pub(super) fn python2_string(line: &[u8]) -> Result<Vec<u8>, &'static str> {
    let inner = match line {
        [quote @ (b'\'' | b'"'), inner @ .., last] if last == quote => inner,
        _ => return Err("the STRING argument must be quoted"),
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let Some((&escape, tail)) = rest.split_first() else {
            return Err("the STRING argument ends in a lone backslash");
        };
        rest = tail;
        match escape {
            b'\n' => {} // a line continuation
            b'\\' | b'\'' | b'"' => out.push(escape),
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut value = u32::from(escape - b'0');
                for _ in 0..2 {
                    match rest.split_first() {
                        Some((&digit @ b'0'..=b'7', tail)) => {
                            value = value * 8 + u32::from(digit - b'0');
                            rest = tail;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8); // Python keeps the low 8 bits of \400 and above
            }
            b'x' => {
                let (high, low) = match rest {
                    [high, low, ..] => (hex_digit(*high), hex_digit(*low)),
                    _ => (None, None),
                };
                let (Some(high), Some(low)) = (high, low) else {
                    return Err("the STRING argument has an invalid \\x escape");
                };
                out.push(((high << 4) | low) as u8);
                rest = &rest[2..];
            }
            other => {
                // Python keeps unknown escapes as written.
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

/// The text written by `UNICODE`: Latin-1 bytes with `\uXXXX` and `\UXXXXXXXX` escapes, decoded
/// as Python's `raw-unicode-escape` codec does (an escape counts only after an odd number of
/// backslashes).
pub(super) fn raw_unicode_escape(line: &[u8]) -> Result<String, &'static str> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'\\' {
            out.push(char::from(byte));
            continue;
        }
        let mut backslashes = 1usize;
        while let Some((b'\\', tail)) = rest.split_first() {
            backslashes += 1;
            rest = tail;
        }
        let digits = match rest.first() {
            Some(b'u') if backslashes % 2 == 1 => 4,
            Some(b'U') if backslashes % 2 == 1 => 8,
            _ => {
                out.extend(std::iter::repeat('\\').take(backslashes));
                continue;
            }
        };
        out.extend(std::iter::repeat('\\').take(backslashes - 1));
        let Some(hex) = rest.get(1..1 + digits) else {
            return Err("the UNICODE argument has a truncated \\u or \\U escape");
        };
        let mut code = 0u32;
        for &digit in hex {
            let Some(value) = hex_digit(digit) else {
                return Err("the UNICODE argument has a truncated \\u or \\U escape");
            };
            code = (code << 4) | value;
        }
        rest = &rest[1 + digits..];
        match char::from_u32(code) {
            Some(ch) => out.push(ch),
            None if code <= 0x10ffff => {
                return Err(
                    "the UNICODE argument holds a lone surrogate, which Rust strings cannot",
                )
            }
            None => return Err("the UNICODE argument has a \\U escape past U+10FFFF"),
        }
    }
    Ok(out)
}

/// The value of an ASCII hex digit.
fn hex_digit(byte: u8) -> Option<u32> {
    char::from(byte).to_digit(16)
}
