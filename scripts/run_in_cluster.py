#!/usr/bin/env python3
"""AICB's multi-node launcher: run one command in a container on every machine of an IP list.

Run on every machine at once (e.g. ``pssh -i -h iplist -t 0 "cd /path/to/toolkit && python3
scripts/run_in_cluster.py --iplist /root/iplist --image IMAGE"``).  Each machine finds its own line in the
IP list: the line number is its node rank (``RANK``), the number of lines the node count
(``WORLD_SIZE``, AICB's scripts read it as the node count), the first line the master (``MASTER_ADDR``,
port 12345 as AICB's).  It then starts ``docker run`` with those variables, the toolkit mounted at
``/workspace/<its folder name>``, and ``--command`` inside it (default: the collective check,
``sh scripts/coll_comm_check.sh``).

AICB's version is edited by hand (IPLIST, DIR, IMAGE_NAME at the top, the command in its body); here
the same settings are flags or environment variables (``IPLIST``, ``AICB_DIR``, ``IMAGE_NAME``).
``--dry_run`` prints the docker command instead of running it.  Errors (no IP list, this machine not
in it, no image) are one line with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys

MASTER_PORT = 12345
DEFAULT_COMMAND = "sh scripts/coll_comm_check.sh"


class UsageError(Exception):
    pass


def local_addresses() -> set[str]:
    """This machine's IPv4 addresses (host name lookup and ``hostname -I``; no ifconfig needed)."""
    found: set[str] = set()
    try:
        found.update(info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET))
    except OSError:
        pass
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10).stdout
        found.update(part for part in out.split() if part.count(".") == 3)
    except (OSError, subprocess.SubprocessError):
        pass
    return found


def read_iplist(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            ips = [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]
    except OSError as exc:
        raise UsageError(f"--iplist {path}: {exc.strerror or exc}") from None
    if not ips:
        raise UsageError(f"--iplist {path}: no addresses in it")
    return ips


def node_env(ips: list[str], mine: set[str]) -> dict[str, str]:
    """WORLD_SIZE (nodes), RANK (this node's line), MASTER_ADDR (the first line), MASTER_PORT."""
    for rank, ip in enumerate(ips):
        if ip in mine:
            return {"WORLD_SIZE": str(len(ips)), "RANK": str(rank), "MASTER_ADDR": ips[0], "MASTER_PORT": str(MASTER_PORT)}
    raise UsageError(f"none of this machine's addresses ({', '.join(sorted(mine)) or 'none found'}) is in the IP list")


def docker_command(env: dict[str, str], toolkit_dir: str, image: str, command: str) -> str:
    base = os.path.basename(os.path.abspath(toolkit_dir).rstrip("/"))
    envs = " ".join(f"-e {key}={shlex.quote(value)}" for key, value in env.items())
    inner = f"cd /workspace/{base} && {command}"
    return (f"docker run --name aicb_test --gpus all --privileged --ulimit memlock=-1 --ulimit stack=67108864 "
            f"--init -i --shm-size=4g --network=host --rm {envs} -v {shlex.quote(os.path.abspath(toolkit_dir))}:"
            f"/workspace/{base} {shlex.quote(image)} /bin/sh -c {shlex.quote(inner)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_in_cluster.py", description=__doc__.split("\n\n")[0],
                                     epilog="Flag by flag against AICB's script: docs/aicb_scripts.md")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--iplist", default=os.environ.get("IPLIST", "iplist"),
                        help="one address per line (default $IPLIST or ./iplist)")
    parser.add_argument("--aicb_dir", default=os.environ.get("AICB_DIR", here),
                        help="the toolkit's folder on every machine (default $AICB_DIR or this checkout)")
    parser.add_argument("--image", default=os.environ.get("IMAGE_NAME"), help="the container image (default $IMAGE_NAME)")
    parser.add_argument("--command", default=DEFAULT_COMMAND, help=f"what to run in the container (default: {DEFAULT_COMMAND})")
    parser.add_argument("--dry_run", action="store_true", help="print the docker command, do not run it")
    args = parser.parse_args(argv)
    try:
        if not args.image:
            raise UsageError("give the container image: --image NAME (or IMAGE_NAME=...)")
        env = node_env(read_iplist(args.iplist), local_addresses())
    except UsageError as exc:
        print(f"run_in_cluster.py: error: {exc}", file=sys.stderr)
        return 2
    command = docker_command(env, args.aicb_dir, args.image, args.command)
    print(f"+ {command}", flush=True)
    if args.dry_run:
        return 0
    return subprocess.run(command, shell=True).returncode


if __name__ == "__main__":
    sys.exit(main())
