//! perftest-compatible tools (`send-lat`, `write-lat`, `read-lat`, `atomic-lat`, `send-bw`,
//! `write-bw`, `read-bw`) on the verbs layer: perftest's options, its TCP exchange (they run
//! against perftest 4.5-0.17's `ib_*` programs in either role), its result table, and JSON.
//!
//! A run follows perftest's sequence exactly, since the peer counts the exchanges: connect,
//! versions, system data, MTU, address messages, QPs to RTS, synchronising handshakes, the
//! measurement, (bandwidth) the report exchange, and the closing handshake.
use std::process::ExitCode;

use clap::Parser;

pub mod bw;
pub mod cm_link;
pub mod endpoint;
pub mod exchange;
pub mod lat;
pub mod options;
pub mod receives;
pub mod report;

use endpoint::{Device, Endpoint};
use exchange::{Comm, Dest};
use options::{Args, Params};

/// The seven tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `ib_send_lat`.
    SendLat,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_lat`.
    AtomicLat,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
}

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND/RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomics.
    Atomic,
}

impl Test {
    /// Our program's name.
    pub fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send-lat",
            Test::WriteLat => "write-lat",
            Test::ReadLat => "read-lat",
            Test::AtomicLat => "atomic-lat",
            Test::SendBw => "send-bw",
            Test::WriteBw => "write-bw",
            Test::ReadBw => "read-bw",
        }
    }
    /// perftest's program of the same test.
    pub fn perftest_name(self) -> &'static str {
        match self {
            Test::SendLat => "ib_send_lat",
            Test::WriteLat => "ib_write_lat",
            Test::ReadLat => "ib_read_lat",
            Test::AtomicLat => "ib_atomic_lat",
            Test::SendBw => "ib_send_bw",
            Test::WriteBw => "ib_write_bw",
            Test::ReadBw => "ib_read_bw",
        }
    }
    /// The title perftest prints.
    pub fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
        }
    }
    /// Whether it measures latency.
    pub fn is_latency(self) -> bool {
        matches!(
            self,
            Test::SendLat | Test::WriteLat | Test::ReadLat | Test::AtomicLat
        )
    }
    /// Its operation.
    pub fn verb(self) -> Verb {
        match self {
            Test::SendLat | Test::SendBw => Verb::Send,
            Test::WriteLat | Test::WriteBw => Verb::Write,
            Test::ReadLat | Test::ReadBw => Verb::Read,
            Test::AtomicLat => Verb::Atomic,
        }
    }
}

/// Why a run failed: each prints as one line saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad options or a setup that cannot work (wrong device, GID index, port...).
    #[error("{0}")]
    Usage(String),
    /// The peer is missing, left, or disagrees.
    #[error("{0}")]
    Peer(String),
    /// A verbs call failed.
    #[error("cannot {0}")]
    Verbs(&'static str, #[source] verbs::Error),
    /// A work request failed.
    #[error("{0} ({1})")]
    Completion(&'static str, String),
    /// Local I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Entry point of each binary.
pub fn main(test: Test) -> ExitCode {
    let args = match Args::try_parse_from(
        std::iter::once(test.name().to_string()).chain(std::env::args().skip(1)),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match Params::resolve(test, args).and_then(|p| run(&p)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: error: {}", test.name(), crate::report::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Everything set up for the measurement: resources, the connection to the peer, both
/// sides' addresses.
#[derive(Debug)]
pub struct TestRun {
    /// Device and port.
    pub dev: Device,
    /// Resources.
    pub ep: Endpoint,
    /// The TCP connection.
    pub comm: Comm,
    /// Our address messages (one per QP).
    pub mine: Vec<Dest>,
    /// The peer's.
    pub remote: Vec<Dest>,
    /// The MTU both sides use.
    pub mtu: verbs::Mtu,
}

fn random_psn(i: usize) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(i);
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// Runs one test as client or server.
pub fn run(p: &Params) -> Result<(), Error> {
    let test = p.test;
    let dev = Device::open(p)?;
    let p = &p.on_device(dev.vendor_id, dev.ctx.transport());
    let timeout = p.timeout();
    let quiet = p.args.output.is_some();
    if p.peak_warning && !quiet {
        println!(" WARNING: BW peak won't be measured in this run.");
    }
    if p.cq_mod_warning && !quiet {
        println!("{}", report::RESULT_LINE);
        println!("Warning: Large message requested and CQ moderation enabled");
        println!("Warning: It can lead to inaccurate results");
    }
    if p.is_server() && !quiet {
        println!("\n************************************");
        println!("* Waiting for client to connect... *");
        println!("************************************");
    }
    // -R: the client's source address picks its device (rdma_cm routes by address).
    let src = p.args.source_ip.or_else(|| {
        p.args
            .ib_dev
            .as_ref()
            .and_then(|_| dev.gid.to_ipv4_mapped())
            .map(std::net::IpAddr::V4)
    });
    let mut comm = match (&p.args.servername, p.args.rdma_cm) {
        (Some(s), false) => Comm::connect(s, p.args.port, timeout)?,
        (None, false) => Comm::accept(p.args.port, timeout)?,
        (Some(s), true) => Comm::connect_cm(s, p.args.port, src, timeout)?,
        (None, true) => Comm::accept_cm(p.args.port, timeout)?,
    };
    comm.set_with_gid(dev.gid_index.is_some());
    comm.set_gid_index(dev.gid_index);
    comm.versions()?;
    comm.sys_data(4096, 64)?;
    let want = match p.args.mtu {
        Some(m) => verbs::Mtu::from_bytes(m).unwrap_or(dev.active_mtu),
        None => dev.active_mtu,
    };
    let want_code = u32::from(want) as u8;
    let mtu = match comm.mtu(want_code)? {
        Some(theirs) if theirs < want_code => verbs::Mtu::from_bytes(128 << theirs).unwrap_or(want),
        _ => want,
    };
    let mut ep = Endpoint::create(&dev, p)?;
    if p.args.rdma_cm {
        // perftest synchronises (with zeroed addresses) before and after the CM connects
        // the test's QPs.
        let zero = Dest::default();
        ep.listen_cm(p)?;
        comm.hand_shake(&zero)?;
        ep.add_cm_qps(p, src)?;
        comm.hand_shake(&zero)?;
    }
    let mine: Vec<Dest> = (0..ep.qps.len())
        .map(|i| ep.dest(&dev, i, random_psn(i)))
        .collect();
    let mut s = TestRun {
        dev,
        ep,
        comm,
        mine,
        remote: Vec::new(),
        mtu,
    };
    // The address exchanges before and after connecting, in each test's order.
    let pre_single = matches!(test, Test::WriteLat | Test::ReadLat | Test::AtomicLat);
    if pre_single {
        s.comm.hand_shake(&s.mine[0])?;
    }
    for i in 0..s.mine.len() {
        let r = s.comm.hand_shake(&s.mine[i])?;
        s.remote.push(r);
    }
    if !p.args.rdma_cm
        && s.dev.gid_index.is_some()
        && s.mine[0].gid.to_ipv4_mapped().is_some() != s.remote[0].gid.to_ipv4_mapped().is_some()
    {
        return Err(Error::Peer(
            "the peer's GID is of another IP version than ours: give both sides a GID index \
             (-x) of the same kind (IPv4-mapped or IPv6)"
                .into(),
        ));
    }
    // With -R the CM has connected the QPs already.
    for i in (0..s.mine.len()).filter(|_| !p.args.rdma_cm) {
        s.ep.connect(&s.dev, p, i, &s.mine[i], &s.remote[i], s.mtu)?;
    }
    if matches!(test, Test::SendLat | Test::SendBw) {
        s.comm.hand_shake(&s.mine[0])?;
    }
    for i in 0..s.mine.len() {
        s.comm.hand_shake(&s.mine[i])?;
    }
    if !matches!(test, Test::SendLat | Test::SendBw) {
        s.comm.hand_shake(&s.mine[0])?;
    }
    if !quiet {
        print_banner(p, &s);
    }
    let results = if test.is_latency() {
        lat::run(p, &mut s)?
    } else {
        bw::run(p, &mut s)?
    };
    // perftest's write latency test ends without a closing handshake.
    if test != Test::WriteLat {
        let mine0 = s.mine[0];
        s.comm.close(&mine0)?;
    }
    s.ep.disconnect_cm();
    if !quiet {
        println!("{}", report::RESULT_LINE);
    }
    if p.args.json || p.args.out_json_file.is_some() {
        let doc = serde_json::json!({
            "test": test.name(),
            "perftest_test": test.perftest_name(),
            "role": if p.is_server() { "server" } else { "client" },
            "device": s.dev.ctx.name(),
            "unit": if test.is_latency() { "usec" }
                    else if p.args.report_gbits { "Gb/sec" } else { "MB/sec" },
            "results": results,
        });
        if p.args.json {
            println!("{doc}");
        }
        if let Some(f) = &p.args.out_json_file {
            std::fs::write(f, format!("{doc}\n"))?;
        }
    }
    Ok(())
}

fn print_banner(p: &Params, s: &TestRun) {
    let line = report::RESULT_LINE;
    println!("{line}");
    println!("                    {}", p.test.title());
    // perftest's names: IB (InfiniBand and RoCE), IW (iWARP).
    let transport = match s.dev.ctx.transport() {
        verbs::Transport::Iwarp => "IW",
        _ => "IB",
    };
    println!(
        " Number of qps   : {}\t\tTransport type : {transport}",
        p.qps
    );
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(" Device          : {}", s.dev.ctx.name());
    println!(" Mtu             : {}[B]", s.mtu.bytes());
    println!(
        " Link type       : {}",
        if s.dev.gid_index.is_some() {
            "Ethernet"
        } else {
            "IB"
        }
    );
    if let Some(i) = s.dev.gid_index {
        println!(" GID index       : {i}");
    }
    println!(" Max inline data : {}[B]", s.ep.max_inline);
    println!(" TX depth        : {}", p.tx_depth);
    if !p.test.is_latency() {
        println!(" CQ Moderation   : {}", p.cq_mod);
    }
    println!(" Outstand reads  : {}", s.ep.out_reads);
    println!("{line}");
    for (side, d) in [("local", &s.mine[0]), ("remote", &s.remote[0])] {
        println!(
            " {side} address: LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}",
            d.lid, d.qpn, d.psn, d.rkey, d.vaddr
        );
        if s.dev.gid_index.is_some() {
            let g: Vec<String> = d.gid.raw().iter().map(|b| format!("{b:02}")).collect();
            println!(" GID: {}", g.join(":"));
        }
    }
}
