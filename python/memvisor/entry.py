"""The `memvisor` command's entry point: loading the command's modules (pandas, polars, the
engine) takes a noticeable fraction of a second, and a Ctrl-C then ends it with the one line and
the status a Ctrl-C during a command gives, not a traceback."""

import os
import sys


def main() -> None:
    # Started with a standard stream closed (`memvisor cases >&-`), Python has none for it: closed
    # output is an error said as one line, not a traceback; closed error output is discarded.
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:
        sys.stderr.write("error: standard output is closed: nothing can be written to it\n")
        raise SystemExit(1)
    try:
        from memvisor.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        raise SystemExit(130) from None
    try:
        command()
    except SystemExit as e:
        # A run an interrupt could not stop (a Python policy's decide that never returns) would
        # hold the interpreter's exit for ever; the cleanup on the way out has already run.
        api = sys.modules.get("memvisor.api")
        if api is not None and api.stuck_runs():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.code if isinstance(e.code, int) else 1)
        raise
