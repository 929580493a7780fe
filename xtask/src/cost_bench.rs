//! `cargo xtask bench cost`: CPU instructions per operation, counted by callgrind, ours beside
//! the C tools, in the two-hosts guest.
//!
//! The measured side runs under `valgrind --tool=callgrind` while its peer runs natively, at
//! `N`, `2N` and `3N` operations; each side's two runs are the differences
//! `(Ir(2N) - Ir(N)) / N` and `(Ir(3N) - Ir(2N)) / N`, so connection setup and teardown cancel
//! out. What is counted is the side's work as at saturation, where it never waits: under
//! callgrind it runs far slower than rxe and its peer, so its polls would find the queue empty
//! or short of a batch for a share of the run that depends on timing. The preload library
//! `xtask/pollshim` makes each poll wait uncounted until the queue holds what it asks for
//! (see its header), and calls into [`WAITS`] (blocked on a lock or condition, or waking a
//! thread that is) are subtracted from the count. Bandwidth tests run
//! with `-N` (no peak: perftest finds it in time quadratic in the iterations, which would not
//! cancel). The transport and stream cases run our `cost` program (`transport/benches/cost.rs`)
//! under reactor polling (no thread spins on an empty queue) and count only its work loop and
//! its reactor thread (`--toggle-collect`), leaving out the endpoint's progress thread, which
//! then only runs timers. The same cases run again under strace with busy and adaptive polling
//! (`N` and `2N`) for the system calls per operation apart from the provider's doorbell (on
//! rxe a `write` of the post-send command to the uverbs file).
//!
//! `XTASK_COST_CASES=WORD,...` runs only the rows whose case contains one of the words;
//! `XTASK_COST_FROM_RAW=1` makes the report again from the files of the last run, running
//! nothing. The script runs the rows small messages first, each row's sets and system-call
//! runs together, so that a run cut short still reports its first rows.
//!
//! Writes `target/bench/cost.json` (the comparison shape, plus each row's runs and system
//! calls) and `target/bench/cost/CASE.txt`: where our instructions per operation go, by
//! function (callgrind_annotate of the `N` and `2N` runs, subtracted).
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Map, Value};

use crate::compare::{self, Better, Comparison, Report};
use crate::util::{self, Result};

/// Invocations of each measured program: `N`, `2N`, `3N` operations (two differences).
pub const STEPS: u64 = 3;

/// A row's runs may differ by this much (of their median) before the report flags them:
/// ours are exact up to the scheduling of the progress work, C tools' polls vary more.
pub const OURS_SPREAD: f64 = 0.01;
pub const BASELINE_SPREAD: f64 = 0.05;

/// How a program is started (both ends run the same program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// perftest's command line (ours or `ib_*`): `-d DEV -x GID -p PORT ARGS -n N [server]`.
    Perftest,
    /// `ibv_rc_pingpong`'s (ours or rdma-core's): `-d DEV -g GID -p PORT ARGS -n N [server]`.
    Pingpong,
    /// rdma-core's `rstream`: `-b ADDR -p PORT ARGS -C N [-s server]`.
    Rstream,
    /// Our `cost` program: `ROLE SIZE N LOCAL PEER PORT POLLING`.
    Transport {
        server_role: &'static str,
        client_role: &'static str,
        size: u64,
    },
}

/// One measured program: a side of an exchange, run `STEPS` times under callgrind.
#[derive(Debug, Clone)]
pub struct Set {
    /// A file name: `CASE-ours` or `CASE-baseline` with the case's spaces as `_`.
    pub key: String,
    pub tool: Tool,
    /// The measured program (a path for ours, a name on PATH for the C tools).
    pub prog: String,
    /// The program at the other end, run natively: the C tool in the rows of our perftest
    /// tools and `rc-pingpong` (so only the measured side differs), else the same program.
    pub peer: String,
    /// Arguments of both ends beside the ones the tool's shape adds.
    pub args: String,
    /// `N`.
    pub n: u64,
    /// Whether the measured side is the server (else the client).
    pub server: bool,
}

impl Set {
    /// The server's and the client's command lines, with `$N`, `$PORT` and the devices and
    /// addresses left to the script; `polling` for our transport program's measured side.
    fn commands(&self, polling: &str) -> (String, String) {
        let (s, c) = if self.server {
            (&self.prog, &self.peer)
        } else {
            (&self.peer, &self.prog)
        };
        let a = &self.args;
        match self.tool {
            Tool::Perftest => (
                format!("{s} -d $PD -x $PG -p $PORT {a} -n $N"),
                format!("{c} -d $D -x $G -p $PORT {a} -n $N $PA"),
            ),
            Tool::Pingpong => (
                format!("{s} -d $PD -g $PG -p $PORT {a} -n $N"),
                format!("{c} -d $D -g $G -p $PORT {a} -n $N $PA"),
            ),
            Tool::Rstream => (
                format!("{s} -b $PA -p $PORT {a} -C $N"),
                format!("{c} -s $PA -b $A -p $PORT {a} -C $N"),
            ),
            Tool::Transport {
                server_role,
                client_role,
                size,
            } => {
                // The native peer polls busily, as perftest's does.
                let (sp, cp) = if self.server {
                    (polling, "busy")
                } else {
                    ("busy", polling)
                };
                (
                    format!("{s} {server_role} {size} $N $PA $A $PORT {sp}"),
                    format!("{c} {client_role} {size} $N $A $PA $PORT {cp}"),
                )
            }
        }
    }

    fn is_ours_transport(&self) -> bool {
        matches!(self.tool, Tool::Transport { .. })
    }
}

/// One row of the report: our set against the sum of baseline sets (usually one).
#[derive(Debug, Clone)]
pub struct Row {
    /// `TOOL SIZE B SIDE`.
    pub case: String,
    pub ours: String,
    pub baseline: Vec<String>,
    pub baseline_name: String,
    pub goal: f64,
    /// Whether our side also runs under strace (busy and adaptive polling).
    pub syscalls: bool,
}

/// The polling modes whose system calls are counted.
pub const SYSCALL_POLLING: [&str; 2] = ["busy", "adaptive"];

/// `N` of a set's strace runs: a quarter of its callgrind runs' (strace stops the program at
/// every system call, and busy polling makes some).
pub fn strace_n(n: u64) -> u64 {
    (n / 4).max(4)
}

fn key(case: &str, who: &str) -> String {
    format!("{}-{who}", case.replace(' ', "_"))
}

/// Every set to run and every row of the report. `bins`: our release binaries (apps);
/// `cost`: the transport's cost program.
pub fn cases(bins: &Path, cost: &Path) -> (Vec<Set>, Vec<Row>) {
    let mut sets: Vec<Set> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let bin = |name: &str| bins.join(name).to_string_lossy().into_owned();
    let cost = cost.to_string_lossy().into_owned();
    let mut pair = |sets: &mut Vec<Set>,
                    case: String,
                    tool: Tool,
                    (ours, theirs): (String, String),
                    args: &str,
                    n: u64,
                    server: bool,
                    goal: f64| {
        for (who, prog) in [("ours", ours), ("baseline", theirs.clone())] {
            sets.push(Set {
                key: key(&case, who),
                tool,
                prog,
                peer: theirs.clone(),
                args: args.into(),
                n,
                server,
            });
        }
        rows.push(Row {
            ours: key(&case, "ours"),
            baseline: vec![key(&case, "baseline")],
            baseline_name: theirs,
            case,
            goal,
            syscalls: false,
        });
    };
    for test in ["send_bw", "write_bw", "read_bw"] {
        for size in [64u64, 4096] {
            let other = if test == "send_bw" {
                "receiver"
            } else {
                "target"
            };
            for (side, server) in [("sender", false), (other, true)] {
                pair(
                    &mut sets,
                    format!("{test} {size} B {side}"),
                    Tool::Perftest,
                    (bin(&test.replace('_', "-")), format!("ib_{test}")),
                    &format!("-F -N -s {size}"),
                    if size == 64 { 2000 } else { 1000 },
                    server,
                    1.0,
                );
            }
        }
    }
    // The ping-pongs, in event mode (a spin's count depends on timing).
    for (test, tool, ours, theirs, args) in [
        (
            "send_lat",
            Tool::Perftest,
            "send-lat",
            "ib_send_lat",
            "-F -s 64 -e",
        ),
        (
            "rc_pingpong",
            Tool::Pingpong,
            "rc-pingpong",
            "ibv_rc_pingpong",
            "-s 64 -e",
        ),
    ] {
        for (side, server) in [("client", false), ("server", true)] {
            pair(
                &mut sets,
                format!("{test} 64 B {side}"),
                tool,
                (bin(ours), theirs.into()),
                args,
                1000,
                server,
                1.0,
            );
        }
    }

    // The transport's cases, against perftest's sets above or their own.
    let ours = |sets: &mut Vec<Set>, case: &str, tool: Tool, n: u64, server: bool| {
        sets.push(Set {
            key: key(case, "ours"),
            tool,
            prog: cost.clone(),
            peer: cost.clone(),
            args: String::new(),
            n,
            server,
        });
    };
    let row = |case: &str, baseline: &[&str], baseline_name: &str, goal: f64| Row {
        case: case.into(),
        ours: key(case, "ours"),
        baseline: baseline.iter().map(|c| key(c, "baseline")).collect(),
        baseline_name: baseline_name.into(),
        goal,
        syscalls: true,
    };
    let messages = |size| Tool::Transport {
        server_role: "recv",
        client_role: "send",
        size,
    };
    for size in [64u64, 4096] {
        let n = if size == 64 { 2000 } else { 1000 };
        let goal = if size == 64 { 1.0 } else { 1.25 };
        for (side, perftest_side, server) in
            [("sender", "sender", false), ("receiver", "receiver", true)]
        {
            let case = format!("transport {size} B {side}");
            ours(&mut sets, &case, messages(size), n, server);
            rows.push(row(
                &case,
                &[&format!("send_bw {size} B {perftest_side}")],
                "ib_send_bw",
                goal,
            ));
        }
    }
    // 1 MiB messages go by rendezvous: the receiver READs them. perftest's READ initiator is
    // the baseline of both sides (its target does no work per message); with -e it sleeps
    // on the completion channel rather than spinning through each 1 MiB transfer.
    let big = 1u64 << 20;
    let read_case = format!("read_bw {big} B reader");
    sets.push(Set {
        key: key(&read_case, "baseline"),
        tool: Tool::Perftest,
        prog: "ib_read_bw".into(),
        peer: "ib_read_bw".into(),
        args: format!("-F -N -s {big} -t 16 -e"),
        n: 16,
        server: false,
    });
    for (side, server) in [("sender", false), ("receiver", true)] {
        let case = format!("transport {big} B {side}");
        ours(&mut sets, &case, messages(big), 16, server);
        rows.push(row(&case, &[&read_case], "ib_read_bw -e (reader)", 1.25));
    }
    // Buffers sent without a copy (`send_buf`): 4 KiB in one frame against ib_send_bw, 1 MiB
    // as one rendezvous chunk (an announce, one READ, its acknowledgement) against
    // ib_read_bw's one READ per message.
    let zero_copy = |size| Tool::Transport {
        server_role: "recv",
        client_role: "send-buf",
        size,
    };
    for (side, perftest_side, server) in
        [("sender", "sender", false), ("receiver", "receiver", true)]
    {
        let case = format!("transport zero-copy 4096 B {side}");
        ours(&mut sets, &case, zero_copy(4096), 1000, server);
        rows.push(row(
            &case,
            &[&format!("send_bw 4096 B {perftest_side}")],
            "ib_send_bw",
            1.25,
        ));
    }
    for (side, server, goal) in [("sender", false, 2.5), ("receiver", true, 3.0)] {
        let case = format!("transport zero-copy {big} B {side}");
        ours(&mut sets, &case, zero_copy(big), 16, server);
        rows.push(row(&case, &[&read_case], "ib_read_bw -e (reader)", goal));
    }
    // A call is a send and a receive on each side: ib_send_bw's sender plus its receiver.
    let rpc = Tool::Transport {
        server_role: "serve",
        client_role: "call",
        size: 64,
    };
    for (side, server) in [("client", false), ("server", true)] {
        let case = format!("rpc 64 B {side}");
        ours(&mut sets, &case, rpc, 2000, server);
        rows.push(row(
            &case,
            &["send_bw 64 B sender", "send_bw 64 B receiver"],
            "ib_send_bw sender + receiver",
            1.5,
        ));
    }
    // The stream as rstream -C N: the client writes N transfers, the server reads them, then
    // the server writes N back; each side's operation is a write and a read of SIZE bytes.
    for size in [64u64, 4096] {
        let n = if size == 64 { 2000 } else { 500 };
        for (side, server) in [("client", false), ("server", true)] {
            let case = format!("stream {size} B {side}");
            ours(
                &mut sets,
                &case,
                Tool::Transport {
                    server_role: "stream-server",
                    client_role: "stream-client",
                    size,
                },
                n,
                server,
            );
            // -T b: blocking sockets, as our program's reads and writes are (rstream's default
            // is non-blocking, and it spins on EAGAIN, in raccept too, for as long as a wait
            // takes).
            sets.push(Set {
                key: key(&case, "baseline"),
                tool: Tool::Rstream,
                prog: "rstream".into(),
                peer: "rstream".into(),
                args: format!("-S {size} -I 1 -T b"),
                n,
                server,
            });
            rows.push(row(&case, &[&case], "rstream", 1.0));
        }
    }
    (sets, rows)
}

/// Copies our measured programs (the apps in `release`, the `cost` program) into `dir` without
/// their debug info, which valgrind would read at every start (the symbols stay: callgrind
/// names functions and matches `--toggle-collect` by them). Returns `dir`.
pub fn stripped_copies(release: &Path, cost: &Path, dir: &Path) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let apps = ["send-bw", "write-bw", "read-bw", "send-lat", "rc-pingpong"];
    let sources = apps.iter().map(|a| (release.join(a), dir.join(a)));
    // `XTASK_COST_DEBUGINFO=1` keeps it: slower starts, but callgrind then attributes each
    // instruction to its source line, inlined code included (see `cost/raw/*.cg`).
    let keep = std::env::var_os("XTASK_COST_DEBUGINFO").is_some_and(|v| !v.is_empty());
    for (from, to) in sources.chain([(cost.to_path_buf(), dir.join("cost"))]) {
        if keep {
            std::fs::copy(&from, &to)?;
            continue;
        }
        let mut cmd = Command::new("objcopy");
        cmd.arg("--strip-debug").arg(&from).arg(&to);
        util::status(cmd, &format!("objcopy --strip-debug {}", from.display()))?;
    }
    build_pollshim(&dir.join(POLLSHIM))?;
    Ok(dir.to_path_buf())
}

/// The preload library that settles the measured side's polls (`xtask/pollshim/pollshim.c`),
/// built into the directory of the measured programs.
pub const POLLSHIM: &str = "libpollshim.so";

/// Builds `xtask/pollshim` into `to` with the host's C compiler.
fn build_pollshim(to: &Path) -> Result<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("pollshim");
    let mut cmd = Command::new("cc");
    cmd.args([
        "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o",
    ])
    .arg(to)
    .arg(src.join("pollshim.c"))
    .arg(format!(
        "-Wl,--version-script={}",
        src.join("pollshim.map").display()
    ))
    // Linked, so that its calls bind to libibverbs' current symbol versions.
    .args(["-libverbs", "-ldl"]);
    util::status(cmd, "cc xtask/pollshim/pollshim.c")
}

/// The rows whose case contains one of the comma-separated words of `filter` (all without
/// one; `XTASK_COST_CASES` in the environment), and the sets they need.
pub fn only((sets, rows): (Vec<Set>, Vec<Row>), filter: Option<&str>) -> (Vec<Set>, Vec<Row>) {
    let Some(words) = filter.filter(|f| !f.trim().is_empty()) else {
        return (sets, rows);
    };
    let rows: Vec<Row> = rows
        .into_iter()
        .filter(|r| words.split(',').any(|w| r.case.contains(w.trim())))
        .collect();
    let sets = sets
        .into_iter()
        .filter(|s| {
            rows.iter()
                .any(|r| r.ours == s.key || r.baseline.contains(&s.key))
        })
        .collect();
    (sets, rows)
}

/// The shell script run in the guest: every set `STEPS` times under callgrind, then our
/// transport sets under strace. Each run ends with `@@cost KEY STEP N RC PEER_RC`; its files
/// go to `raw` (`KEY.STEP.cg`, `KEY.busy.STEP.st`, ...).
pub fn script(sets: &[Set], rows: &[Row], raw: &Path, shim: &Path) -> String {
    // Small messages first, then the rest; within a size, the tools in this order.
    let rank = |case: &str| {
        let size: u64 = case
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX);
        let tools = [
            "send_bw",
            "transport",
            "rpc",
            "stream",
            "rc_pingpong",
            "send_lat",
            "write_bw",
            "read_bw",
        ];
        let tool = tools
            .iter()
            .position(|t| case.starts_with(t))
            .unwrap_or(tools.len());
        (size, tool)
    };
    let mut ordered: Vec<&Row> = rows.iter().collect();
    ordered.sort_by_key(|r| rank(&r.case));
    let mut emitted: Vec<&str> = Vec::new();
    let mut s = format!(
        r#"RAW={raw}
SHIM={shim}
mkdir -p $RAW
D=$RDMA_TEST_DEVICE; G=$RDMA_TEST_GID_INDEX; A=$RDMA_TEST_ADDR
PD=${{RDMA_TEST_PEER_DEVICE:-$D}}; PG=${{RDMA_TEST_PEER_GID_INDEX:-$G}}; PA=${{RDMA_TEST_PEER_ADDR:-$A}}
PORT=19600
# rsocket spins on its completion queue for polling_time microseconds before it blocks (10 by
# default); under callgrind that spin is a share of the run that depends on timing. 0: it
# blocks at once, so its instructions per operation are its work.
mkdir -p /etc/rdma/rsocket && echo 0 > /etc/rdma/rsocket/polling_time
# The measured side's polls wait, uncounted, until its queue holds what a device that kept up
# would have queued (xtask/pollshim).
CG="env LD_PRELOAD=$SHIM valgrind --tool=callgrind"
# Ours in the transport's cases: only its work loop and reactor thread (the endpoint's own
# threads, named transport-*, poll as they would).
CGT="env POLLSHIM_PASS=transport- $CG --collect-atstart=no --toggle-collect=cost::measured_work --toggle-collect=cost::measured_reactor"
listening() {{ # a TCP listener (perftest, pingpong) or an rdma_cm one (rsocket, ours) on port $1
  hex=$(printf '%04X' $1)
  grep -q ":$hex 00000000:0000 0A" /proc/net/tcp 2>/dev/null && return 0
  rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ":$1 "
}}
ended() {{ # waits up to $2 s for pid $1, then ends it; its status
  i=0
  while kill -0 $1 2>/dev/null; do
    i=$((i+1)); [ $i -gt $(($2*10)) ] && {{ kill $1; break; }}; sleep 0.1
  done
  wait $1
}}
# run KEY STEP N server|client WRAP OUT SERVER_CMD CLIENT_CMD: the measured end under WRAP
run() {{
  key=$1; step=$2; N=$3; side=$4; wrap=$5; out=$6; srv=$7; cli=$8
  PORT=$((PORT+1)); log=$RAW/$key.$step.log
  if [ $side = server ]; then
    eval "timeout 900 $wrap $out $srv >$log 2>&1 &"; m=$!
    i=0; while ! listening $PORT && kill -0 $m 2>/dev/null; do
      i=$((i+1)); [ $i -gt 1800 ] && break; sleep 0.1; done
    eval "timeout 900 $cli >$log.peer 2>&1"; prc=$?
    ended $m 300; rc=$?
  else
    eval "timeout 900 $srv >$log.peer 2>&1 &"; p=$!
    i=0; while ! listening $PORT && kill -0 $p 2>/dev/null; do
      i=$((i+1)); [ $i -gt 1800 ] && break; sleep 0.1; done
    eval "timeout 900 $wrap $out $cli >$log 2>&1"; rc=$?
    ended $p 60; prc=$?
  fi
  echo "$rc $prc" > $RAW/$key.$step.rc
  echo "@@cost $key $step $N $rc $prc"
}}
"#,
        raw = util::shell_quote(&raw.to_string_lossy()),
        shim = util::shell_quote(&shim.to_string_lossy()),
    );
    for row in ordered {
        let keys = std::iter::once(&row.ours).chain(&row.baseline);
        for set in keys.filter_map(|k| sets.iter().find(|s| &s.key == k)) {
            if emitted.contains(&set.key.as_str()) {
                continue;
            }
            emitted.push(&set.key);
            s.push_str(&callgrind_runs(set));
        }
        if row.syscalls {
            if let Some(set) = sets.iter().find(|s| s.key == row.ours) {
                s.push_str(&strace_runs(set));
            }
        }
    }
    s
}

/// The `STEPS` callgrind runs of `set`.
fn callgrind_runs(set: &Set) -> String {
    let (srv, cli) = set.commands("reactor");
    let wrap = if set.is_ours_transport() {
        "$CGT"
    } else {
        "$CG"
    };
    (1..=STEPS)
        .map(|step| {
            format!(
                "run {key} {step} {n} {side} \"env POLLSHIM_OUT=$RAW/{key}.{step}.poll {wrap}\" --callgrind-out-file=$RAW/{key}.{step}.cg {srv} {cli}\n",
                key = set.key,
                n = set.n * step,
                side = if set.server { "server" } else { "client" },
                srv = util::shell_quote(&srv),
                cli = util::shell_quote(&cli),
            )
        })
        .collect()
}

/// The strace runs of our `set`: `N` and `2N` under each of [`SYSCALL_POLLING`].
fn strace_runs(set: &Set) -> String {
    let mut s = String::new();
    for polling in SYSCALL_POLLING {
        let (srv, cli) = set.commands(polling);
        for step in 1..=2 {
            s.push_str(&format!(
                "run {key}.{polling} {step} {n} {side} \"strace -f -qq -x -s 32\" \"-o $RAW/{key}.{polling}.{step}.st\" {srv} {cli}\n",
                key = set.key,
                n = strace_n(set.n) * step,
                side = if set.server { "server" } else { "client" },
                srv = util::shell_quote(&srv),
                cli = util::shell_quote(&cli),
            ));
        }
    }
    s
}

/// The instructions a callgrind output file counted (its `totals:` line, else `summary:`).
pub fn callgrind_total(text: &str) -> Option<u64> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

/// Functions that wait rather than work, by the start of their name: a thread blocked on a
/// lock or a condition, or waking one that is. A saturated side does not wait, so what runs
/// in these (and in everything they call) is taken out of the count, as the poll shim takes
/// out waits for the device. Ours name their waits (`wait_blocked`, `park_until_ready`,
/// `wait_progress_lock`); a reactor's sleep on its fd, and the event it wakes for, are waits.
/// The names follow the module the function is defined in: a test checks that ours are still
/// defined there (`waits_of_ours_are_defined_where_their_names_say`).
pub const WAITS: [&str; 15] = [
    "transport::wait::<impl transport::conn::Conn>::wait_blocked",
    "transport::task::park_until_ready",
    "transport::engine::poll::<impl transport::engine::Shared>::wait_progress_lock",
    "verbs_sys::fd::wait",
    "verbs::cq::Cq::get_event",
    "parking_lot::condvar::Condvar::notify_all_slow",
    "parking_lot::condvar::Condvar::notify_one_slow",
    "parking_lot::raw_mutex::RawMutex::lock_slow",
    "parking_lot::raw_mutex::RawMutex::unlock_slow",
    "std::thread::Thread::unpark",
    "__lll_lock_wait",
    "__lll_lock_wake",
    "___pthread_cond_wait",
    "___pthread_cond_timedwait",
    "__pthread_cond_wait",
];

fn is_wait(function: &str) -> bool {
    WAITS.iter().any(|w| function.starts_with(w))
}

/// The instructions a callgrind output file counted inside [`WAITS`]: the inclusive cost of
/// every call from a function that is not a wait into one that is (so a wait within a wait
/// counts once).
pub fn callgrind_waits(text: &str) -> u64 {
    let mut total = 0;
    for_each_cost(text, |function, callee, cost| {
        if callee.is_some_and(is_wait) && !is_wait(function) {
            total += cost;
        }
    });
    total
}

/// The poll shim's own functions (their names start so): what they count per poll besides
/// the provider's poll (the calls into the shim and the collection toggles) is the bench's,
/// not the program's, and comes off the count.
pub const SHIM_FUNCTIONS: &str = "shim_";

/// The instructions a callgrind output file counted in the functions whose name starts with
/// `prefix`, themselves (exclusive: what they call is not included).
pub fn callgrind_exclusive(text: &str, prefix: &str) -> u64 {
    let mut total = 0;
    for_each_cost(text, |function, callee, cost| {
        if callee.is_none() && function.starts_with(prefix) {
            total += cost;
        }
    });
    total
}

/// Walks the cost lines of a callgrind output file: `f(function, callee, cost)` for each,
/// `callee` set on the line after a `calls=` (the inclusive cost of those calls), else the
/// function's own cost on one line of its code.
fn for_each_cost(text: &str, mut f: impl FnMut(&str, Option<&str>, u64)) {
    // `fn=(12) name` defines a compressed name (shared by `cfn=`), `fn=(12)` uses it.
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let (mut function, mut callee) = (String::new(), String::new());
    let mut in_call = false;
    for l in text.lines() {
        if let Some(spec) = l.strip_prefix("fn=") {
            function = compressed_name(&mut names, spec);
        } else if let Some(spec) = l.strip_prefix("cfn=") {
            callee = compressed_name(&mut names, spec);
        } else if l.starts_with("calls=") {
            in_call = true;
        } else if in_call {
            in_call = false;
            f(&function, Some(&callee), line_cost(l));
        } else if l.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            f(&function, None, line_cost(l));
        }
    }
}

/// The cost on one of callgrind's cost lines (`POSITION COST`; 0 when it has none).
fn line_cost(line: &str) -> u64 {
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A name of callgrind's compressed form: `(12) name` defines id 12, `(12)` uses it.
fn compressed_name(names: &mut BTreeMap<String, String>, spec: &str) -> String {
    let spec = spec.trim();
    if let Some(rest) = spec.strip_prefix('(') {
        if let Some((id, name)) = rest.split_once(')') {
            let name = name.trim();
            if name.is_empty() {
                return names.get(id).cloned().unwrap_or_default();
            }
            names.insert(id.to_string(), name.to_string());
            return name.to_string();
        }
    }
    spec.to_string()
}

/// The differences of `totals` (the counts at `N`, `2N`, `3N`, ...) per operation.
pub fn per_op(totals: &[u64], n: u64) -> Vec<f64> {
    totals
        .windows(2)
        .map(|w| (w[1] as f64 - w[0] as f64) / n as f64)
        .collect()
}

/// How far apart `runs` are, as a fraction of their median (0 for fewer than two).
pub fn spread(runs: &[f64]) -> f64 {
    if runs.len() < 2 {
        return 0.0;
    }
    let max = runs.iter().copied().fold(f64::MIN, f64::max);
    let min = runs.iter().copied().fold(f64::MAX, f64::min);
    let med = compare::median(runs.to_vec()).abs();
    if med == 0.0 {
        if max == min {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (max - min) / med
    }
}

/// Exclusive instructions by function from `callgrind_annotate` output: (function, count),
/// the `file:` prefix dropped and the counts of one function summed over its files.
pub fn annotate_functions(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let mut in_table = false;
    for l in text.lines() {
        if l.trim_start().starts_with("Ir") && l.contains("file:function") {
            in_table = true;
            continue;
        }
        if !in_table || l.starts_with("---") {
            continue;
        }
        let t = l.trim_start();
        let Some((num, rest)) = t.split_once(' ') else {
            continue;
        };
        let Ok(count) = num.replace(',', "").parse::<u64>() else {
            continue;
        };
        let rest = rest.trim_start();
        // `(12.34%)` after the count, then `file:function [object]`.
        let rest = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, after)| after).trim_start(),
            None => rest,
        };
        let name = rest.split_once(':').map_or(rest, |(_, f)| f);
        *m.entry(name.trim().to_string()).or_insert(0) += count;
    }
    m
}

/// Per function, (count at 2N - count at N) / N, largest first.
pub fn per_op_functions(
    at_n: &BTreeMap<String, u64>,
    at_2n: &BTreeMap<String, u64>,
    n: u64,
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = at_2n
        .iter()
        .map(|(f, &c)| {
            let before = at_n.get(f).copied().unwrap_or(0);
            (f.clone(), (c as f64 - before as f64) / n as f64)
        })
        .chain(
            at_n.iter()
                .filter(|(f, _)| !at_2n.contains_key(*f))
                .map(|(f, &c)| (f.clone(), -(c as f64) / n as f64)),
        )
        .filter(|(_, d)| d.abs() >= 0.05)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// System calls in an strace log (`-f -x`): by name, a `write` of a uverbs command named
/// `write(uverbs N)`, the provider's doorbell (uverbs command 28, post send) as `doorbell`.
pub fn strace_counts(text: &str) -> BTreeMap<String, u64> {
    let mut uverbs_fds: Vec<String> = Vec::new();
    let mut m = BTreeMap::new();
    for l in text.lines() {
        // `PID  name(args) = ret`, or a call split by another thread's: `... <unfinished ...>`
        // (counted) and `<... name resumed> ...` (not).
        let call = l.trim_start();
        let call = call
            .split_once(char::is_whitespace)
            .map(|(pid, rest)| {
                if pid.chars().all(|c| c.is_ascii_digit()) {
                    rest.trim_start()
                } else {
                    call
                }
            })
            .unwrap_or(call);
        if call.starts_with('<') || call.starts_with("---") || call.starts_with("+++") {
            continue;
        }
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if (name == "openat" || name == "open") && args.contains("/dev/infiniband/uverbs") {
            if let Some(fd) = l.rsplit_once("= ").map(|(_, r)| r.trim().to_string()) {
                uverbs_fds.push(fd);
            }
        }
        let mut label = name.to_string();
        if name == "write" {
            let fd = args.split(',').next().unwrap_or("").trim();
            let buf = args.split_once("\"").map_or("", |(_, b)| b);
            if uverbs_fds.iter().any(|f| f == fd) || buf.starts_with("\\x1c\\x00\\x00\\x00") {
                let cmd = buf
                    .get(2..4)
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .unwrap_or(u32::MAX);
                label = if cmd == 28 {
                    "doorbell".into()
                } else {
                    format!("write(uverbs {cmd})")
                };
            }
        }
        *m.entry(label).or_insert(0) += 1;
    }
    m
}

/// System calls per operation from the counts at `N` and `2N`: the doorbells, the others,
/// and the others by name.
pub fn syscalls_per_op(
    at_n: &BTreeMap<String, u64>,
    at_2n: &BTreeMap<String, u64>,
    n: u64,
) -> Value {
    let mut by = Map::new();
    let (mut doorbells, mut other) = (0.0, 0.0);
    let names: std::collections::BTreeSet<&String> = at_n.keys().chain(at_2n.keys()).collect();
    for name in names {
        let d = (at_2n.get(name).copied().unwrap_or(0) as f64
            - at_n.get(name).copied().unwrap_or(0) as f64)
            / n as f64;
        if name == "doorbell" {
            doorbells = d;
        } else {
            other += d;
            if d.abs() >= 0.005 {
                by.insert(name.clone(), json!(round3(d)));
            }
        }
    }
    json!({"doorbells_per_op": round3(doorbells), "other_per_op": round3(other), "other_by_call": by})
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// What the poll shim did in one run: its `POLLSHIM_OUT` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Polls of a thread that waits.
    pub polls: u64,
    /// Polls that found fewer completions queued than they asked for, and waited.
    pub waits: u64,
    /// Waits that ended with nothing queued (nothing was coming).
    pub empty_waits: u64,
    /// Waits that ended with fewer than asked for and no new completion for the quiet time.
    pub partial_waits: u64,
    /// Completions the polls found queued (up to what each asked for).
    pub entries: u64,
}

impl Settled {
    /// `polls waits empty_waits partial_waits entries`.
    pub fn parse(text: &str) -> Option<Self> {
        let v: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        match v[..] {
            [polls, waits, empty_waits, partial_waits, entries] => Some(Self {
                polls,
                waits,
                empty_waits,
                partial_waits,
                entries,
            }),
            _ => None,
        }
    }

    /// Per operation from the runs at `N` (`self`) and `2N` (`at_2n`).
    pub fn per_op(&self, at_2n: &Self, n: u64) -> Value {
        let d = |a: u64, b: u64| round3((b as f64 - a as f64) / n as f64);
        json!({
            "polls_per_op": d(self.polls, at_2n.polls),
            "entries_per_op": d(self.entries, at_2n.entries),
            "waits_per_op": d(self.waits, at_2n.waits),
            "partial_waits_per_op": d(self.partial_waits, at_2n.partial_waits),
            "empty_waits_per_op": d(self.empty_waits, at_2n.empty_waits),
        })
    }
}

/// One row's measurements.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub ours_runs: Vec<f64>,
    pub baseline_runs: Vec<f64>,
    /// By polling mode, the system calls per operation (see [`syscalls_per_op`]).
    pub syscalls: Map<String, Value>,
    /// By set, what the poll shim did per operation (see [`Settled::per_op`]).
    pub settled: Map<String, Value>,
}

/// Runs under this many instructions per operation do no work per operation (a WRITE's or
/// READ's target): their spread and ratio are noise.
pub const NO_WORK: f64 = 1.0;

impl Measured {
    /// Whether neither side does work per operation: every run of both under [`NO_WORK`].
    pub fn no_work(&self) -> bool {
        let runs = || self.ours_runs.iter().chain(&self.baseline_runs);
        runs().next().is_some() && runs().all(|r| r.abs() < NO_WORK)
    }

    /// Why the runs of this row are flagged, if they are.
    pub fn flags(&self) -> Vec<String> {
        if self.no_work() {
            return vec![format!(
                "neither side works per operation (every run under {NO_WORK} instruction): no ratio, no goal"
            )];
        }
        let mut f = Vec::new();
        let (o, b) = (spread(&self.ours_runs), spread(&self.baseline_runs));
        if o > OURS_SPREAD {
            f.push(format!("ours' runs differ by {:.1}%", o * 100.0));
        }
        if b > BASELINE_SPREAD {
            f.push(format!("the baseline's runs differ by {:.1}%", b * 100.0));
        }
        f
    }
}

/// Whether the run `stem` (`KEY.STEP`) in `raw` succeeded on both ends: its `.rc` file (the
/// measured side's status and the peer's) says `0 0`, or there is none.
fn succeeded(raw: &Path, stem: &str) -> bool {
    std::fs::read_to_string(raw.join(format!("{stem}.rc")))
        .map_or(true, |rc| rc.split_whitespace().all(|s| s == "0"))
}

/// The runs of a set from its callgrind files in `raw`: as many as its first steps that
/// succeeded allow (a failed step, or a run cut short, leaves fewer).
pub fn set_runs(raw: &Path, set: &Set) -> Vec<f64> {
    let totals: Vec<u64> = (1..=STEPS)
        .map_while(|step| {
            let stem = format!("{}.{step}", set.key);
            if !succeeded(raw, &stem) {
                return None;
            }
            let text = std::fs::read_to_string(raw.join(format!("{stem}.cg"))).ok()?;
            let left_out = callgrind_waits(&text) + callgrind_exclusive(&text, SHIM_FUNCTIONS);
            Some(callgrind_total(&text)?.saturating_sub(left_out))
        })
        .collect();
    per_op(&totals, set.n)
}

/// Every row's runs and system calls, from the files in `raw`.
pub fn measure(raw: &Path, sets: &[Set], rows: &[Row]) -> Vec<Measured> {
    let runs: BTreeMap<&str, Vec<f64>> = sets
        .iter()
        .map(|s| (s.key.as_str(), set_runs(raw, s)))
        .collect();
    rows.iter()
        .map(|r| {
            let ours_runs = runs.get(r.ours.as_str()).cloned().unwrap_or_default();
            // The sum of the baseline sets, run by run (as many runs as all of them have).
            let parts: Vec<&Vec<f64>> = r
                .baseline
                .iter()
                .filter_map(|k| runs.get(k.as_str()))
                .collect();
            let len = if parts.len() == r.baseline.len() {
                parts.iter().map(|p| p.len()).min().unwrap_or(0)
            } else {
                0
            };
            let baseline_runs = (0..len).map(|i| parts.iter().map(|p| p[i]).sum()).collect();
            let mut syscalls = Map::new();
            if r.syscalls {
                let n = sets
                    .iter()
                    .find(|s| s.key == r.ours)
                    .map_or(1, |s| strace_n(s.n));
                for polling in SYSCALL_POLLING {
                    let counts = |step: u64| {
                        let stem = format!("{}.{polling}.{step}", r.ours);
                        if !succeeded(raw, &stem) {
                            return None;
                        }
                        std::fs::read_to_string(raw.join(format!("{stem}.st")))
                            .ok()
                            .map(|t| strace_counts(&t))
                    };
                    if let (Some(a), Some(b)) = (counts(1), counts(2)) {
                        syscalls.insert(polling.into(), syscalls_per_op(&a, &b, n));
                    }
                }
            }
            let mut settled = Map::new();
            for key in std::iter::once(&r.ours).chain(&r.baseline) {
                let Some(set) = sets.iter().find(|s| &s.key == key) else {
                    continue;
                };
                let at = |step: u64| {
                    let stem = format!("{key}.{step}");
                    let text = std::fs::read_to_string(raw.join(format!("{stem}.poll")));
                    (succeeded(raw, &stem)).then_some(())?;
                    Settled::parse(&text.ok()?)
                };
                let waits = |step: u64| {
                    let text = std::fs::read_to_string(raw.join(format!("{key}.{step}.cg")));
                    text.ok().map(|t| callgrind_waits(&t))
                };
                if let (Some(a), Some(b)) = (at(1), at(2)) {
                    let mut v = a.per_op(&b, set.n);
                    if let (Some(wa), Some(wb)) = (waits(1), waits(2)) {
                        v["wait_instructions_per_op"] =
                            json!(round3((wb as f64 - wa as f64) / set.n as f64));
                    }
                    settled.insert(key.clone(), v);
                }
            }
            Measured {
                ours_runs,
                baseline_runs,
                syscalls,
                settled,
            }
        })
        .collect()
}

/// The comparison report: instructions per operation, medians of each side's runs.
pub fn report(device: &str, sets: &[Set], rows: &[Row], measured: &[Measured]) -> Report {
    let comparisons = rows
        .iter()
        .zip(measured)
        .map(|(r, m)| {
            let n = sets.iter().find(|s| s.key == r.ours).map_or(0, |s| s.n);
            let mut extra = Map::new();
            extra.insert("ours_runs".into(), json!(m.ours_runs));
            extra.insert("baseline_runs".into(), json!(m.baseline_runs));
            extra.insert("iterations".into(), json!(n));
            extra.insert("flags".into(), json!(m.flags()));
            if !m.syscalls.is_empty() {
                extra.insert("syscalls".into(), Value::Object(m.syscalls.clone()));
            }
            extra.insert("settled".into(), Value::Object(m.settled.clone()));
            Comparison {
                case: r.case.clone(),
                metric: "instructions per op".into(),
                unit: "instructions".into(),
                ours: compare::median(m.ours_runs.clone()),
                baseline: compare::median(m.baseline_runs.clone()),
                baseline_name: r.baseline_name.clone(),
                better: Better::Lower,
                goal: if m.no_work() { f64::NAN } else { r.goal },
                extra,
            }
        })
        .collect();
    let mut extra = Map::new();
    extra.insert(
        "method".into(),
        json!(format!(
            "callgrind in the guest, the peer native; runs (Ir(kN) - Ir((k-1)N)) / N for k = 2..{STEPS}; \
             the measured side's polls wait uncounted until the queue holds what they ask for \
             (xtask/pollshim: or some and none new for 2 ms, or none for 20 ms; the shim's own \
             instructions are taken off), and calls into \
             functions that wait (WAITS: blocked on a lock or condition, or waking a thread that \
             is) are not counted; \
             flagged when ours' runs differ by more than {}% or the baseline's by more than {}%",
            OURS_SPREAD * 100.0,
            BASELINE_SPREAD * 100.0
        )),
    );
    extra.insert(
        "transport_polling".into(),
        json!(
            "instructions: Polling::Reactor (no spin) driven by the program's own reactor thread, \
               counting its work loop and reactor thread only (the progress thread runs timers); \
               system calls: busy and adaptive polling under strace, N and 2N"
        ),
    );
    Report {
        bench: "cost".into(),
        device: device.into(),
        comparisons,
        extra,
    }
}

/// The table with every run, and the flagged rows.
pub fn table(report: &Report) -> String {
    let mut s = format!(
        "{:<28} {:>10} {:>10} {:>7} {:>6}  {:<24} {}\n",
        "case", "ours", "baseline", "ratio", "goal", "ours runs", "baseline runs"
    );
    let runs = |v: &Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| format!("{:.1}", x.as_f64().unwrap_or(f64::NAN)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .unwrap_or_default()
    };
    for c in &report.comparisons {
        s.push_str(&format!(
            "{:<28} {:>10.1} {:>10.1} {:>6.2}x {:>6}  {:<24} {}{}\n",
            c.case,
            c.ours,
            c.baseline,
            c.ratio(),
            if c.goal.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2}x", c.goal)
            },
            runs(&c.extra["ours_runs"]),
            runs(&c.extra["baseline_runs"]),
            if c.ours.is_nan() || c.baseline.is_nan() {
                "  (not measured)"
            } else if c.met() {
                ""
            } else {
                "  (missed)"
            }
        ));
    }
    let flagged: Vec<String> = report
        .comparisons
        .iter()
        .filter_map(|c| {
            let f = c.extra["flags"].as_array()?;
            (!f.is_empty()).then(|| {
                let why: Vec<&str> = f.iter().filter_map(Value::as_str).collect();
                format!("  {}: {}\n", c.case, why.join("; "))
            })
        })
        .collect();
    if !flagged.is_empty() {
        s.push_str("flagged:\n");
        s.extend(flagged);
    }
    let sys: Vec<String> = report
        .comparisons
        .iter()
        .filter_map(|c| {
            let m = c.extra.get("syscalls")?.as_object()?;
            let modes: Vec<String> = m
                .iter()
                .map(|(mode, v)| {
                    format!(
                        "{mode}: {} doorbells, {} others {}",
                        v["doorbells_per_op"], v["other_per_op"], v["other_by_call"]
                    )
                })
                .collect();
            Some(format!("  {}: {}\n", c.case, modes.join("; ")))
        })
        .collect();
    if !sys.is_empty() {
        s.push_str("system calls per op (ours, under strace):\n");
        s.extend(sys);
    }
    let mut shown = std::collections::BTreeSet::new();
    let settled: Vec<String> = report
        .comparisons
        .iter()
        .filter_map(|c| c.extra.get("settled")?.as_object())
        .flat_map(|m| m.iter())
        .filter(|(key, _)| shown.insert(key.as_str()))
        .map(|(key, v)| {
            format!(
                "  {key}: {} polls, {} completions, {} waits ({} partial, {} empty); {} instructions in waits, not counted\n",
                v["polls_per_op"],
                v["entries_per_op"],
                v["waits_per_op"],
                v["partial_waits_per_op"],
                v["empty_waits_per_op"],
                v.get("wait_instructions_per_op").unwrap_or(&Value::Null)
            )
        })
        .collect();
    if !settled.is_empty() {
        s.push_str("polls per op (measured side, N to 2N):\n");
        s.extend(settled);
    }
    s
}

/// Writes `dir/CASE.txt` for every row: our instructions per operation by function, from
/// callgrind_annotate of the `N` and `2N` runs.
pub fn write_functions(raw: &Path, dir: &Path, sets: &[Set], rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for r in rows {
        let Some(set) = sets.iter().find(|s| s.key == r.ours) else {
            continue;
        };
        let annotate = |step: u64| -> Option<String> {
            let file = raw.join(format!("{}.{step}.cg", set.key));
            if !file.exists() {
                return None;
            }
            let mut cmd = Command::new("callgrind_annotate");
            cmd.arg("--threshold=100").arg(&file);
            util::output(cmd, "callgrind_annotate").ok()
        };
        let (Some(a), Some(b)) = (annotate(1), annotate(2)) else {
            continue;
        };
        let funcs = per_op_functions(&annotate_functions(&a), &annotate_functions(&b), set.n);
        let total: f64 = funcs.iter().map(|(_, d)| d).sum();
        let mut text = format!(
            "{}: our instructions per operation by function (exclusive), from callgrind_annotate\n\
             of the runs at N = {} and 2N, subtracted and divided by N. Total {total:.1}.\n\n",
            r.case, set.n
        );
        for (f, d) in funcs.iter().take(40) {
            text.push_str(&format!("{d:>10.1}  {f}\n"));
        }
        std::fs::write(dir.join(format!("{}.txt", r.case.replace(' ', "_"))), text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_differences_per_operation_and_spread_flags_them() {
        assert_eq!(per_op(&[5_000, 7_000, 9_010], 1000), vec![2.0, 2.01]);
        assert!((spread(&[2.0, 2.01]) - 0.01 / 2.005).abs() < 1e-12);
        let m = Measured {
            ours_runs: vec![100.0, 100.5],
            baseline_runs: vec![100.0, 106.0],
            syscalls: Map::new(),
            settled: Map::new(),
        };
        let f = m.flags();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("baseline"));
        let m = Measured {
            ours_runs: vec![100.0, 102.0],
            baseline_runs: vec![100.0, 104.0],
            syscalls: Map::new(),
            settled: Map::new(),
        };
        assert!(m.flags()[0].starts_with("ours"));
        assert!(!m.no_work());
        assert_eq!(spread(&[0.0, 0.0]), 0.0);
        // A WRITE's target on both sides: no work per operation, whatever the spread.
        let m = Measured {
            ours_runs: vec![0.3, -0.0],
            baseline_runs: vec![-0.1, 0.1],
            ..Measured::default()
        };
        assert!(m.no_work());
        assert_eq!(m.flags().len(), 1);
        assert!(m.flags()[0].contains("no ratio"), "{:?}", m.flags());
        assert!(!Measured::default().no_work());
    }

    #[test]
    fn the_poll_shims_counts_are_read_and_taken_per_operation() {
        let a = Settled::parse("10 4 1 2 30\n").unwrap();
        assert_eq!(a.waits, 4);
        assert_eq!(a.entries, 30);
        assert_eq!(Settled::parse("1 2 3"), None);
        assert_eq!(Settled::parse("1 2 3 4 x"), None);
        let b = Settled::parse("30 8 1 6 70").unwrap();
        let v = a.per_op(&b, 10);
        assert_eq!(v["polls_per_op"], 2.0);
        assert_eq!(v["entries_per_op"], 4.0);
        assert_eq!(v["partial_waits_per_op"], 0.4);
        assert_eq!(v["empty_waits_per_op"], 0.0);
    }

    #[test]
    fn waits_of_ours_are_defined_where_their_names_say() {
        // A wait renamed or moved to another module would no longer be subtracted: every
        // count would silently grow by the waits' instructions.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for name in WAITS {
            let segments: Vec<&str> = name.split("::").collect();
            let krate = segments[0];
            if !["transport", "verbs", "verbs_sys"].contains(&krate) {
                continue;
            }
            let function = segments[segments.len() - 1];
            let module: Vec<&str> = segments[1..segments.len() - 1]
                .iter()
                .take_while(|s| s.starts_with(|c: char| c.is_ascii_lowercase()))
                .copied()
                .collect();
            let src = root.join(krate.replace('_', "-")).join("src");
            let path = module.join("/");
            let file = [
                src.join(format!("{path}.rs")),
                src.join(path).join("mod.rs"),
            ]
            .into_iter()
            .find(|f| f.is_file())
            .unwrap_or_else(|| panic!("{name}: no file for its module"));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                text.contains(&format!("fn {function}")),
                "{name}: {} defines no fn {function}",
                file.display()
            );
        }
    }

    #[test]
    fn calls_into_waits_are_counted_once_with_what_they_call() {
        let text = "events: Ir\n\
                    fn=(1) cost::measured_work\n\
                    5 100\n\
                    cfn=(2) transport::wait::<impl transport::conn::Conn>::wait_blocked::<u8, {closure#0}>\n\
                    calls=3 40\n\
                    7 900\n\
                    cfn=(3) transport::conn::Conn::recv\n\
                    calls=10 50\n\
                    8 500\n\
                    fn=(2)\n\
                    41 300\n\
                    cfn=(4) parking_lot::raw_mutex::RawMutex::lock_slow\n\
                    calls=1 60\n\
                    42 20\n\
                    42 200\n\
                    fn=(3)\n\
                    cfn=(4)\n\
                    calls=2 60\n\
                    51 70\n\
                    totals: 1800\n";
        // 900 from measured_work into the wait, 70 from recv into lock_slow; the lock_slow
        // within the wait is inside the 900 already.
        assert_eq!(callgrind_waits(text), 970);
        assert_eq!(callgrind_waits("events: Ir\nfn=(1) main\n3 10\n"), 0);
        // The shim's own instructions: its lines, not the call into the provider's poll.
        let shim = "fn=(1) main\n3 10\ncfn=(2) shim_poll_cq\ncalls=1 5\n4 90\n\
                    fn=(2)\n5 30\n+1 6\ncfn=(3) 0x2ca0\ncalls=1 9\n7 54\n* 2\n";
        assert_eq!(callgrind_exclusive(shim, SHIM_FUNCTIONS), 38);
        assert_eq!(callgrind_exclusive(shim, "main"), 10);
    }

    #[test]
    fn callgrind_totals_are_read_from_its_output_file() {
        let text = "version: 1\ncreator: callgrind-3.19.0\npid: 179\ncmd:  ib_send_bw -n 1000\n\
                    part: 1\n\nevents: Ir\n\nfn=(1) main\n3 10\n\nsummary: 5026497\n\n\ntotals: 5026497\n";
        assert_eq!(callgrind_total(text), Some(5_026_497));
        assert_eq!(callgrind_total("summary: 12\n"), Some(12));
        assert_eq!(callgrind_total("events: Ir\n"), None);
    }

    #[test]
    fn annotate_output_gives_functions_and_their_cost_per_operation() {
        let at = |main: &str, memcpy: &str, gone: &str| {
            format!(
                "--------------------------------------------------------------------------------\n\
                 Profile data file 'x.cg' (creator: callgrind-3.19.0)\n\
                 --------------------------------------------------------------------------------\n\
                 Events recorded:  Ir\n\n\
                 --------------------------------------------------------------------------------\n\
                 Ir              \n\
                 --------------------------------------------------------------------------------\n\
                 10,012 (100.0%)  PROGRAM TOTALS\n\n\
                 --------------------------------------------------------------------------------\n\
                 Ir              file:function\n\
                 --------------------------------------------------------------------------------\n\
                 {main} (39.96%)  /rustc/abc/library/core/src/cmp.rs:cost::measured_work\n\
                 {main} (20.02%)  /rustc/abc/library/core/src/iter/range.rs:cost::measured_work\n\
                 {memcpy} ( 0.05%)  ???:__memcpy_avx_unaligned_erms [/usr/lib/x86_64-linux-gnu/libc.so.6]\n\
                 {gone} ( 0.01%)  ???:setup [/x/cost]\n\
                 \x20   .           ???:(below main) [/x/cost]\n"
            )
        };
        let a = annotate_functions(&at("4,000", "5", "7"));
        assert_eq!(a["cost::measured_work"], 8_000);
        assert_eq!(
            a["__memcpy_avx_unaligned_erms [/usr/lib/x86_64-linux-gnu/libc.so.6]"],
            5
        );
        assert!(!a.keys().any(|k| k.contains("PROGRAM TOTALS")));
        let b = annotate_functions(&at("6,000", "1,005", "7"));
        let per = per_op_functions(&a, &b, 1000);
        assert_eq!(per[0], ("cost::measured_work".to_string(), 4.0));
        assert_eq!(per[1].1, 1.0);
        assert_eq!(per.len(), 2, "unchanged functions are left out: {per:?}");
    }

    #[test]
    fn strace_lines_count_the_doorbell_apart() {
        let log = r#"201   openat(AT_FDCWD, "/dev/infiniband/uverbs1", O_RDWR|O_CLOEXEC) = 3
201   write(3, "\x1c\x00\x00\x00\x08\x00\x01\x00", 32) = 32
202   write(3, "\x17\x00\x00\x00\x04\x00\x00\x00", 16 <unfinished ...>
201   futex(0x7f00, FUTEX_WAKE_PRIVATE, 1) = 1
202   <... write resumed>) = 16
201   write(1, "done\n", 5) = 5
202   +++ exited with 0 +++
"#;
        let c = strace_counts(log);
        assert_eq!(c["doorbell"], 1);
        assert_eq!(c["write(uverbs 23)"], 1);
        assert_eq!(c["write"], 1);
        assert_eq!(c["futex"], 1);
        assert_eq!(c["openat"], 1);
        let at_n = BTreeMap::from([("doorbell".to_string(), 100), ("futex".to_string(), 10)]);
        let at_2n = BTreeMap::from([("doorbell".to_string(), 200), ("futex".to_string(), 30)]);
        let v = syscalls_per_op(&at_n, &at_2n, 100);
        assert_eq!(v["doorbells_per_op"], 1.0);
        assert_eq!(v["other_per_op"], 0.2);
        assert_eq!(v["other_by_call"]["futex"], 0.2);
    }

    #[test]
    fn a_failed_step_ends_a_sets_runs() {
        let dir = std::env::temp_dir().join(format!("xtask-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let set = Set {
            key: "k".into(),
            tool: Tool::Rstream,
            prog: "rstream".into(),
            peer: "rstream".into(),
            args: String::new(),
            n: 10,
            server: false,
        };
        for (step, total) in [(1, 100), (2, 200), (3, 5)] {
            std::fs::write(
                dir.join(format!("k.{step}.cg")),
                format!("totals: {total}\n"),
            )
            .unwrap();
        }
        std::fs::write(dir.join("k.1.rc"), "0 0\n").unwrap();
        std::fs::write(dir.join("k.3.rc"), "1 0\n").unwrap();
        assert_eq!(set_runs(&dir, &set), vec![10.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_row_has_its_sets_and_the_script_runs_each_step() {
        let (sets, rows) = cases(Path::new("/b"), Path::new("/c/cost"));
        assert!(rows.iter().any(|r| r.case == "send_bw 64 B sender"));
        assert!(rows
            .iter()
            .any(|r| r.case == "rpc 64 B server" && r.baseline.len() == 2));
        for r in &rows {
            assert!(sets.iter().any(|s| s.key == r.ours), "{}", r.case);
            for b in &r.baseline {
                assert!(sets.iter().any(|s| &s.key == b), "{}: {b}", r.case);
            }
        }
        let keys: std::collections::BTreeSet<&str> = sets.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys.len(), sets.len(), "keys are unique");
        let s = script(
            &sets,
            &rows,
            Path::new("/raw"),
            Path::new("/b/libpollshim.so"),
        );
        assert!(s.contains(
            "run send_bw_64_B_sender-ours 3 6000 client \"env POLLSHIM_OUT=$RAW/send_bw_64_B_sender-ours.3.poll $CG\" --callgrind-out-file=$RAW/send_bw_64_B_sender-ours.3.cg"
        ));
        assert!(s.contains("SHIM=/b/libpollshim.so"));
        assert!(s.contains("'/c/cost recv 64 $N $PA $A $PORT reactor'"));
        // Our perftest tool measured, perftest's at the other end.
        assert!(s.contains("'ib_send_bw -d $PD -x $PG -p $PORT -F -N -s 64 -n $N'"));
        assert!(s.contains("'/b/send-bw -d $D -x $G -p $PORT -F -N -s 64 -n $N $PA'"));
        assert!(s.contains("'/c/cost send 64 $N $A $PA $PORT busy'"));
        assert!(s.contains("run transport_64_B_sender-ours.adaptive 2 1000 client"));
    }
}
