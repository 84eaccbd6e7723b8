/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bump arenas for protobuf-c unpacking, with their blocks kept across calls in a bounded pool.
 *
 * protobuf-c's default allocator makes one malloc per submessage, repeated field and string, and
 * protobuf_c_message_free_unpacked() one free each: a 15,000-container listing is ~400,000 of
 * each, and glibc trims and regrows its heap around them on every relist.  Here an unpack bumps
 * a pointer, freeing is a no-op, and the whole answer is dropped at once with its arena.  A block
 * goes back to its pool when the arena ends; the pool keeps at most its cap in bytes and frees
 * the rest.  An arena that needed more than one block frees them all and tells the pool the size
 * one block should have had, so the next arena takes one block that holds a whole answer.
 */
#include "pleg-config.h"

#include "cri-private.h"

/* Every allocation is aligned for any type protobuf-c stores (int64, double, pointers); most are
 * short strings, so a wider alignment would mostly add padding. */
#define ARENA_ALIGN        8
#define ARENA_BLOCK_MIN    (64 * 1024)
#define ALIGN_UP(n, align) (((n) + (align)-1) & ~((gsize)(align)-1))

typedef struct _Block Block;
struct _Block {
    Block *next;
    gsize size; /* bytes of data[] */
    gsize used;
    /* data follows, ARENA_ALIGN-aligned */
};

#define BLOCK_HEADER  ALIGN_UP(sizeof(Block), ARENA_ALIGN)
#define BLOCK_DATA(b) ((guint8 *)(b) + BLOCK_HEADER)

struct _CriArenaPool {
    GMutex lock;
    gsize cap_bytes;
    Block *free_blocks; /* singly linked, any order */
    gsize cached_bytes;
    gsize hint_bytes;    /* what one block should hold, learnt from arenas that chained */
    guint64 blocks_made; /* blocks ever allocated, for tests and benchmarks */
    guint n_arenas;      /* arenas alive */
};

struct _CriArena {
    CriArenaPool *pool;
    Block *blocks; /* newest first; the head is the one being filled */
    guint n_blocks;
    gsize used_bytes; /* over every block, including alignment padding */
    ProtobufCAllocator allocator;
};

CriArenaPool *
cri_arena_pool_new(gsize cap_bytes)
{
    CriArenaPool *pool = g_new0(CriArenaPool, 1);

    g_mutex_init(&pool->lock);
    pool->cap_bytes = cap_bytes;
    return pool;
}

void
cri_arena_pool_free(CriArenaPool *pool)
{
    if (!pool)
        return;
    g_return_if_fail(pool->n_arenas == 0);
    while (pool->free_blocks) {
        Block *b = pool->free_blocks;

        pool->free_blocks = b->next;
        g_free(b);
    }
    g_mutex_clear(&pool->lock);
    g_free(pool);
}

gsize
cri_arena_pool_get_cached_bytes(CriArenaPool *pool)
{
    gsize ret;

    g_return_val_if_fail(pool != NULL, 0);
    g_mutex_lock(&pool->lock);
    ret = pool->cached_bytes;
    g_mutex_unlock(&pool->lock);
    return ret;
}

guint64
cri_arena_pool_get_blocks_made(CriArenaPool *pool)
{
    guint64 ret;

    g_return_val_if_fail(pool != NULL, 0);
    g_mutex_lock(&pool->lock);
    ret = pool->blocks_made;
    g_mutex_unlock(&pool->lock);
    return ret;
}

static gpointer
allocator_alloc(void *data, size_t size)
{
    return cri_arena_alloc(data, size);
}

static void
allocator_free(void *data, void *pointer)
{
    /* Dropped with the arena. */
}

CriArena *
cri_arena_new(CriArenaPool *pool)
{
    CriArena *arena;

    g_return_val_if_fail(pool != NULL, NULL);

    arena = g_new0(CriArena, 1);
    arena->pool = pool;
    arena->allocator.alloc = allocator_alloc;
    arena->allocator.free = allocator_free;
    arena->allocator.allocator_data = arena;
    g_mutex_lock(&pool->lock);
    pool->n_arenas++;
    g_mutex_unlock(&pool->lock);
    return arena;
}

/* A block whose data holds at least @need bytes: a cached one if any is large enough, else a
 * new one of the size the pool learnt, at least twice the arena's last. */
static Block *
take_block(CriArena *arena, gsize need)
{
    CriArenaPool *pool = arena->pool;
    Block **link, *b = NULL;
    gsize size;

    g_mutex_lock(&pool->lock);
    /* An arena's first block is one that holds what the pool learnt an answer needs, so that a
     * small cached block does not start a chain. */
    size = MAX(need, ARENA_BLOCK_MIN);
    if (arena->n_blocks == 0)
        size = MAX(size, pool->hint_bytes);
    else
        size = MAX(size, arena->blocks->size * 2);
    for (link = &pool->free_blocks; *link; link = &(*link)->next) {
        if ((*link)->size >= size) {
            b = *link;
            *link = b->next;
            pool->cached_bytes -= b->size;
            break;
        }
    }
    if (!b)
        pool->blocks_made++;
    g_mutex_unlock(&pool->lock);

    if (!b) {
        b = g_malloc(BLOCK_HEADER + size);
        b->size = size;
    }
    b->used = 0;
    b->next = arena->blocks;
    arena->blocks = b;
    arena->n_blocks++;
    return b;
}

gpointer
cri_arena_alloc(CriArena *arena, gsize size)
{
    Block *b;
    gpointer ret;

    g_return_val_if_fail(arena != NULL, NULL);

    /* Checked before rounding up, which would wrap. */
    if (G_UNLIKELY(size > G_MAXSIZE / 2))
        return NULL; /* protobuf-c treats NULL as out of memory and fails the unpack */
    size = ALIGN_UP(MAX(size, 1), ARENA_ALIGN);
    b = arena->blocks;
    if (!b || b->size - b->used < size) {
        /* The rest of the head block is given up: unpacking asks for small pieces, and a piece
         * larger than a block gets a block of its own. */
        if (b)
            arena->used_bytes += b->size - b->used;
        b = take_block(arena, size);
    }
    ret = BLOCK_DATA(b) + b->used;
    b->used += size;
    arena->used_bytes += size;
    return ret;
}

ProtobufCAllocator *
cri_arena_get_allocator(CriArena *arena)
{
    g_return_val_if_fail(arena != NULL, NULL);
    return &arena->allocator;
}

gsize
cri_arena_get_used_bytes(CriArena *arena)
{
    g_return_val_if_fail(arena != NULL, 0);
    return arena->used_bytes;
}

CriArenaMark
cri_arena_mark(CriArena *arena)
{
    CriArenaMark mark = {0};

    g_return_val_if_fail(arena != NULL, mark);
    mark.n_blocks = arena->n_blocks;
    mark.head_used = arena->blocks ? arena->blocks->used : 0;
    mark.used_bytes = arena->used_bytes;
    return mark;
}

/* Gives the blocks of @arena newer than its first @keep back to the pool: cached while the pool
 * stays under its cap, freed otherwise. */
static void
release_blocks(CriArena *arena, guint keep)
{
    CriArenaPool *pool = arena->pool;
    Block *to_free = NULL;

    g_mutex_lock(&pool->lock);
    while (arena->n_blocks > keep) {
        Block *b = arena->blocks;

        arena->blocks = b->next;
        arena->n_blocks--;
        /* A block smaller than an arena now starts with would never be taken again. */
        if (b->size >= pool->hint_bytes && pool->cached_bytes + b->size <= pool->cap_bytes) {
            b->next = pool->free_blocks;
            pool->free_blocks = b;
            pool->cached_bytes += b->size;
        } else {
            b->next = to_free;
            to_free = b;
        }
    }
    g_mutex_unlock(&pool->lock);

    while (to_free) {
        Block *b = to_free;

        to_free = b->next;
        g_free(b);
    }
}

void
cri_arena_rewind(CriArena *arena, const CriArenaMark *mark)
{
    g_return_if_fail(arena != NULL && mark != NULL);
    g_return_if_fail(mark->n_blocks <= arena->n_blocks);

    release_blocks(arena, mark->n_blocks);
    if (arena->blocks)
        arena->blocks->used = mark->head_used;
    arena->used_bytes = mark->used_bytes;
}

void
cri_arena_free(CriArena *arena)
{
    CriArenaPool *pool;

    if (!arena)
        return;
    pool = arena->pool;

    if (arena->n_blocks > 1) {
        /* One block should have held it all: learn its size (bounded by the cap) and free these,
         * or the pool would keep handing out blocks too small for the next answer. */
        gsize want = MIN(ALIGN_UP(arena->used_bytes + arena->used_bytes / 4, ARENA_BLOCK_MIN),
                         pool->cap_bytes);
        Block *b = arena->blocks;

        g_mutex_lock(&pool->lock);
        pool->hint_bytes = MAX(pool->hint_bytes, want);
        g_mutex_unlock(&pool->lock);
        while (b) {
            Block *next = b->next;

            g_free(b);
            b = next;
        }
        arena->blocks = NULL;
        arena->n_blocks = 0;
    }
    release_blocks(arena, 0);

    g_mutex_lock(&pool->lock);
    pool->n_arenas--;
    g_mutex_unlock(&pool->lock);
    g_free(arena);
}
