//! A running `memtrace serve` and raw HTTP/1.x to it, for the test files that talk to the
//! viewer.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `memtrace serve`, killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// The port it serves on.
    pub port: u16,
    /// What it printed up to and with the `serving ... at http://127.0.0.1:PORT/` line.
    pub banner: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `memtrace serve ARGS --port 0` and waits until it serves.
pub fn serve(args: &[&str]) -> Server {
    let args: Vec<&str> = ["serve"]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["--port", "0"])
        .collect();
    start(&args, &[])
}

/// Starts `memtrace` with `args` and `env` and waits for the line that names the address it
/// serves at, `http://127.0.0.1:PORT/` (lines before it, such as the demo's report, are kept
/// in the banner too).
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout);
    let mut banner = String::new();
    let mut line = String::new();
    while !line.contains("http://127.0.0.1:") {
        line.clear();
        let read = lines.read_line(&mut line).expect("memtrace writes lines");
        if read == 0 {
            let mut why = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = stderr.read_to_string(&mut why);
            }
            panic!("memtrace ended before serving: {banner}{why}");
        }
        banner.push_str(&line);
    }
    let port = line
        .rsplit_once("http://127.0.0.1:")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no 127.0.0.1 address in {line:?}"));
    Server {
        child,
        port,
        banner,
    }
}

/// A reply read off the wire.
pub struct Reply {
    /// The status, 0 when there was no status line.
    pub status: u16,
    /// The status line and headers.
    pub head: String,
    /// What came after the blank line.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON; a body that is not fails the test with its start.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            let body = String::from_utf8_lossy(&self.body);
            panic!(
                "{e}: not JSON: {}",
                body.chars().take(300).collect::<String>()
            )
        })
    }
}

/// Splits the bytes of one reply into its status, head and body.
pub fn split_reply(bytes: &[u8]) -> Reply {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = bytes.get(split + 4..).unwrap_or_default().to_vec();
    Reply { status, head, body }
}

/// Sends `raw` as is on a fresh connection and reads until the server closes it.
pub fn send(port: u16, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    // A guard against a hang, not a timing assertion.
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    stream.write_all(raw).expect("request sent");
    // Nothing more will come: a server waiting for the rest of a request sees the end.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    split_reply(&bytes)
}

/// GETs `target` over HTTP/1.0 (the server closes after the reply).
pub fn get(port: u16, target: &str) -> Reply {
    send(
        port,
        format!("GET {target} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
}

/// GETs `target` and parses its body as JSON; a status other than 200 fails the test with the
/// body.
pub fn get_json(port: u16, target: &str) -> Value {
    let reply = get(port, target);
    assert_eq!(
        reply.status,
        200,
        "{target}: {}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()
}
