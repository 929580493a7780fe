//! A port's counters (`Context::port_counters`) against iproute2's `rdma statistic show link`,
//! and counters that move with traffic (device tier).
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use verbs::{AccessFlags, CounterGroup, PortCounters, RecvRequest, SendRequest};

use crate::support::{drain, open, Pair, PORT};

/// `rdma statistic show link DEV/PORT` as (name, value) pairs, `None` when rdma refuses the
/// port with EINVAL, which is how the kernel answers for a port without statistics (siw's).
/// Fails the test when `rdma` is missing or fails otherwise.
fn rdma_statistic(dev: &str, port: u8) -> Option<BTreeMap<String, u64>> {
    let link = format!("{dev}/{port}");
    let mut cmd = Command::new("rdma");
    cmd.args(["statistic", "show", "link", &link]);
    let child = testkit::ChildGuard::spawn(cmd).unwrap_or_else(|e| {
        panic!(
            "cannot run `rdma statistic show link {link}` ({e}): this test compares the port's \
             counters with iproute2's `rdma`; install iproute2 (the guest of `cargo xtask test` \
             has it as /bin/rdma)"
        )
    });
    let out = child.wait_output(Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("Invalid argument") {
        return None;
    }
    testkit::assert_success(&format!("rdma statistic show link {link}"), &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let line = lines
        .next()
        .unwrap_or_else(|| panic!("rdma printed nothing:\n{text}"));
    assert_eq!(lines.next(), None, "one line per port:\n{text}");
    let mut words = line.split_whitespace();
    assert_eq!(
        (words.next(), words.next()),
        (Some("link"), Some(link.as_str())),
        "{line}"
    );
    let words: Vec<&str> = words.collect();
    assert!(words.len() % 2 == 0, "name value pairs: {line}");
    Some(
        words
            .chunks(2)
            .map(|pair| {
                let value = pair[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("{} is not a number: {line}", pair[1]));
                (pair[0].to_owned(), value)
            })
            .collect(),
    )
}

/// The `hw_counters` group, the one rdma shows.
fn hw(c: &PortCounters) -> BTreeMap<String, u64> {
    c.group(CounterGroup::HwCounters)
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_ports_counters_are_those_rdma_statistic_shows() {
    let ctx = open();
    let before = ctx.port_counters(PORT).expect("port counters");
    let theirs = rdma_statistic(ctx.name(), PORT);
    // The kernel keeps what it read for sysfs this long: wait it out, so that the second
    // reading is the driver's values after rdma's.
    std::thread::sleep(before.lifespan().unwrap_or_default() * 2 + Duration::from_millis(5));
    let after = ctx.port_counters(PORT).expect("port counters");
    assert_eq!((after.device(), after.port()), (ctx.name(), PORT));
    eprintln!("{}/{PORT}: {:?}", ctx.name(), hw(&after));

    let (before, after) = (hw(&before), hw(&after));
    let Some(theirs) = theirs else {
        assert!(
            after.is_empty(),
            "rdma says {}/{PORT} has no statistics (EINVAL), we read {after:?}",
            ctx.name()
        );
        return;
    };
    let names = |m: &BTreeMap<String, u64>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&before),
        names(&theirs),
        "the same counters as rdma's"
    );
    assert_eq!(names(&after), names(&theirs), "the same counters as rdma's");
    for (name, value) in &theirs {
        assert!(
            before[name] <= *value && *value <= after[name],
            "{name}: ours {} before rdma's {value}, ours {} after",
            before[name],
            after[name]
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_port_the_device_lacks_is_no_such_port() {
    let ctx = open();
    let ports = ctx.query_device().unwrap().phys_port_cnt();
    for port in [0, ports + 1] {
        match ctx.port_counters(port) {
            Err(e @ verbs::Error::NoSuchPort { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("1..={ports}")), "{text}");
            }
            other => panic!("port {port}: {other:?}"),
        }
    }
}

/// The packet counters of the two groups: rxe's (`hw_counters`) or an InfiniBand port's
/// (`counters`).
const PACKETS: [(&str, &str); 2] = [
    ("sent_pkts", "rcvd_pkts"),
    ("port_xmit_packets", "port_rcv_packets"),
];

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_packet_counters_grow_with_sends() {
    let test = testkit::test_name!();
    let ctx = open();
    let before = ctx.port_counters(PORT).expect("port counters");
    if before.is_empty() {
        testkit::skip(
            test,
            &format!("{} shows no counters for port {PORT} in sysfs", ctx.name()),
        );
        return;
    }
    let Some((sent, received)) = PACKETS
        .into_iter()
        .find(|(s, r)| before.get(s).is_some() && before.get(r).is_some())
    else {
        panic!("no packet counters among {before:?}");
    };
    if crate::support::lacks(test, verbs::Capability::ManualConnect) {
        return;
    }
    const SENDS: u64 = 8;
    let p = Pair::rc();
    for i in 0..SENDS {
        let rx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        p.b.post_recv(RecvRequest::new(rx, ..).unwrap()).unwrap();
        let mut tx = p.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        tx.as_mut_slice()[..100].fill(i as u8);
        p.a.post_send(SendRequest::send(tx, 0..100).unwrap())
            .unwrap();
    }
    let mut received_ok = 0;
    drain(&p.cq_b, SENDS as usize, |wc| {
        wc.status().expect("receive");
        p.b.reclaim(wc);
        received_ok += 1;
    });
    drain(&p.cq_a, SENDS as usize, |wc| {
        wc.status().expect("send");
        p.a.reclaim(wc);
    });
    assert_eq!(received_ok, SENDS);
    std::thread::sleep(before.lifespan().unwrap_or_default() * 2 + Duration::from_millis(5));
    let grew = ctx.port_counters(PORT).unwrap().since(&before);
    eprintln!("grew: {grew:?}");
    // A loopback pair: each SEND leaves and arrives on this port (and its ACK too).
    assert!(grew.get(sent).unwrap() >= SENDS, "{sent}: {grew:?}");
    assert!(grew.get(received).unwrap() >= SENDS, "{received}: {grew:?}");
}
