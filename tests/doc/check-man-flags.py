#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-man-flags.py PLEGD PAGE_SOURCE: plegd(8) documents exactly the options `plegd --help`
prints, each with its argument and its default, and the [plegd] keys of --config.

check-man-flags.py --plegctl PLEGCTL PAGE_SOURCE: plegctl(1) documents exactly the options each
command's `plegctl COMMAND --help` prints, with its argument and default: the options every
command takes in OPTIONS, a command's own in the section named after it (EVENTS, PODS, STATUS).

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


def documented_flags(lines):
    """{flag name: (heading, body)} of the option entries of a section."""
    documented = {}
    for heading, body in entries(lines).items():
        # "*--name*=_ARG_" or "*-h*, *--help*"; anything else is a paragraph.
        m = re.match(r"^(?:\*-\w\*, )?\*--([a-z][a-z0-9-]*)\*(?:=\S+)?$", heading)
        if not m:
            continue
        documented[m.group(1)] = (strip_markup(heading), strip_markup(body))
    return documented


def compare_flags(help_flags, documented, command, section):
    """What differs between the flags `command --help` prints and a section's entries."""
    problems = []
    for name, (metavar, default) in sorted(help_flags.items()):
        if name not in documented:
            problems.append(f"--{name} is in `{command} --help` but not in {section}")
            continue
        heading, body = documented[name]
        expected = f"--{name}" + (f"={metavar}" if metavar else "")
        if expected not in heading:
            problems.append(f"--{name}: the page's heading \"{heading}\" does not show \"{expected}\"")
        if default is not None and strip_markup(default) not in body:
            problems.append(f"--{name}: default \"{default}\" (from --help) is not in its entry: {body}")
    for name in sorted(set(documented) - set(help_flags)):
        problems.append(f"--{name} is in {section} but `{command} --help` does not print it")
    return problems


def check(help_flags, source):
    problems = []
    secs = sections(source)
    if "OPTIONS" not in secs:
        return ["the page has no OPTIONS section"]

    documented = documented_flags(secs["OPTIONS"])
    problems += compare_flags(help_flags, documented, "plegd", "OPTIONS")

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


PLEGCTL_COMMANDS = ("events", "pods", "status")


def check_plegctl(helps, source):
    """helps: {command: its parsed --help}.  The options all commands print belong in OPTIONS,
    the rest in the command's own section."""
    problems = []
    secs = sections(source)
    common = set.intersection(*(set(flags) for flags in helps.values()))
    first = helps[PLEGCTL_COMMANDS[0]]
    if "OPTIONS" not in secs:
        return ["the page has no OPTIONS section"]
    problems += compare_flags({n: first[n] for n in common}, documented_flags(secs["OPTIONS"]),
                              "plegctl COMMAND", "OPTIONS")
    for command, flags in helps.items():
        section = command.upper()
        if section not in secs:
            problems.append(f"the page has no {section} section")
            continue
        own = {n: v for n, v in flags.items() if n not in common}
        problems += compare_flags(own, documented_flags(secs[section]), f"plegctl {command}",
                                  section)
    return problems


def help_of(argv, least):
    """The parsed `argv` (a --help command line), with at least `least` flags."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    text = subprocess.run(argv, check=True, capture_output=True, text=True, env=env,
                          timeout=60).stdout
    flags = parse_help(text)
    if len(flags) < least:
        sys.exit(f"could not parse `{' '.join(argv)}`:\n{text}")
    return flags


def judge(title, page, check_page, removed, summary):
    """Runs check_page(source) on the page, after making sure that it fails on the page without
    the entry of the flag `removed`; prints the problems or `summary`."""
    with open(page, encoding="utf-8") as f:
        source = f.read()

    # The check must be able to fail: the page without one entry.
    mutated = re.sub(rf"^\*--{removed}\*.*\n(\t.*\n)+", "", source, flags=re.M)
    if mutated == source or not check_page(mutated):
        sys.exit(f"self-check failed: a page without --{removed}'s entry was not caught")

    problems = check_page(source)
    for p in problems:
        print(f"{title} ({page}): {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(summary)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--plegctl":
        plegctl, page = sys.argv[2:]
        helps = {c: help_of([plegctl, c, "--help"], 3) for c in PLEGCTL_COMMANDS}
        n = sum(len(flags) for flags in helps.values())
        judge("plegctl(1)", page, lambda source: check_plegctl(helps, source), "since",
              f"plegctl(1) documents all {n} options of `plegctl COMMAND --help` with their "
              "defaults")
        return
    if len(sys.argv) != 3:
        sys.exit("usage: check-man-flags.py PLEGD PAGE_SOURCE | --plegctl PLEGCTL PAGE_SOURCE")
    plegd, page = sys.argv[1:]
    help_flags = help_of([plegd, "--help"], 5)
    judge("plegd(8)", page, lambda source: check(help_flags, source), "relist-period",
          f"plegd(8) documents all {len(help_flags)} options of `plegd --help` with their "
          "defaults")


if __name__ == "__main__":
    main()
