/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unpacking arenas (lib/cri/cri-arena.c): alignment, blocks reused across arenas, the pool's
 * bound, answers larger than a block, and a failed unpack that leaves nothing behind.
 */
#include <check.h>
#include <string.h>

#include "cri-private.h"

#define KIB 1024
#define MIB (1024 * 1024)

START_TEST(test_alloc_aligned)
{
    CriArenaPool *pool = cri_arena_pool_new(MIB);
    CriArena *arena = cri_arena_new(pool);
    guint8 *pieces[200];
    guint64 made;
    gsize used;

    for (guint i = 0; i < G_N_ELEMENTS(pieces); i++) {
        gsize size = 1 + i * 37;

        pieces[i] = cri_arena_alloc(arena, size);
        ck_assert_ptr_nonnull(pieces[i]);
        ck_assert_uint_eq((guintptr)pieces[i] % 8, 0);
        memset(pieces[i], (int)i, size);
    }
    /* Nothing written later overlapped anything written before. */
    for (guint i = 0; i < G_N_ELEMENTS(pieces); i++)
        for (gsize j = 0; j < 1 + i * 37; j++)
            ck_assert_uint_eq(pieces[i][j], (guint8)i);
    ck_assert_uint_ge(cri_arena_get_used_bytes(arena), 200 * 8);
    /* A size no block could have fails, as an allocator's out of memory, and costs nothing. */
    made = cri_arena_pool_get_blocks_made(pool);
    used = cri_arena_get_used_bytes(arena);
    ck_assert_ptr_null(cri_arena_alloc(arena, G_MAXSIZE - 3));
    ck_assert_uint_eq(cri_arena_pool_get_blocks_made(pool), made);
    ck_assert_uint_eq(cri_arena_get_used_bytes(arena), used);

    cri_arena_free(arena);
    cri_arena_pool_free(pool);
}
END_TEST

START_TEST(test_blocks_reused)
{
    CriArenaPool *pool = cri_arena_pool_new(MIB);

    for (guint round = 0; round < 10; round++) {
        CriArena *arena = cri_arena_new(pool);

        for (guint i = 0; i < 100; i++)
            memset(cri_arena_alloc(arena, 100), 0xab, 100);
        cri_arena_free(arena);
        /* The first arena made the block; every later one took it from the pool. */
        ck_assert_uint_eq(cri_arena_pool_get_blocks_made(pool), 1);
        ck_assert_uint_gt(cri_arena_pool_get_cached_bytes(pool), 0);
    }
    cri_arena_pool_free(pool);
}
END_TEST

START_TEST(test_two_arenas_at_once)
{
    CriArenaPool *pool = cri_arena_pool_new(MIB);
    CriArena *a = cri_arena_new(pool);
    CriArena *b = cri_arena_new(pool);
    char *in_a = cri_arena_alloc(a, 64);
    char *in_b = cri_arena_alloc(b, 64);

    /* Each arena has a block of its own. */
    memset(in_a, 'a', 64);
    memset(in_b, 'b', 64);
    ck_assert_int_eq(in_a[63], 'a');
    ck_assert_int_eq(in_b[0], 'b');
    ck_assert_uint_eq(cri_arena_pool_get_blocks_made(pool), 2);
    cri_arena_free(a);
    cri_arena_free(b);
    ck_assert_uint_eq(cri_arena_pool_get_blocks_made(pool), 2);
    cri_arena_pool_free(pool);
}
END_TEST

START_TEST(test_pool_bounded)
{
    const gsize cap = 256 * KIB;
    CriArenaPool *pool = cri_arena_pool_new(cap);

    for (guint round = 0; round < 5; round++) {
        CriArena *arena = cri_arena_new(pool);
        CriArena *small = cri_arena_new(pool);

        /* A chain of blocks well past the cap, and one piece larger than the cap. */
        for (guint i = 0; i < 64; i++)
            memset(cri_arena_alloc(arena, 16 * KIB), 1, 16 * KIB);
        memset(cri_arena_alloc(arena, 2 * MIB), 2, 2 * MIB);
        cri_arena_alloc(small, 10);
        cri_arena_free(arena);
        cri_arena_free(small);
        ck_assert_uint_le(cri_arena_pool_get_cached_bytes(pool), cap);
    }
    cri_arena_pool_free(pool);
}
END_TEST

/* A ListContainers answer of @n containers, each with a few labels, packed. */
static guint8 *
pack_listing(guint n, gsize *ret_length)
{
    Runtime__V1__ListContainersResponse response = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
    g_autofree Runtime__V1__Container *containers = g_new(Runtime__V1__Container, n);
    g_autofree Runtime__V1__Container **items = g_new(Runtime__V1__Container *, n);
    g_autofree Runtime__V1__ContainerMetadata *metadata = g_new(Runtime__V1__ContainerMetadata, n);
    g_autofree Runtime__V1__Container__LabelsEntry *labels =
        g_new(Runtime__V1__Container__LabelsEntry, 2 * n);
    g_autofree Runtime__V1__Container__LabelsEntry **label_items =
        g_new(Runtime__V1__Container__LabelsEntry *, 2 * n);
    g_autoptr(GPtrArray) texts = g_ptr_array_new_with_free_func(g_free);
    guint8 *packed;

    for (guint i = 0; i < n; i++) {
        Runtime__V1__Container *c = &containers[i];
        char *id = g_strdup_printf("container-%08u-%s", i, "0123456789abcdef0123456789abcdef");
        char *uid = g_strdup_printf("uid-%u", i / 3);

        g_ptr_array_add(texts, id);
        g_ptr_array_add(texts, uid);
        *c = (Runtime__V1__Container)RUNTIME__V1__CONTAINER__INIT;
        metadata[i] = (Runtime__V1__ContainerMetadata)RUNTIME__V1__CONTAINER_METADATA__INIT;
        metadata[i].name = (char *)"app";
        metadata[i].attempt = i % 5;
        c->id = id;
        c->pod_sandbox_id = uid;
        c->metadata = &metadata[i];
        c->state = RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING;
        c->created_at = (gint64)i * 1000;
        labels[2 * i] =
            (Runtime__V1__Container__LabelsEntry)RUNTIME__V1__CONTAINER__LABELS_ENTRY__INIT;
        labels[2 * i].key = (char *)"io.kubernetes.pod.uid";
        labels[2 * i].value = uid;
        labels[2 * i + 1] =
            (Runtime__V1__Container__LabelsEntry)RUNTIME__V1__CONTAINER__LABELS_ENTRY__INIT;
        labels[2 * i + 1].key = (char *)"io.kubernetes.container.name";
        labels[2 * i + 1].value = (char *)"app";
        label_items[2 * i] = &labels[2 * i];
        label_items[2 * i + 1] = &labels[2 * i + 1];
        c->n_labels = 2;
        c->labels = &label_items[2 * i];
        items[i] = c;
    }
    response.n_containers = n;
    response.containers = items;

    *ret_length = runtime__v1__list_containers_response__get_packed_size(&response);
    packed = g_malloc(*ret_length);
    runtime__v1__list_containers_response__pack(&response, packed);
    return packed;
}

static void
assert_listing(const Runtime__V1__ListContainersResponse *response, guint n)
{
    ck_assert_ptr_nonnull(response);
    ck_assert_uint_eq(response->n_containers, n);
    for (guint i = 0; i < n; i += 997) {
        g_autofree char *id =
            g_strdup_printf("container-%08u-%s", i, "0123456789abcdef0123456789abcdef");
        g_autoptr(PlegContainer) c = cri_decode_container(response->containers[i]);

        ck_assert_str_eq(c->id, id);
        ck_assert_str_eq(c->name, "app");
        ck_assert_uint_eq(c->attempt, i % 5);
        ck_assert_str_eq(c->pod_uid_label, response->containers[i]->pod_sandbox_id);
    }
}

/* An answer of several MiB: far past the first block, then in one block the next time, then
 * in that same block again. */
START_TEST(test_big_message)
{
    const guint n = 20000;
    CriArenaPool *pool = cri_arena_pool_new(CRI_ARENA_POOL_CAP_BYTES);
    gsize length;
    g_autofree guint8 *packed = pack_listing(n, &length);
    guint64 made[3];

    ck_assert_uint_gt(length, MIB);
    for (guint round = 0; round < 3; round++) {
        CriArena *arena = cri_arena_new(pool);
        Runtime__V1__ListContainersResponse *response =
            runtime__v1__list_containers_response__unpack(cri_arena_get_allocator(arena), length,
                                                          packed);

        assert_listing(response, n);
        ck_assert_uint_gt(cri_arena_get_used_bytes(arena), length);
        cri_arena_free(arena);
        made[round] = cri_arena_pool_get_blocks_made(pool);
        ck_assert_uint_le(cri_arena_pool_get_cached_bytes(pool), CRI_ARENA_POOL_CAP_BYTES);
    }
    ck_assert_uint_gt(made[0], 1);           /* a chain of growing blocks */
    ck_assert_uint_eq(made[1], made[0] + 1); /* one block of the size learnt */
    ck_assert_uint_eq(made[2], made[1]);     /* that block again */
    cri_arena_pool_free(pool);
}
END_TEST

START_TEST(test_failed_unpack_rewound)
{
    CriArenaPool *pool = cri_arena_pool_new(CRI_ARENA_POOL_CAP_BYTES);
    CriArena *arena = cri_arena_new(pool);
    gsize length, before;
    g_autofree guint8 *packed = pack_listing(5000, &length);
    CriArenaMark mark;
    char *kept;

    kept = cri_arena_alloc(arena, 32);
    strcpy(kept, "allocated before the unpack");
    before = cri_arena_get_used_bytes(arena);
    mark = cri_arena_mark(arena);

    /* Cut in the middle of a container: protobuf-c fails after allocating much of the answer. */
    ck_assert_ptr_null(runtime__v1__list_containers_response__unpack(cri_arena_get_allocator(arena),
                                                                     length - 7, packed));
    ck_assert_uint_gt(cri_arena_get_used_bytes(arena), before);
    cri_arena_rewind(arena, &mark);
    ck_assert_uint_eq(cri_arena_get_used_bytes(arena), before);
    ck_assert_str_eq(kept, "allocated before the unpack");

    /* The arena goes on where it was, and a whole answer unpacks into it. */
    assert_listing(runtime__v1__list_containers_response__unpack(cri_arena_get_allocator(arena),
                                                                 length, packed),
                   5000);
    cri_arena_free(arena);
    cri_arena_pool_free(pool);
}
END_TEST

static Suite *
cri_arena_suite(void)
{
    Suite *s = suite_create("cri-arena");
    TCase *arena = tcase_create("arena");

    tcase_add_test(arena, test_alloc_aligned);
    tcase_add_test(arena, test_blocks_reused);
    tcase_add_test(arena, test_two_arenas_at_once);
    tcase_add_test(arena, test_pool_bounded);
    tcase_add_test(arena, test_big_message);
    tcase_add_test(arena, test_failed_unpack_rewound);
    suite_add_tcase(s, arena);
    return s;
}

int
main(void)
{
    SRunner *runner = srunner_create(cri_arena_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
