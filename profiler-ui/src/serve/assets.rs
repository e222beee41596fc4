//! The pages (the viewer of one trace, `index.html`; several side by side, `compare.html`),
//! embedded in the binary at build time from `profiler-ui/assets/`: the viewer
//! needs no network and reads no file at run time.

/// An embedded file.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub body: &'static [u8],
}

const INDEX: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../../assets/index.html"),
};

/// The comparison page: `/` when several files are served.
pub const COMPARE: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../../assets/compare.html"),
};

/// The asset served at `path`, if any; only these exact paths exist.
pub fn asset(path: &str) -> Option<Asset> {
    match path {
        "/" | "/index.html" => Some(INDEX),
        "/app.js" => Some(Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../../assets/app.js"),
        }),
        "/tree.js" => Some(Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../../assets/tree.js"),
        }),
        "/style.css" => Some(Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../../assets/style.css"),
        }),
        "/compare.html" => Some(COMPARE),
        "/compare.js" => Some(Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../../assets/compare.js"),
        }),
        "/compare.css" => Some(Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../../assets/compare.css"),
        }),
        _ => None,
    }
}
