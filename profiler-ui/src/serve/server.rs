//! The HTTP server: bound to 127.0.0.1 only, a few threads answering [`routes`](super::routes)
//! from one shared [`TraceModel`].
//!
//! Only `GET` is answered (405 otherwise). A request whose `Host` is not a loopback name is
//! refused (403): a web page elsewhere cannot read the trace through DNS rebinding. Responses
//! forbid every source but the server itself (`Content-Security-Policy`), so the page cannot
//! load a script from a CDN even by mistake.

use super::error::ServeError;
use super::model::TraceModel;
use super::routes::{answer, Reply};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use tiny_http::{Header, Method, Request, Response, Server};

/// Threads answering requests.
const THREADS: usize = 4;

/// Binds `port` (0: any free one) on 127.0.0.1; the address actually bound comes with it.
pub fn bind(port: u16) -> Result<(Server, SocketAddr), ServeError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .map_err(|source| ServeError::Bind { port, source })?;
    let address = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { port, source })?;
    let server =
        Server::from_listener(listener, None).map_err(|e| ServeError::Http(e.to_string()))?;
    Ok((server, address))
}

/// Answers requests until the process ends.
pub fn serve_forever(server: Server, model: Arc<TraceModel>) {
    let server = Arc::new(server);
    let workers: Vec<_> = (1..THREADS)
        .map(|_| {
            let (server, model) = (Arc::clone(&server), Arc::clone(&model));
            std::thread::spawn(move || worker(&server, &model))
        })
        .collect();
    worker(&server, &model);
    for w in workers {
        let _ = w.join();
    }
}

fn worker(server: &Server, model: &TraceModel) {
    // `recv` fails only when the server shuts down.
    while let Ok(request) = server.recv() {
        let reply = catch_unwind(AssertUnwindSafe(|| reply_to(&request, model)))
            .unwrap_or_else(|_| Reply::error(500, "the viewer failed on this request"));
        respond(request, reply);
    }
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
pub fn reply_to(request: &Request, model: &TraceModel) -> Reply {
    let host = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str());
    if host.is_some_and(|h| !is_loopback_host(h)) {
        return Reply::error(
            403,
            "this viewer answers only requests addressed to 127.0.0.1",
        );
    }
    if *request.method() != Method::Get {
        return Reply::error(405, "only GET is answered");
    }
    answer(model, request.url())
}

fn respond(request: Request, reply: Reply) {
    let headers: [(&[u8], &[u8]); 5] = [
        (b"Content-Type", reply.content_type.as_bytes()),
        (b"Cache-Control", b"no-store"),
        (b"X-Content-Type-Options", b"nosniff"),
        (
            b"Content-Security-Policy",
            b"default-src 'self'; img-src 'self' data:; style-src 'self'",
        ),
        (b"Referrer-Policy", b"no-referrer"),
    ];
    let mut response = Response::from_data(reply.body).with_status_code(reply.status);
    for (name, value) in headers {
        if let Ok(header) = Header::from_bytes(name, value) {
            response = response.with_header(header);
        }
    }
    if reply.status == 405 {
        if let Ok(header) = Header::from_bytes(&b"Allow"[..], &b"GET"[..]) {
            response = response.with_header(header);
        }
    }
    // A client that went away is no error of ours.
    let _ = request.respond(response);
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
