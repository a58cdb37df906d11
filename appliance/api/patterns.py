r"""Patterns match whole strings.

Python's `$` matches at the end of a string *or before a newline at its end*, so
`^[a-z]+$` accepts "abc\n": a config path "x\n" passed and the agent wrote a file named
so. `\Z` matches only at the very end. The patterns the API declares keep `$` (they are
published in the OpenAPI document, and in ECMA-262, the dialect of JSON Schema, `$` has
no such exception); every place that checks input with them compiles them through
`whole`, which rewrites each end anchor to `\Z` (docs/validation.md).
"""

import functools
import re


def whole(pattern):
    """`pattern` with every `$` that is an end anchor (not escaped, not inside a
    character class) rewritten to `\\Z`."""
    out = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            # a "]" right after "[" or "[^" is a member, not the end of the class
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        elif c == "$":
            out.append(r"\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def compiled(pattern, flags=0):
    """The compiled whole-string form of `pattern` (cached: schemas reuse theirs)."""
    return re.compile(whole(pattern), flags)
