"""``python -m simulator``: see :mod:`simulator.cli`."""

from simulator.cli import PROG, main
from utils.cli import run_main

if __name__ == "__main__":
    run_main(main, PROG)
