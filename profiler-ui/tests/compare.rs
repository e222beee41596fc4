//! `memtrace serve` of several files: the comparison routes with exact values on rank traces
//! written here, bad file lists refused with one line, and the server's bounds (connections
//! capped, idle ones closed after the timeout) checked on the process itself.

mod common;

use common::scratch;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A blockpool JSON Lines trace written event by event: every allocation gets a segment of
/// exactly its size (so reserved bytes are known without the allocator's rounding), freed
/// blocks stay cached, and events are 10 µs apart (or all at time 0).
struct TraceText {
    lines: Vec<String>,
    contexts: HashMap<String, u32>,
    events: usize,
    time_us: u64,
    timed: bool,
    next_addr: u64,
}

impl TraceText {
    fn new(timed: bool) -> TraceText {
        TraceText {
            lines: vec![
                r#"{"blockpool_trace":1,"created_by":"compare test","time_origin_unix_us":0,"allocator_config":""}"#
                    .to_string(),
            ],
            contexts: HashMap::new(),
            events: 0,
            time_us: 1_000,
            timed,
            next_addr: 0x7f00_0000_0000,
        }
    }

    fn context(&mut self, tag: &str) -> u32 {
        if let Some(&id) = self.contexts.get(tag) {
            return id;
        }
        let id = self.contexts.len() as u32 + 1;
        self.lines.push(format!(
            r#"{{"context":{id},"tags":["{tag}"],"frames":[]}}"#
        ));
        self.contexts.insert(tag.to_string(), id);
        id
    }

    fn event(&mut self, action: &str, addr: u64, size: u64, requested: u64, context: u32) {
        let time = if self.timed { self.time_us } else { 0 };
        self.lines.push(format!(
            r#"{{"event":"{action}","device":0,"addr":{addr},"size":{size},"requested":{requested},"time_us":{time},"context":{context}}}"#
        ));
        self.events += 1;
        self.time_us += 10;
    }

    /// A segment of `size` bytes and a block filling it, `requested` asked for, under `tag`:
    /// two events. Returns the address.
    fn alloc(&mut self, tag: &str, size: u64, requested: u64) -> u64 {
        let context = self.context(tag);
        let addr = self.next_addr;
        self.next_addr += size;
        self.event("segment_alloc", addr, size, 0, context);
        self.event("alloc", addr, size, requested, context);
        addr
    }

    /// The block at `addr` freed (two events); its segment stays cached.
    fn free(&mut self, addr: u64, size: u64) {
        self.event("free_requested", addr, size, size, 0);
        self.event("free_completed", addr, size, size, 0);
    }

    fn write(mut self, path: &Path) -> PathBuf {
        let events = self.events;
        self.lines.push(format!(
            r#"{{"end":{{"events":{events},"segments":0,"dropped_events":0}}}}"#
        ));
        let mut text = self.lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).expect("trace written");
        path.to_path_buf()
    }
}

/// One rank of a job: 16 MiB of `weights` (100 bytes fewer asked for), 8 MiB of `scratch`
/// allocated and freed (cached), then `activations` MiB of `activations` kept to the end:
/// 8 events. Allocated bytes peak at event 8 at 16 + `activations` MiB; reserved bytes at
/// event 7 (the activations' segment) at 24 + `activations` MiB.
fn rank_trace(path: &Path, activations: u64, timed: bool) -> PathBuf {
    let mut t = TraceText::new(timed);
    t.alloc("weights", 16 * MIB, 16 * MIB - 100);
    let scratch = t.alloc("scratch", 8 * MIB, 8 * MIB);
    t.free(scratch, 8 * MIB);
    t.alloc("activations", activations * MIB, activations * MIB);
    t.write(path)
}

/// A running `memtrace serve`, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `memtrace serve` with `args` (after `serve`, before `--port 0`) and waits for the
/// line with its address.
fn serve(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .arg("serve")
        .args(args)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("memtrace starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout);
    let mut banner = String::new();
    let mut line = String::new();
    while !line.contains("http://127.0.0.1:") {
        line.clear();
        let read = lines.read_line(&mut line).expect("memtrace writes lines");
        assert!(read > 0, "memtrace ended before serving: {banner}");
        banner.push_str(&line);
    }
    let port = line
        .rsplit_once("http://127.0.0.1:")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no 127.0.0.1 address in {line:?}"));
    Server { child, port }
}

/// The status and body of `raw` sent on a fresh connection, read to its end.
fn send(port: u16, raw: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    // A guard against a hang, not a timing assertion.
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    stream.write_all(raw).expect("request sent");
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    split_reply(&bytes)
}

fn split_reply(bytes: &[u8]) -> (u16, Vec<u8>) {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = String::from_utf8_lossy(&bytes[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, bytes.get(split + 4..).unwrap_or_default().to_vec())
}

fn get(port: u16, target: &str) -> (u16, Value) {
    let (status, body) = send(
        port,
        format!("GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
    );
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!("{target}: {e}: {}", String::from_utf8_lossy(&body));
    });
    (status, json)
}

/// Threads of process `pid`, from `/proc`.
#[cfg(target_os = "linux")]
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads line")
}

/// What `stream` has to read now: `None` when nothing came yet, `Some(0)` at its end, else
/// how many bytes are waiting (up to 64).
fn waiting(stream: &TcpStream) -> Option<usize> {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut bytes = [0u8; 64];
    let peeked = stream.peek(&mut bytes);
    stream.set_nonblocking(false).expect("blocking");
    match peeked {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(_) => Some(0),
        Ok(n) => Some(n),
    }
}

#[test]
fn idle_connections_are_capped_then_closed_after_the_timeout() {
    const CAP: usize = 8;
    const SOCKETS: usize = 300;
    // Long enough that the served ones are still open when the threads are counted.
    const TIMEOUT: Duration = Duration::from_secs(3);
    let trace = rank_trace(&scratch("idle.jsonl"), 16, true);
    let server = serve(&[
        &trace.to_string_lossy(),
        "--max-connections",
        &CAP.to_string(),
        "--idle-timeout",
        &TIMEOUT.as_secs().to_string(),
    ]);
    let opened = Instant::now();
    let sockets: Vec<TcpStream> = (0..SOCKETS)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).expect("connects"))
        .collect();
    // Every socket past the cap is answered at once; the ones served stay silent, waiting for
    // a request.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut answered = 0;
    while Instant::now() < deadline {
        answered = sockets
            .iter()
            .filter(|s| waiting(s).is_some_and(|n| n > 0))
            .count();
        if answered >= SOCKETS - CAP {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(answered, SOCKETS - CAP, "all but {CAP} refused at once");
    assert!(
        opened.elapsed() < TIMEOUT,
        "the refusals took {:?}, past the timeout: the counts below would not hold",
        opened.elapsed()
    );
    #[cfg(target_os = "linux")]
    assert_eq!(
        threads(server.child.id()),
        1 + CAP,
        "the accepting thread and one per served connection, not one per socket"
    );
    let (mut refused, mut held) = (Vec::new(), Vec::new());
    for socket in sockets {
        if waiting(&socket).is_some_and(|n| n > 0) {
            refused.push(socket);
        } else {
            held.push(socket);
        }
    }
    let mut reply = Vec::new();
    refused[0].read_to_end(&mut reply).expect("read");
    let (status, body) = split_reply(&reply);
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&reply));
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        body["error"],
        "this viewer serves at most 8 connections at once (--max-connections); try again when \
         one closes"
    );
    // The held ones are closed, without a word, once idle for the timeout: not before.
    for mut socket in held {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut bytes = Vec::new();
        let read = socket.read_to_end(&mut bytes);
        assert!(read.is_ok() && bytes.is_empty(), "{read:?} {bytes:?}");
        assert!(
            opened.elapsed() >= TIMEOUT,
            "closed after {:?}, before the timeout",
            opened.elapsed()
        );
    }
    #[cfg(target_os = "linux")]
    {
        let deadline = Instant::now() + Duration::from_secs(10);
        while threads(server.child.id()) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            threads(server.child.id()),
            1,
            "every connection's thread ended"
        );
    }
    drop(refused);
    let (status, meta) = get(server.port, "/api/meta");
    assert_eq!((status, &meta["format"]), (200, &Value::from("jsonl")));
}

#[test]
fn a_trickled_request_is_cut_at_the_timeout_and_keep_alive_serves_several() {
    let trace = rank_trace(&scratch("trickle.jsonl"), 16, true);
    let server = serve(&[&trace.to_string_lossy(), "--idle-timeout", "0.5"]);

    // A header byte every 100 ms never completes the head: the server gives up after 0.5 s
    // of it, not when the client stops.
    let mut slow = TcpStream::connect(("127.0.0.1", server.port)).expect("connects");
    slow.write_all(b"GET /api/meta HTTP/1.1\r\nX: ")
        .expect("sent");
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        if slow.write_all(b"a").is_err() || waiting(&slow).is_some() {
            cut = true;
            break;
        }
    }
    assert!(cut, "still open after {:?} of trickling", started.elapsed());
    let mut reply = Vec::new();
    let _ = slow.read_to_end(&mut reply);
    assert_eq!(
        split_reply(&reply).0,
        408,
        "{}",
        String::from_utf8_lossy(&reply)
    );

    // Two requests on one connection (HTTP/1.1 keeps it), then silence closes it.
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let request = b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    stream.write_all(request).expect("sent");
    stream.write_all(request).expect("sent");
    let mut bytes = Vec::new();
    let read = stream.read_to_end(&mut bytes);
    assert!(
        read.is_ok(),
        "closed by the server, not by our timeout: {read:?}"
    );
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert_eq!(text.matches("Connection: keep-alive").count(), 2, "{text}");
}
