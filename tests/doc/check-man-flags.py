#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-man-flags.py PLEGD PAGE_SOURCE: plegd(8) documents exactly the options `plegd --help`
prints, each with its argument and its default, and the [plegd] keys of --config.

PAGE_SOURCE is the scdoc source of the page as configured by the build (doc/man/plegd.8.scd.in
with the build's paths filled in).  Whoever adds, renames or removes a flag, or changes a
default, without updating the page makes this test fail; so does a page entry for a flag plegd
no longer has.  The check is run once on a copy of the page with an entry taken out, which must
fail, so that a parser that finds nothing cannot pass.
"""
import os
import re
import subprocess
import sys

# Options that are not settings of the [plegd] group of --config.
NOT_CONFIG_KEYS = {"help", "version", "config", "feature-gates"}


def parse_help(text):
    """{flag name: (metavar or None, default text or None)} from `plegd --help`."""
    flags = {}
    for line in text.splitlines():
        m = re.match(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)(?:=(\S+))?(?:\s+(.*))?$", line)
        if not m:
            continue
        name, metavar, description = m.group(1), m.group(2), m.group(3) or ""
        d = re.search(r"\(default:? ([^)]*)\)", description)
        flags[name] = (metavar, d.group(1).strip() if d else None)
    return flags


def strip_markup(text):
    text = text.replace("*", "")
    text = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", "", text)
    return " ".join(text.split())


def sections(source):
    """{section title: its lines} of an scdoc page."""
    result, current = {}, None
    for line in source.splitlines():
        m = re.match(r"^# (.+)$", line)
        if m:
            current = m.group(1).strip()
            result[current] = []
        elif current:
            result[current].append(line)
    return result


def entries(lines):
    """Definition-list entries: {heading line: body text} (the body is the tab-indented lines)."""
    result, heading = {}, None
    for line in lines:
        if line.startswith("\t"):
            if heading is not None:
                result[heading] += " " + line.strip()
        elif line.strip():
            heading = line.strip()
            result[heading] = ""
    return result


def check(help_flags, source):
    problems = []
    secs = sections(source)
    if "OPTIONS" not in secs:
        return ["the page has no OPTIONS section"]

    documented = {}
    for heading, body in entries(secs["OPTIONS"]).items():
        # "*--name*=_ARG_" or "*-h*, *--help*"; anything else is a paragraph.
        m = re.match(r"^(?:\*-\w\*, )?\*--([a-z][a-z0-9-]*)\*(?:=\S+)?$", heading)
        if not m:
            continue
        names = [m.group(1)]
        for name in names:
            documented[name] = (strip_markup(heading), strip_markup(body))

    for name, (metavar, default) in sorted(help_flags.items()):
        if name not in documented:
            problems.append(f"--{name} is in `plegd --help` but not in OPTIONS")
            continue
        heading, body = documented[name]
        expected = f"--{name}" + (f"={metavar}" if metavar else "")
        if expected not in heading:
            problems.append(f"--{name}: the page's heading \"{heading}\" does not show \"{expected}\"")
        if default is not None and strip_markup(default) not in body:
            problems.append(f"--{name}: default \"{default}\" (from --help) is not in its entry: {body}")
    for name in sorted(set(documented) - set(help_flags)):
        problems.append(f"--{name} is in OPTIONS but `plegd --help` does not print it")

    config = secs.get("CONFIGURATION FILE")
    if config is None:
        problems.append("the page has no CONFIGURATION FILE section")
    else:
        group = entries(config).get("*[plegd]*")
        if group is None:
            problems.append("CONFIGURATION FILE has no *[plegd]* entry")
        else:
            keys = set(re.findall(r"\*([a-z][a-z0-9-]*)\*", group))
            wanted = set(help_flags) - NOT_CONFIG_KEYS
            for key in sorted(wanted - keys):
                problems.append(f"[plegd] key {key} (--{key}) is not listed in CONFIGURATION FILE")
            for key in sorted(keys - wanted):
                problems.append(f"[plegd] key {key} is listed but plegd has no --{key}")
    return problems


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check-man-flags.py PLEGD PAGE_SOURCE")
    plegd, page = sys.argv[1:]
    env = dict(os.environ, LC_ALL="C.UTF-8")
    help_text = subprocess.run([plegd, "--help"], check=True, capture_output=True, text=True,
                               env=env, timeout=60).stdout
    help_flags = parse_help(help_text)
    if len(help_flags) < 5:
        sys.exit(f"could not parse `plegd --help`:\n{help_text}")
    with open(page, encoding="utf-8") as f:
        source = f.read()

    # The check must be able to fail: the page without the entry of --relist-period.
    mutated = re.sub(r"^\*--relist-period\*.*\n(\t.*\n)+", "", source, flags=re.M)
    if mutated == source or not check(help_flags, mutated):
        sys.exit("self-check failed: a page without --relist-period's entry was not caught")

    problems = check(help_flags, source)
    for p in problems:
        print(f"plegd(8) ({page}): {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"plegd(8) documents all {len(help_flags)} options of `plegd --help` with their defaults")


if __name__ == "__main__":
    main()
