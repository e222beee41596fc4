//! The HTTP server: bound to 127.0.0.1 only, one thread per open connection answering
//! [`routes`](super::routes) from one shared [`TraceSet`], with the connections bounded by
//! [`Limits`] so that no client can pile up threads or keep others out:
//! - at most so many open at once. When all are held, the one that has waited longest for a
//!   request (idle between requests, or still sending its first) is closed to make room; only
//!   when every one is being answered is a new one refused with a `503`;
//! - a new connection must send its request within the request timeout, and a request begun
//!   must arrive whole within it; between requests a connection is kept for the idle timeout.
//!
//! Only `GET` is answered (405 otherwise). A request must carry exactly one `Host` header
//! (400 otherwise, as RFC 9112 asks) naming a loopback name (403 otherwise): a web page
//! elsewhere cannot read the trace through DNS rebinding. Responses forbid every source but
//! the server itself (`Content-Security-Policy`), so the page cannot load a script from a CDN
//! even by mistake.

use super::error::ServeError;
use super::http::{Connection, Incoming, RequestHead, Response};
use super::routes::{answer, Reply};
use super::set::TraceSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Connections served at once unless `--max-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// How long an idle connection is kept unless `--idle-timeout` says otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request may take to arrive unless `--request-timeout` says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server holds open for its clients: each open connection has one thread, so these
/// bound the threads and sockets whatever the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once. One more closes the connection that has waited longest
    /// for a request, or is answered `503` when every one is being answered.
    pub max_connections: usize,
    /// How long a connection is kept between requests; also how long one write of a reply
    /// may wait for the client to read.
    pub idle_timeout: Duration,
    /// How long a new connection may take to send its request head, and any request to
    /// arrive whole once its first byte has (a request begun but not finished gets a `408`).
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
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
/// `limits.max_connections` at once (module docs), until the process ends.
pub fn serve_forever(listener: TcpListener, set: Arc<TraceSet>, limits: Limits) {
    let open = Arc::new(Registry::default());
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // Out of file descriptors, or a client gone before it was accepted: let a
            // connection close, then carry on.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // Only this thread admits, so the cap cannot be overshot between the check and the
        // entry.
        let Some(slot) = Registry::admit(&open, &stream, limits.max_connections) else {
            refuse(stream, limits);
            continue;
        };
        let set = Arc::clone(&set);
        // Should no thread start, the closure is dropped with the stream and the slot.
        let _ = std::thread::Builder::new()
            .name("memtrace-http".into())
            .spawn(move || serve_connection(stream, &set, limits, &slot));
    }
}

/// The open connections, each with a handle to close it and, while it waits for a request,
/// since when.
#[derive(Default)]
struct Registry {
    open: Mutex<Vec<Open>>,
    next_id: AtomicU64,
}

/// One open connection.
struct Open {
    id: u64,
    /// A second handle to the socket: shutting it down ends the connection's blocking read.
    stream: TcpStream,
    /// Since when it has waited for a request; `None` while one is being answered.
    waiting_since: Option<Instant>,
}

impl Registry {
    fn open(&self) -> std::sync::MutexGuard<'_, Vec<Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters `stream`, waiting for its first request, closing the connection that has waited
    /// longest when `max` are open; `None` when all `max` are being answered (or the socket
    /// cannot be shared).
    fn admit(registry: &Arc<Registry>, stream: &TcpStream, max: usize) -> Option<Slot> {
        let handle = stream.try_clone().ok()?;
        let mut open = registry.open();
        if open.len() >= max {
            let (index, _) = open
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.waiting_since.map(|since| (i, since)))
                .min_by_key(|&(_, since)| since)?;
            let evicted = open.swap_remove(index);
            // Its thread's read ends at once; its slot is already free.
            let _ = evicted.stream.shutdown(std::net::Shutdown::Both);
        }
        let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
        open.push(Open {
            id,
            stream: handle,
            waiting_since: Some(Instant::now()),
        });
        Some(Slot {
            registry: Arc::clone(registry),
            id,
        })
    }
}

/// One admitted connection's entry in the [`Registry`], removed when this drops.
struct Slot {
    registry: Arc<Registry>,
    id: u64,
}

impl Slot {
    /// Marks the connection as waiting for a request (`true`: it may be closed to make room)
    /// or being answered (`false`).
    fn set_waiting(&self, waiting: bool) {
        if let Some(open) = self.registry.open().iter_mut().find(|c| c.id == self.id) {
            open.waiting_since = waiting.then(Instant::now);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.open().retain(|c| c.id != self.id);
    }
}

/// Answers a connection over the cap with a `503` and closes it.
fn refuse(stream: TcpStream, limits: Limits) {
    let message = format!(
        "this viewer serves at most {} connections at once (--max-connections), and every \
         one is being answered; try again in a moment",
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
fn serve_connection(stream: TcpStream, set: &TraceSet, limits: Limits, slot: &Slot) {
    let _ = stream.set_nodelay(true);
    let mut connection = Connection::new(stream);
    // The first request is due within the request timeout; later ones within the idle one.
    let mut wait = limits.request_timeout;
    loop {
        slot.set_waiting(true);
        let incoming = connection.next_request(wait, limits.request_timeout);
        slot.set_waiting(false);
        wait = limits.idle_timeout;
        let (reply, keep_alive) = match incoming {
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
                    "the request did not arrive whole within the request timeout \
                     (--request-timeout)",
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
    let mut hosts = request
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("Host"));
    match (hosts.next(), hosts.count()) {
        (Some((_, host)), 0) if is_loopback_host(host) => {}
        (Some(_), 0) => {
            return Reply::error(
                403,
                "this viewer answers only requests addressed to 127.0.0.1",
            )
        }
        (first, more) => {
            let count = usize::from(first.is_some()) + more;
            return Reply::error(
                400,
                &format!("a request must carry exactly one Host header; this one has {count}"),
            );
        }
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
    use std::io::Read;

    /// A connected pair on loopback: the client's end and the server's.
    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().expect("bound")).expect("connects");
        let (server, _) = listener.accept().expect("accepted");
        (client, server)
    }

    #[test]
    fn a_full_registry_makes_room_from_the_longest_waiting_and_refuses_when_all_are_busy() {
        let (listener, _) = bind(0).expect("a free port");
        let registry = Arc::new(Registry::default());
        let (mut first_client, first) = pair(&listener);
        let (_second_client, second) = pair(&listener);
        let a = Registry::admit(&registry, &first, 2).expect("room");
        let b = Registry::admit(&registry, &second, 2).expect("room");
        a.set_waiting(false);
        b.set_waiting(false);
        let (_third_client, third) = pair(&listener);
        assert!(
            Registry::admit(&registry, &third, 2).is_none(),
            "both are being answered: refused"
        );
        a.set_waiting(true);
        let c = Registry::admit(&registry, &third, 2).expect("the waiting one makes room");
        let mut bytes = Vec::new();
        first_client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        assert_eq!(
            first_client.read_to_end(&mut bytes).ok(),
            Some(0),
            "the waiting connection was closed"
        );
        assert_eq!(registry.open().len(), 2);
        drop((a, c));
        assert_eq!(
            registry.open().len(),
            1,
            "slots leave with their connections"
        );
    }

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
