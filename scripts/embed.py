#!/usr/bin/env python3
"""Build tool: writes a C file defining `const unsigned char NAME[]` (the input's bytes and a
NUL that is not counted) and `const size_t NAME_len`, so a file of the repository is served by
the binary without being hand-escaped into C strings. Run by meson's own Python.

    embed.py NAME HEADER INPUT OUTPUT      (HEADER: the include declaring both)
"""
import sys


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(f"usage: {argv[0]} NAME HEADER INPUT OUTPUT\n")
        return 2
    name, header, src, dst = argv[1:]
    with open(src, "rb") as f:
        data = f.read()
    lines = [f"/* generated from {src.rsplit('/', 1)[-1]} by scripts/embed.py: do not edit */",
             f'#include "{header}"', "", f"const unsigned char {name}[] = {{"]
    for i in range(0, len(data), 16):
        lines.append("    " + " ".join(f"0x{b:02x}," for b in data[i:i + 16]))
    lines += ["    0x00};", f"const size_t {name}_len = {len(data)};", ""]
    with open(dst, "w") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
