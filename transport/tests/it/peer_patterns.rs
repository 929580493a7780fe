//! What `transport-test-peer` writes, made the same way by the peer (which includes this file)
//! and by the tests that check it: built from copies of 256-byte rows, not byte by byte (the
//! device tests run unoptimized, under emulation).

/// Byte `i` of what `stream-writer` writes: it changes within every 256 bytes and from one
/// 256-byte block and one 64 KiB block to the next, so a byte out of place shows.
pub fn stream_byte(i: usize) -> u8 {
    (i as u8) ^ ((i >> 8) as u8).wrapping_mul(3) ^ ((i >> 16) as u8).wrapping_mul(7)
}

/// The first `len` bytes `stream-writer` writes ([`stream_byte`] of each): every block of 256
/// is `0..=255` XOR one value, copied from a table of the 256 such rows.
pub fn stream_bytes(len: usize) -> Vec<u8> {
    let rows: Vec<u8> = (0..=255u8)
        .flat_map(|k| (0..=255u8).map(move |x| x ^ k))
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let i = v.len();
        let row = usize::from(stream_byte(i));
        v.extend_from_slice(&rows[row * 256..][..(len - i).min(256)]);
    }
    v
}

/// Message `n` of `len` bytes (at least 8): `n` (8 bytes, little-endian), then byte `i` is
/// `n + i` (mod 256); copies of one 256-byte ramp.
pub fn numbered(n: u64, len: usize) -> Vec<u8> {
    let ramp: Vec<u8> = (0..=255u8).map(|i| (n as u8).wrapping_add(i)).collect();
    let len = len.max(8);
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        v.extend_from_slice(&ramp[..(len - v.len()).min(256)]);
    }
    v[..8].copy_from_slice(&n.to_le_bytes());
    v
}

/// Whether `m` is message `n` of `len` bytes: its number, then the ramp from `n + 8`,
/// compared against `ramp` (bytes `0, 1, .., 255` twice: `(0..512).map(|i| i as u8)`).
pub fn is_numbered(m: &[u8], n: u64, len: usize, ramp: &[u8]) -> bool {
    let len = len.max(8);
    if m.len() != len || m[..8] != n.to_le_bytes() {
        return false;
    }
    let start = usize::from((n as u8).wrapping_add(8));
    m[8..]
        .chunks(256)
        .all(|c| c == &ramp[start..start + c.len()])
}
