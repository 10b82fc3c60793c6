"""Tokens of Metal code, and the two passes over them that need no Metal vocabulary: the check
that brackets balance (naming the user's line) and the casts that give ``c ? a : b`` Metal's
promoted type where a 16-bit class meets a number (see ``cast_conditionals``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._errors import ArgumentError

__all__ = ["Tok", "cast_conditionals", "check_balanced", "tokens"]

_TOKEN_RE = re.compile(
    r"(?P<pp>^[ \t]*#[^\n]*(?:\\\n[^\n]*)*)"
    r"|(?P<skip>//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|[ \t\r\f\v]+|\n)"
    r"|(?P<num>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[A-Za-z_]*)"
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op>->|::|<<=|>>=|==|!=|<=|>=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|&&|\|\||\+\+|--|<<|>>|.)",
    re.S | re.M,
)
# Directives that can hide or make brackets (conditionals, macros): with them, bracket balance is
# left to the compiler.
_BRACKET_DIRECTIVE_RE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|define)\b", re.M)
_CLOSERS = {"}": "{", ")": "(", "]": "["}


@dataclass
class Tok:
    kind: str
    text: str
    line: int


def tokens(code: str) -> list[Tok]:
    out, line = [], 1
    for m in _TOKEN_RE.finditer(code):
        kind = m.lastgroup or "op"
        out.append(Tok(kind, m.group(), line))
        line += m.group().count("\n")
    return out


def check_balanced(kernel: str, code: str, where: str, toks: list[Tok] | None = None) -> None:
    """Refuse unbalanced brackets by the user's line (the compiler would name generated ones)."""
    if _BRACKET_DIRECTIVE_RE.search(code):
        return
    open_: list[Tok] = []
    for t in tokens(code) if toks is None else toks:
        if t.kind != "op" or t.text not in "{}()[]":
            continue
        if t.text in "{([":
            open_.append(t)
            continue
        if not open_ or open_[-1].text != _CLOSERS[t.text]:
            got = f"'{open_[-1].text}' of line {open_[-1].line}" if open_ else "nothing"
            raise ArgumentError(
                f"[{kernel}] unbalanced brackets in the Metal {where}: '{t.text}' at line "
                f"{t.line} closes {got}"
            )
        open_.pop()
    if open_:
        t = open_[-1]
        raise ArgumentError(
            f"[{kernel}] unbalanced brackets in the Metal {where}: '{t.text}' at line {t.line} "
            "is never closed"
        )


# Operand text copied into decltype: each nesting level copies its operands twice more, so a deep
# nest is left as written past this (a compile error with a hint where it mixes 16-bit types),
# and so is every conditional after the casts of one body have added _COND_TOTAL_LIMIT.
_COND_TEXT_LIMIT = 16384
_COND_TOTAL_LIMIT = 1 << 22
_PLAIN_NUMBER_RE = re.compile(
    r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFuUlL]*|0[xX][0-9a-fA-F]+[uUlL]*"
)


def cast_conditionals(toks: list[Tok], sig: list[int], out: list[str]) -> None:
    """``c ? a : b`` -> ``c ? static_cast<kk_cond_t<A, B>>((a)) : static_cast<..<B, A>>((b))``.

    ``A``, ``B`` are ``decltype((a))``, ``decltype((b))``: the header's ``kk_cond_t`` is Metal's
    promoted type where a 16-bit class meets a number, and the operand's own type otherwise.
    Inner conditionals go first (they come later in the text), so an outer one copies their
    casts. A conditional whose extent a token pass cannot be sure of (a ``<``/``>`` after the
    ``:`` where one may close a template argument list; a string or directive inside) is left
    as written.
    """
    added = 0
    for q in reversed([k for k, i in enumerate(sig) if toks[i].text == "?"]):
        c = _cond_scan(toks, sig, q, colon=True)
        angle = _open_angle_before(toks, sig, q)
        e = _cond_scan(toks, sig, c, colon=False, angle=angle) if c is not None else None
        if c is None or e is None or c == q + 1 or e == c + 1:
            continue
        span = toks[sig[q] : sig[e - 1] + 1]
        if any(t.kind == "pp" or t.text[:1] in "\"'" for t in span):
            continue
        if (
            c == q + 2
            and e == c + 2
            and all(  # `c ? 1 : 2.0f`: two numbers need no cast
                _PLAIN_NUMBER_RE.fullmatch(out[sig[j]]) for j in (q + 1, c + 1)
            )
        ):
            continue
        a = " ".join(out[sig[j]] for j in range(q + 1, c) if out[sig[j]])
        b = " ".join(out[sig[j]] for j in range(c + 1, e) if out[sig[j]])
        added += 2 * (len(a) + len(b)) + 100
        if len(a) + len(b) > _COND_TEXT_LIMIT or added > _COND_TOTAL_LIMIT:
            continue
        ta, tb = f"decltype(({a}))", f"decltype(({b}))"
        out[sig[q + 1]] = f"static_cast<metal::kk_cond_t<{ta}, {tb}>>((" + out[sig[q + 1]]
        out[sig[c - 1]] += "))"
        out[sig[c + 1]] = f"static_cast<metal::kk_cond_t<{tb}, {ta}>>((" + out[sig[c + 1]]
        out[sig[e - 1]] += "))"


def _open_angle_before(toks: list[Tok], sig: list[int], q: int) -> bool:
    """Whether the statement before the ``?`` at ``q`` has more ``<`` than ``>`` at its own
    bracket level: the conditional may sit in a template argument list (``f<c ? 1 : 2>``)."""
    depth = lt = gt = 0
    for j in range(q - 1, -1, -1):
        t = toks[sig[j]].text
        if t in (")", "]"):
            depth += 1
        elif t in ("(", "["):
            if depth == 0:
                break
            depth -= 1
        elif t in (";", "{", "}"):
            break
        elif depth == 0:
            lt += t == "<"
            gt += (t == ">") + 2 * (t == ">>")
    return lt > gt


def _cond_scan(
    toks: list[Tok], sig: list[int], k: int, colon: bool, angle: bool = False
) -> int | None:
    """From the ``?`` (``colon``) or ``:`` at significant index ``k``: the index of its ``:``,
    or one past the third operand's end; None where the extent is unsure."""
    depth = nested = 0
    for j in range(k + 1, len(sig)):
        t = toks[sig[j]].text
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            if depth == 0:
                return None if colon else j
            depth -= 1
        elif depth:
            continue
        elif t == ";" or (t == "," and not colon):
            return None if colon else j
        elif t == "?":
            nested += 1
        elif t == ":":
            if nested == 0:
                return j
            nested -= 1
        elif angle and not colon and t in ("<", ">", ">>", "<=", ">="):
            return None  # `f<c ? 1 : 2>`: the `>` may close the template, not compare
    return None if colon else len(sig)
