/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main() of a fuzz target built without libFuzzer: runs every file of the folders (and every
 * single file) named on the command line through LLVMFuzzerTestOneInput, in name order, each
 * from a buffer of exactly its size so that a sanitizer build catches reads past the end.
 * Files whose name starts with '.' are skipped.  Fails when a path cannot be read or when no
 * input was found at all: a target that replays nothing tests nothing.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-target.h"

extern int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static void
replay_file(const char *path)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *contents = NULL;
    g_autofree uint8_t *data = NULL;
    gsize size;

    if (!g_file_get_contents(path, &contents, &size, &error)) {
        fprintf(stderr, "replay: %s\n", error->message);
        exit(EXIT_FAILURE);
    }
    /* g_file_get_contents() adds a NUL past the end: copy, so the target sees no extra byte. */
    data = g_malloc(size ? size : 1);
    memcpy(data, contents, size);
    fprintf(stderr, "replay: %s (%" G_GSIZE_FORMAT " bytes)\n", path, size);
    if (LLVMFuzzerTestOneInput(data, size) != 0) {
        fprintf(stderr, "replay: %s: the target returned non-zero\n", path);
        exit(EXIT_FAILURE);
    }
}

static int
compare_names(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static guint
replay_dir(const char *path)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GDir) dir = g_dir_open(path, 0, &error);
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    const char *name;

    if (!dir) {
        fprintf(stderr, "replay: %s\n", error->message);
        exit(EXIT_FAILURE);
    }
    while ((name = g_dir_read_name(dir)))
        if (name[0] != '.')
            g_ptr_array_add(names, g_build_filename(path, name, NULL));
    g_ptr_array_sort(names, compare_names);
    for (guint i = 0; i < names->len; i++)
        replay_file(names->pdata[i]);
    return names->len;
}

int
main(int argc, char **argv)
{
    guint n_inputs = 0;

    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS-DIR-OR-FILE...\n", argv[0]);
        return EXIT_FAILURE;
    }
    for (int i = 1; i < argc; i++) {
        if (g_file_test(argv[i], G_FILE_TEST_IS_DIR)) {
            n_inputs += replay_dir(argv[i]);
        } else {
            replay_file(argv[i]);
            n_inputs++;
        }
    }
    if (n_inputs == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return EXIT_FAILURE;
    }
    fprintf(stderr, "replay: %u inputs, all passed\n", n_inputs);
    return EXIT_SUCCESS;
}
