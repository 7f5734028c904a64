"""``python -m simulator``: see :mod:`simulator.cli`; ``python -m simulator validate``: see
:mod:`simulator.validation`."""

import sys

from utils.cli import run_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["validate"]:
        from simulator.validation import PROG, main

        run_main(lambda: main(sys.argv[2:]), PROG)
    from simulator.cli import PROG, main

    run_main(main, PROG)
