"""Describers: the techniques a kernel's code shows, and how an instruction names them.

A describer is one technique. It reads a kernel's `Source` (identifiers, inline asm, loop
headers and calls taken from the parse tree, so comments and ordinary strings never count)
through one method per language it knows, `cuda(src)` and `triton(src)`; a language it has
no method for never shows it. It also owns the words: `phrase`, how instructions name the
technique in each language, and `claim`, the pattern the fidelity check reads a claim of it
back with (from text in any language). Adding a technique is one file in this folder:

    @DESCRIBERS.register
    class SharedMemory(Describer):
        '''Shared memory: a `__shared__` buffer.'''
        name = "shared_memory"
        phrase = {"en": "shared memory", "zh": "共享内存"}
        claim = r"shared[- ]memory|__shared__|共享内存"

        def cuda(self, s):
            return "__shared__" in s.tokens

`sftbuild list describer` shows them; `describe.describers` in the config turns one off.
"""
from __future__ import annotations

import dataclasses

from sftbuild.plugins import Plugin, Registry


@dataclasses.dataclass
class Source:
    """What a describer reads from one kernel's code."""
    tokens: set[str]  # identifiers, keywords and type names outside comments and strings
    asm: str  # inline-asm text
    loops: list[str]  # the header (init; cond; update) of every for loop
    calls: set[str]  # called names, dotted for Triton (tl.dot)
    text: str

    def has(self, *names: str) -> bool:
        return any(n in self.tokens for n in names)

    def has_prefix(self, *prefixes: str) -> bool:
        return any(t.startswith(prefixes) for t in self.tokens)


class Describer(Plugin):
    """A technique: how to see it in each language's code, and how instructions name it."""

    phrase: dict[str, str] = {}  # language -> the words instructions use
    claim: str = ""  # a regular expression (case-insensitive) that finds the claim in any language

    def detect(self, language: str, src: Source) -> bool:
        read = getattr(self, language, None)  # the method named after the language, if the technique has one
        return bool(read and read(src))


DESCRIBERS: Registry[Describer] = Registry(
    "describer", Describer, __name__, doc="techniques read from a kernel's parse tree, with their phrases")
