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

/// A script.
const fn script(body: &'static [u8]) -> Asset {
    Asset {
        content_type: "text/javascript; charset=utf-8",
        body,
    }
}

/// The asset served at `path`, if any; only these exact paths exist.
pub fn asset(path: &str) -> Option<Asset> {
    match path {
        "/" | "/index.html" => Some(INDEX),
        "/app.js" => Some(script(include_bytes!("../../assets/app.js"))),
        "/tree.js" => Some(script(include_bytes!("../../assets/tree.js"))),
        "/chart.js" => Some(script(include_bytes!("../../assets/chart.js"))),
        "/panels.js" => Some(script(include_bytes!("../../assets/panels.js"))),
        "/streams.js" => Some(script(include_bytes!("../../assets/streams.js"))),
        "/context.js" => Some(script(include_bytes!("../../assets/context.js"))),
        "/style.css" => Some(Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../../assets/style.css"),
        }),
        "/compare.html" => Some(COMPARE),
        "/compare.js" => Some(script(include_bytes!("../../assets/compare.js"))),
        "/compare.css" => Some(Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../../assets/compare.css"),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Elements that take no closing tag.
    const VOID: [&str; 8] = ["meta", "link", "input", "br", "img", "hr", "col", "source"];

    /// The first element of `html` left open or closed out of order, if any (comments,
    /// doctype and void elements aside; attribute values hold no `>` in our pages).
    fn unbalanced(html: &str) -> Option<String> {
        let mut open: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find('<') {
            rest = &rest[start + 1..];
            let end = rest.find('>')?;
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('!') {
                continue;
            }
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_ascii_lowercase();
            if tag.starts_with('/') {
                match open.pop() {
                    Some(top) if top == name => {}
                    Some(top) => return Some(format!("<{top}> closed by </{name}>")),
                    None => return Some(format!("</{name}> with nothing open")),
                }
            } else if !VOID.contains(&name.as_str()) && !tag.ends_with('/') {
                open.push(name);
                // A script's or style's body is not markup.
                if let Some(body_end) = ["script", "style"]
                    .iter()
                    .find(|t| **t == open.last().map_or("", |n| n.as_str()))
                    .and_then(|t| rest.find(&format!("</{t}>")))
                {
                    rest = &rest[body_end..];
                }
            }
        }
        open.pop().map(|top| format!("<{top}> never closed"))
    }

    #[test]
    fn every_page_closes_what_it_opens() {
        assert_eq!(unbalanced("<p><b>x</b></p>"), None);
        assert_eq!(
            unbalanced("<section><div></div>").as_deref(),
            Some("<section> never closed")
        );
        assert_eq!(
            unbalanced("<section><div></section>").as_deref(),
            Some("<div> closed by </section>")
        );
        for path in ["/index.html", "/compare.html"] {
            let page = asset(path).expect("embedded");
            let html = std::str::from_utf8(page.body).expect("UTF-8");
            assert_eq!(unbalanced(html), None, "{path}");
        }
    }
}
