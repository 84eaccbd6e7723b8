#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tsan-check.py's verdicts on reports whose shapes were seen in this tree's TSan runs.

    test-tsan-check.py SUPPRESSIONS

Each case is a report as TSan prints it; the build root is a folder holding the file names of
the project's modules (libpleg.so.0, shim-embed), which is all the judge looks at.
"""

import importlib.util
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tsan_check", os.path.join(HERE, "tsan-check.py"))
tsan_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tsan_check)

CLOSE_BY_GLIB = """\
  Write of size 8 at 0x7ba000000030 by main thread:
    #0 close ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1749 (libtsan.so.2+0x4002c)
    #1 <null> <null> (libglib-2.0.so.0+0xa3f2a)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
CLOSE_BY_PLEG = """\
  Write of size 8 at 0x7ba000000030 by main thread:
    #0 close ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1749 (libtsan.so.2+0x4002c)
    #1 pleg_cri_client_unref ../../lib/cri/pleg-cri-client.c:70 (libpleg.so.0+0x1239f)
    #2 main ../../examples/shim-embed/shim-embed.c:112 (shim-embed+0x2577)
"""
WRITE_BY_GLIB_WORKER = """\
  Previous read of size 8 at 0x7ba000000030 by thread T7:
    #0 write ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:1138 (libtsan.so.2+0x4e798)
    #1 <null> <null> (libglib-2.0.so.0+0xa3f09)
"""
CREATED_BY_GLIB = """\
  Location is file descriptor 3 created by main thread at:
    #0 eventfd ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1655 (libtsan.so.2+0x412d3)
    #1 <null> <null> (libglib-2.0.so.0+0xa3d46)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
CREATED_BY_PLEG = """\
  Location is file descriptor 3 created by main thread at:
    #0 eventfd ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1655 (libtsan.so.2+0x412d3)
    #1 pleg_wakeup_new ../../lib/common/pleg-wakeup.c:12 (libpleg.so.0+0x1000)
    #2 main ../../examples/shim-embed/shim-embed.c:80 (shim-embed+0x2400)
"""
HEAP_BY_GLIB_HASH = """\
  Write of size 8 at 0x7b0400000010 by thread T2:
    #0 <null> <null> (libglib-2.0.so.0+0x4a1b0)
    #1 pleg_records_insert ../../lib/core/pleg-records.c:40 (libpleg.so.0+0x2000)
"""
HEAP_BY_PLEG = """\
  Previous read of size 8 at 0x7b0400000010 by main thread:
    #0 pleg_records_lookup ../../lib/core/pleg-records.c:60 (libpleg.so.0+0x2100)
    #1 main ../../examples/shim-embed/shim-embed.c:90 (shim-embed+0x2500)
"""
THREAD_T7 = """\
  Thread T7 'gmain' (tid=5284, running) created by main thread at:
    #0 pthread_create ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1001 (libtsan.so.2+0x5e686)
    #1 <null> <null> (libglib-2.0.so.0+0xa9213)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
# plegd-events' teardown: plegd_http_free() (the libsoup frames under it are not instrumented)
# grows a block that GLib's shared pool thread last grew for GIO.
REALLOC_UNDER_PLEGD = """\
  Write of size 8 at 0x7b1000034000 by main thread:
    #0 realloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:680 (libtsan.so.2+0x4302f)
    #1 g_realloc <null> (libglib-2.0.so.0+0x5a6f7)
    #2 run ../../examples/plegd/main.c:462 (plegd+0x91e2)
    #3 main ../../examples/plegd/main.c:527 (plegd+0x91e2)
"""
REALLOC_BY_GLIB_POOL = """\
  Previous write of size 8 at 0x7b1000034000 by thread T12:
    #0 realloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:680 (libtsan.so.2+0x4302f)
    #1 g_realloc <null> (libglib-2.0.so.0+0x5a6f7)
"""
REALLOC_BY_PLEG_POOL = """\
  Previous write of size 8 at 0x7b1000034000 by thread T12:
    #0 realloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:680 (libtsan.so.2+0x4302f)
    #1 g_realloc <null> (libglib-2.0.so.0+0x5a6f7)
    #2 ask ../../lib/core/pleg-status-pool.c:60 (libpleg.so.0+0x3000)
"""
# The same pool thread's GTask source, freed by the main loop's dispatch inside GLib.
FREE_IN_MAIN_LOOP = """\
  Write of size 8 at 0x7b1c0000a870 by main thread:
    #0 free ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:706 (libtsan.so.2+0x47e82)
    #1 <null> <null> (libglib-2.0.so.0+0x50cad)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
CALLOC_BY_GLIB_POOL = """\
  Previous write of size 8 at 0x7b1c0000a870 by thread T12:
    #0 calloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:667 (libtsan.so.2+0x3ee50)
    #1 g_malloc0 <null> (libglib-2.0.so.0+0x5a6b0)
"""
# GIO's string, written on GLib's pool thread and in the main loop's dispatch: no project
# frame on either side, nor where the block came from.
SNPRINTF_BY_GLIB_POOL = """\
  Write of size 1 at 0x7b24000007e9 by thread T12:
    #0 __vsnprintf_chk ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:1670 (libtsan.so.2+0x51e71)
    #1 g_snprintf <null> (libglib-2.0.so.0+0xa43be)
"""
SNPRINTF_IN_MAIN_LOOP = """\
  Previous write of size 1 at 0x7b24000007e9 by main thread:
    #0 __vsnprintf_chk ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:1670 (libtsan.so.2+0x51e71)
    #1 g_snprintf <null> (libglib-2.0.so.0+0xa43be)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
BLOCK_BY_GIO = """\
  Location is heap block of size 136 at 0x7b24000007e0 allocated by main thread:
    #0 malloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:647 (libtsan.so.2+0x3ebb8)
    #1 g_malloc <null> (libglib-2.0.so.0+0x5a658)
    #2 <null> <null> (libgio-2.0.so.0+0xafca2)
    #3 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""
BLOCK_BY_PLEG = """\
  Location is heap block of size 136 at 0x7b24000007e0 allocated by main thread:
    #0 malloc ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:647 (libtsan.so.2+0x3ebb8)
    #1 g_malloc <null> (libglib-2.0.so.0+0x5a658)
    #2 pleg_records_insert ../../lib/core/pleg-records.c:40 (libpleg.so.0+0x2000)
"""
UNRESTORED = """\
  Previous write of size 1 at 0x7b24000007e9 by main thread:
    [failed to restore the stack]
"""
THREAD_T12 = """\
  Thread T12 'pool-plegd' (tid=12818, running) created by main thread at:
    #0 pthread_create ../../../../src/libsanitizer/tsan/tsan_interceptors_posix.cpp:1001 (libtsan.so.2+0x5e686)
    #1 <null> <null> (libglib-2.0.so.0+0xa9213)
    #2 __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58 (libc.so.6+0x27249)
"""


def report(*stacks):
    return "WARNING: ThreadSanitizer: data race (pid=5273)\n" + "\n".join(stacks) + \
        "\nSUMMARY: ThreadSanitizer: data race\n"


class Verdicts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.TemporaryDirectory()
        for name in ("libpleg.so.0", "shim-embed", "plegd"):
            open(os.path.join(cls.root.name, name), "w").close()
        cls.judge = tsan_check.Judge(cls.root.name, tsan_check.read_suppressions(sys.argv[1]))

    @classmethod
    def tearDownClass(cls):
        cls.root.cleanup()

    def verdict(self, text):
        return self.judge.judge(text)[0]

    def test_glib_wakeup_closed_by_glib_is_glib_own(self):
        self.assertEqual(self.verdict(report(CLOSE_BY_GLIB, WRITE_BY_GLIB_WORKER, CREATED_BY_GLIB,
                                             THREAD_T7)), "suppressed")

    def test_glib_descriptor_closed_by_project_code_fails(self):
        self.assertEqual(self.verdict(report(CLOSE_BY_PLEG, WRITE_BY_GLIB_WORKER, CREATED_BY_GLIB,
                                             THREAD_T7)), "fail")

    def test_project_descriptor_written_by_glib_fails(self):
        self.assertEqual(self.verdict(report(CLOSE_BY_GLIB, WRITE_BY_GLIB_WORKER, CREATED_BY_PLEG,
                                             THREAD_T7)), "fail")

    def test_project_code_on_both_sides_fails(self):
        both = HEAP_BY_PLEG.replace("Previous read", "Write").replace("main thread", "thread T2")
        self.assertEqual(self.verdict(report(both, HEAP_BY_PLEG)), "fail")

    def test_glib_function_called_by_project_code_is_not_hidden_by_fd_entry(self):
        # An unsymbolized GLib frame above libpleg's (a hash table insert, say) names no entry:
        # fd:libglib-2.0.so applies to descriptors only.
        self.assertEqual(self.verdict(report(HEAP_BY_GLIB_HASH, HEAP_BY_PLEG)), "fail")

    def test_realloc_on_glib_pool_thread_is_glib_own(self):
        self.assertEqual(self.verdict(report(REALLOC_UNDER_PLEGD, REALLOC_BY_GLIB_POOL, THREAD_T12)),
                         "suppressed")

    def test_block_from_glib_pool_freed_by_main_loop_is_glib_own(self):
        self.assertEqual(self.verdict(report(FREE_IN_MAIN_LOOP, CALLOC_BY_GLIB_POOL, THREAD_T12)),
                         "suppressed")

    def test_race_without_project_frames_is_the_libraries_own(self):
        self.assertEqual(self.verdict(report(SNPRINTF_BY_GLIB_POOL, SNPRINTF_IN_MAIN_LOOP,
                                             BLOCK_BY_GIO, THREAD_T12)), "suppressed")

    def test_race_on_a_project_block_fails_without_an_entry(self):
        # The same accesses on a block that libpleg allocated: the project may have handed it
        # to both threads, and no entry names g_snprintf.
        self.assertEqual(self.verdict(report(SNPRINTF_BY_GLIB_POOL, SNPRINTF_IN_MAIN_LOOP,
                                             BLOCK_BY_PLEG, THREAD_T12)), "fail")

    def test_side_that_could_not_be_restored_fails(self):
        self.assertEqual(self.verdict(report(SNPRINTF_BY_GLIB_POOL, UNRESTORED, BLOCK_BY_GIO,
                                             THREAD_T12)), "fail")

    def test_each_glib_wrapper_entry_on_the_pool_thread_is_needed(self):
        # plegd_http_free() against GLib's pool thread, through each wrapper the entries name:
        # the entry hides it, and without that entry alone the report fails.
        for wrapper in ("g_malloc", "g_realloc", "g_free"):
            with self.subTest(wrapper=wrapper):
                text = report(*(side.replace("realloc", wrapper[2:])
                                for side in (REALLOC_UNDER_PLEGD, REALLOC_BY_GLIB_POOL)), THREAD_T12)
                self.assertEqual(self.verdict(text), "suppressed")
                self.assertIn(f"race:{wrapper} ", self.judge.judge(text)[1])
                others = [e for e in self.judge.suppressions if e[:2] != ("race", wrapper)]
                without = tsan_check.Judge(self.root.name, others)
                self.assertEqual(without.judge(text)[0], "fail")

    def test_realloc_on_pool_thread_running_project_code_fails(self):
        # libpleg's status pool shares GLib's pool threads: its own realloc is never hidden.
        self.assertEqual(self.verdict(report(REALLOC_UNDER_PLEGD, REALLOC_BY_PLEG_POOL, THREAD_T12)),
                         "fail")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
