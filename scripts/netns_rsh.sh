#!/usr/bin/env bash
# A launch agent that stands in for ssh on the virtual cluster of scripts/netns_cluster.sh: it runs
# a command "on" a host by entering the network namespace that holds the host's address.
#
#   scripts/netns_rsh.sh [ssh-options] [user@]HOST COMMAND...
#   mpirun --mca plm_rsh_agent $PWD/scripts/netns_rsh.sh --host 10.77.0.1:1,10.77.0.2:1 ...
#
# Called like ssh: ssh options are accepted and ignored (Open MPI 4.1's rsh launcher passes none
# to an agent not named ssh/rsh, but plm_rsh_args may add some); HOST is an IPv4 address of one
# namespace (or a namespace's name); the COMMAND words are joined with spaces and run by /bin/sh -c,
# as sshd runs them (Open MPI sends "PATH=...; export PATH; ... orted -mca ... \"uri\"").
# The command also gets its own UTS namespace with the hostname set to the namespace's name, so
# each virtual host has a hostname of its own, as real hosts do (log prefixes, Open MPI's
# per-host session directories). The environment of the caller is kept (unlike ssh).
#
# Exit: the command's exit status; 255 when the host is unknown or cannot be entered (like ssh).
set -uo pipefail

fail() { echo "netns_rsh: $*" >&2; exit 255; }

# ssh options: those listed here take a value ("-o X" or "-oX"); the others are flags ("-x", "-qT").
while (($# > 0)) && [[ $1 == -* ]]; do
  opt=${1#-}
  shift
  [[ $opt == - ]] && break
  while [[ -n $opt ]]; do
    c=${opt:0:1}
    opt=${opt:1}
    if [[ $c == [BbcDEeFIiJLlmOoPpQRSWw] ]]; then
      if [[ -z $opt ]]; then
        (($# > 0)) || fail "ssh option -$c needs a value"
        shift
      fi
      break
    fi
  done
done
(($# >= 2)) || fail "usage: $0 [ssh-options] HOST COMMAND... (no interactive logins)"
host=${1#*@}
shift

if [[ -e /run/netns/$host ]]; then
  ns=$host
else
  ns=""
  for candidate in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    if ip -n "$candidate" -4 -o addr show 2>/dev/null |
        awk -v h="$host" '{split($4, a, "/"); if (a[1] == h) found = 1} END {exit !found}'; then
      ns=$candidate
      break
    fi
  done
  [[ -n $ns ]] || fail "no network namespace has address ${host} (is the cluster up? scripts/netns_cluster.sh up)"
fi

# $0 of the inner shell is the namespace name, $1 the command line.
# shellcheck disable=SC2016  # expanded by the inner shell
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'echo "$0" >/proc/sys/kernel/hostname && exec /bin/sh -c "$1"' "$ns" "$*"
