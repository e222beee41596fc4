//! HTTP/1.1 as far as the viewer needs it, on a plain [`TcpStream`]: read one request head at a
//! time under a deadline, write one reply with its length, keep the connection for the next
//! request unless either side says otherwise.
//!
//! The viewer only answers `GET`s without a body, so a request body is never read: a request
//! that announces one gets its reply and the connection is closed, since where the next request
//! would start is unknown. Heads are at most [`MAX_HEAD_BYTES`]; a longer one is a 431.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Most bytes of a request line and its headers.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// A request's line and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// `GET`, `POST`, ... as sent.
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// `HTTP/1.0` is `0`, `HTTP/1.1` is `1`.
    pub minor_version: u8,
    /// Header names and values in the order sent (values trimmed).
    pub headers: Vec<(String, String)>,
}

impl RequestHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a body follows the head (a non-zero `Content-Length`, or any
    /// `Transfer-Encoding`).
    pub fn has_body(&self) -> bool {
        self.header("Transfer-Encoding").is_some()
            || self
                .header("Content-Length")
                .is_some_and(|n| n.trim() != "0")
    }

    /// Whether the client wants the connection kept after the reply: HTTP/1.1 unless it says
    /// `Connection: close`; HTTP/1.0 never (its keep-alive extension is not spoken here).
    pub fn keep_alive(&self) -> bool {
        let close = self.header("Connection").is_some_and(|v| {
            v.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case("close"))
        });
        self.minor_version == 1 && !close
    }
}

/// What reading the next request gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A whole request head.
    Request(RequestHead),
    /// The client closed the connection, or sent nothing for the whole timeout: close quietly.
    Idle,
    /// Part of a head came, but not the rest before the deadline: answer 408 and close.
    TimedOut,
    /// Not HTTP/1.x: answer 400 (with the reason) and close.
    Malformed(&'static str),
    /// The head is longer than [`MAX_HEAD_BYTES`]: answer 431 and close.
    TooLarge,
}

/// One client's connection, with the bytes read past the last request.
pub struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    /// Wraps an accepted stream.
    pub fn new(stream: TcpStream) -> Connection {
        Connection {
            stream,
            buffer: Vec::new(),
        }
    }

    /// Reads the next request head: its first byte must arrive within `wait` from now, and
    /// the whole head within `whole` of its first byte (and of now, when bytes of it came
    /// with the last request), so a client that trickles bytes is closed as surely as a
    /// silent one.
    pub fn next_request(&mut self, wait: Duration, whole: Duration) -> Incoming {
        let now = Instant::now();
        let begun = |buffer: &[u8]| buffer.iter().any(|b| !b.is_ascii_whitespace());
        let mut started = begun(&self.buffer);
        let mut deadline = now + if started { whole } else { wait };
        let mut chunk = [0u8; 4096];
        // Bytes already searched for the blank line, less the two a line end can span: a
        // client sending a byte at a time costs one pass over its head, not one per byte.
        let mut searched = 0;
        loop {
            if let Some(end) = head_end(&self.buffer, searched) {
                let head: Vec<u8> = self.buffer.drain(..end).collect();
                return parse_head(&head);
            }
            searched = self.buffer.len().saturating_sub(2);
            if self.buffer.len() > MAX_HEAD_BYTES {
                return Incoming::TooLarge;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
                return self.timed_out();
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Incoming::Idle,
                Ok(n) => {
                    self.buffer.extend_from_slice(&chunk[..n]);
                    if !started && begun(&self.buffer) {
                        started = true;
                        deadline = Instant::now() + whole;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return self.timed_out()
                }
                Err(_) => return Incoming::Idle,
            }
        }
    }

    fn timed_out(&self) -> Incoming {
        if self.buffer.iter().all(|b| b.is_ascii_whitespace()) {
            Incoming::Idle
        } else {
            Incoming::TimedOut
        }
    }

    /// Writes a reply: `status`, `headers`, then `body` with its length; each write must make
    /// progress within `timeout`. `keep_alive` says whether the connection stays open for
    /// another request.
    pub fn respond(&mut self, reply: Response<'_>, timeout: Duration) -> io::Result<()> {
        self.stream.set_write_timeout(Some(timeout))?;
        self.stream.write_all(&reply.encode())?;
        self.stream.flush()
    }

    /// Closes the connection both ways.
    pub fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// A reply as written on the wire.
#[derive(Clone, Copy, Debug)]
pub struct Response<'r> {
    /// HTTP status.
    pub status: u16,
    /// Headers beside `Content-Length` and `Connection`.
    pub headers: &'r [(&'r str, &'r str)],
    /// The body.
    pub body: &'r [u8],
    /// Whether the connection stays open after it.
    pub keep_alive: bool,
}

impl Response<'_> {
    /// The status line, headers, blank line and body.
    pub fn encode(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "Content-Length: {}\r\nConnection: {}\r\n\r\n",
            self.body.len(),
            if self.keep_alive {
                "keep-alive"
            } else {
                "close"
            }
        ));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(self.body);
        bytes
    }
}

/// Where the head in `buffer` ends (past its blank line), if it has arrived, searching from
/// byte `from`. A line may end in a bare LF as well as in CRLF (RFC 9112, 2.2 lets a server
/// take either), so a head typed by hand is not left waiting for a CR that never comes.
fn head_end(buffer: &[u8], from: usize) -> Option<usize> {
    let rest = buffer.get(from..)?;
    rest.iter().enumerate().find_map(|(i, &b)| {
        if b != b'\n' {
            return None;
        }
        match rest.get(i + 1..) {
            Some([b'\n', ..]) => Some(from + i + 2),
            Some([b'\r', b'\n', ..]) => Some(from + i + 3),
            _ => None,
        }
    })
}

/// Reads a request line and headers (`head` ends with the blank line).
fn parse_head(head: &[u8]) -> Incoming {
    if head.len() > MAX_HEAD_BYTES {
        return Incoming::TooLarge;
    }
    let Ok(text) = std::str::from_utf8(head) else {
        return Incoming::Malformed("the request head is not UTF-8");
    };
    // Blank lines before a request line are allowed, and lines may end in a bare LF (RFC
    // 9112, 2.2).
    let mut lines = text
        .trim_start_matches(['\r', '\n'])
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .take_while(|l| !l.is_empty());
    let Some(request_line) = lines.next() else {
        return Incoming::Malformed("no request line");
    };
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Incoming::Malformed("the request line is not `METHOD TARGET HTTP/1.x`");
    };
    let minor_version = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        _ => return Incoming::Malformed("only HTTP/1.0 and HTTP/1.1 are spoken"),
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Incoming::Malformed("the method is not a word in capitals");
    }
    if !target.starts_with('/') {
        return Incoming::Malformed("the target is not a path starting with `/`");
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Incoming::Malformed("a header line has no `:`");
        };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Incoming::Malformed("a header name is empty or holds spaces");
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Incoming::Request(RequestHead {
        method: method.to_string(),
        target: target.to_string(),
        minor_version,
        headers,
    })
}

/// The reason phrase of the statuses the viewer answers with.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(head: &str) -> RequestHead {
        match parse_head(head.as_bytes()) {
            Incoming::Request(r) => r,
            other => panic!("{head:?} is a request, not {other:?}"),
        }
    }

    #[test]
    fn heads_read_with_their_headers_and_connection_choice() {
        let r = request("GET /api/meta?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nAccept:  */* \r\n\r\n");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/api/meta?x=1");
        assert_eq!(r.header("host"), Some("127.0.0.1:1"));
        assert_eq!(r.header("ACCEPT"), Some("*/*"), "values are trimmed");
        assert!(r.keep_alive(), "HTTP/1.1 keeps the connection by default");
        assert!(!r.has_body());
        let closing = request("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
        assert!(!closing.keep_alive());
        assert!(!request("GET / HTTP/1.0\r\n\r\n").keep_alive());
        let posted = request("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n");
        assert!(posted.has_body());
        assert!(!request("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").has_body());
        assert!(
            request("\r\nGET / HTTP/1.1\r\n\r\n").keep_alive(),
            "leading blank line"
        );
    }

    #[test]
    fn heads_end_at_a_blank_line_of_crlf_or_bare_lf() {
        assert_eq!(
            head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest", 0),
            Some(27)
        );
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\nrest", 0), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\r\n", 0), Some(25));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
        // Searched up to `Host: a\r\n` less two bytes before: the LF of that line is seen.
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 23), Some(27));
        assert_eq!(
            head_end(b"ab", 7),
            None,
            "a start past the end finds nothing"
        );
        let r = request("GET /api/meta HTTP/1.1\nHost: localhost\n\n");
        assert_eq!(r.target, "/api/meta");
        assert_eq!(
            r.header("Host"),
            Some("localhost"),
            "no CR is left in the value"
        );
    }

    #[test]
    fn malformed_heads_are_refused_with_a_reason() {
        for head in [
            "GARBAGE\r\n\r\n",
            "GET\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "get / HTTP/1.1\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(head.as_bytes()), Incoming::Malformed(_)),
                "{head:?}"
            );
        }
        assert_eq!(
            parse_head(b"\x00\xff\xfe\r\n\r\n"),
            Incoming::Malformed("the request head is not UTF-8")
        );
    }
}
