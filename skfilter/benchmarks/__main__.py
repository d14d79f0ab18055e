"""Command-line entry point: ``python -m skfilter.benchmarks {demo,speed,uci} [options]``."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import COMMANDS
from ._common import DEFAULT_THREADS, limit_threads


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per entry of :data:`skfilter.benchmarks.COMMANDS`.

    Returns
    -------
    argparse.ArgumentParser
        Parsed arguments carry the command's module as ``_module``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m skfilter.benchmarks",
        description="Benchmarks of skfilter's online Bayesian filters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    sub.required = True
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname, __package__)
        p = sub.add_parser(name, help=mod.HELP.replace("%", "%%"),  # argparse %-formats help texts
                           description=mod.__doc__.strip().splitlines()[0],
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the chosen benchmark with at most its
    ``--threads`` (default :data:`~skfilter.benchmarks._common.DEFAULT_THREADS`) threads in torch and
    the BLAS/OpenMP pools.

    Parameters
    ----------
    argv : list of str, optional

    Returns
    -------
    int
        Exit status.
    """
    args = build_parser().parse_args(argv)
    with limit_threads(getattr(args, "threads", DEFAULT_THREADS)):
        return int(args._module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
