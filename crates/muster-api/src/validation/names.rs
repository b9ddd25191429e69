//! Kubernetes name syntax.

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
}

/// A DNS-1123 subdomain: dot-separated DNS labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A qualified name, as label keys and resource names are: an optional DNS-subdomain prefix and
/// `/`, then 1–63 characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let name = match s.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns1123_subdomain(prefix) {
                return false;
            }
            name
        }
        None => s,
    };
    !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or up to 63 characters of `[A-Za-z0-9_.-]` starting and ending
/// alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns1123_label("team-a"));
        assert!(!is_dns1123_label("Team"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1035_label("job1"));
        assert!(!is_dns1035_label("1job"));
        assert!(is_dns1123_subdomain("queued-provisioning.gke.io"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_qualified_name("cloud.google.com/gce-topology-block"));
        assert!(is_qualified_name("cpu"));
        assert!(is_qualified_name("nvidia.com/mig-1g.10gb"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("/x"));
        assert!(!is_qualified_name("x/"));
        assert!(is_label_value(""));
        assert!(is_label_value("H100_80GB"));
        assert!(!is_label_value("a b"));
    }
}
