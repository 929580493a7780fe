//! The out-of-band exchange of rdma-core's `ibv_*_pingpong` examples, byte-compatible with
//! them: a TCP connection carrying `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, wire GID) as a
//! 52-byte NUL-terminated message each way, then the client's `"done"`.
use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};

use verbs::{Gid, Mtu};

/// Size of one address message: `sizeof "0000:000000:000000:" + 32 hex digits` with its NUL.
pub const MSG_LEN: usize = 52;

/// One end's address, as exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// GID (zero without `-g`).
    pub gid: Gid,
}

impl Dest {
    /// The wire message, NUL-padded to [`MSG_LEN`].
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.raw().iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses a wire message (as `sscanf("%x:%x:%x:%s")` would).
    pub fn from_wire(msg: &[u8]) -> io::Result<Dest> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad address message: {what}"),
            )
        };
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad("not text"))?;
        let mut parts = text.splitn(4, ':');
        let mut hex = |what: &str| {
            parts
                .next()
                .and_then(|p| u32::from_str_radix(p, 16).ok())
                .ok_or_else(|| bad(what))
        };
        let lid = hex("lid")?;
        let qpn = hex("qpn")?;
        let psn = hex("psn")?;
        let g = parts.next().ok_or_else(|| bad("gid"))?;
        if g.len() != 32 {
            return Err(bad("gid length"));
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad("gid digits"))?;
        }
        Ok(Dest {
            lid: lid as u16,
            qpn,
            psn,
            gid: Gid(raw),
        })
    }

    /// The line the C programs print (`"LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s"`).
    pub fn describe(&self) -> String {
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid.raw())
        )
    }
}

/// `pp_mtu_to_enum`: the MTU for a byte count, `None` for anything but 256..4096 powers of two.
pub fn mtu_from_bytes(bytes: u32) -> Option<Mtu> {
    Mtu::from_bytes(bytes)
}

/// Client side: connects to `server:port`, sends `mine`, reads the server's address, says
/// "done".
pub fn client_exchange(server: &str, port: u16, mine: &Dest) -> io::Result<Dest> {
    let mut last = None;
    let mut stream = None;
    for addr in (server, port).to_socket_addrs()? {
        match TcpStream::connect(addr) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut s = stream.ok_or_else(|| {
        last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
    })?;
    s.write_all(&mine.to_wire())?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)?;
    s.write_all(b"done\0")?;
    Dest::from_wire(&msg)
}

/// Server side: accepts one client on `port`, reads its address, calls `connect` (the QP must
/// be ready before the reply, as the C server does), replies with `mine`, waits for "done".
pub fn server_exchange<E: From<io::Error>>(
    port: u16,
    mine: &Dest,
    connect: impl FnOnce(&Dest) -> Result<(), E>,
) -> Result<Dest, E> {
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    let (mut s, _) = listener.accept()?;
    drop(listener);
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)?;
    let remote = Dest::from_wire(&msg)?;
    connect(&remote)?;
    s.write_all(&mine.to_wire())?;
    // The client answers "done" (and closes); any answer, or the close, ends the exchange.
    let mut done = [0u8; MSG_LEN];
    let _ = s.read(&mut done)?;
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_matches_the_c_programs() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x1eb7a4,
            gid: Gid::from_ip("192.168.77.1".parse().unwrap()),
        };
        let msg = d.to_wire();
        assert_eq!(
            std::str::from_utf8(&msg[..MSG_LEN - 1]).unwrap(),
            "0000:000011:1eb7a4:00000000000000000000ffffc0a84d01"
        );
        assert_eq!(msg[MSG_LEN - 1], 0);
        assert_eq!(Dest::from_wire(&msg).unwrap(), d);
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0x000011, PSN 0x1eb7a4, GID ::ffff:192.168.77.1"
        );
        assert!(Dest::from_wire(b"zz").is_err());
        assert_eq!(mtu_from_bytes(1024), Some(Mtu::Mtu1024));
        assert_eq!(mtu_from_bytes(1000), None);
    }

    #[test]
    fn exchange_over_tcp() {
        let server_dest = Dest {
            lid: 1,
            qpn: 2,
            psn: 3,
            gid: Gid([7; 16]),
        };
        let client_dest = Dest {
            lid: 4,
            qpn: 5,
            psn: 6,
            gid: Gid::ZERO,
        };
        let port = 18_000 + (std::process::id() % 2000) as u16;
        let t = std::thread::spawn(move || {
            server_exchange::<io::Error>(port, &server_dest, |_| Ok(())).unwrap()
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let got = loop {
            match client_exchange("127.0.0.1", port, &client_dest) {
                Ok(d) => break d,
                Err(e) if std::time::Instant::now() > deadline => panic!("no server: {e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        assert_eq!(got, server_dest);
        assert_eq!(t.join().unwrap(), client_dest);
    }
}
