#!/usr/bin/env python3
"""docs/manual.md -> hpcbake.1 (roff, man macros): the man page is generated from the manual, the one
reference for every command, option, exit code and environment variable. It reads the subset of
Markdown the manual is written in (docs/contributing.md, "The manual"): # title, ## sections,
### commands, paragraphs, ``` blocks, "- " bullets (an option bullet "- `--x N`: text" becomes a
tagged paragraph), tables, `code`, **bold** and [links](url).

Usage: manual-to-man.py MANUAL.md VERSION OUT.1
"""
import re
import sys


def escape(text):
    text = text.replace("\\", "\\e")
    return text


def inline(text):
    text = escape(text)
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)",
                  lambda m: m.group(1) if m.group(2).startswith("#") else f"{m.group(1)} ({m.group(2)})", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"`([^`]+)`", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR", text)
    return text


def line_start(text):
    """A roff text line must not start with a control character."""
    return "\\&" + text if text[:1] in (".", "'") else text


def convert(md, version):
    out = []
    lines = md.splitlines()
    i = 0
    para = []

    def flush():
        if para:
            out.append(line_start(inline(" ".join(para))))
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.startswith("# "):
            flush()
            out.append(f'.TH HPCBAKE 1 "" "hpcbake {version}" "User Commands"')
        elif line.startswith("## "):
            flush()
            out.append(".SH " + line[3:].strip())
        elif line.startswith("### "):
            flush()
            out.append('.SS "' + line[4:].strip() + '"')
        elif line.startswith("```"):
            flush()
            out.append(".PP\n.nf")
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(line_start(escape(lines[i])))
                i += 1
            out.append(".fi")
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    rows.append(cells)
                i += 1
            i -= 1
            for cells in rows[1:]:  # the header row names the columns the tags already show
                out.append(".TP\n" + line_start(inline(cells[0])))
                out.append(line_start(inline(" \u2014 ".join(cells[1:]) if len(cells) > 2 else cells[1])))
        elif line.startswith("- "):
            flush()
            item = [line[2:]]
            while i + 1 < len(lines) and lines[i + 1].startswith("  ") and lines[i + 1].strip():
                i += 1
                item.append(lines[i].strip())
            text = " ".join(item)
            m = re.match(r"`([^`]+)`: (.*)", text)
            if m:
                out.append(".TP\n" + line_start(inline("`" + m.group(1) + "`")))
                out.append(line_start(inline(m.group(2))))
            else:
                out.append(".IP \\(bu 2\n" + line_start(inline(text)))
        elif not line.strip():
            flush()
            if out and not out[-1].startswith((".PP", ".SH", ".SS", ".TH")):
                out.append(".PP")
        else:
            para.append(line.strip())
        i += 1
    flush()
    return "\n".join(out) + "\n"


def main():
    manual, version, dest = sys.argv[1:4]
    with open(manual, encoding="utf-8") as f:
        roff = convert(f.read(), version)
    with open(dest, "w", encoding="utf-8") as f:
        f.write(roff)


if __name__ == "__main__":
    main()
