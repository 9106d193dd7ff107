#!/usr/bin/env python3
"""Checks that the documentation names only files that exist.

Scans README.md and docs/**/*.md (the whole text), and the comments of the
sources under src/ (*.h, *.cc), tests/, bench/, examples/ and scripts/ (C++ comments; '#'
comments of shell, Python, CMake and TOML files, and Python docstrings) for

  1. markdown relative links, [text](path) and [label]: path, resolved
     relative to the file that holds them (anchors stripped);
  2. repository paths written as text: tokens that start with src/, docs/,
     tests/, bench/, scripts/, examples/ or third_party/, resolved relative
     to the repository root. A trailing ':LINE' or '#anchor' is allowed;
     tokens with a '*' (a glob) or a '<...>' placeholder are skipped, and so
     is anything under build/ or runs/ (paths the build and the runs make).

Prints every reference to a file or directory that does not exist as
`FILE:LINE: missing PATH`, sorted by file and line, and exits 1 if there is
any, 0 otherwise. Standard library only; deterministic; well under a second
on this repository.

Usage: scripts/check_doc_paths.py [--root DIR] [--strings]

--strings also checks the string literals of the C/C++ sources (the config
schema's help texts, error messages), which are not comments but are read by
users just the same.
"""

import argparse
import os
import re
import sys

PREFIXES = ("src", "docs", "tests", "bench", "scripts", "examples", "third_party")
IGNORED_TOP = ("build", "runs")

# A path written as text: one of the prefixes at a token boundary (not after a
# letter, digit, '_', '.', '/', '$', '-' or '~', so build/src/... and
# $dir/bench/... are not taken for repository paths), then path characters.
TEXT_PATH = re.compile(
    r"(?<![\w./$~-])((?:%s)/[^\s`'\"()\[\]{},;|\\]*)" % "|".join(PREFIXES))
# [text](target) and [text](target "title"); images too.
MD_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
MD_REF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_SUFFIX = re.compile(r"(?::\d+)+$")

CPP_EXT = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".c", ".cu", ".in", ".proto")
HASH_EXT = (".sh", ".bash", ".cmake", ".toml", ".txt", ".py", ".yml", ".yaml")


def cpp_comments(text, strings=False):
    """Yields (line, text) for every comment of a C/C++ source.

    Skips string and character literals, raw strings included, so that a
    '//' inside a string is not taken for a comment; with strings=True it
    yields the contents of string literals too (help texts, messages)."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            yield line, text[i + 2:end]
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            for k, part in enumerate(text[i + 2:end].split("\n")):
                yield line + k, part
            line += text.count("\n", i, end)
            i = end + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            if open_paren < 0:
                i += 2
                continue
            delim = ")" + text[i + 2:open_paren] + '"'
            end = text.find(delim, open_paren + 1)
            end = n if end < 0 else end + len(delim)
            if strings:
                for k, part in enumerate(text[open_paren + 1:end].split("\n")):
                    yield line + k, part
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            # A string or character literal (a digit separator 1'000 is not).
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if strings and c == '"':
                yield line, text[i + 1:j]
            i = min(j + 1, n)
        else:
            i += 1


def hash_comments(text, python):
    """Yields (line, text) for '#' comments (and, in Python, docstrings)."""
    in_doc = None
    for number, raw in enumerate(text.split("\n"), 1):
        if in_doc:
            end = raw.find(in_doc)
            yield number, raw if end < 0 else raw[:end]
            if end >= 0:
                in_doc = None
            continue
        stripped = raw.lstrip()
        if python and stripped[:3] in ('"""', "'''"):
            quote = stripped[:3]
            rest = stripped[3:]
            end = rest.find(quote)
            yield number, rest if end < 0 else rest[:end]
            if end < 0:
                in_doc = quote
            continue
        # A '#' that starts a comment: at the start of the line or after a
        # blank (not '$#', '${#x}' or a '#' inside a word).
        match = re.search(r"(?:^|\s)#(.*)$", raw)
        if match:
            yield number, match.group(1)


def markdown_lines(text):
    """Yields (line, text, in_code) for a markdown file."""
    fence = None
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.lstrip()
        marker = stripped[:3]
        if fence is None and marker in ("```", "~~~"):
            fence = marker
            yield number, raw, True
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            yield number, raw, True
            continue
        yield number, raw, False


def clean_text_path(token):
    """The path a text token names, or None when it is to be skipped."""
    if "*" in token or "<" in token or ">" in token or "..." in token:
        return None
    token = token.split("#", 1)[0]
    # Trailing punctuation of the sentence; then a ':LINE' suffix.
    token = token.rstrip(".,:;!?'")
    token = LINE_SUFFIX.sub("", token)
    token = token.rstrip(".,:;!?'")
    if not token or token.endswith("/.."):
        return None
    return token


def exists(root, relative):
    path = os.path.normpath(os.path.join(root, relative))
    if os.path.relpath(path, root).split(os.sep)[0] in IGNORED_TOP:
        return True
    return os.path.exists(path)


def check_text(root, rel_file, line, text, missing):
    for match in TEXT_PATH.finditer(text):
        path = clean_text_path(match.group(1))
        if path is None:
            continue
        if not exists(root, path):
            missing.add((rel_file, line, path))


def check_link(root, rel_file, line, target, missing):
    if not target or target.startswith("#") or SCHEME.match(target) or target.startswith("//"):
        return
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path or "<" in path or "*" in path:
        return
    if path.startswith("/"):
        resolved = path.lstrip("/")
    else:
        resolved = os.path.join(os.path.dirname(rel_file), path)
    if not exists(root, resolved):
        missing.add((rel_file, line, path))


def scan_markdown(root, rel_file, text, missing):
    for line, raw, in_code in markdown_lines(text):
        if not in_code:
            # Links outside inline code spans only.
            outside = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), raw)
            for match in MD_LINK.finditer(outside):
                check_link(root, rel_file, line, match.group(1), missing)
            ref = MD_REF.match(outside)
            if ref:
                check_link(root, rel_file, line, ref.group(1), missing)
        check_text(root, rel_file, line, raw, missing)


def source_comments(rel_file, text, strings=False):
    name = os.path.basename(rel_file)
    lower = name.lower()
    if lower.endswith(CPP_EXT):
        return cpp_comments(text, strings)
    if lower.endswith(HASH_EXT) or name == "CMakeLists.txt" or name == "Makefile":
        return hash_comments(text, lower.endswith(".py"))
    if not os.path.splitext(name)[1]:
        # A script without an extension: '#' comments if it has a shebang.
        if text.startswith("#!"):
            return hash_comments(text, "python" in text.split("\n", 1)[0])
    return iter(())


def walk(root, top):
    """Every file under root/top, sorted, as repository-relative paths."""
    result = []
    base = os.path.join(root, top)
    for directory, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            result.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(result)


def read(root, rel_file):
    try:
        with open(os.path.join(root, rel_file), "r", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository root (default: the parent of scripts/)")
    parser.add_argument("--strings", action="store_true",
                        help="also check the string literals of C/C++ sources (help texts, messages)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    missing = set()

    markdown = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    markdown += [f for f in walk(root, "docs") if f.endswith(".md")]
    for rel_file in markdown:
        text = read(root, rel_file)
        if text is not None:
            scan_markdown(root, rel_file, text, missing)

    sources = [f for f in walk(root, "src") if f.endswith((".h", ".cc"))]
    sources += walk(root, "tests") + walk(root, "bench")
    sources += walk(root, "examples") + walk(root, "scripts")
    for rel_file in sources:
        text = read(root, rel_file)
        if text is None or "\0" in text:
            continue
        for line, comment in source_comments(rel_file, text, args.strings):
            check_text(root, rel_file, line, comment, missing)

    for rel_file, line, path in sorted(missing):
        print("%s:%d: missing %s" % (rel_file, line, path))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
