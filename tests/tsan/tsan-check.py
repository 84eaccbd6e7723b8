#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs one test under ThreadSanitizer and judges every report of every process it started.

    tsan-check.py --build-root DIR --suppressions FILE -- COMMAND [ARG...]

TSan writes its reports to files in a private folder (log_path, inherited by plegd, cri-sim and
every forked Check child), the test runs to its end (halt_on_error=0) and keeps its own exit
status (exitcode=0).  Then each report is judged:

- a frame is the project's when its module was built in the build tree (libpleg, the plugins,
  plegd, the tests); a side of a report (each access of a data race; every stack of other
  kinds) is the project's when its access was made by project code, directly or through a libc
  function or one of GLib's allocation and copy wrappers (g_malloc, g_free, g_strdup...) that
  code called (the TSan runtime's interceptor frames do not count); on a thread that never
  entered project code (GLib's worker) those wrappers acted for GLib itself and are matched;
- a report fails when every side is the project's: two accesses made by libpleg, the plugins,
  plegd or the tests are never suppressed;
- a data race none of whose sides has a project frame at all, on memory or a descriptor that
  no project code made (the location's stack has none either), is the libraries' own and
  passes: each access was made while its thread ran only GLib, libsoup or gRPC code (GLib's
  pool threads, the main loop's own dispatch), where their locks, which TSan does not see,
  order them; a side TSan could not restore (no frame) never counts as such;
- any other report fails too unless an entry of the suppressions file matches one of the frames
  above the first project frame of a side that is not the project's, that is a frame of GLib,
  gRPC, abseil or libc that made the access;
- an entry of type fd (not one of TSan's) is narrower still: fd:MODULE hides a data race on a
  file descriptor only when MODULE's code created the descriptor and made every access of the
  report itself (each stack's first frame below TSan's interceptor is MODULE's).

TSan's own suppressions would hide a report when an entry matches any frame on either side,
so the file is not given to TSan: entries are matched here, with TSan's syntax (TYPE:PATTERN,
'*' wildcards, substring otherwise), against function names, files and modules.

Exit status: the test's own when it failed, 1 when a report failed, else 0.  Every failing
report is printed in full on stderr, each suppressed one as one line.
"""

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile

FRAME = re.compile(r"^\s+#\d+ (?P<rest>.*)$")
MODULE = re.compile(r" \((?P<module>[^()]+)\+0x[0-9a-f]+\)$")


def parse_frame(line):
    """"    #3 function (C++ names have spaces) file:line (module+0xoffset)" -> (func, file, module)"""
    m = FRAME.match(line)
    if not m:
        return None
    rest, module = m.group("rest"), ""
    mm = MODULE.search(rest)
    if mm:
        module, rest = mm.group("module"), rest[:mm.start()]
    func, _, path = rest.rpartition(" ")
    return (func or path, path if func else "", module)
SIDE = re.compile(r"^  (?:Previous )?(?:[Aa]tomic )?(?:[Rr]ead|[Ww]rite)\b.* by (?:main )?thread")
STACK_HEAD = re.compile(r"^  \S.*:$")
REPORT_KIND = re.compile(r"^WARNING: ThreadSanitizer: (?P<kind>.+?) \(pid=(?P<pid>\d+)\)")
# Stacks that say where a thread, a mutex or a heap block came from, not who did what.
FD_LOCATION = re.compile(r"^  Location is file descriptor \d+ ")
CONTEXT_STACK = re.compile(r"^  (?:Location is|Thread T\d+|Mutex M\d+ \(0x[0-9a-f]+\) created at)")
SEPARATOR = "=================="
GLIB_ALLOCATORS = {
    "g_malloc", "g_malloc0", "g_malloc_n", "g_malloc0_n", "g_realloc", "g_realloc_n",
    "g_try_malloc", "g_try_malloc0", "g_try_realloc", "g_free", "g_free_sized",
    "g_slice_alloc", "g_slice_alloc0", "g_slice_free1", "g_memdup2", "g_strdup",
    "g_strndup", "g_strdup_printf", "g_strdup_vprintf", "g_strconcat", "g_strsplit",
    "g_strfreev", "g_strdupv",
}


def without_tsan(frames):
    """A stack without the TSan runtime's own frames (its interceptors)."""
    return [f for f in frames if not os.path.basename(f[2]).startswith("libtsan.so")]


def suppression_type(kind):
    """The suppression type TSan itself would use for a report kind."""
    if kind.startswith(("data race", "heap-use-after-free")):
        return "race"
    if kind.startswith("thread leak"):
        return "thread"
    if kind.startswith("lock-order-inversion"):
        return "deadlock"
    if kind.startswith("signal"):
        return "signal"
    if "mutex" in kind:
        return "mutex"
    return kind


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-root", required=True)
    parser.add_argument("--suppressions", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command to run")
    return args


def read_suppressions(path):
    """TYPE:PATTERN lines, '#' comments; returns (type, pattern, line number)."""
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kind, sep, pattern = line.partition(":")
            if not sep or not pattern:
                sys.exit(f"tsan-check: {path}:{number}: expected TYPE:PATTERN, got {line!r}")
            entries.append((kind, pattern, number))
    return entries


def matches(pattern, text):
    anchored = pattern.startswith("^") or pattern.endswith("$")
    core = pattern.strip("^$")
    if "*" in core or anchored:
        glob = ("" if pattern.startswith("^") else "*") + core + ("" if pattern.endswith("$") else "*")
        return fnmatch.fnmatchcase(text, glob)
    return core in text


class Judge:
    def __init__(self, build_root, suppressions):
        self.build_root = os.path.realpath(build_root)
        self.suppressions = suppressions
        self.built = set()
        for _, _, files in os.walk(self.build_root):
            self.built.update(files)

    def is_project(self, frame):
        """Code built in the build tree: libpleg, the plugins, plegd, the tests (and this shim)."""
        return os.path.basename(frame[2]) in self.built

    def side(self, frames):
        """(ours, foreign frames): a side is ours when its access was made by project code,
        directly or through a libc function it called; its foreign frames are those above its
        first project frame, the TSan runtime's interceptor frames left out."""
        frames = without_tsan(frames)
        if len(frames) == 1 and not self.is_project(frames[0]):
            # TSan's stack is the uninstrumented frame that made the access, then where each
            # instrumented function still running was called from.  One frame alone: the thread
            # never entered project code (GLib's worker thread), and a GLib wrapper there acted
            # for GLib itself.
            return False, frames
        # GLib's allocation and copy wrappers at the top act for their caller, like malloc.
        while frames and frames[0][0] in GLIB_ALLOCATORS:
            frames = frames[1:]
        foreign = []
        for frame in frames:
            if self.is_project(frame):
                break
            foreign.append(frame)
        ours = bool(frames) and not foreign
        return ours, foreign

    def library_only(self, frames):
        """Whether a side's thread ran no project code at all when it made its access: at least
        one frame besides TSan's own, and none of them the project's."""
        frames = without_tsan(frames)
        return bool(frames) and not any(self.is_project(f) for f in frames)

    def sides(self, kind, stacks):
        """The stacks that count as the report's sides."""
        if suppression_type(kind) == "race":
            return [frames for head, frames in stacks if SIDE.match(head)]
        return [frames for head, frames in stacks if not CONTEXT_STACK.match(head)] or \
            [frames for _, frames in stacks]

    def judge(self, text):
        """Returns (verdict, reason): verdict is 'fail' or 'suppressed'."""
        lines = text.splitlines()
        m = next((REPORT_KIND.match(l) for l in lines if REPORT_KIND.match(l)), None)
        kind = m.group("kind") if m else "unknown report"
        stacks, frames = [], None
        for line in lines:
            frame = parse_frame(line)
            if frame and frames is not None:
                frames.append(frame)
            elif STACK_HEAD.match(line):
                frames = []
                stacks.append((line, frames))
        raw_sides = self.sides(kind, stacks)
        sides = [self.side(frames) for frames in raw_sides]
        if not sides:
            return "fail", f"{kind}: no stack to judge"
        if all(ours for ours, _ in sides):
            return "fail", f"{kind}: project code on both sides"
        locations = [frames for head, frames in stacks if head.startswith("  Location is")]
        if suppression_type(kind) == "race" and \
                all(self.library_only(frames) for frames in raw_sides + locations):
            return "suppressed", f"{kind}: no project frame on any side, the libraries' own"
        if suppression_type(kind) == "race":
            verdict = self.judge_fd(kind, stacks)
            if verdict:
                return verdict
        for ours, foreign in sides:
            if ours:
                continue
            for supp_kind, pattern, number in self.suppressions:
                if supp_kind != suppression_type(kind):
                    continue
                for func, path, module in foreign:
                    if matches(pattern, func) or matches(pattern, path) or matches(pattern, module):
                        return "suppressed", f"{kind}: entry {supp_kind}:{pattern} (line {number})"
        return "fail", f"{kind}: no suppression entry matches a side made inside GLib, gRPC or libc"

    def judge_fd(self, kind, stacks):
        """A data race on a file descriptor that one module created and only that module's own
        code touched (fd:MODULE entries); None when no such entry applies."""
        created = next((frames for head, frames in stacks if FD_LOCATION.match(head)), None)
        accesses = self.sides(kind, stacks)
        if created is None or not accesses:
            return None
        for supp_kind, pattern, number in self.suppressions:
            if supp_kind == "fd" and all(made_by(frames, pattern) for frames in [created] + accesses):
                return "suppressed", f"{kind} on a file descriptor: entry fd:{pattern} (line {number})"
        return None


def made_by(frames, pattern):
    """Whether the first frame below TSan's interceptors is in a module that PATTERN names."""
    frames = without_tsan(frames)
    return bool(frames) and matches(pattern, frames[0][2])


def split_reports(text):
    """The reports in one log, and any other text TSan wrote (FATAL errors and the like)."""
    reports, other, current = [], [], None
    for line in text.splitlines(keepends=True):
        if line.startswith(SEPARATOR):
            if current is not None and any(REPORT_KIND.match(l) for l in current):
                reports.append("".join(current))
                current = None
            else:
                current = []
            continue
        if current is not None:
            current.append(line)
        elif line.strip() and not line.startswith("ThreadSanitizer: reported"):
            other.append(line)
    if current:
        reports.append("".join(current))
    return reports, "".join(other)


def main():
    args = parse_args()
    judge = Judge(args.build_root, read_suppressions(args.suppressions))
    log_dir = tempfile.mkdtemp(prefix="tsan-check-")
    env = dict(os.environ)
    options = env.get("TSAN_OPTIONS", "")
    env["TSAN_OPTIONS"] = ":".join(o for o in [
        options,
        "halt_on_error=0",
        "exitcode=0",
        "second_deadlock_stack=1",
        "history_size=4",
        f"log_path={log_dir}/tsan",
    ] if o)
    command = list(args.command)
    # gcc 12's TSan cannot map its shadow with more than 28 bits of mmap randomisation.
    try:
        with open("/proc/sys/vm/mmap_rnd_bits") as f:
            if int(f.read()) > 28 and shutil.which("setarch"):
                command = ["setarch", os.uname().machine, "-R"] + command
    except (OSError, ValueError):
        pass
    try:
        status = subprocess.call(command, env=env)
        failed, suppressed = 0, 0
        for name in sorted(os.listdir(log_dir)):
            with open(os.path.join(log_dir, name), errors="replace") as f:
                reports, other = split_reports(f.read())
            if other:
                failed += 1
                sys.stderr.write(f"tsan-check: {name}: TSan wrote:\n{other}")
            for report in reports:
                verdict, reason = judge.judge(report)
                if verdict == "suppressed":
                    suppressed += 1
                    sys.stderr.write(f"tsan-check: {name}: suppressed {reason}\n")
                else:
                    failed += 1
                    sys.stderr.write(f"tsan-check: {name}: FAILED {reason}\n{SEPARATOR}\n{report}{SEPARATOR}\n")
        sys.stderr.write(f"tsan-check: {failed} failing, {suppressed} suppressed TSan reports\n")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    if status != 0:
        return status if status > 0 else 128 - status
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
