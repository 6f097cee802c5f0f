#!/usr/bin/env python3
"""Reports C++ functions longer than a limit (issue 12: every function in tools/ under 80 lines).

usage: scripts/check-function-length.py [--max N] [--top K] [PATH ...]
  PATH: files or directories (their *.cc / *.h, recursively); default tools/.
  --max N: report functions of more than N lines (default 79, i.e. "under 80").
  --top K: also list the K longest functions whatever their length.
Exit status 1 when a function is over the limit, so CI or a reviewer can run it as a check.

A function is a brace block opened outside any other function: at namespace level, or
directly inside a class / struct / union body (inline members). Its length runs from the
first line of its signature (walking back from the opening brace over the lines that do
not end a previous declaration) to its closing brace, comments and blank lines included.
Lambdas and nested blocks count towards the function that holds them. String and
character literals (raw strings too) and comments are blanked before braces are counted,
so a brace in a help text or a comment does not move the count. Brace-initialized
namespace-level variables (`const X kY = {...};`) are reported as such ("initializer"),
not as functions, and never fail the check.
"""
import argparse
import os
import re
import sys

# Keywords whose brace opens a scope that can hold functions (not a function body).
SCOPE_RE = re.compile(r'\b(namespace|class|struct|union)\b[^;()]*$|\bextern\s+"C"\s*$')
ENUM_RE = re.compile(r'\benum\b')


def blank_literals(text):
    """The text with comments, string and char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = text.find(')' + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c in '"\'':
            # A digit separator (1'000) is not a char literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(' '); i += 1; continue
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(' ' * (j - i)); i = j
        else:
            out.append(c); i += 1
    return ''.join(out)


def signature_start(lines, brace_line):
    """First line of the declaration whose body opens on brace_line (0-based)."""
    i = brace_line
    while i > 0:
        prev = lines[i - 1].strip()
        if (not prev or prev.endswith((';', '}', '{', ':')) or prev.startswith('#')
                or prev in ('public:', 'private:', 'protected:')):
            break
        i -= 1
    return i


def functions(path):
    """(first line, last line, kind, signature) of each function or initializer, 1-based."""
    raw = open(path, encoding='utf-8', errors='replace').read()
    code = blank_literals(raw)
    lines = code.split('\n')
    raw_lines = raw.split('\n')
    stack = []  # per open brace: 'scope', 'enum', or ('body', start line, kind)
    found = []
    for ln, line in enumerate(lines):
        for col, ch in enumerate(line):
            if ch == '{':
                if any(isinstance(s, tuple) for s in stack):
                    stack.append('inner')
                    continue
                start = signature_start(lines, ln)
                head = ' '.join(l.strip() for l in lines[start:ln]) + ' ' + line[:col]
                if SCOPE_RE.search(head):
                    stack.append('scope')
                elif ENUM_RE.search(head):
                    stack.append('enum')
                else:
                    kind = 'function' if head.rstrip().endswith((')', 'const', 'override', 'noexcept', 'final')) \
                        or re.search(r'\)\s*(->[^=]*)?$', head.strip()) else 'initializer'
                    stack.append(('body', start, kind))
            elif ch == '}':
                if not stack:
                    continue  # unbalanced (macro tricks): ignore
                top = stack.pop()
                if isinstance(top, tuple):
                    _, start, kind = top
                    sig = ' '.join(raw_lines[start].split())[:100]
                    found.append((start + 1, ln + 1, kind, sig))
    return found


def sources(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in sorted(files):
                    if f.endswith(('.cc', '.h', '.cpp', '.hpp')):
                        yield os.path.join(root, f)
        else:
            yield p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--max', type=int, default=79)
    ap.add_argument('--top', type=int, default=0)
    ap.add_argument('paths', nargs='*', default=['tools'])
    a = ap.parse_args()
    rows = []
    for path in sources(a.paths):
        for first, last, kind, sig in functions(path):
            rows.append((last - first + 1, path, first, kind, sig))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    over = [r for r in rows if r[0] > a.max and r[3] == 'function']
    for n, path, first, kind, sig in over:
        print(f'{n:5d} lines  {path}:{first}  {sig}')
    if a.top:
        print(f'the {a.top} longest:')
        for n, path, first, kind, sig in rows[:a.top]:
            print(f'{n:5d} lines  {path}:{first}  {"" if kind == "function" else "(initializer) "}{sig}')
    funcs = [r for r in rows if r[3] == 'function']
    print(f'{len(funcs)} functions in {len(set(r[1] for r in rows))} files; '
          f'{len(over)} over {a.max} lines' + (f'; longest {funcs[0][0]} lines' if funcs else ''))
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main())
