#!/usr/bin/env python3
"""Prints COUNT distinct TCP ports that are free on 127.0.0.1 right now, for the test servers' scripts
(prometheus_test_server.sh, s3_test_server.sh, slurm_test_cluster.sh) to configure a daemon with.

The ports are picked at random below Linux's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999): a port
the kernel hands out for bind(0) is one that another process's outgoing connection can take in the moment before
the daemon binds it (tests/testing/free_port.h says the same for the C++ tests).

    python3 scripts/free_ports.py 3    # "23411 28007 20515"
"""
import random
import socket
import sys


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    held = []
    for _ in range(200 * count):
        if len(held) == count:
            break
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", random.randrange(20000, 32000)))
            held.append(s)  # held until printed: no port twice
        except OSError:
            s.close()
    if len(held) < count:
        sys.exit(f"free_ports.py: no {count} free ports on 127.0.0.1 in [20000, 32000)")
    print(*[s.getsockname()[1] for s in held])


if __name__ == "__main__":
    main()
