"""The `memvisor` command's entry point: loading the command's modules (pandas, polars, the
engine) takes a noticeable fraction of a second, and a Ctrl-C then ends it with the one line and
the status a Ctrl-C during a command gives, not a traceback."""

import sys


def main() -> None:
    try:
        from memvisor.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        raise SystemExit(130) from None
    command()
