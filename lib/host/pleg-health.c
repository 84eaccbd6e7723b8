/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The health-checker registry: checkers by id, each a liveness or a readiness checker, and the
 * rounds that run them in registration order.  The host keeps one (pleg-host-health.c), and so
 * does the test harness's fake host: a plugin's checkers behave alike in both.
 */
#include "pleg-services.h"

typedef struct {
    guint id;
    char *name;
    PlegHealthCheckFunc func;
    gpointer user_data;
    GDestroyNotify destroy;
    gconstpointer owner; /* NULL for the host's own checker */
    PlegHealthKind kind; /* readiness checkers are left out of liveness rounds */

    /* Under the registry's lock: */
    guint refs;      /* the registry's list, and each round that will run it */
    guint running;   /* rounds inside func right now */
    gboolean removed; /* out of the list: rounds skip it */
} Checker;

struct _PlegHealthRegistry {
    gatomicrefcount refs; /* the owner, and each round under way */
    /* Guards the list and every checker's counts.  Never held while a checker runs: a checker
     * that never returns holds back only the rounds that run it, and the removal of that one
     * checker, never the registry. */
    GMutex lock;
    GCond idle; /* a removed checker's last run ended */
    GPtrArray *checkers;
    guint next_id;
};

/* With the lock held; the checker's memory only: its destroy notify ran at removal. */
static void
checker_unref_locked(Checker *checker)
{
    if (--checker->refs > 0)
        return;
    g_free(checker->name);
    g_free(checker);
}

PlegHealthRegistry *
pleg_health_registry_new(void)
{
    PlegHealthRegistry *self = g_new0(PlegHealthRegistry, 1);

    g_atomic_ref_count_init(&self->refs);
    g_mutex_init(&self->lock);
    g_cond_init(&self->idle);
    self->checkers = g_ptr_array_new();
    return self;
}

PlegHealthRegistry *
pleg_health_registry_ref(PlegHealthRegistry *self)
{
    g_atomic_ref_count_inc(&self->refs);
    return self;
}

void
pleg_health_registry_unref(PlegHealthRegistry *self)
{
    if (!self || !g_atomic_ref_count_dec(&self->refs))
        return;
    /* No round is under way: each holds a reference. */
    while (self->checkers->len > 0) {
        Checker *checker = g_ptr_array_steal_index(self->checkers, self->checkers->len - 1);

        if (checker->destroy)
            checker->destroy(checker->user_data);
        checker_unref_locked(checker);
    }
    g_ptr_array_unref(self->checkers);
    g_cond_clear(&self->idle);
    g_mutex_clear(&self->lock);
    g_free(self);
}

guint
pleg_health_registry_add(PlegHealthRegistry *self, gconstpointer owner, PlegHealthKind kind,
                         const char *name, PlegHealthCheckFunc func, gpointer user_data,
                         GDestroyNotify destroy)
{
    Checker *checker;
    guint id;

    g_return_val_if_fail(name != NULL, 0);
    g_return_val_if_fail(func != NULL, 0);

    checker = g_new0(Checker, 1);
    checker->name = g_strdup(name);
    checker->func = func;
    checker->user_data = user_data;
    checker->destroy = destroy;
    checker->owner = owner;
    checker->kind = kind;
    checker->refs = 1;

    g_mutex_lock(&self->lock);
    id = checker->id = ++self->next_id;
    g_ptr_array_add(self->checkers, checker);
    g_mutex_unlock(&self->lock);
    return id;
}

void
pleg_health_registry_remove(PlegHealthRegistry *self, guint id, gconstpointer owner)
{
    g_autoptr(GPtrArray) removed = g_ptr_array_new();

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len;) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (id != 0 ? checker->id == id : checker->owner == owner) {
            checker->removed = TRUE;
            g_ptr_array_add(removed, g_ptr_array_steal_index(self->checkers, i));
        } else {
            i++;
        }
    }
    /* The promise to the plugin: once this returns, its checker runs no more, so it may free
     * what the checker uses.  A checker that never returns holds its remover here; the host
     * bounds how long it waits for a plugin's stop (pleg-plugin-thread.c). */
    for (guint i = 0; i < removed->len; i++) {
        Checker *checker = g_ptr_array_index(removed, i);

        while (checker->running > 0)
            g_cond_wait(&self->idle, &self->lock);
    }
    g_mutex_unlock(&self->lock);

    /* Destroy notifies run unlocked: they may call back into the host. */
    for (guint i = 0; i < removed->len; i++) {
        Checker *checker = g_ptr_array_index(removed, i);

        if (checker->destroy)
            checker->destroy(checker->user_data);
        g_mutex_lock(&self->lock);
        checker_unref_locked(checker);
        g_mutex_unlock(&self->lock);
    }
}

/* The checkers of a @kind round: every one for readiness, the liveness ones for liveness. */
static gboolean
in_round(const Checker *checker, PlegHealthKind kind)
{
    return kind == PLEG_HEALTH_READINESS || checker->kind == PLEG_HEALTH_LIVENESS;
}

/* A round: the checkers it runs, taken under the lock and run without it. */
typedef struct {
    PlegHealthRegistry *registry;
    GPtrArray *checkers;
} Round;

static Round
round_begin(PlegHealthRegistry *self, PlegHealthKind kind)
{
    Round round = {pleg_health_registry_ref(self), g_ptr_array_new()};

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (!in_round(checker, kind))
            continue;
        checker->refs++;
        g_ptr_array_add(round.checkers, checker);
    }
    g_mutex_unlock(&self->lock);
    return round;
}

static void
round_end(Round *round)
{
    g_mutex_lock(&round->registry->lock);
    for (guint i = 0; i < round->checkers->len; i++)
        checker_unref_locked(g_ptr_array_index(round->checkers, i));
    g_mutex_unlock(&round->registry->lock);
    g_ptr_array_unref(round->checkers);
    pleg_health_registry_unref(round->registry);
}

typedef enum {
    CHECK_PASSED,
    CHECK_FAILED,
    CHECK_SKIPPED, /* removed since the round began */
} CheckOutcome;

static CheckOutcome
run_checker(PlegHealthRegistry *self, Checker *checker, GError **error)
{
    g_autoptr(GError) local_error = NULL;
    gboolean ok;

    g_mutex_lock(&self->lock);
    if (checker->removed) {
        g_mutex_unlock(&self->lock);
        return CHECK_SKIPPED;
    }
    checker->running++;
    g_mutex_unlock(&self->lock);

    ok = checker->func(checker->user_data, &local_error);

    g_mutex_lock(&self->lock);
    if (--checker->running == 0 && checker->removed)
        g_cond_broadcast(&self->idle);
    g_mutex_unlock(&self->lock);

    if (ok)
        return CHECK_PASSED;
    if (!local_error)
        local_error = g_error_new(PLEG_HOST_ERROR, PLEG_HOST_ERROR_CHECK_FAILED,
                                  "health checker %s failed", checker->name);
    g_propagate_error(error, g_steal_pointer(&local_error));
    return CHECK_FAILED;
}

gboolean
pleg_health_registry_run(PlegHealthRegistry *self, PlegHealthKind kind,
                         PlegHealthProgressFunc progress, gpointer progress_data,
                         char **ret_checker, GError **error)
{
    Round round = round_begin(self, kind);
    gboolean healthy = TRUE;

    for (guint i = 0; i < round.checkers->len && healthy; i++) {
        Checker *checker = g_ptr_array_index(round.checkers, i);

        if (progress)
            progress(checker->name, progress_data);
        if (run_checker(self, checker, error) != CHECK_FAILED)
            continue;
        if (ret_checker)
            *ret_checker = g_strdup(checker->name);
        healthy = FALSE;
    }
    round_end(&round);
    return healthy;
}

GPtrArray *
pleg_health_registry_run_all(PlegHealthRegistry *self, PlegHealthKind kind)
{
    GPtrArray *results = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_health_result_free);
    Round round = round_begin(self, kind);

    for (guint i = 0; i < round.checkers->len; i++) {
        Checker *checker = g_ptr_array_index(round.checkers, i);
        PlegHealthResult *result = g_new0(PlegHealthResult, 1);

        if (run_checker(self, checker, &result->error) == CHECK_SKIPPED) {
            g_free(result);
            continue;
        }
        result->name = g_strdup(checker->name);
        g_ptr_array_add(results, result);
    }
    round_end(&round);
    return results;
}

char *
pleg_health_registry_get_names(PlegHealthRegistry *self)
{
    GString *names = g_string_new(NULL);

    g_mutex_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        const Checker *checker = g_ptr_array_index(self->checkers, i);

        if (i > 0)
            g_string_append_c(names, ',');
        g_string_append(names, checker->name);
    }
    g_mutex_unlock(&self->lock);
    return g_string_free(names, FALSE);
}
