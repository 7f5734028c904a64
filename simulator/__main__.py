"""``python -m simulator``: see :mod:`simulator.cli`; ``python -m simulator validate``: see
:mod:`simulator.validation`; ``python -m simulator search``: see :mod:`simulator.search.run`; ``python -m simulator
place``: see :mod:`simulator.search.place`; ``python -m simulator serve`` and ``serve-search``: see
:mod:`simulator.serve.cli` and :mod:`simulator.serve.search`.  The console entry
points ``aicb-simulator`` and ``aicb-search`` (pyproject.toml) call :func:`cli` and :func:`search_cli`."""

import sys

from utils.cli import run_main


def cli() -> None:
    if sys.argv[1:2] == ["validate"]:
        from simulator.validation import PROG, main

        run_main(lambda: main(sys.argv[2:]), PROG)
    if sys.argv[1:2] == ["search"]:
        search_cli(sys.argv[2:])
    if sys.argv[1:2] == ["place"]:  # issue 30: the best placement of a job's ranks (simulator/search/place.py)
        from simulator.search.place import PROG as PLACE
        from simulator.search.place import main as place_main

        run_main(lambda: place_main(sys.argv[2:]), PLACE)
    if sys.argv[1:2] in (["serve"], ["serve-search"]):
        serve_cli(sys.argv[1], sys.argv[2:])
    from simulator.cli import PROG, main

    try:
        run_main(main, PROG)
    except SystemExit as done:
        _leave(done)


def _leave(done: SystemExit) -> None:
    """End a simulation: when nothing is registered to run at exit (a SimAI-file run registers nothing), flush what
    was printed and leave without the interpreter's teardown, which frees every module and object one by one for a
    process that is ending (about 5 ms of SimAI's example's 42 ms, bench/bench_vs_simai.py); otherwise exit as usual."""
    import atexit

    code = done.code
    if not isinstance(code, (int, type(None))) or getattr(atexit, "_ncallbacks", lambda: 1)() != 0:
        raise done
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a reader that went away: exit as a broken pipe would
        raise done from None
    import os

    os._exit(code or 0)


def search_cli(argv: list[str] | None = None) -> None:
    from simulator.search.run import PROG, main

    run_main(lambda: main(sys.argv[1:] if argv is None else argv), PROG)


def serve_cli(command: str, argv: list[str]) -> None:
    """``serve``: :mod:`simulator.serve.cli`; ``serve-search``: :mod:`simulator.serve.search`."""
    if command == "serve":
        from simulator.serve.cli import PROG, main
    else:
        from simulator.serve.search import PROG, main

    run_main(lambda: main(argv), PROG)


if __name__ == "__main__":
    cli()
