/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A relist's listing, grouped into pods, in memory kept from one relist to the next.  The items'
 * texts go into one byte array and the items into one array, both emptied, not freed, by the
 * next relist, so a steady relist allocates nothing per item;
 * each pod's items are then compared in place with the snapshot its record holds, and a pod
 * whose listing did not change keeps that snapshot.  Only a pod that changed gets a new one.
 * Allocating per relist what is freed by the next one made glibc trim its heap top and grow it
 * back every relist (a page fault per page), and was a third of a steady relist's CPU.
 *
 * Used under relist_lock by every relist: a global relist publishes every pod listed, a targeted
 * relist the pods it was asked for, from a listing of everything or of those pods alone.
 */
#include "pleg-config.h"

#include <string.h>

#include "pleg-generic-private.h"

/* An offset into the texts; 0 stands for NULL. */
typedef guint32 Text;

typedef struct {
    Text id;
    Text uid;        /* sandbox: its metadata's UID; container: its io.kubernetes.pod.uid label */
    Text sandbox_id; /* containers only */
    Text pod;        /* the pod the item was grouped into, 0 when ignored */
    Text name;       /* container: its metadata's name; sandbox: the pod's name */
    Text namespace_; /* sandboxes only */
    Text image;      /* containers only */
    guint32 attempt;
    gboolean is_sandbox;
    PlegState state;
    gint64 created_at_ns;
} Item;

struct _PlegListing {
    GByteArray *texts; /* NUL-terminated, after a first byte that offset 0 names */
    GArray *items;     /* Item, in listing order */
    GArray *order;     /* guint32 item indices, sorted by what is grouped or looked up */
    guint container_states[PLEG_CONTAINER_STATE_UNKNOWN + 1];
    /* Where the containers start, every sandbox being listed before them, for a restart. */
    guint containers_item, containers_text;
    gboolean has_containers;
};

PlegListing *
pleg_listing_new(void)
{
    PlegListing *listing = g_new0(PlegListing, 1);

    listing->texts = g_byte_array_new();
    listing->items = g_array_new(FALSE, FALSE, sizeof(Item));
    listing->order = g_array_new(FALSE, FALSE, sizeof(guint32));
    pleg_listing_reset(listing);
    return listing;
}

void
pleg_listing_free(PlegListing *listing)
{
    if (!listing)
        return;
    g_byte_array_unref(listing->texts);
    g_array_unref(listing->items);
    g_array_unref(listing->order);
    g_free(listing);
}

void
pleg_listing_reset(PlegListing *listing)
{
    g_byte_array_set_size(listing->texts, 1);
    listing->texts->data[0] = '\0';
    g_array_set_size(listing->items, 0);
    memset(listing->container_states, 0, sizeof(listing->container_states));
    listing->has_containers = FALSE;
}

static void
restart(gboolean sandboxes, gpointer data)
{
    PlegListing *listing = data;

    /* Sandboxes are listed first: a restart of theirs drops everything. */
    if (sandboxes) {
        pleg_listing_reset(listing);
        return;
    }
    if (!listing->has_containers)
        return;
    g_byte_array_set_size(listing->texts, listing->containers_text);
    g_array_set_size(listing->items, listing->containers_item);
    memset(listing->container_states, 0, sizeof(listing->container_states));
    listing->has_containers = FALSE;
}

static Text
add_text(PlegListing *listing, const char *text)
{
    guint offset = listing->texts->len;

    if (!text)
        return 0;
    g_byte_array_append(listing->texts, (const guint8 *)text, strlen(text) + 1);
    return offset;
}

static const char *
text_of(const PlegListing *listing, Text text)
{
    return text ? (const char *)listing->texts->data + text : NULL;
}

static void
add_sandbox(const PlegPodSandbox *sandbox, gpointer listing)
{
    pleg_listing_add_sandbox(listing, sandbox);
}

static void
add_container(const PlegContainer *container, gpointer listing)
{
    pleg_listing_add_container(listing, container);
}

const PlegListingVisitor pleg_listing_visitor = {
    .sandbox = add_sandbox,
    .container = add_container,
    .restart = restart,
};

void
pleg_listing_add_sandbox(PlegListing *listing, const PlegPodSandbox *sandbox)
{
    Item item = {
        .is_sandbox = TRUE,
        .state = sandbox->state == PLEG_POD_SANDBOX_STATE_READY ? STATE_RUNNING : STATE_EXITED,
        .created_at_ns = sandbox->created_at_ns,
    };

    item.id = add_text(listing, sandbox->id);
    item.uid = add_text(listing, sandbox->uid);
    item.name = add_text(listing, sandbox->name);
    item.namespace_ = add_text(listing, sandbox->namespace_);
    item.attempt = sandbox->attempt;
    g_array_append_val(listing->items, item);
}

void
pleg_listing_add_container(PlegListing *listing, const PlegContainer *container)
{
    Item item = {
        .state = pleg_state_from_container(container->state),
        .created_at_ns = container->created_at_ns,
    };

    if (!listing->has_containers) {
        listing->containers_item = listing->items->len;
        listing->containers_text = listing->texts->len;
        listing->has_containers = TRUE;
    }
    if ((guint)container->state < G_N_ELEMENTS(listing->container_states))
        listing->container_states[container->state]++;
    item.id = add_text(listing, container->id);
    item.uid = add_text(listing, container->pod_uid_label);
    item.sandbox_id = add_text(listing, container->pod_sandbox_id);
    item.name = add_text(listing, container->name);
    item.image = add_text(listing, container->image);
    item.attempt = container->attempt;
    g_array_append_val(listing->items, item);
}

const guint *
pleg_listing_get_container_states(PlegListing *listing)
{
    return listing->container_states;
}

static const Item *
item_at(const PlegListing *listing, guint32 index)
{
    return &g_array_index(listing->items, Item, index);
}

/* Sandboxes by id, and among equal ids in listing order. */
static gint
by_sandbox_id(gconstpointer a, gconstpointer b, gpointer data)
{
    const PlegListing *listing = data;
    guint32 ia = *(const guint32 *)a, ib = *(const guint32 *)b;
    gint cmp = strcmp(text_of(listing, item_at(listing, ia)->id),
                      text_of(listing, item_at(listing, ib)->id));

    return cmp ? cmp : (ia > ib) - (ia < ib);
}

/* The UID of the pod of the sandbox @id: the last listed sandbox of that id, as a hash table
 * filled in listing order keeps it.  0 when no sandbox of a pod has that id. */
static Text
find_sandbox_pod(const PlegListing *listing, const char *id)
{
    const guint32 *order = (const guint32 *)listing->order->data;
    guint lo = 0, hi = listing->order->len;

    /* The first index whose id sorts after @id; the one before it is the last equal one. */
    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;

        if (strcmp(text_of(listing, item_at(listing, order[mid])->id), id) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || strcmp(text_of(listing, item_at(listing, order[lo - 1])->id), id) != 0)
        return 0;
    return item_at(listing, order[lo - 1])->uid;
}

/* A pod's items as its snapshot holds them: by pod, its containers in listing order, then its
 * sandboxes newest first (equal creation times in listing order). */
static gint
by_pod(gconstpointer a, gconstpointer b, gpointer data)
{
    const PlegListing *listing = data;
    guint32 ia = *(const guint32 *)a, ib = *(const guint32 *)b;
    const Item *ea = item_at(listing, ia), *eb = item_at(listing, ib);
    gint cmp = strcmp(text_of(listing, ea->pod), text_of(listing, eb->pod));

    if (cmp)
        return cmp;
    if (ea->is_sandbox != eb->is_sandbox)
        return ea->is_sandbox - eb->is_sandbox;
    if (ea->is_sandbox && ea->created_at_ns != eb->created_at_ns)
        return (ea->created_at_ns < eb->created_at_ns) - (ea->created_at_ns > eb->created_at_ns);
    return (ia > ib) - (ia < ib);
}

/* Groups the items into pods by UID, as kubelet does: a sandbox by its metadata's UID, a
 * container into its sandbox's pod (the sandbox listed last, should an id repeat) or, when its
 * sandbox is not listed, the pod its io.kubernetes.pod.uid label names.  A pod's sandboxes are
 * ordered newest first.  Leaves @listing->order holding the grouped items by pod. */
static void
group(PlegListing *listing)
{
    Item *items = (Item *)listing->items->data;

    g_array_set_size(listing->order, 0);
    for (guint32 i = 0; i < listing->items->len; i++) {
        Item *item = &items[i];

        if (!item->is_sandbox)
            continue;
        if (!item->id || !item->uid || !*text_of(listing, item->uid)) {
            g_debug("sandbox %s has no pod UID, ignoring",
                    item->id ? text_of(listing, item->id) : "(no id)");
            continue;
        }
        item->pod = item->uid;
        g_array_append_val(listing->order, i);
    }
    g_array_sort_with_data(listing->order, by_sandbox_id, listing);

    for (guint32 i = 0; i < listing->items->len; i++) {
        Item *item = &items[i];
        Text pod = 0;

        if (item->is_sandbox)
            continue;
        if (item->sandbox_id)
            pod = find_sandbox_pod(listing, text_of(listing, item->sandbox_id));
        if (!pod)
            pod = item->uid;
        if (!item->id || !pod || !*text_of(listing, pod)) {
            g_debug("container %s belongs to no known pod, ignoring",
                    item->id ? text_of(listing, item->id) : "(no id)");
            continue;
        }
        item->pod = pod;
    }

    g_array_set_size(listing->order, 0);
    for (guint32 i = 0; i < listing->items->len; i++) {
        if (items[i].pod)
            g_array_append_val(listing->order, i);
    }
    g_array_sort_with_data(listing->order, by_pod, listing);
}

/* The names are not compared: CRI metadata and image are fixed when an id is created. */
static gboolean
entry_matches(const PlegListing *listing, const PodEntry *entry, const Item *item)
{
    return entry->state == item->state && entry->created_at_ns == item->created_at_ns &&
           g_str_equal(entry->id, text_of(listing, item->id)) &&
           g_strcmp0(entry->sandbox_id, text_of(listing, item->sandbox_id)) == 0;
}

/* Whether @pod holds exactly @items[0..n), containers then sandboxes, in that order. */
static gboolean
snapshot_matches(const PlegListing *listing, const PodSnapshot *pod, const guint32 *order, guint n)
{
    guint n_containers = pod->containers->len;

    if (n != n_containers + pod->sandboxes->len)
        return FALSE;
    for (guint i = 0; i < n; i++) {
        const Item *item = item_at(listing, order[i]);
        gboolean is_sandbox = i >= n_containers;
        const PodEntry *entry =
            is_sandbox ? pod->sandboxes->pdata[i - n_containers] : pod->containers->pdata[i];

        if (item->is_sandbox != is_sandbox || !entry_matches(listing, entry, item))
            return FALSE;
    }
    return TRUE;
}

static PodSnapshot *
snapshot_new(const PlegListing *listing, const char *uid, const guint32 *order, guint n)
{
    PodSnapshot *pod = pod_snapshot_new(uid);

    for (guint i = 0; i < n; i++) {
        const Item *item = item_at(listing, order[i]);
        const PodEntry fields = {
            .id = text_of(listing, item->id),
            .sandbox_id = text_of(listing, item->sandbox_id),
            .state = item->state,
            .created_at_ns = item->created_at_ns,
            .is_sandbox = item->is_sandbox,
            .names = {text_of(listing, item->name), text_of(listing, item->namespace_),
                      text_of(listing, item->image), item->attempt},
        };

        g_ptr_array_add(item->is_sandbox ? pod->sandboxes : pod->containers,
                        pod_entry_new(&fields));
    }
    return pod;
}

void
record_free(PodRecord *rec)
{
    pod_snapshot_unref(rec->old);
    pod_snapshot_unref(rec->current);
    g_free(rec);
}

/* Calls @func on each record that @only names, or on every record when @only is NULL: the
 * records a publication is about. */
static void
foreach_record(GHashTable *records, GHashTable *only, void (*func)(PodRecord *rec))
{
    GHashTableIter iter;
    gpointer key, value;

    g_hash_table_iter_init(&iter, only ? only : records);
    while (g_hash_table_iter_next(&iter, &key, &value)) {
        PodRecord *rec = only ? g_hash_table_lookup(records, key) : value;

        if (rec)
            func(rec);
    }
}

static void
mark_unlisted(PodRecord *rec)
{
    rec->listed = FALSE;
}

/* The pod was not listed: it has no current snapshot. */
static void
clear_unlisted(PodRecord *rec)
{
    if (!rec->listed)
        g_clear_pointer(&rec->current, pod_snapshot_unref);
}

guint
pleg_listing_publish(PlegListing *listing, GHashTable *records, GHashTable *only,
                     gboolean initial)
{
    const guint32 *order;
    guint running_pods = 0;
    PodRecord *rec;

    group(listing);
    order = (const guint32 *)listing->order->data;
    foreach_record(records, only, mark_unlisted);

    for (guint first = 0, end; first < listing->order->len; first = end) {
        const char *uid = text_of(listing, item_at(listing, order[first])->pod);
        gboolean running = FALSE;

        for (end = first; end < listing->order->len; end++) {
            const Item *item = item_at(listing, order[end]);

            if (strcmp(text_of(listing, item->pod), uid) != 0)
                break;
            running = running || (item->is_sandbox && item->state == STATE_RUNNING);
        }
        if (only && !g_hash_table_contains(only, uid))
            continue;
        running_pods += running;

        rec = g_hash_table_lookup(records, uid);
        if (!rec) {
            rec = g_new0(PodRecord, 1);
            rec->initial = initial;
            g_hash_table_insert(records, g_strdup(uid), rec);
        }
        rec->listed = TRUE;
        if (rec->current && snapshot_matches(listing, rec->current, order + first, end - first))
            continue;
        pod_snapshot_unref(rec->current);
        rec->current = snapshot_new(listing, uid, order + first, end - first);
    }
    foreach_record(records, only, clear_unlisted);
    return running_pods;
}
