//! Command-line options of the perftest-compatible tools: perftest's letters, long names,
//! meanings and defaults (perftest 4.5-0.17, protocol version 6.06), resolved per test.
use clap::{Parser, ValueEnum};

use super::{Error, Test, Verb};

/// perftest's `MAX_SIZE`: the largest message of a test, and the top of the `-a` sweep.
pub const MAX_SIZE: u64 = 1 << 23;
/// perftest's `MIN_ITER` / `MAX_ITER`.
pub const ITERS: std::ops::RangeInclusive<u64> = 5..=100_000_000;
/// perftest's `MAX_TX` / `MAX_RX` and `MAX_QP_NUM`.
const MAX_DEPTH: u32 = 16_384;
const MAX_TX: u32 = 15_000;
const MAX_QPS: u32 = 16_384;
/// Iterations above which a bandwidth test leaves its peak out (perftest's rule).
const NO_PEAK_ABOVE: u64 = 20_000;

/// Above this message size perftest's bandwidth tests signal every request (CQ moderation 1)
/// unless moderation is asked for with `-Q` (perftest's `MSG_SIZE_CQ_MOD_LIMIT`).
const CQ_MOD_SIZE_LIMIT: u64 = 8192;

/// What `--output` prints instead of the table (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Only the average bandwidth.
    Bandwidth,
    /// Only the message rate.
    #[value(name = "message_rate")]
    MessageRate,
    /// Only the average latency.
    Latency,
}

/// Atomic operation of `atomic-lat` (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AtomicType {
    /// Compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

/// The options, as perftest spells them. Fields left `None` take the test's default.
#[derive(Parser, Debug, Clone)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Use this RDMA device (default: the first found).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Use this port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,
    /// GID index (default: the port's best RoCE v2 GID on Ethernet, none on InfiniBand).
    #[arg(short = 'x', long = "gid-index", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub gid_index: Option<u32>,
    /// Message size in bytes (default: 2 for latency, 65536 for bandwidth, 8 for atomics).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Number of exchanges (at least 5; default 1000, 5000 for write bandwidth).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run sizes from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Size of the send queue (default: 1 for latency, 128 for bandwidth).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (default: 512 for send tests, 1 otherwise).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Number of queue pairs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Path MTU (256..4096; default: the port's active MTU).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Measure bidirectional bandwidth.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Post lists of this many requests.
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    pub post_list: u32,
    /// Largest message sent inline (default, as perftest: 236 for send-lat, 220 for write-lat
    /// on the devices perftest knows, 0 on software devices (rxe, siw) and for every other
    /// test).
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Connect the queue pairs with rdma_cm, and run the exchange over rdma_cm too (on the
    /// same port).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// With -R, the client's source address (default: the address of the -d device's GID).
    #[arg(long = "source_ip")]
    pub source_ip: Option<std::net::IpAddr>,
    /// Do not fail on a CPU frequency that varies (this implementation uses the monotonic
    /// clock, so it never does).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Report bandwidth in Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Print only this number.
    #[arg(long = "output", value_enum)]
    pub output: Option<Output>,
    /// Do not measure the peak bandwidth (the bandwidth tests leave it out anyway, with a
    /// warning, in duration mode, on a send-bw server and above 20,000 iterations, as
    /// perftest does: finding it takes time quadratic in the iterations).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Completion moderation: signal one send in this many (default 100).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// QP timeout exponent (4.096 us * 2^N; default 14).
    #[arg(short = 'u', long = "qp-timeout")]
    pub qp_timeout: Option<u8>,
    /// Service level.
    #[arg(short = 'S', long = "sl", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,
    /// Atomic operation (atomic-lat).
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    pub atomic_type: AtomicType,
    /// Outstanding RDMA reads/atomics (default: the device's maximum).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// Connection type; only RC.
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Also print the results as one JSON line (perftest's `--out_json` fields).
    #[arg(long = "json")]
    pub json: bool,
    /// Write the JSON results to this file.
    #[arg(long = "out_json_file")]
    pub out_json_file: Option<std::path::PathBuf>,
    /// Give up after this many seconds without progress (connecting, exchanging, completing).
    #[arg(long = "timeout", default_value_t = 60)]
    pub timeout: u64,
    /// Server to connect to; without it, wait for a client.
    pub servername: Option<String>,
}

/// Vendor ids of the software devices: rxe (soft-RoCE) and siw (soft-iWARP).
const SOFTWARE_VENDORS: [u32; 2] = [0xff_ffff, 0x62_6d74];

/// The options resolved for one test: defaults applied, limits checked.
#[derive(Debug, Clone)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Sizes to run, in order.
    pub sizes: Vec<u64>,
    /// Largest of `sizes`: the buffers' size.
    pub max_size: u64,
    /// Iterations per size (in duration mode: the limit of timestamps kept).
    pub iters: u64,
    /// Duration mode: seconds.
    pub duration: Option<u64>,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Receive queue depth.
    pub rx_depth: u32,
    /// Completion moderation.
    pub cq_mod: u32,
    /// Post list length.
    pub post_list: u32,
    /// Inline threshold.
    pub inline_size: u32,
    /// Outstanding reads/atomics asked for (`None`: the device's maximum).
    pub outs: Option<u32>,
    /// Queue pairs.
    pub qps: u32,
    /// Whether a bandwidth test measures its peak (see [`Args::no_peak`]).
    pub peak: bool,
    /// Whether the peak is left out although `-N` was not given (perftest then warns).
    pub peak_warning: bool,
    /// Whether `-Q` asked for moderation of messages over 8 KiB (perftest warns that the
    /// result may be inaccurate).
    pub cq_mod_warning: bool,
    /// send-bw on iWARP: the receiver grants the sender receive credits (perftest's
    /// `send_rcredit`: iWARP has no RNR retry, so a SEND that finds no receive posted ends
    /// the connection).
    pub credits: bool,
    /// Everything else, as given.
    pub args: Args,
}

impl Params {
    /// Applies `test`'s defaults to `args` and checks the limits perftest checks.
    pub fn resolve(test: Test, args: Args) -> Result<Params, Error> {
        let bad = |m: String| Err(Error::Usage(m));
        if !args.connection.eq_ignore_ascii_case("RC") {
            return bad(format!(
                "connection type {:?} is not supported: these tools run RC only (-c RC)",
                args.connection
            ));
        }
        if args.rdma_cm {
            // The CM computes the QPs' path attributes: refuse what it would override.
            let overridden = [
                (args.mtu.is_some(), "-m (the path MTU)"),
                (args.sl != 0, "-S (the service level)"),
                (args.qp_timeout.is_some(), "-u (the QP timeout)"),
            ];
            if let Some((_, what)) = overridden.iter().find(|(given, _)| *given) {
                return bad(format!(
                    "with -R the connection manager sets {what}: drop it, or drop -R"
                ));
            }
        }
        if args.source_ip.is_some() && !args.rdma_cm {
            return bad("--source_ip applies to rdma_cm mode only: add -R or drop it".into());
        }
        let lat = test.is_latency();
        if args.bidirectional && lat {
            return bad(format!(
                "bidirectional mode (-b) is for the bandwidth tests; {} measures latency: drop -b",
                test.name()
            ));
        }
        if lat {
            let bw_only = [
                (args.post_list != 1, "-l (post lists)"),
                (args.cq_mod.is_some(), "-Q (completion moderation)"),
                (args.report_gbits, "--report_gbits"),
            ];
            if let Some((_, what)) = bw_only.iter().find(|(given, _)| *given) {
                return bad(format!(
                    "{what} applies to the bandwidth tests; {} signals and waits for every \
                     request: drop it",
                    test.name()
                ));
            }
        }
        if args.outs.is_some() && !matches!(test.verb(), Verb::Read | Verb::Atomic) {
            return bad(format!(
                "-o (outstanding reads/atomics) applies to read and atomic tests, not {}: drop it",
                test.name()
            ));
        }
        if args.bidirectional && args.duration.is_some() {
            return bad("-b and -D do not go together here: use -b with -n".into());
        }
        let verb = test.verb();
        if verb == Verb::Atomic && args.size.is_some_and(|s| s != 8) {
            return bad("atomic operations are 8 bytes: drop -s or use -s 8".into());
        }
        let size = args.size.unwrap_or(match (verb, lat) {
            (Verb::Atomic, _) => 8,
            (_, true) => 2,
            (_, false) => 65_536,
        });
        if size == 0 || size > MAX_SIZE {
            return bad(format!(
                "message size {size} is out of range: use -s 1..={MAX_SIZE}"
            ));
        }
        if args.all && verb == Verb::Atomic {
            return bad("the size sweep (-a) does not apply to atomics (always 8 bytes)".into());
        }
        let iters = args
            .iters
            .unwrap_or(if test == Test::WriteBw { 5000 } else { 1000 });
        if !ITERS.contains(&iters) {
            return bad(format!(
                "{iters} iterations is out of range: use -n {}..={}",
                ITERS.start(),
                ITERS.end()
            ));
        }
        if let Some(d) = args.duration {
            if d == 0 {
                return bad("the duration (-D) must be at least 1 second".into());
            }
            if args.all {
                return bad("-D and -a do not go together: pick one".into());
            }
            if !matches!(
                test,
                Test::WriteBw | Test::ReadBw | Test::ReadLat | Test::AtomicLat
            ) {
                return bad(format!(
                    "duration mode (-D) is supported by write-bw, read-bw, read-lat and \
                     atomic-lat; use -n with {}",
                    test.name()
                ));
            }
        }
        let tx_depth = args.tx_depth.unwrap_or(if lat { 1 } else { 128 });
        if tx_depth == 0 || tx_depth > MAX_TX {
            return bad(format!(
                "tx depth {tx_depth} is out of range: use -t 1..={MAX_TX}"
            ));
        }
        // perftest never keeps more requests in flight than a run of iterations posts.
        let tx_depth = if args.duration.is_none() {
            tx_depth.min(u32::try_from(iters).unwrap_or(u32::MAX))
        } else {
            tx_depth
        };
        let rx_depth = args
            .rx_depth
            .unwrap_or(if verb == Verb::Send { 512 } else { 1 });
        if rx_depth == 0 || rx_depth > MAX_DEPTH {
            return bad(format!(
                "rx depth {rx_depth} is out of range: use -r 1..={MAX_DEPTH}"
            ));
        }
        if args.qps == 0 || args.qps > MAX_QPS {
            return bad(format!(
                "{} QPs is out of range: use -q 1..={MAX_QPS}",
                args.qps
            ));
        }
        if lat && args.qps != 1 {
            return bad("latency tests run one QP: drop -q".into());
        }
        if args.post_list == 0 || args.post_list > tx_depth {
            return bad(format!(
                "post list {} must be 1..=tx depth ({tx_depth})",
                args.post_list
            ));
        }
        // perftest: lat tests signal every send they wait for; bw tests moderate, never past
        // the send queue depth, and not at all for messages over 8 KiB unless asked (-Q),
        // except in the size sweep and with events.
        let unmoderated = size > CQ_MOD_SIZE_LIMIT && !args.all && !args.events;
        let cq_mod = match args.cq_mod {
            _ if lat => 1,
            None if unmoderated => 1,
            m => m.unwrap_or(100).clamp(1, 1024).min(tx_depth),
        };
        let cq_mod_warning = !lat && unmoderated && cq_mod > 1;
        if let Some(m) = args.mtu {
            if verbs::Mtu::from_bytes(m).is_none() {
                return bad(format!("MTU {m} is not one of 256, 512, 1024, 2048, 4096"));
            }
        }
        // perftest sends inline by default in its latency tests only.
        let inline_size = args.inline_size.unwrap_or(match verb {
            Verb::Send if test.is_latency() => 236,
            Verb::Write if test.is_latency() => 220,
            _ => 0,
        });
        if inline_size > 912 {
            return bad(format!(
                "inline size {inline_size} is over perftest's limit of 912"
            ));
        }
        let sizes: Vec<u64> = if args.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            vec![size]
        };
        let max_size = *sizes.iter().max().unwrap_or(&size);
        // perftest's rules for leaving the peak out of a bandwidth test.
        let server = args.servername.is_none();
        let peak_left_out = args.duration.is_some()
            || (verb == Verb::Send && server && !args.bidirectional)
            || iters > NO_PEAK_ABOVE;
        let peak = !lat && !args.no_peak && !peak_left_out;
        let peak_warning = !lat && !args.no_peak && peak_left_out;
        Ok(Params {
            test,
            sizes,
            max_size,
            iters,
            duration: args.duration,
            tx_depth,
            rx_depth: rx_depth.min(u32::try_from(iters).unwrap_or(u32::MAX)),
            cq_mod,
            post_list: args.post_list,
            inline_size: if verb == Verb::Read || verb == Verb::Atomic {
                0
            } else {
                inline_size
            },
            outs: args.outs,
            qps: args.qps,
            peak,
            peak_warning,
            cq_mod_warning,
            credits: false,
            args,
        })
    }

    /// The QP timeout exponent (`-u`, perftest's default 14).
    pub fn qp_timeout(&self) -> u8 {
        self.args.qp_timeout.unwrap_or(14)
    }

    /// These parameters on a device with vendor id `vendor_id` and `transport`: perftest
    /// recognizes devices by vendor and part id to send inline by default, and knows no
    /// software device, so on rxe (vendor 0xffffff) and siw (0x626d74) the default inline
    /// size is 0 there, and here. An explicit `-I` is kept. On iWARP, send-bw takes receive
    /// credits ([`credits`](Self::credits)), and every READ and atomic is signaled: one
    /// completes when its response arrives, after later requests, so only its own
    /// completion says it is done.
    pub fn on_device(&self, vendor_id: u32, transport: verbs::Transport) -> Params {
        let mut p = self.clone();
        if p.args.inline_size.is_none() && SOFTWARE_VENDORS.contains(&vendor_id) {
            p.inline_size = 0;
        }
        let iwarp = transport == verbs::Transport::Iwarp;
        p.credits = p.test == Test::SendBw && iwarp;
        if iwarp && matches!(p.test.verb(), Verb::Read | Verb::Atomic) {
            p.cq_mod = 1;
        }
        p
    }

    /// Receives that a receive credit stands for (perftest's `credit_cnt`): a third of the
    /// receive queue.
    pub fn credit_every(&self) -> u64 {
        u64::from(self.rx_depth / 3).max(1)
    }

    /// Whether this side is the server.
    pub fn is_server(&self) -> bool {
        self.args.servername.is_none()
    }

    /// The no-progress bound.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.args.timeout.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(test: Test, args: &[&str]) -> Result<Params, Error> {
        let argv = std::iter::once(test.name()).chain(args.iter().copied());
        Params::resolve(
            test,
            Args::try_parse_from(argv).map_err(|e| Error::Usage(e.to_string()))?,
        )
    }

    #[test]
    fn defaults_match_perftest() {
        let p = parse(Test::SendLat, &[]).unwrap();
        assert_eq!(p.args.port, 18515);
        assert_eq!(p.args.ib_port, 1);
        assert_eq!(p.args.gid_index, None);
        assert_eq!(p.sizes, [2]);
        assert_eq!(p.iters, 1000);
        assert_eq!(p.tx_depth, 1);
        assert_eq!(p.rx_depth, 512);
        assert_eq!(p.inline_size, 236);
        assert_eq!(p.qp_timeout(), 14);
        assert!(p.is_server());

        let p = parse(Test::WriteBw, &["10.0.0.1"]).unwrap();
        assert_eq!(p.sizes, [65_536]);
        assert_eq!(p.iters, 5000);
        assert_eq!(p.tx_depth, 128);
        // The default 64 KiB is over 8 KiB: perftest signals every request.
        assert_eq!(p.cq_mod, 1);
        assert_eq!(p.rx_depth, 1);
        // perftest's bandwidth tests send nothing inline unless asked (-I).
        assert_eq!(p.inline_size, 0);
        assert!(!p.is_server());

        let p = parse(Test::SendBw, &[]).unwrap();
        assert_eq!((p.iters, p.rx_depth, p.sizes[0]), (1000, 512, 65_536));
        let p = parse(Test::ReadBw, &[]).unwrap();
        assert_eq!((p.iters, p.inline_size), (1000, 0));
        let p = parse(Test::AtomicLat, &[]).unwrap();
        assert_eq!(p.sizes, [8]);
        assert_eq!(p.args.atomic_type, AtomicType::FetchAndAdd);
        let p = parse(Test::ReadLat, &[]).unwrap();
        assert_eq!((p.sizes[0], p.tx_depth, p.rx_depth), (2, 1, 1));
        let p = parse(Test::WriteLat, &[]).unwrap();
        assert_eq!(p.inline_size, 220);
    }

    #[test]
    fn tx_depth_and_cq_moderation_follow_perftest_dependencies() {
        /// Tx depth, CQ moderation, and whether perftest warns about the moderation.
        type Depths = (u32, u32, bool);
        let cases: [(Test, &[&str], Depths); 11] = [
            // Moderated up to 8 KiB, never past the depth.
            (Test::SendBw, &["-s", "8192"], (128, 100, false)),
            (Test::SendBw, &["-s", "64", "-t", "32"], (32, 32, false)),
            // Over 8 KiB every request is signaled, unless -Q asks (perftest then warns).
            (Test::SendBw, &["-s", "8193"], (128, 1, false)),
            (Test::WriteBw, &["-s", "65536", "-Q", "4"], (128, 4, true)),
            (Test::ReadBw, &["-s", "65536", "-Q", "1"], (128, 1, false)),
            // Not in the size sweep, and not with events.
            (Test::WriteBw, &["-a"], (128, 100, false)),
            (Test::WriteBw, &["-s", "65536", "-e"], (128, 100, false)),
            // The depth is at most the iterations, except in duration mode.
            (Test::SendBw, &["-s", "1048576", "-n", "64"], (64, 1, false)),
            (Test::WriteBw, &["-s", "64", "-n", "50"], (50, 50, false)),
            (
                Test::WriteBw,
                &["-s", "64", "-n", "50", "-D", "2"],
                (128, 100, false),
            ),
            // Latency tests signal every request.
            (Test::WriteLat, &["-s", "65536"], (1, 1, false)),
        ];
        for (test, args, want) in cases {
            let p = parse(test, args).unwrap();
            let got = (p.tx_depth, p.cq_mod, p.cq_mod_warning);
            assert_eq!(got, want, "{} {args:?}", test.name());
        }
    }

    #[test]
    fn software_devices_send_nothing_inline_unless_asked_like_perftest() {
        let p = parse(Test::SendLat, &[]).unwrap();
        assert_eq!(p.on_device(0xff_ffff, verbs::Transport::Ib).inline_size, 0);
        assert_eq!(
            p.on_device(0x62_6d74, verbs::Transport::Iwarp).inline_size,
            0
        );
        // A hardware vendor (Mellanox) keeps perftest's default.
        assert_eq!(p.on_device(0x02c9, verbs::Transport::Ib).inline_size, 236);
        let p = parse(Test::SendLat, &["-I", "64"]).unwrap();
        assert_eq!(p.on_device(0xff_ffff, verbs::Transport::Ib).inline_size, 64);
    }

    #[test]
    fn perftest_letters_and_long_names() {
        let p = parse(
            Test::WriteBw,
            &[
                "-d",
                "rxe0",
                "-i",
                "1",
                "-x",
                "3",
                "-p",
                "19000",
                "-s",
                "4096",
                "-n",
                "200",
                "-t",
                "64",
                "-q",
                "2",
                "-m",
                "1024",
                "-e",
                "-l",
                "4",
                "-I",
                "64",
                "-F",
                "--report_gbits",
                "-Q",
                "8",
                "--output",
                "bandwidth",
                "server",
            ],
        )
        .unwrap();
        assert_eq!(p.args.ib_dev.as_deref(), Some("rxe0"));
        assert_eq!(p.args.gid_index, Some(3));
        assert_eq!(p.args.port, 19000);
        assert_eq!((p.sizes[0], p.iters, p.tx_depth, p.qps), (4096, 200, 64, 2));
        assert_eq!((p.cq_mod, p.post_list, p.inline_size), (8, 4, 64));
        assert!(p.args.events && p.args.report_gbits && p.args.cpu_freq);
        assert_eq!(p.args.output, Some(Output::Bandwidth));
        assert_eq!(p.args.servername.as_deref(), Some("server"));

        let p = parse(Test::SendLat, &["--size=64", "--iters=300", "--all"]).unwrap();
        assert_eq!(p.sizes.len(), 23);
        assert_eq!((p.sizes[0], p.max_size), (2, 1 << 23));
        let p = parse(Test::SendBw, &["-b", "-R", "--source_ip", "10.0.0.1", "h"]).unwrap();
        assert!(p.args.bidirectional && p.args.rdma_cm);
        assert_eq!(p.args.source_ip, Some("10.0.0.1".parse().unwrap()));
        let p = parse(Test::ReadBw, &["-D", "3"]).unwrap();
        assert_eq!(p.duration, Some(3));
        let p = parse(Test::AtomicLat, &["-A", "CMP_AND_SWAP"]).unwrap();
        assert_eq!(p.args.atomic_type, AtomicType::CmpAndSwap);
    }

    #[test]
    fn bad_values_are_refused_with_the_fix() {
        let msg = |t, a: &[&str]| parse(t, a).unwrap_err().to_string();
        assert!(msg(Test::SendLat, &["-s", "9000000"]).contains("-s 1..=8388608"));
        assert!(msg(Test::SendLat, &["-n", "2"]).contains("-n 5..="));
        assert!(msg(Test::WriteBw, &["-m", "1500"]).contains("256, 512"));
        assert!(msg(Test::AtomicLat, &["-s", "16"]).contains("8 bytes"));
        assert!(msg(Test::SendLat, &["-D", "2"]).contains("use -n"));
        assert!(msg(Test::SendBw, &["--source_ip", "10.0.0.1"]).contains("-R"));
        assert!(msg(Test::SendBw, &["-R", "-m", "1024"]).contains("-m (the path MTU)"));
        assert!(msg(Test::SendBw, &["-R", "-u", "10"]).contains("drop -R"));
        assert!(msg(Test::SendLat, &["-t", "4", "-l", "4"]).contains("-l (post lists)"));
        assert!(msg(Test::WriteLat, &["-Q", "4"]).contains("bandwidth tests"));
        assert!(msg(Test::WriteBw, &["-o", "4"]).contains("read and atomic"));
        assert!(msg(Test::SendLat, &["-b"]).contains("drop -b"));
        assert!(msg(Test::WriteBw, &["-b", "-D", "2"]).contains("-b with -n"));
        assert!(msg(Test::SendBw, &["-c", "UD"]).contains("RC"));
        assert!(msg(Test::WriteLat, &["-q", "2"]).contains("one QP"));
        assert!(parse(Test::SendLat, &["-x", "65"]).is_err());
    }

    #[test]
    fn the_peak_is_left_out_by_perftest_rules() {
        let peak = |test, args: &[&str]| {
            let p = parse(test, args).unwrap();
            (p.peak, p.peak_warning)
        };
        // A bandwidth client measures it; latency tests have none.
        assert_eq!(peak(Test::WriteBw, &["h"]), (true, false));
        assert_eq!(peak(Test::SendLat, &["h", "-n", "50000"]), (false, false));
        // -N: left out, silently.
        assert_eq!(peak(Test::WriteBw, &["h", "-N"]), (false, false));
        assert_eq!(peak(Test::SendBw, &["--noPeak"]), (false, false));
        // Left out with a warning: a send-bw server (not -b), duration mode, over 20,000
        // iterations.
        assert_eq!(peak(Test::SendBw, &[]), (false, true));
        assert_eq!(peak(Test::SendBw, &["-b"]), (true, false));
        assert_eq!(peak(Test::WriteBw, &[]), (true, false));
        assert_eq!(peak(Test::ReadBw, &["h", "-D", "2"]), (false, true));
        assert_eq!(peak(Test::ReadBw, &["h", "-n", "20000"]), (true, false));
        assert_eq!(peak(Test::ReadBw, &["h", "-n", "20001"]), (false, true));
    }
}
