//! The tokenizer of config strings, which reads them as PyTorch's `ConfigTokenizer` does, and
//! the cursor the parser walks the tokens with.

use super::error::ConfigError;

/// One token of a config string: a word, or one of `,` `:` `[` `]`.
#[derive(Debug)]
pub(super) struct Token<'a> {
    /// The word with its whitespace removed, as PyTorch's tokenizer sees it.
    pub(super) text: String,
    /// The text as written, without surrounding whitespace: what error messages quote.
    pub(super) raw: &'a str,
    /// Byte offset of `raw` in the config string.
    pub(super) start: usize,
    /// The punctuation character, if this token is one.
    pub(super) punct: Option<char>,
}

/// Splits at `,` `:` `[` `]` and drops whitespace (C's `isspace`) wherever it is, as PyTorch's
/// `ConfigTokenizer` does, so `max split` is the single word `maxsplit`.
pub(super) fn tokenize(conf: &str) -> Vec<Token<'_>> {
    fn flush<'a>(
        conf: &'a str,
        tokens: &mut Vec<Token<'a>>,
        word: &mut Option<(usize, usize)>,
        text: &mut String,
    ) {
        if let Some((start, end)) = word.take() {
            tokens.push(Token {
                text: std::mem::take(text),
                raw: &conf[start..end],
                start,
                punct: None,
            });
        }
    }
    let mut tokens = Vec::new();
    let mut word: Option<(usize, usize)> = None;
    let mut text = String::new();
    for (i, c) in conf.char_indices() {
        match c {
            ',' | ':' | '[' | ']' => {
                flush(conf, &mut tokens, &mut word, &mut text);
                let raw = &conf[i..i + 1];
                tokens.push(Token {
                    text: raw.to_owned(),
                    raw,
                    start: i,
                    punct: Some(c),
                });
            }
            ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' => {}
            _ => {
                let end = i + c.len_utf8();
                word = Some(word.map_or((i, end), |(start, _)| (start, end)));
                text.push(c);
            }
        }
    }
    flush(conf, &mut tokens, &mut word, &mut text);
    tokens
}

/// Reads tokens in order: the whole string, or the inside of one list.
pub(super) struct Cursor<'t, 'a> {
    pub(super) tokens: &'t [Token<'a>],
    pub(super) pos: usize,
    /// What running out of tokens means, as an error message shows it: `None` for the end of
    /// the string, `Some("]")` inside a list.
    pub(super) end: Option<&'static str>,
}

impl<'t, 'a> Cursor<'t, 'a> {
    pub(super) fn next(&mut self) -> Option<&'t Token<'a>> {
        let token = self.tokens.get(self.pos)?;
        self.pos += 1;
        Some(token)
    }

    pub(super) fn peek(&self) -> Option<&'t Token<'a>> {
        self.tokens.get(self.pos)
    }

    pub(super) fn unexpected(
        &self,
        expected: &'static str,
        after: &str,
        found: Option<&Token<'_>>,
    ) -> ConfigError {
        ConfigError::UnexpectedToken {
            expected,
            after: Some(after.to_owned()),
            found: found.map(|t| t.raw).or(self.end).map(str::to_owned),
        }
    }

    pub(super) fn expect_colon(&mut self, key: &Token<'_>) -> Result<(), ConfigError> {
        match self.next() {
            Some(t) if t.punct == Some(':') => Ok(()),
            other => Err(self.unexpected("`:`", key.raw, other)),
        }
    }

    /// The next token, which must be a word (a value, not punctuation).
    pub(super) fn word(
        &mut self,
        expected: &'static str,
        after: &str,
    ) -> Result<&'t Token<'a>, ConfigError> {
        match self.next() {
            Some(t) if t.punct.is_none() => Ok(t),
            other => Err(self.unexpected(expected, after, other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::{parse_ok, MIB_U};

    #[test]
    fn whitespace_is_ignored_anywhere_as_pytorch_tokenizer_does() {
        let c = parse_ok(" max_split_size_mb : 1 00 ,\texpandable_segments:\nTrue\r\n");
        assert_eq!(c.max_split_size(), 100 * MIB_U);
        assert!(c.expandable_segments());
    }
}
