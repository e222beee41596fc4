//! `memtrace serve`'s bounds on its clients, checked on the process itself: sockets that hold
//! every slot without a request do not keep a new client out, a new connection must send its
//! request within the request timeout and a request begun must arrive whole within it, an
//! idle keep-alive connection is kept for the idle timeout, and a request needs exactly one
//! loopback `Host`.

mod common;

use common::fixture;
use common::server::{get, send, serve, split_reply};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A small real snapshot to serve.
fn trace() -> String {
    fixture("made_expandable_two_devices.pickle")
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

/// Polls `done` every 20 ms for up to 20 s (a guard against a hang, not a timing assertion).
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn sockets_holding_every_slot_do_not_keep_a_new_client_out() {
    const CAP: usize = 8;
    const SOCKETS: usize = 300;
    // Timeouts far beyond the test: only making room can let the client in.
    let server = serve(&[
        &trace(),
        "--max-connections",
        &CAP.to_string(),
        "--idle-timeout",
        "600",
        "--request-timeout",
        "600",
    ]);
    // Silent sockets, and sockets that begin a request and never finish it.
    let holders: Vec<TcpStream> = (0..SOCKETS)
        .map(|i| {
            let mut socket = TcpStream::connect(("127.0.0.1", server.port)).expect("connects");
            if i % 2 == 1 {
                socket
                    .write_all(b"GET /api/meta HTTP/1.1\r\nX: ")
                    .expect("sent");
            }
            socket
        })
        .collect();
    let closed = |holders: &[TcpStream]| holders.iter().filter(|s| waiting(s) == Some(0)).count();
    assert!(
        eventually(|| closed(&holders) == SOCKETS - CAP),
        "the oldest waiting connections are closed to make room: {} of {} closed",
        closed(&holders),
        SOCKETS - CAP
    );
    assert!(
        holders.iter().all(|s| waiting(s).is_none_or(|n| n == 0)),
        "closed without a word (no 503)"
    );
    #[cfg(target_os = "linux")]
    assert!(
        eventually(|| threads(server.child.id()) == 1 + CAP),
        "the accepting thread and one per open connection, not one per socket: {}",
        threads(server.child.id())
    );
    // While the newest CAP sockets still hold every slot, a client is answered.
    let reply = get(server.port, "/api/meta");
    assert_eq!(reply.status, 200, "{}", reply.head);
    assert_eq!(reply.json()["format"], "pytorch");
}

#[test]
fn a_new_connection_has_the_request_timeout_and_a_kept_one_the_idle_timeout() {
    let server = serve(&[&trace(), "--request-timeout", "0.5", "--idle-timeout", "30"]);
    // Silence on a new connection: closed without a word after the request timeout.
    let silent = TcpStream::connect(("127.0.0.1", server.port)).expect("connects");
    let opened = Instant::now();
    assert!(eventually(|| waiting(&silent) == Some(0)), "never closed");
    let waited = opened.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(20),
        "closed after {waited:?}"
    );

    // A header byte every 100 ms never completes the head: cut with a 408 once the request
    // timeout has passed since it began, not when the client stops.
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
    let reply = split_reply(&reply);
    assert_eq!(reply.status, 408, "{}", reply.head);
    assert!(
        String::from_utf8_lossy(&reply.body).contains("--request-timeout"),
        "the refusal names the flag that raises it"
    );

    // After a request, the connection is kept past the request timeout (the idle one
    // applies) and serves the next.
    let mut kept = TcpStream::connect(("127.0.0.1", server.port)).expect("connects");
    kept.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let request = b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    kept.write_all(request).expect("sent");
    let mut first = [0u8; 12];
    kept.read_exact(&mut first).expect("a reply");
    assert_eq!(&first, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_millis(1500));
    kept.write_all(b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("sent");
    let mut rest = Vec::new();
    kept.read_to_end(&mut rest).expect("read");
    let text = String::from_utf8_lossy(&rest);
    assert_eq!(
        text.matches("HTTP/1.1 200 OK").count(),
        1,
        "the second reply came on the kept connection: {text}"
    );
}

#[test]
fn a_request_needs_exactly_one_loopback_host() {
    let server = serve(&[&trace()]);
    let port = server.port;
    let none = send(port, b"GET /api/meta HTTP/1.0\r\n\r\n");
    assert_eq!(none.status, 400, "{}", none.head);
    assert_eq!(
        none.json()["error"],
        "a request must carry exactly one Host header; this one has 0"
    );
    let two = send(
        port,
        b"GET /api/meta HTTP/1.1\r\nHost: 127.0.0.1\r\nhost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(two.status, 400, "{}", two.head);
    assert_eq!(
        two.json()["error"],
        "a request must carry exactly one Host header; this one has 2"
    );
    let elsewhere = send(
        port,
        b"GET /api/meta HTTP/1.0\r\nHost: evil.example\r\n\r\n",
    );
    assert_eq!(elsewhere.status, 403);
    let one = send(port, b"GET /api/meta HTTP/1.0\r\nHOST: localhost:1\r\n\r\n");
    assert_eq!(one.status, 200, "{}", one.head);
}

#[test]
fn serve_help_states_the_connection_bounds() {
    let help = common::stdout(&common::memtrace(&["serve", "--help"]));
    for words in [
        "--max-connections <N>",
        "waited longest for a request",
        "--idle-timeout <SECONDS>",
        "[default: 30]",
        "--request-timeout <SECONDS>",
        "[default: 5]",
    ] {
        assert!(help.contains(words), "{words:?} in\n{help}");
    }
    let output = common::memtrace(&["serve", &trace(), "--request-timeout", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(common::stderr(&output).contains("`0` is out of range"));
}
