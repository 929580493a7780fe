#!/bb/sh
# /init of the test guest (busybox sh). Loads the RDMA modules of the Debian kernel, mounts the
# workspace and the host's /usr over 9p, brings up rxe or siw (xtask.device; one device on a
# dummy netdev, or two devices on the two ends of a veth pair), checks that each
# device is usable, runs the command the xtask wrote to the share, and hands back its status.
#
# Lines starting with XTASK- are read by the xtask (xtask/src/guest.rs); keep both in step.
export PATH=/usr/sbin:/usr/bin:/bb
export HOME=/tmp
# busybox's sh runs its own applets before PATH: iproute2 is called by full path (busybox ip
# cannot make veth pairs).
IP=/usr/sbin/ip

echo  # the firmware's last line has no newline
/bb/mkdir -p /proc /sys /dev /tmp /run
/bb/mount -t proc proc /proc
/bb/mount -t sysfs sysfs /sys
/bb/mount -t devtmpfs devtmpfs /dev 2>/dev/null
/bb/mkdir -p /dev/pts /dev/shm
/bb/mount -t devpts devpts /dev/pts
/bb/mount -t tmpfs tmpfs /dev/shm
/bb/mount -t tmpfs tmpfs /tmp
/bb/mount -t tmpfs tmpfs /run

WS=; RUN=; RCFILE=; HOSTS=1; BREAK=; DEVICE=rxe
for a in $(cat /proc/cmdline); do
  case $a in
    xtask.ws=*) WS=${a#*=} ;;
    xtask.run=*) RUN=${a#*=} ;;
    xtask.rc=*) RCFILE=${a#*=} ;;
    xtask.hosts=*) HOSTS=${a#*=} ;;
    xtask.break=*) BREAK=${a#*=} ;;
    xtask.device=*) DEVICE=${a#*=} ;;
  esac
done

finish() { # rc
  rc=$1
  [ -n "$RCFILE" ] && grep -q " $WS 9p " /proc/mounts && { echo "$rc" > "$RCFILE"; sync; }
  echo "XTASK-END $rc"
  # isa-debug-exit: qemu exits with (rc << 1) | 1
  printf "\\$(printf %o $((rc & 0x7f)))" | dd of=/dev/port bs=1 seek=244 count=1 conv=notrunc 2>/dev/null
  poweroff -f
}

fail() { # cause...
  echo "XTASK-ERROR $*"
  finish 125
}

# Modules in dependency order (the xtask resolved them with modprobe --show-depends).
while read -r m; do
  [ -n "$m" ] || continue
  out=$(insmod "$m" 2>&1) || {
    case $out in *"File exists"*) ;; *) fail "insmod $m failed: $out" ;; esac
  }
done < /etc/xtask/modules

case $DEVICE in rxe | siw) ;; *) fail "unknown xtask.device=$DEVICE (rxe or siw)" ;; esac
[ -n "$WS" ] || fail "no xtask.ws= on the kernel command line"
mkdir -p "$WS"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 ws "$WS" ||
  fail "cannot mount the workspace over 9p on $WS"
# After the modules: the host's /usr hides the initramfs' /usr (and with it /lib/modules).
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose hostusr /usr ||
  fail "cannot mount the host's /usr over 9p"
RDMA=/usr/bin/rdma
[ -x $RDMA ] || RDMA=/usr/sbin/rdma
[ -x $IP ] || fail "$IP (iproute2) not found in the host's /usr"
[ -x $RDMA ] || fail "rdma (iproute2) not found in the host's /usr"
ulimit -l unlimited
$IP link set lo up

hex_addr() { # a.b.c.d -> the last two groups of its IPv4-mapped GID
  IFS=. read -r o1 o2 o3 o4 <<EOF
$1
EOF
  printf '%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4"
}

# Prints the index of the RoCE v2 GID ::ffff:ADDR of DEV's port 1 (read from the GID table).
roce_v2_gid() { # dev addr
  want="0000:0000:0000:0000:0000:ffff:$(hex_addr "$2")"
  for t in /sys/class/infiniband/$1/ports/1/gid_attrs/types/*; do
    i=${t##*/}
    [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue
    [ "$(cat "/sys/class/infiniband/$1/ports/1/gids/$i" 2>/dev/null)" = "$want" ] && { echo "$i"; return 0; }
  done
  return 1
}

# rdma link add of a $DEVICE device (nsexec: a prefix entering the netdev's namespace, empty
# for this one), then wait (bounded) until the port is ACTIVE and, for rxe, its RoCE v2 IPv4
# GID is in the GID table (an iWARP device has one GID, from its netdev's MAC: index 0).
link_up() { # nsexec dev netdev addr -> sets GID
  nsexec=$1; dev=$2; netdev=$3; addr=$4
  if [ "$BREAK" = no-rdma-link ]; then
    echo "XTASK-NOTE XTASK_GUEST_BREAK=no-rdma-link: skipping rdma link add $dev"
  else
    out=$($nsexec $RDMA link add "$dev" type "$DEVICE" netdev "$netdev" 2>&1) ||
      fail "rdma link add $dev netdev $netdev failed: $out"
  fi
  # rdma link add is synchronous: no device now means none will come.
  [ -d /sys/class/infiniband/$dev ] || fail "no $DEVICE device $dev after rdma link add (netdev $netdev)"
  n=0
  while :; do
    state=$(cat /sys/class/infiniband/$dev/ports/1/state 2>/dev/null)
    if [ "$DEVICE" = rxe ]; then
      GID=$(roce_v2_gid "$dev" "$addr") && [ "${state#*: }" = ACTIVE ] && return 0
    else
      GID=0
      [ "${state#*: }" = ACTIVE ] && return 0
    fi
    n=$((n + 1))
    if [ $n -ge 100 ]; then
      [ "${state#*: }" = ACTIVE ] || fail "$dev port 1 not ACTIVE after 10 s (state: ${state:-none})"
      fail "$dev has no RoCE v2 GID for $addr after 10 s"
    fi
    sleep 0.1
  done
}

# Addresses in a private /24 that exists only inside this guest (it has no NIC).
if [ "$HOSTS" = 2 ]; then
  # Two "hosts": a veth pair, rxe0 on veth-a (10.77.0.1), rxe1 on veth-b (10.77.0.2). Both ends
  # stay in the initial network namespace: this kernel's rxe receives RoCE (UDP 4791) only
  # there, so a device in another namespace never sees its packets. Policy routing makes
  # traffic that leaves through one end cross the wire to the other instead of short-cutting
  # through the local table; accept_local lets each end accept the other's (local) source.
  $IP link add veth-a type veth peer name veth-b || fail "cannot create the veth pair veth-a/veth-b"
  $IP addr add 10.77.0.1/24 dev veth-a
  $IP addr add 10.77.0.2/24 dev veth-b
  for c in all default veth-a veth-b; do
    echo 1 > /proc/sys/net/ipv4/conf/$c/accept_local
    echo 0 > /proc/sys/net/ipv4/conf/$c/rp_filter
  done
  # rxe sends an RDMA READ response of 1 MiB as one burst of 1024 packets, which a veth hands
  # to the receiving CPU's backlog: the default 1000 drops the tail, and RC then waits for its
  # retransmission timer. Real NICs queue in hardware; give the veth room like one.
  echo 10000 > /proc/sys/net/core/netdev_max_backlog
  $IP link set veth-a up && $IP link set veth-b up || fail "cannot bring up veth-a/veth-b"
  { $IP rule add pref 1000 lookup local && $IP rule del pref 0 &&
    $IP rule add pref 100 oif veth-a lookup 100 && $IP rule add pref 101 oif veth-b lookup 101 &&
    $IP route add 10.77.0.2 dev veth-a src 10.77.0.1 table 100 &&
    $IP route add 10.77.0.1 dev veth-b src 10.77.0.2 table 101; } ||
    fail "cannot set up policy routing between veth-a and veth-b"
  # siw's TCP sockets are bound to the device's address, not to its netdev: route what this
  # host sends (iif lo) by address too, or it short-cuts through lo and never meets the wire
  # (nor netem). What arrives on a veth is still delivered locally.
  if [ "$DEVICE" = siw ]; then
    { $IP rule add pref 102 iif lo from 10.77.0.1 to 10.77.0.2 lookup 100 &&
      $IP rule add pref 103 iif lo from 10.77.0.2 to 10.77.0.1 lookup 101; } ||
      fail "cannot route siw's traffic between 10.77.0.1 and 10.77.0.2 over the veth pair"
  fi
  link_up "" ${DEVICE}0 veth-a 10.77.0.1; GID_A=$GID
  link_up "" ${DEVICE}1 veth-b 10.77.0.2; GID_B=$GID
  export RDMA_TEST_DEVICE=${DEVICE}0 RDMA_TEST_GID_INDEX=$GID_A RDMA_TEST_ADDR=10.77.0.1
  export RDMA_TEST_PEER_DEVICE=${DEVICE}1 RDMA_TEST_PEER_GID_INDEX=$GID_B RDMA_TEST_PEER_ADDR=10.77.0.2
else
  $IP link add rxe-dummy0 type dummy || fail "cannot create the dummy netdev rxe-dummy0"
  $IP addr add 10.77.1.1/24 dev rxe-dummy0
  $IP link set rxe-dummy0 up
  link_up "" ${DEVICE}0 rxe-dummy0 10.77.1.1
  export RDMA_TEST_DEVICE=${DEVICE}0 RDMA_TEST_GID_INDEX=$GID RDMA_TEST_ADDR=10.77.1.1
fi

for v in RDMA_TEST_DEVICE RDMA_TEST_GID_INDEX RDMA_TEST_ADDR RDMA_TEST_PEER_DEVICE \
         RDMA_TEST_PEER_GID_INDEX RDMA_TEST_PEER_ADDR RDMA_TEST_PEER_EXEC; do
  eval "val=\${$v-}"
  [ -n "$val" ] && echo "XTASK-ENV $v=$val"
done
echo "XTASK-ENV kernel=$(uname -r)"
echo "XTASK-ENV uptime=$(cut -d' ' -f1 /proc/uptime)"

[ -n "$RUN" ] && [ -f "$RUN" ] || fail "no command script at ${RUN:-?} on the share"
echo "XTASK-BEGIN"
/bb/sh "$RUN" < /dev/null
finish $?
