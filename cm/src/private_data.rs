//! [`PrivateData`]: the private data a peer sent, as the transport delivered it (zero-padded),
//! shown as the sender's bytes; and the IB CM's reject reasons in words.
use std::fmt;
use std::ops::Deref;

/// Private data received from the peer. The transport pads it with zeros to the full size of
/// its message field (56 bytes for a connect request, 196 for an accept, 148 for a reject), so
/// its `Debug` shows the bytes up to the last non-zero one and the padded length. Derefs to
/// the full bytes.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PrivateData(Vec<u8>);

impl PrivateData {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        PrivateData(bytes)
    }
    /// The bytes without the transport's trailing zero padding (a sender's own trailing zeros
    /// go too: frame your data if they matter).
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }
    /// The full bytes, padding included.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl Deref for PrivateData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data = self.trimmed();
        write!(f, "PrivateData({} bytes", self.0.len())?;
        if !data.is_empty() {
            write!(f, ": b\"{}\"", data.escape_ascii())?;
        }
        if data.len() < self.0.len() {
            write!(f, " + {} zero bytes", self.0.len() - data.len())?;
        }
        f.write_str(")")
    }
}

/// The IB CM's reject reason `status` (`enum ib_cm_rej_reason`) in words, with what it usually
/// means for an rdma_cm connection, or iWARP's one reason (`-ECONNREFUSED`); `None` for a code
/// neither defines.
pub fn reject_reason(status: i32) -> Option<&'static str> {
    Some(match status {
        // iWARP connects over TCP: a port nobody listens on refuses the TCP connection; a
        // consumer reject (MPA) comes as a reset.
        s if s == -libc::ECONNREFUSED => {
            "connection refused: nothing listens on that port (start the server, or check the address and port)"
        }
        s if s == -libc::ECONNRESET => {
            "connection reset: the peer's application refused the connection (rdma_reject)"
        }
        1 => "no QP available at the peer",
        2 => "no EE context available",
        3 => "no resources at the peer",
        4 => "the peer's CM timed out",
        5 => "unsupported request",
        6 => "invalid communication ID",
        7 => "invalid communication instance",
        8 => "invalid service ID: nothing listens on that port (start the server, or check the address and port)",
        9 => "invalid transport type",
        10 => "stale connection: the peer still knows an earlier connection with these ids (retry)",
        11 => "RDC does not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid service level",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        18 => "invalid alternate GID",
        19 => "invalid alternate LID",
        20 => "invalid alternate service level",
        21 => "invalid alternate traffic class",
        22 => "invalid alternate hop limit",
        23 => "invalid alternate packet rate",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid path MTU",
        27 => "insufficient responder resources (the peer accepts fewer outstanding RDMA READs)",
        28 => "consumer reject: the peer's application refused the connection (rdma_reject)",
        29 => "invalid RNR retry count",
        30 => "duplicate local communication ID",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alternate flow label",
        35 => "vendor option not supported",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_senders_bytes_and_the_padding() {
        let mut padded = b"go away".to_vec();
        padded.resize(148, 0);
        let d = PrivateData::new(padded);
        assert_eq!(d.trimmed(), b"go away");
        assert_eq!(d.len(), 148);
        assert_eq!(
            format!("{d:?}"),
            "PrivateData(148 bytes: b\"go away\" + 141 zero bytes)"
        );
        assert_eq!(
            format!("{:?}", PrivateData::new(vec![0; 56])),
            "PrivateData(56 bytes + 56 zero bytes)"
        );
        assert_eq!(
            format!("{:?}", PrivateData::new(vec![1, 0xff])),
            "PrivateData(2 bytes: b\"\\x01\\xff\")"
        );
        assert_eq!(
            format!("{:?}", PrivateData::default()),
            "PrivateData(0 bytes)"
        );
    }

    #[test]
    fn reject_reasons_in_words() {
        assert!(reject_reason(8).unwrap().contains("nothing listens"));
        assert!(reject_reason(28).unwrap().contains("consumer reject"));
        assert_eq!(reject_reason(0), None);
        assert_eq!(reject_reason(34), None);
        assert_eq!((1..=40).filter_map(reject_reason).count(), 34);
    }
}
