//! The HTTP server: bound to 127.0.0.1 only, one thread per open connection answering
//! [`routes`](super::routes) from one shared [`TraceSet`], with the connections bounded by
//! [`Limits`]: at most so many at once (one more is refused with a `503`), and none kept longer
//! than the idle timeout without a request, so idle or trickling clients cannot pile up
//! threads.
//!
//! Only `GET` is answered (405 otherwise). A request whose `Host` is not a loopback name is
//! refused (403): a web page elsewhere cannot read the trace through DNS rebinding. Responses
//! forbid every source but the server itself (`Content-Security-Policy`), so the page cannot
//! load a script from a CDN even by mistake.

use super::error::ServeError;
use super::http::{Connection, Incoming, RequestHead, Response};
use super::routes::{answer, Reply};
use super::set::TraceSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once unless `--max-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// How long an idle connection is kept unless `--idle-timeout` says otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the server holds open for its clients: each open connection has one thread, so these
/// bound the threads and sockets whatever the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once; one more is answered `503` and closed at once.
    pub max_connections: usize,
    /// How long a connection may wait for its next request, or for the rest of one, before it
    /// is closed (a request begun but not finished gets a `408`); also how long one write of a
    /// reply may wait for the client to read.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Binds `port` (0: any free one) on 127.0.0.1; the address actually bound comes with it.
pub fn bind(port: u16) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .map_err(|source| ServeError::Bind { port, source })?;
    let address = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { port, source })?;
    Ok((listener, address))
}

/// Accepts connections on this thread and answers each on a thread of its own, at most
/// `limits.max_connections` at once, until the process ends.
pub fn serve_forever(listener: TcpListener, set: Arc<TraceSet>, limits: Limits) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // Out of file descriptors, or a client gone before it was accepted: let a
            // connection close, then carry on.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // Only this thread adds to `open`, so the cap cannot be overshot between the check
        // and the increment.
        if open.load(Ordering::Acquire) >= limits.max_connections {
            refuse(stream, limits);
            continue;
        }
        let slot = Slot::take(&open);
        let set = Arc::clone(&set);
        // Should no thread start, the closure is dropped with the stream and the slot.
        let _ = std::thread::Builder::new()
            .name("memtrace-http".into())
            .spawn(move || {
                let _slot = slot;
                serve_connection(stream, &set, limits);
            });
    }
}

/// One open connection counted in `open` for as long as this lives.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>) -> Slot {
        open.fetch_add(1, Ordering::AcqRel);
        Slot(Arc::clone(open))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a connection over the cap with a `503` and closes it.
fn refuse(stream: TcpStream, limits: Limits) {
    let message = format!(
        "this viewer serves at most {} connections at once (--max-connections); try again \
         when one closes",
        limits.max_connections
    );
    let mut connection = Connection::new(stream);
    let _ = respond(
        &mut connection,
        &Reply::error(503, &message),
        false,
        Duration::from_secs(1),
    );
    connection.close();
}

/// Answers the requests of one connection until the client closes it, stays idle for the
/// timeout, or sends something that leaves the stream unreadable.
fn serve_connection(stream: TcpStream, set: &TraceSet, limits: Limits) {
    let _ = stream.set_nodelay(true);
    let mut connection = Connection::new(stream);
    loop {
        let (reply, keep_alive) = match connection.next_request(limits.idle_timeout) {
            Incoming::Request(head) => {
                let reply = catch_unwind(AssertUnwindSafe(|| reply_to(&head, set)))
                    .unwrap_or_else(|_| Reply::error(500, "the viewer failed on this request"));
                // An unread body would be taken for the next request.
                (reply, head.keep_alive() && !head.has_body())
            }
            Incoming::Idle => break,
            Incoming::TimedOut => (
                Reply::error(
                    408,
                    "the request did not arrive whole within the idle timeout",
                ),
                false,
            ),
            Incoming::Malformed(reason) => (Reply::error(400, reason), false),
            Incoming::TooLarge => (
                Reply::error(431, "the request line and headers are too long"),
                false,
            ),
        };
        let sent = respond(&mut connection, &reply, keep_alive, limits.idle_timeout);
        if sent.is_err() || !keep_alive {
            break;
        }
    }
    connection.close();
}

/// Whether `host` (a `Host` header value) names this machine's loopback interface.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

/// The reply to `request`.
pub fn reply_to(request: &RequestHead, set: &TraceSet) -> Reply {
    if request.header("Host").is_some_and(|h| !is_loopback_host(h)) {
        return Reply::error(
            403,
            "this viewer answers only requests addressed to 127.0.0.1",
        );
    }
    if request.method != "GET" {
        return Reply::error(405, "only GET is answered");
    }
    answer(set, &request.target)
}

/// Writes `reply` with the headers every reply carries.
fn respond(
    connection: &mut Connection,
    reply: &Reply,
    keep_alive: bool,
    timeout: Duration,
) -> std::io::Result<()> {
    let mut headers: Vec<(&str, &str)> = vec![
        ("Content-Type", reply.content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        (
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'",
        ),
        ("Referrer-Policy", "no-referrer"),
    ];
    if reply.status == 405 {
        headers.push(("Allow", "GET"));
    }
    connection.respond(
        Response {
            status: reply.status,
            headers: &headers,
            body: &reply.body,
            keep_alive,
        },
        timeout,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass_the_host_check() {
        for host in [
            "127.0.0.1:8700",
            "localhost:1",
            "localhost",
            "[::1]:80",
            "127.0.0.1",
        ] {
            assert!(is_loopback_host(host), "{host} is loopback");
        }
        for host in [
            "evil.example:8700",
            "127.0.0.1.evil.example",
            "10.0.0.1:8700",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host} must be refused");
        }
    }
}
