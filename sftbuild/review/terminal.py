"""`sftbuild review next`: review the sample in the terminal, one item per screen, single keys.

Keys: a accept · r reject, then a reason key (d wrong_description, c wrong_code, l license,
t trivial, u unsafe, o other; Esc cancels) · s skip · b back · q quit.

The flow starts at the first item still open for the reviewer, so quitting and starting
again resumes; each verdict is committed as it is given. Keys come from the terminal in
raw mode, or, when stdin is not a terminal, one non-blank character at a time from stdin
(so a script or a test can drive it: `printf 'aaard' | sftbuild review next --reviewer me`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Callable, TextIO

from sftbuild.context import Context
from sftbuild.review import evidence, stage

HELP = "a accept · r reject · s skip · b back · q quit"
REASON_HELP = " · ".join(f"{k} {v}" for k, v in evidence.REASONS.items()) + " · Esc cancel"
LEXERS = {"cuda": "cuda", "triton": "python", "python": "python", "kernelbench": "python"}


def key_reader(stream: TextIO | None = None) -> Callable[[], str | None]:
    """One key per call; None at the end of input."""
    stream = stream or sys.stdin
    if stream.isatty():
        import termios
        import tty

        fd = stream.fileno()

        def read_tty():
            old = termios.tcgetattr(fd)
            try:
                tty.setcbreak(fd)
                ch = stream.read(1)
            finally:
                termios.tcsetattr(fd, termios.TCSADRAIN, old)
            return ch or None
        return read_tty

    def read_stream():
        while True:
            ch = stream.read(1)
            if not ch:
                return None
            if not ch.isspace():
                return ch
    return read_stream


@dataclasses.dataclass
class Session:
    reviewed: int = 0
    keystrokes: int = 0
    skipped: int = 0

    @property
    def per_item(self) -> float:
        return self.keystrokes / self.reviewed if self.reviewed else 0.0


def flow(ctx: Context, reviewer: str, read_key: Callable[[], str | None], console=None) -> Session:
    """Run the review loop until the items run out, `q`, or the keys end."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    items = stage.queue(ctx, reviewer)
    session = Session()
    i = next((n for n, it in enumerate(items) if it["open"]), None)
    if i is None:
        console.print(Text(f"Nothing left for {reviewer}: {len(items)} sampled records, none open."))
        return session
    note = ""
    while 0 <= i < len(items):
        item = items[i]
        _render(console, ctx, items, i, reviewer, note)
        note = ""
        try:
            k = read_key()
        except KeyboardInterrupt:  # Ctrl-C quits like q; every verdict given is already committed
            k = None
        if k is None or k == "q":
            session.keystrokes += k is not None
            break
        session.keystrokes += 1
        if k in ("s", "b"):
            session.skipped += k == "s"
            i = _next_open(items, i) if k == "s" else max(0, i - 1)
            continue
        if k not in ("a", "r"):
            note = f"unknown key {k!r}: {HELP}"
            continue
        if not (item["open"] or item["mine"]):
            note = f"already decided by {item['reviewer']}; s or b to move on"
            continue
        reason = ""
        if k == "r":
            console.print(Text(f"reason: {REASON_HELP}", style="bold"))
            try:
                code = read_key()
            except KeyboardInterrupt:
                code = None
            session.keystrokes += code is not None
            if code not in evidence.REASONS:
                note = "reject cancelled"
                continue
            reason = evidence.REASONS[code]
        verdict = "accept" if k == "a" else "reject"
        stage.verdict(ctx, item["record_id"], verdict, reason, reviewer, via="terminal")
        session.reviewed += 1
        items[i] = {**item, "open": False, "mine": {"verdict": verdict, "reason": reason}}
        i = _next_open(items, i)
    done = sum(1 for it in items if it["mine"])
    console.print(f"{reviewer}: {session.reviewed} verdicts this session, {done} of {len(items)} sampled "
                  f"records reviewed by you; {session.keystrokes} keys ({session.per_item:.2f} per verdict).",
                  markup=False)
    return session


def _next_open(items: list[dict], i: int) -> int:
    return next((n for n in range(i + 1, len(items)) if items[n]["open"]), len(items))


def _render(console, ctx, items, i, reviewer, note) -> None:
    from rich.markup import escape
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    item = items[i]
    ev = evidence.gather(ctx.store, item["record_id"])
    mine = item["mine"]
    done = sum(1 for it in items if it["mine"])
    with contextlib.suppress(Exception):
        if console.is_terminal:
            console.clear()
    state = (f"your verdict: {mine['verdict']} {mine.get('reason') or ''}" if mine
             else ("open" if item["open"] else f"decided: {item['verdict']} by {item['reviewer']}"))
    console.print(f"[bold]\\[{i + 1}/{len(items)}][/] " + escape(
        f"{done} reviewed by {reviewer} · stratum {item['stratum']}"
        + (" · needs two reviewers" if item["copies"] > 1 else "") + f" · {state}"))
    lines = evidence.lines(ev)
    console.print(Panel(Text("\n".join(lines[1:])), title=Text(lines[0], style="bold"), title_align="left"))
    if ev.reference["source"]:
        console.print(Syntax(ev.reference["source"], "python", line_numbers=False, word_wrap=True),
                      Text(f"↑ {ev.reference['title']}", style="dim"))
    console.print(Syntax(ev.record.code, LEXERS.get(ev.language, "text"), line_numbers=True, word_wrap=True))
    if note:
        console.print(Text(note, style="yellow"))
    console.print(Text(HELP, style="bold"))
