//! `index.html`: one page per output folder that gathers a run — the scenario, the summary
//! tables, every plot inline, links to the data files — readable offline, with no script.

use std::fmt::Write as _;

use crate::plots::escape;

/// What a page shows, in order.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The heading and the window's title.
    pub title: String,
    /// Sentences under the heading (plain text).
    pub notes: Vec<String>,
    /// Sections, in order.
    pub sections: Vec<Section>,
}

/// One section of a page.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Its heading.
    pub heading: String,
    /// Markdown pipe tables (as `comparison.md` has them), drawn as HTML tables.
    pub tables: Vec<String>,
    /// Preformatted text (the scenario file, a text summary).
    pub text: Option<String>,
    /// Plots: (file name it is also written to, SVG).
    pub plots: Vec<(String, String)>,
    /// Links: (label, relative path).
    pub links: Vec<(String, String)>,
}

/// The page as a standalone HTML document.
pub fn render(page: &Page) -> String {
    let mut out = String::new();
    let title = escape(&page.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 880px; margin: 2em auto; padding: 0 1em; color: #111; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }}\n\
         th, td {{ border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }}\n\
         th:first-child, td:first-child {{ text-align: left; }}\n\
         pre {{ background: #f4f4f4; padding: 0.8em; overflow-x: auto; }}\n\
         figure {{ margin: 1.5em 0; }}\n\
         figcaption {{ font-size: 0.9em; color: #444; }}\n\
         </style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    );
    for note in &page.notes {
        let _ = writeln!(out, "<p>{}</p>", escape(note));
    }
    for section in &page.sections {
        let _ = writeln!(out, "<section>\n<h2>{}</h2>", escape(&section.heading));
        for table in &section.tables {
            out.push_str(&table_html(table));
        }
        if let Some(text) = &section.text {
            let _ = writeln!(out, "<pre>{}</pre>", escape(text));
        }
        for (file, svg) in &section.plots {
            let _ = writeln!(
                out,
                "<figure>\n{}\n<figcaption><a href=\"{}\">{}</a></figcaption>\n</figure>",
                inline_svg(svg),
                escape(file),
                escape(file)
            );
        }
        if !section.links.is_empty() {
            out.push_str("<ul>\n");
            for (label, href) in &section.links {
                let _ = writeln!(
                    out,
                    "<li><a href=\"{}\">{}</a></li>",
                    escape(href),
                    escape(label)
                );
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// An SVG document as an element of the page (without an XML declaration, if it has one).
fn inline_svg(svg: &str) -> &str {
    let svg = svg.trim();
    match (svg.starts_with("<?xml"), svg.find("?>")) {
        (true, Some(end)) => svg[end + 2..].trim_start(),
        _ => svg,
    }
}

/// A markdown pipe table (a header row, a rule, rows) as an HTML table; other lines as
/// paragraphs.
fn table_html(markdown: &str) -> String {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_start_matches('|')
            .trim_end_matches('|')
            .split('|')
            .map(|c| escape(c.trim()))
            .collect()
    };
    let mut out = String::new();
    let mut in_table = false;
    let mut header_done = false;
    for line in markdown.lines() {
        let line = line.trim();
        if line.starts_with('|') {
            if !in_table {
                out.push_str("<table>\n");
                in_table = true;
                header_done = false;
            }
            if line
                .trim_matches(|c| c == '|' || c == '-' || c == ':' || c == ' ')
                .is_empty()
            {
                continue;
            }
            let tag = if header_done { "td" } else { "th" };
            out.push_str("<tr>");
            for cell in cells(line) {
                let _ = write!(out, "<{tag}>{cell}</{tag}>");
            }
            out.push_str("</tr>\n");
            header_done = true;
        } else {
            if in_table {
                out.push_str("</table>\n");
                in_table = false;
            }
            if !line.is_empty() {
                let _ = writeln!(out, "<p>{}</p>", escape(line));
            }
        }
    }
    if in_table {
        out.push_str("</table>\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_its_tables_text_plots_and_links_without_script() {
        let page = Page {
            title: "demo <1>".to_owned(),
            notes: vec!["a note".to_owned()],
            sections: vec![Section {
                heading: "Summary".to_owned(),
                tables: vec!["| policy | wait |\n|---|---|\n| best-fit | 3 |\n".to_owned()],
                text: Some("name: demo".to_owned()),
                plots: vec![(
                    "queue.svg".to_owned(),
                    "<?xml version=\"1.0\"?>\n<svg width=\"1\"></svg>".to_owned(),
                )],
                links: vec![("jobs.csv".to_owned(), "best-fit/jobs.csv".to_owned())],
            }],
        };
        let html = render(&page);
        assert!(html.contains("<title>demo &lt;1&gt;</title>"));
        assert!(html.contains("<tr><th>policy</th><th>wait</th></tr>"));
        assert!(html.contains("<tr><td>best-fit</td><td>3</td></tr>"));
        assert!(html.contains("<pre>name: demo</pre>"));
        assert!(html.contains("<figure>\n<svg width=\"1\"></svg>"));
        assert!(html.contains("<a href=\"best-fit/jobs.csv\">jobs.csv</a>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("<?xml"));
    }
}
