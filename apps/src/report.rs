//! An error as one line with its causes, for the programs' messages.

use std::fmt::Write;

/// `e` and each of its sources, joined by ": " (each error shows only its own words; the
/// causes are its sources).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(line, ": {s}");
        source = s.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_shows_once() {
        let os = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let e = cm::Error::Bind {
            addr: "10.0.0.1:7471".parse().unwrap(),
            source: os,
        };
        let line = error_chain(&e);
        assert!(
            line.starts_with("rdma_bind_addr to 10.0.0.1:7471 failed: ")
                && line.matches("in use").count() == 1,
            "{line}"
        );
        let t = transport::Error::from(e);
        assert_eq!(
            error_chain(&t),
            line,
            "the transport's wrapper adds no repetition"
        );
    }
}
