"""``python -m simulator``: see :mod:`simulator.cli`; ``python -m simulator validate``: see
:mod:`simulator.validation`; ``python -m simulator search``: see :mod:`simulator.search`."""

import sys

from utils.cli import run_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["validate"]:
        from simulator.validation import PROG, main

        run_main(lambda: main(sys.argv[2:]), PROG)
    if sys.argv[1:2] == ["search"]:
        from simulator.search import PROG, main

        run_main(lambda: main(sys.argv[2:]), PROG)
    from simulator.cli import PROG, main

    run_main(main, PROG)
