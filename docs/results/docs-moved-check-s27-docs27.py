"""Check that a move of docs lost no line: every non-blank line of the old files occurs in the new ones.

    python docs/results/docs-moved-check-s27-docs27.py REV OLD_FILE... -- NEW_FILE...

OLD_FILEs are read at git revision REV, NEW_FILEs from the work tree. Lines are compared stripped, with
heading marks and link targets left out (a moved heading may change its level, a moved link its path),
and with the method renames a doc's current text applies (RENAMES: old spelling → new). Prints the lines
found nowhere and exits 1 if there are any.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

# the band's steps became functions of model/band.py in session 24; model.md's current text names them so
RENAMES = [
    ("RuntimeModel._quantiles", "band.quantiles"),
    ("RuntimeModel._band_sources", "band.band_sources"),
    ("RuntimeModel._at_runs", "band.at_runs"),
    ("RuntimeModel._missing_errors", "band.missing_errors"),
    ("RuntimeModel._guess_profile", "band.guess_profile"),
    ("`_quantiles", "`band.quantiles"),
    ("`_band_sources", "`band.band_sources"),
    ("`_own_miss", "`band.own_miss"),
    ("`_at_runs", "`band.at_runs"),
    ("`_missing_errors", "`band.missing_errors"),
    ("`_guess_profile", "`band.guess_profile"),
    ("`_check_profile", "`band.check_profile"),
    ("`_check_scale", "`band.check_scale"),
]


def normal(line: str) -> str:
    line = re.sub(r"^#+ +", "", line.strip())
    return re.sub(r"\]\([^()\s]*\)", "]()", line)


def renamed(line: str) -> str:
    for old, new in RENAMES:
        line = line.replace(old, new)
    return line


def main(argv: list[str]) -> int:
    rev, rest = argv[0], argv[1:]
    split = rest.index("--")
    old_files, new_files = rest[:split], rest[split + 1 :]
    new_lines = set()
    for name in new_files:
        new_lines.update(normal(x) for x in pathlib.Path(name).read_text().split("\n"))
    missing = []
    for name in old_files:
        old = subprocess.run(
            ["git", "show", f"{rev}:{name}"], capture_output=True, text=True, check=True
        ).stdout
        for number, line in enumerate(old.split("\n"), 1):
            if not line.strip():
                continue
            n = normal(line)
            if n not in new_lines and normal(renamed(line)) not in new_lines:
                missing.append(f"{name}:{number}: {line}")
    for line in missing:
        print(line)
    print(f"{len(missing)} line(s) found nowhere")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
