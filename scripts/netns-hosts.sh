#!/usr/bin/env bash
# Two emulated hosts on this machine: two network namespaces joined by a veth pair, for running
# mpirun -H across "machines" over Open MPI's TCP transport (tests/integration/
# cross_host_mpi_test.cc; docs/data_parallel.md "Across machines").
#
#   scripts/netns-hosts.sh up DIR [--delay-us N] [--rate-mbit N]
#   scripts/netns-hosts.sh mpirun DIR PER_HOST ARGS...
#   scripts/netns-hosts.sh down DIR
#
# up creates namespaces tpns<OWNER>a and tpns<OWNER>b (OWNER: $TP_NETNS_OWNER, default the
# caller's pid), loopback up in both, a veth pair tpns<OWNER>a <-> tpns<OWNER>b with
# 10.77.X.1/24 and 10.77.X.2/24 (X from OWNER), and on both veths, where asked, a tc netem qdisc
# with that one-way delay and rate (a kernel without sch_netem gets a tbf rate limit only, and no
# delay: hosts.env says what was applied). It writes into DIR (created):
#   hosts.env  sourceable: NS_A NS_B HOST_A HOST_B IF_A IF_B SUBNET AGENT, and LINK, DELAY_US,
#              RATE_MBIT: what the veths really got (0: nothing)
#   agent.sh   Open MPI's launcher agent (mpirun --mca plm_rsh_agent DIR/agent.sh): called as ssh
#              would be, "[options] HOST COMMAND...", it runs COMMAND in HOST's namespace
# and removes what it made if it fails half way. Before it starts it removes the namespaces and
# veths of earlier runs whose owner process is gone (a run killed before its cleanup).
# mpirun runs mpirun in host A's namespace, as on a cluster's first host, with PER_HOST ranks on
# each host (A's first), the agent, TCP between the hosts over the veth's subnet, and ARGS (the
# program and its flags); it prints that command line first, on stderr.
# down removes DIR's namespaces (their veth goes with them); it is quiet when they are gone.
#
# Exit status: 0; 77 where namespaces cannot be made here (not root, no CAP_SYS_ADMIN, no `ip`,
# no veth), with one line on stderr saying why, for the test to skip with; 1 on other errors.
# NS_A, HOST_A... come from DIR/hosts.env (source).
# shellcheck disable=SC2153
set -euo pipefail

die() { echo "netns-hosts: $*" >&2; exit 1; }
skip() { echo "netns-hosts: cannot emulate hosts here: $*" >&2; exit 77; }
usage() {
  die "usage: $0 up DIR [--delay-us N] [--rate-mbit N] | mpirun DIR PER_HOST ARGS... | down DIR"
}

# Namespaces and stray veths (the root namespace's, from a run that died between creating the pair
# and moving its ends) named tpns<pid>[ab] whose pid is no longer running.
reap_stale() {
  local name pid
  for name in $( (ip netns list 2>/dev/null | awk '{print $1}'; ip -o link show 2>/dev/null |
    awk -F': ' '{sub(/@.*/, "", $2); print $2}') | grep -E '^tpns[0-9]+[abp]$' | sort -u); do
    pid=${name#tpns}
    pid=${pid%?}
    [[ -d /proc/$pid ]] && continue
    ip netns del "$name" 2>/dev/null || true
    ip link del "$name" 2>/dev/null || true
  done
}

# What up needs, tried once on a namespace of its own before anything is made: add one, run a
# command inside it (ip netns exec remounts / and /sys: a chroot, or a container whose / is not a
# mount point, fails there with "mount --make-rslave /"), delete it. Any failure skips (77) with
# the step and ip's words.
probe_netns() {
  local ns=tpns${1}p err
  ip netns del "$ns" 2>/dev/null || true
  if ! err=$(ip netns add "$ns" 2>&1); then
    skip "ip netns add failed: ${err//$'\n'/ }; hint: needs CAP_SYS_ADMIN and a writable /var/run/netns"
  fi
  if ! err=$(ip netns exec "$ns" true 2>&1); then
    ip netns del "$ns" 2>/dev/null || true
    skip "ip netns exec failed: ${err//$'\n'/ }; hint: needs a mount namespace it may remount / in (not a chroot, or a container with / a mount point)"
  fi
  if ! err=$(ip netns del "$ns" 2>&1); then
    skip "ip netns del failed: ${err//$'\n'/ }"
  fi
}

cmd_down() {
  local dir=$1
  [[ -f $dir/hosts.env ]] || return 0
  # shellcheck disable=SC1091
  source "$dir/hosts.env"
  local ns
  for ns in "$NS_A" "$NS_B"; do
    if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
      ip netns del "$ns" || die "down: ip netns del $ns failed; hint: a process still inside it? ip netns pids $ns"
    fi
  done
  # A veth left in the root namespace by a failed up.
  ip link del "$IF_A" 2>/dev/null || true
}

cmd_up() {
  local dir=$1
  shift
  local delay_us=0 rate_mbit=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --delay-us) delay_us=${2:?--delay-us needs a value}; shift 2 ;;
      --rate-mbit) rate_mbit=${2:?--rate-mbit needs a value}; shift 2 ;;
      *) die "up: unknown option '$1'; hint: --delay-us N, --rate-mbit N" ;;
    esac
  done
  [[ $delay_us =~ ^[0-9]{1,7}$ ]] || die "up: --delay-us '$delay_us' is not a whole number of microseconds below 1e7"
  [[ $rate_mbit =~ ^[0-9]{1,9}$ ]] || die "up: --rate-mbit '$rate_mbit' is not a whole number of Mbit/s below 1e9"

  command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"
  [[ $(id -u) == 0 ]] || skip "not root (uid $(id -u)); ip netns add needs root"
  local owner=${TP_NETNS_OWNER:-$PPID}
  [[ $owner =~ ^[0-9]{1,9}$ ]] || die "up: TP_NETNS_OWNER '$owner' is not a pid"
  reap_stale
  probe_netns "$owner"

  local ns_a=tpns${owner}a ns_b=tpns${owner}b
  local x=$((owner % 250 + 1))
  local host_a=10.77.$x.1 host_b=10.77.$x.2
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  cat >"$dir/hosts.env" <<EOF
NS_A=$ns_a
NS_B=$ns_b
IF_A=$ns_a
IF_B=$ns_b
HOST_A=$host_a
HOST_B=$host_b
SUBNET=10.77.$x.0/24
AGENT=$dir/agent.sh
EOF
  if ip netns list | awk '{print $1}' | grep -qxE "$ns_a|$ns_b"; then
    die "up: namespace $ns_a or $ns_b exists already (owner $owner is running); hint: $0 down on its DIR, or another TP_NETNS_OWNER"
  fi
  # From here on a failure removes what was made (UP_DIR: the trap runs after cmd_up's locals
  # are gone).
  UP_DIR=$dir
  trap 'cmd_down "$UP_DIR"' EXIT
  local err
  if ! err=$(ip netns add "$ns_a" 2>&1); then
    skip "ip netns add failed: ${err//$'\n'/ }; hint: needs CAP_SYS_ADMIN and a writable /var/run/netns"
  fi
  ip netns add "$ns_b"
  if ! err=$(ip link add "$ns_a" type veth peer name "$ns_b" 2>&1); then
    skip "ip link add type veth failed: ${err//$'\n'/ }; hint: a kernel with veth"
  fi
  ip link set "$ns_a" netns "$ns_a"
  ip link set "$ns_b" netns "$ns_b"
  ip -n "$ns_a" addr add "$host_a/24" dev "$ns_a"
  ip -n "$ns_b" addr add "$host_b/24" dev "$ns_b"
  local ns
  for ns in "$ns_a" "$ns_b"; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$ns" up
  done

  # The link: netem on the sending side of each veth gives each direction its delay and rate.
  local link=none applied_delay=0 applied_rate=0
  if ((delay_us > 0 || rate_mbit > 0)) && ! command -v tc >/dev/null 2>&1; then
    link="none (no 'tc' command)"
  elif ((delay_us > 0 || rate_mbit > 0)); then
    local netem=()
    ((delay_us > 0)) && netem+=(delay "${delay_us}us")
    ((rate_mbit > 0)) && netem+=(rate "${rate_mbit}mbit")
    if ip netns exec "$ns_a" tc qdisc add dev "$ns_a" root netem "${netem[@]}" 2>/dev/null; then
      ip netns exec "$ns_b" tc qdisc add dev "$ns_b" root netem "${netem[@]}"
      link="netem ${netem[*]}"
      applied_delay=$delay_us
      applied_rate=$rate_mbit
    elif ((rate_mbit > 0)) &&
      ip netns exec "$ns_a" tc qdisc add dev "$ns_a" root tbf rate "${rate_mbit}mbit" burst 1mb latency 10ms; then
      ip netns exec "$ns_b" tc qdisc add dev "$ns_b" root tbf rate "${rate_mbit}mbit" burst 1mb latency 10ms
      link="tbf rate ${rate_mbit}mbit (this kernel has no netem: no delay)"
      applied_rate=$rate_mbit
    else
      link="none (this kernel has no netem)"
    fi
  fi
  cat >>"$dir/hosts.env" <<EOF
LINK='$link'
DELAY_US=$applied_delay
RATE_MBIT=$applied_rate
EOF

  cat >"$dir/agent.sh" <<EOF
#!/bin/sh
# Open MPI's launcher agent for the emulated hosts of $dir (scripts/netns-hosts.sh): mpirun calls
# it as it would call ssh, "[options] HOST COMMAND...", and COMMAND runs in HOST's namespace,
# through a shell as ssh's remote side would run it.
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
case "\$1" in
  $host_a) ns=$ns_a ;;
  $host_b) ns=$ns_b ;;
  *) echo "netns agent: unknown host '\$1' (hosts: $host_a $host_b); hint: mpirun -H with the HOST_A and HOST_B of $dir/hosts.env" >&2; exit 1 ;;
esac
shift
exec ip netns exec "\$ns" sh -c "\$*"
EOF
  chmod +x "$dir/agent.sh"
  trap - EXIT
}

cmd_mpirun() {
  local dir=$1 per_host=$2
  shift 2
  [[ -f $dir/hosts.env ]] || die "mpirun: no $dir/hosts.env; hint: $0 up $dir first"
  [[ $per_host =~ ^[1-9][0-9]{0,3}$ ]] || die "mpirun: PER_HOST '$per_host' is not a rank count in [1, 9999]"
  # shellcheck disable=SC1091
  source "$dir/hosts.env"
  # shellcheck disable=SC2054  # the commas are -H's, not array separators
  local cmd=(ip netns exec "$NS_A" mpirun --allow-run-as-root -H "$HOST_A:$per_host,$HOST_B:$per_host"
    -np $((2 * per_host)) --mca plm_rsh_agent "$AGENT" --mca btl tcp,self
    --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET" "$@")
  echo "netns-hosts: ${cmd[*]}" >&2
  exec "${cmd[@]}"
}

[[ $# -ge 2 ]] || usage
case $1 in
  up) shift; cmd_up "$@" ;;
  mpirun) [[ $# -ge 4 ]] || usage; shift; cmd_mpirun "$@" ;;
  down) cmd_down "$2" ;;
  *) usage ;;
esac
