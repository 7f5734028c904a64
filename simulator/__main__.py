"""``python -m simulator``: see :mod:`simulator.cli`; ``python -m simulator validate``: see
:mod:`simulator.validation`; ``python -m simulator search``: see :mod:`simulator.search`; ``python -m simulator
serve`` and ``serve-search``: see :mod:`simulator.serve.cli` and :mod:`simulator.serve.search`.  The console entry
points ``aicb-simulator`` and ``aicb-search`` (pyproject.toml) call :func:`cli` and :func:`search_cli`."""

import sys

from utils.cli import run_main


def cli() -> None:
    if sys.argv[1:2] == ["validate"]:
        from simulator.validation import PROG, main

        run_main(lambda: main(sys.argv[2:]), PROG)
    if sys.argv[1:2] == ["search"]:
        search_cli(sys.argv[2:])
    if sys.argv[1:2] in (["serve"], ["serve-search"]):
        serve_cli(sys.argv[1], sys.argv[2:])
    from simulator.cli import PROG, main

    run_main(main, PROG)


def search_cli(argv: list[str] | None = None) -> None:
    from simulator.search import PROG, main

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
