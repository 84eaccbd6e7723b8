#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`cri-sim --help` and doc/cri-sim.md describe the same commands with the same arguments, and
the same options.

Usage: check-cri-sim-doc.py CRI_SIM DOC

The commands of --help are its lines "  COMMAND ARGS   text" after "Commands"; those of the
page are its "#### `COMMAND ARGS`" headings.  Options: every --long option of --help appears
in the page."""
import re
import subprocess
import sys


def main():
    cri_sim, doc = sys.argv[1], sys.argv[2]
    help_text = subprocess.run([cri_sim, '--help'], check=True, capture_output=True,
                               text=True).stdout
    page = open(doc, encoding='utf-8').read()

    commands = help_text[help_text.index('\nCommands'):]
    in_help = set()
    for line in commands.splitlines()[1:]:
        match = re.match(r'^  ([a-z][^ ]*(?: [^ ]+)*?)(?: {2,}|$)', line)
        if match:
            in_help.add(match.group(1).strip())
    in_doc = set(re.findall(r'^#### `([^`]+)`\s*$', page, flags=re.M))

    failures = []
    for command in sorted(in_help - in_doc):
        failures.append(f'--help has "{command}", doc/cri-sim.md has no "#### `{command}`"')
    for command in sorted(in_doc - in_help):
        failures.append(f'doc/cri-sim.md has "#### `{command}`", --help does not list it')
    for option in sorted(set(re.findall(r'(--[a-z][a-z-]+)=', help_text))):
        if option not in page:
            failures.append(f'--help has {option}, doc/cri-sim.md does not mention it')
    if not in_help:
        failures.append('no command found in --help')
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f'{len(in_help)} commands in --help, {len(in_doc)} in doc/cri-sim.md')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
