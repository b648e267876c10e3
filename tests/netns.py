"""Hosts for tests: Linux network namespaces joined by veth links to one bridge.

Each :class:`Hosts` host is a network namespace with its own loopback and one interface,
``eth0``, holding an address of a private test range (``10.213.<net>.<i + 1>/24``); the
bridge lives in a namespace of its own (the "switch"), so nothing is added to, or bound in,
the machine's own namespace.  A program runs on host ``i`` under ``ip netns exec``
(:meth:`Hosts.prefix`); :meth:`Hosts.cut` takes a host's link down (a network partition: the
host stays up, its packets go nowhere) and :meth:`Hosts.heal` brings it back.

Needs root (CI runs the suite as root) and iproute2.  :meth:`Hosts.stop` kills every process
left in the namespaces and deletes them (their veth links go with them)."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def available() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if subprocess.run(["ip", "-V"], capture_output=True, check=False).returncode != 0:
        return "iproute2's ip is not installed"
    return None


class Hosts:
    """``count`` hosts on one private network (see the module docstring)."""

    def __init__(self, count: int, net: int | None = None) -> None:
        tag = f"pt{os.getpid() % 100000}"
        self.count = count
        self.net = net if net is not None else 200 + os.getpid() % 50
        self.switch = f"{tag}sw"
        self.names = [f"{tag}h{i}" for i in range(count)]
        self.addresses = [f"10.213.{self.net}.{i + 1}" for i in range(count)]
        self._links = [f"{tag}v{i}" for i in range(count)]

    def _ip(self, *args: str, namespace: str | None = None) -> None:
        argv = ["ip", *(("-n", namespace) if namespace else ()), *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")

    def start(self) -> Hosts:
        try:
            self._ip("netns", "add", self.switch)
            self._ip("link", "add", "br0", "type", "bridge", namespace=self.switch)
            self._ip("link", "set", "br0", "up", namespace=self.switch)
            for name, link, address in zip(self.names, self._links, self.addresses):
                self._ip("netns", "add", name)
                self._ip("link", "set", "lo", "up", namespace=name)
                # Both ends are made in the switch namespace, then one moves to the host.
                self._ip(
                    "link", "add", link, "type", "veth", "peer", "name", "eth0",
                    namespace=self.switch,
                )  # fmt: skip
                self._ip("link", "set", "eth0", "netns", name, namespace=self.switch)
                self._ip("link", "set", link, "master", "br0", namespace=self.switch)
                self._ip("link", "set", link, "up", namespace=self.switch)
                self._ip("addr", "add", f"{address}/24", "dev", "eth0", namespace=name)
                self._ip("link", "set", "eth0", "up", namespace=name)
        except BaseException:
            self.stop()
            raise
        return self

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program on host ``i``."""
        return ["ip", "netns", "exec", self.names[i]]

    def cut(self, i: int) -> None:
        """Partition host ``i`` from every other host (its switch port goes down)."""
        self._ip("link", "set", self._links[i], "down", namespace=self.switch)

    def heal(self, i: int) -> None:
        self._ip("link", "set", self._links[i], "up", namespace=self.switch)

    def pids(self) -> list[int]:
        """Every process running in one of the hosts' namespaces."""
        found = []
        for name in [*self.names, self.switch]:
            done = subprocess.run(
                ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
            )
            found += [int(p) for p in done.stdout.split()]
        return found

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        for name in [*self.names, self.switch]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)

    def __enter__(self) -> Hosts:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
