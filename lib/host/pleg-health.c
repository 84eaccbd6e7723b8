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
} Checker;

struct _PlegHealthRegistry {
    /* A health round holds the reader lock, so that a checker is never removed (and its
     * plugin freed) while it runs. */
    GRWLock lock;
    GPtrArray *checkers;
    guint next_id;
};

static void
checker_free(Checker *checker)
{
    if (checker->destroy)
        checker->destroy(checker->user_data);
    g_free(checker->name);
    g_free(checker);
}

PlegHealthRegistry *
pleg_health_registry_new(void)
{
    PlegHealthRegistry *self = g_new0(PlegHealthRegistry, 1);

    g_rw_lock_init(&self->lock);
    self->checkers = g_ptr_array_new();
    return self;
}

void
pleg_health_registry_free(PlegHealthRegistry *self)
{
    if (!self)
        return;
    while (self->checkers->len > 0)
        checker_free(g_ptr_array_steal_index(self->checkers, self->checkers->len - 1));
    g_ptr_array_unref(self->checkers);
    g_rw_lock_clear(&self->lock);
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

    g_rw_lock_writer_lock(&self->lock);
    id = checker->id = ++self->next_id;
    g_ptr_array_add(self->checkers, checker);
    g_rw_lock_writer_unlock(&self->lock);
    return id;
}

void
pleg_health_registry_remove(PlegHealthRegistry *self, guint id, gconstpointer owner)
{
    g_autoptr(GPtrArray) removed = g_ptr_array_new_with_free_func((GDestroyNotify)checker_free);

    g_rw_lock_writer_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len;) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (id != 0 ? checker->id == id : checker->owner == owner)
            g_ptr_array_add(removed, g_ptr_array_steal_index(self->checkers, i));
        else
            i++;
    }
    g_rw_lock_writer_unlock(&self->lock);
    /* Destroy notifies run unlocked: they may call back into the host. */
}

static gboolean
run_checker(Checker *checker, GError **error)
{
    g_autoptr(GError) local_error = NULL;

    if (checker->func(checker->user_data, &local_error))
        return TRUE;
    if (!local_error)
        local_error = g_error_new(PLEG_HOST_ERROR, PLEG_HOST_ERROR_CHECK_FAILED,
                                  "health checker %s failed", checker->name);
    g_propagate_error(error, g_steal_pointer(&local_error));
    return FALSE;
}

/* The checkers of a @kind round: every one for readiness, the liveness ones for liveness. */
static gboolean
in_round(const Checker *checker, PlegHealthKind kind)
{
    return kind == PLEG_HEALTH_READINESS || checker->kind == PLEG_HEALTH_LIVENESS;
}

gboolean
pleg_health_registry_run(PlegHealthRegistry *self, PlegHealthKind kind,
                         PlegHealthProgressFunc progress, gpointer progress_data,
                         char **ret_checker, GError **error)
{
    g_rw_lock_reader_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);

        if (!in_round(checker, kind))
            continue;
        if (progress)
            progress(checker->name, progress_data);
        if (run_checker(checker, error))
            continue;
        if (ret_checker)
            *ret_checker = g_strdup(checker->name);
        g_rw_lock_reader_unlock(&self->lock);
        return FALSE;
    }
    g_rw_lock_reader_unlock(&self->lock);
    return TRUE;
}

GPtrArray *
pleg_health_registry_run_all(PlegHealthRegistry *self, PlegHealthKind kind)
{
    GPtrArray *results = g_ptr_array_new_with_free_func((GDestroyNotify)pleg_health_result_free);

    g_rw_lock_reader_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        Checker *checker = g_ptr_array_index(self->checkers, i);
        PlegHealthResult *result;

        if (!in_round(checker, kind))
            continue;
        result = g_new0(PlegHealthResult, 1);
        result->name = g_strdup(checker->name);
        run_checker(checker, &result->error);
        g_ptr_array_add(results, result);
    }
    g_rw_lock_reader_unlock(&self->lock);
    return results;
}

char *
pleg_health_registry_get_names(PlegHealthRegistry *self)
{
    GString *names = g_string_new(NULL);

    g_rw_lock_reader_lock(&self->lock);
    for (guint i = 0; i < self->checkers->len; i++) {
        const Checker *checker = g_ptr_array_index(self->checkers, i);

        if (i > 0)
            g_string_append_c(names, ',');
        g_string_append(names, checker->name);
    }
    g_rw_lock_reader_unlock(&self->lock);
    return g_string_free(names, FALSE);
}
