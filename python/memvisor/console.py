"""The terminal: the two consoles every command writes to, and the one way they fail."""

from __future__ import annotations

import signal
import sys
from typing import IO, Sequence

import click
from rich.console import Console
from rich.text import Text

from memvisor.atomic import output_problem

# Markup and emoji codes are off: what is printed includes user text (scenario, VM and file names,
# error messages quoting the scenario such as "no [[vm]]"), and rich would eat its brackets and
# colons. Styles are given as `Text` where wanted.
err = Console(stderr=True, soft_wrap=True, markup=False, emoji=False)
# Output that is not a terminal (CI logs, pipes, files) has no width: wide enough that no report
# table is cut. `COLUMNS` is not consulted there: GNU readline exports the size of the terminal a
# Python process started in to every child, so a stale 80 would narrow a log.


class _TrimmedStdout:
    """Standard output without the spaces a table pads its last column with at each line's end,
    which a terminal does not show but a pipe, a log or a diff keeps. Writes go to whatever
    `sys.stdout` is at the time (a test may have replaced it), past the stand-in a live progress
    display puts there (it would send them to the display's stream)."""

    def __init__(self):
        self._line = ""  # the unfinished line: its trailing spaces may yet be followed by text

    def write(self, text: str) -> int:
        *lines, self._line = (self._line + text).split("\n")
        if lines:
            self._stdout().write("".join(f"{line.rstrip(' ')}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._line:
            self._stdout().write(self._line)
            self._line = ""
        self._stdout().flush()

    @staticmethod
    def _stdout():
        return getattr(sys.stdout, "rich_proxied_file", sys.stdout)

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


out = Console(markup=False, emoji=False) if sys.stdout.isatty() else Console(file=_TrimmedStdout(), width=1000, markup=False, emoji=False)

#: Exit status of usage and scenario errors (as click's own usage errors).
USAGE = 2
#: Exit status when the machine lacks what a command needs (automake's "skipped").
SKIPPED = 77


class MemvisorError(click.ClickException):
    """A failure the user should see as one line `error: <message>` (plus `details`, one a line)
    and exit status `exit_code`. Raised, never `sys.exit`, so that every cleanup on the way out
    runs and helpers stay callable from Python."""

    def __init__(self, message: str, exit_code: int = 1, details: Sequence[str] = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.details = list(details)

    def show(self, file: IO | None = None) -> None:
        console = err if file is None else Console(file=file, soft_wrap=True, markup=False, emoji=False)
        console.print(Text.assemble(("error:", "bold red"), " ", self.message), highlight=False)
        for d in self.details:
            console.print(Text(f"  - {d}"), highlight=False)


def warn(message: str) -> None:
    """One warning line; the message is printed as it is, brackets included."""
    err.print(Text.assemble(("warning:", "bold yellow"), " ", message), highlight=False)


def some_of(names: list[str], at_most: int) -> str:
    """The first `at_most` names, comma-separated, and how many more there are: a message names a
    few of thousands of VMs, not all."""
    more = f" and {len(names) - at_most:,} more" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


def fmt(v) -> str:
    """A table cell."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def describe_status(returncode: int) -> str:
    """A subprocess's return code in words: `status 3`, or `signal SIGKILL` for one a signal ended."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"status {returncode}"


def given(name: str) -> bool:
    """Whether the running command's parameter `name` came from the user, not its default."""
    return click.get_current_context().get_parameter_source(name) is not click.core.ParameterSource.DEFAULT


def check_output(path, option: str) -> None:
    """Refuses an output file a user named that cannot be written (`atomic.output_problem`), before
    the work rather than after it: `error: OPTION PATH: why`."""
    problem = output_problem(path)
    if problem:
        raise MemvisorError(f"{option} {path}: {problem}", USAGE)


def refuse_twice(option: str, items) -> None:
    """A list option's items each once: a point given twice would run, and count, twice."""
    from memvisor.params import listed_twice

    if twice := listed_twice(items):
        raise MemvisorError(f"{option}: {', '.join(map(str, twice))} given more than once; give each once", USAGE)


class OnceGroup(click.Group):
    """A group whose commands refuse an option that takes one value given twice (click keeps the
    last without a word: `plan --variant a --variant b` planned for b alone)."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, click.Group):
            refuse_repeated_options(cmd, rest)
        return name, cmd, rest


def refuse_repeated_options(cmd: click.Command, args: Sequence[str]) -> None:
    """Refuses `args` that give an option of `cmd` taking one value more than once."""
    single = {
        name: p
        for p in cmd.params
        if isinstance(p, click.Option) and not p.multiple and not p.is_flag and not p.count
        for name in p.opts
    }
    seen: dict[str, str] = {}
    for i, a in enumerate(args):
        if a == "--":
            break
        opt, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        p = single.get(opt)
        if p is None:
            continue
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        if p.name in seen:
            raise MemvisorError(f"{opt}: given twice ('{seen[p.name]}', then '{value}'); it takes one value", USAGE)
        seen[p.name] = value
