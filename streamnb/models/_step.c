/* streamnb.models._step: MultinomialNB's prequential batch step, in C.
 *
 * Two functions, both called by streamnb/models/_prequential.py, which keeps the model's
 * Python-side bookkeeping (row creation, caches, change tracking) and the numpy step that is
 * the reference and the fallback:
 *
 *   intern(xs, ys, table, keys, ids, values, lengths) -> (list, bytearray, list) | None
 *       One pass over the batch's messages (dicts token -> count): each occurrence's count
 *       into ``values`` (float64), its message's length into ``lengths`` (int64), and the
 *       number of its token among the batch's distinct tokens (numbered by first occurrence)
 *       into ``ids`` (int64). Returns the distinct tokens in that order; their rows (int64):
 *       the model's row (``keys[row]`` is the token; found through the token ``table``, once
 *       per batch), else the row the token will get if a labelled message (``ys[i]`` not
 *       None) holds it, else -1; and the tokens to index, in the order of those rows (the
 *       loop's order: by first labelled occurrence, after the model's ``len(keys)`` rows).
 *       None when a message is not a dict of exact ``str`` tokens with exact ``int`` counts
 *       in [1, 2**46) (the caller then takes the per-example path).
 *
 *   table_insert(table, keys, start)
 *       Adds the rows ``keys[start:]`` to a token table (see below).
 *
 *   table_rows(table, keys, tokens, rows) -> bool
 *       The rows of ``tokens`` through a token table (-1: not there); False if one is not
 *       exactly a str.
 *
 *   step(rows, lengths, values, columns, counts, nnz, n_docs, totals, seen, labels, vocab,
 *        clock, start, options) -> (done, vocab, clock, log_probas)
 *       The loop itself, message by message from ``start``: predict (the arithmetic of
 *       MultinomialNB's short path for a message of at most ``short_limit`` tokens, of its
 *       array path for a longer one), then learn if labelled (``columns[i] >= 0``), writing
 *       the counts, the per-row non-zero class counts, the message counts, the totals and the
 *       last-seen stamps in place. ``log_probas`` holds one dict per message done: log P(c | x)
 *       of every active class c, the normalised score itself ((score - top) - log of the sum
 *       of exp(score - top), what ``predict_log_proba_one`` returns), finite where P(c | x)
 *       underflows. It stops early (``done`` < number of messages) at a message holding a
 *       token whose spread lies within ``band`` of ``min_spread``: this code's logs (libm) and
 *       the array path's (numpy) may differ in the last bit there, so the caller steps that
 *       message with the loop itself.
 *
 * Every count is an integer below 2**46 (the caller checks), so adding them is exact in any
 * order and the state written is the loop's bit for bit. The scores' logs are libm's, as the
 * short path's are (numpy's may differ by an ulp on the array path); the sums are
 * compensated (Neumaier), as close to the short path's math.fsum as makes no difference.
 * Compiled with -ffp-contract=off so that no multiply-add is fused: the spread of a token,
 * (lc0 - ld0) - (lc1 - ld1), is then the short path's to the bit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_COUNT 70368744177664LL /* 2**46 */
/* How far ahead intern fetches a key's str, and the table slot its hash points to. */
#define KEY_AHEAD 16
#define SLOT_AHEAD 8

/* -- intern ------------------------------------------------------------------------------- */

typedef struct {
    PyObject *key; /* borrowed: the batch's messages hold it */
    Py_hash_t hash;
    int64_t id;
} Slot;

static int
same_str(PyObject *a, PyObject *b)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    return n == PyUnicode_GET_LENGTH(b) && kind == PyUnicode_KIND(b)
           && memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * (size_t)kind) == 0;
}

static int
get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len % itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes", name, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A growable int64 array. */
typedef struct {
    int64_t *items;
    size_t n, capacity;
} Int64s;

static int
int64s_append(Int64s *a, int64_t value)
{
    if (a->n == a->capacity) {
        size_t bigger = a->capacity ? 2 * a->capacity : 4096;
        int64_t *grown = realloc(a->items, bigger * sizeof(int64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->items = grown;
        a->capacity = bigger;
    }
    a->items[a->n++] = value;
    return 0;
}

/* The model's token table: open addressing over the rows of its tokens, a slot per power of
 * two, at most half of them used. A slot is 0 (empty) or ((row + 1) << 32) | (the low 32 bits
 * of the token's hash), so a probe compares the hash without reading the token's str, and
 * reads the str (``keys[row]``) only to confirm a match. Unlike the model's index (a dict of
 * str, which keeps no hashes), the table lets a batch's look-ups be fetched ahead. Python's
 * str hashes are those of this process: the caller rebuilds the table in another one. */

static inline uint64_t
slot_of(int64_t row, Py_hash_t hash)
{
    return ((uint64_t)(row + 1) << 32) | (uint32_t)hash;
}

static int64_t
table_find(const uint64_t *slots, size_t mask, PyObject *keys, Py_hash_t hash, PyObject *key)
{
    Py_ssize_t n_keys = PyList_GET_SIZE(keys);
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        uint64_t slot = slots[i];
        if (slot == 0)
            return -1;
        if ((uint32_t)slot != (uint32_t)hash)
            continue;
        Py_ssize_t row = (Py_ssize_t)(slot >> 32) - 1;
        if (row >= n_keys)
            continue; /* not the caller's table (checked by the caller): never a match */
        PyObject *candidate = PyList_GET_ITEM(keys, row);
        if (candidate == key || (PyUnicode_CheckExact(candidate) && same_str(candidate, key)))
            return row;
    }
}

static int
get_table(PyObject *obj, Py_buffer *view, size_t *mask)
{
    if (get_buffer(obj, view, 8, 1, "table") < 0)
        return -1;
    size_t n = (size_t)(view->len / 8);
    if (n == 0 || (n & (n - 1))) {
        PyErr_SetString(PyExc_ValueError, "table: its size must be a power of two");
        PyBuffer_Release(view);
        return -1;
    }
    *mask = n - 1;
    return 0;
}

static PyObject *
table_insert(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj, *keys;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OO!n", &table_obj, &PyList_Type, &keys, &start))
        return NULL;
    Py_buffer view;
    size_t mask;
    if (get_table(table_obj, &view, &mask) < 0)
        return NULL;
    uint64_t *slots = view.buf;
    Py_ssize_t n_keys = PyList_GET_SIZE(keys);
    if (start < 0 || (size_t)n_keys > (mask + 1) / 2) {
        PyErr_SetString(PyExc_ValueError, "table_insert: the table is too small");
        PyBuffer_Release(&view);
        return NULL;
    }
    for (Py_ssize_t row = start; row < n_keys; row++) {
        PyObject *key = PyList_GET_ITEM(keys, row);
        if (!PyUnicode_CheckExact(key)) {
            PyErr_SetString(PyExc_TypeError, "table_insert: tokens must be str");
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_hash_t hash = PyObject_Hash(key);
        if (hash == -1) {
            PyBuffer_Release(&view);
            return NULL;
        }
        size_t i = (size_t)hash & mask;
        while (slots[i] != 0)
            i = (i + 1) & mask;
        slots[i] = slot_of(row, hash);
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* The rows of ``n`` distinct tokens (``items``, their hashes in ``hashes``) in the table, into
 * ``rows`` (-1: not there). The look-ups are pipelined: the slot of the token 24 ahead, the
 * row's entry in ``keys`` of the token 12 ahead and the str of the token 4 ahead are fetched
 * while this one is compared, so the cache misses of many look-ups overlap. */
static void
table_find_all(const uint64_t *slots, size_t mask, PyObject *keys, PyObject **items,
               const int64_t *hashes, size_t n, int64_t *rows, int64_t *candidates)
{
    PyObject **key_items = ((PyListObject *)keys)->ob_item;
    Py_ssize_t n_keys = PyList_GET_SIZE(keys);
    for (size_t i = 0; i < n; i++) {
        if (i + 24 < n)
            __builtin_prefetch(&slots[(size_t)hashes[i + 24] & mask]);
        if (i + 12 < n) {
            uint64_t slot = slots[(size_t)hashes[i + 12] & mask];
            int64_t row = -1;
            if (slot != 0 && (uint32_t)slot == (uint32_t)hashes[i + 12]) {
                row = (int64_t)(slot >> 32) - 1;
                if (row < n_keys)
                    __builtin_prefetch(&key_items[row]);
                else
                    row = -1;
            }
            candidates[i + 12] = row;
        }
        if (i + 4 < n && candidates[i + 4] >= 0) {
            const char *str = (const char *)key_items[candidates[i + 4]];
            __builtin_prefetch(str);
            __builtin_prefetch(str + 64);
        }
        rows[i] = table_find(slots, mask, keys, (Py_hash_t)hashes[i], items[i]);
    }
}

/* table_rows(table, keys, tokens, rows) -> bool: the row of each of ``tokens`` (a list)
 * through the token table into ``rows`` (int64, -1: not there), False (nothing written)
 * if a token is not exactly a str. For the rows of tokens the model's index dict has not
 * taken yet (streamnb/models/_text.py, ``_index``). */
static PyObject *
table_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj, *keys, *tokens, *rows_obj;
    if (!PyArg_ParseTuple(args, "OO!O!O", &table_obj, &PyList_Type, &keys, &PyList_Type,
                          &tokens, &rows_obj))
        return NULL;
    Py_buffer table_b, rows_b;
    size_t mask;
    if (get_table(table_obj, &table_b, &mask) < 0)
        return NULL;
    if (get_buffer(rows_obj, &rows_b, 8, 1, "rows") < 0) {
        PyBuffer_Release(&table_b);
        return NULL;
    }
    PyObject *result = NULL;
    size_t n = (size_t)PyList_GET_SIZE(tokens);
    int64_t *hashes = NULL, *candidates = NULL;
    if ((size_t)(rows_b.len / 8) != n) {
        PyErr_SetString(PyExc_ValueError, "table_rows: rows must hold one row per token");
        goto done;
    }
    hashes = malloc((n + 1) * sizeof(int64_t));
    candidates = malloc((n + 1) * sizeof(int64_t));
    if (hashes == NULL || candidates == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject **items = ((PyListObject *)tokens)->ob_item;
    for (size_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(items[i])) {
            result = Py_False;
            Py_INCREF(result);
            goto done;
        }
        Py_hash_t hash = PyObject_Hash(items[i]);
        if (hash == -1)
            goto done;
        hashes[i] = hash;
        candidates[i] = -1;
    }
    table_find_all(table_b.buf, mask, keys, items, hashes, n, rows_b.buf, candidates);
    result = Py_True;
    Py_INCREF(result);
done:
    free(hashes);
    free(candidates);
    PyBuffer_Release(&table_b);
    PyBuffer_Release(&rows_b);
    return result;
}

static PyObject *
intern_(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xs, *ys, *table_obj, *keys, *ids_obj, *values_obj, *lengths_obj;
    if (!PyArg_ParseTuple(args, "O!O!OO!OOO", &PyList_Type, &xs, &PyList_Type, &ys,
                          &table_obj, &PyList_Type, &keys, &ids_obj, &values_obj,
                          &lengths_obj))
        return NULL;
    Py_ssize_t n_indexed = PyList_GET_SIZE(keys);
    Py_buffer table_b;
    size_t table_mask;
    if (get_table(table_obj, &table_b, &table_mask) < 0)
        return NULL;
    Py_buffer ids_b, values_b, lengths_b;
    if (get_buffer(ids_obj, &ids_b, 8, 1, "ids") < 0) {
        PyBuffer_Release(&table_b);
        return NULL;
    }
    if (get_buffer(values_obj, &values_b, 8, 1, "values") < 0) {
        PyBuffer_Release(&table_b);
        PyBuffer_Release(&ids_b);
        return NULL;
    }
    if (get_buffer(lengths_obj, &lengths_b, 8, 1, "lengths") < 0) {
        PyBuffer_Release(&table_b);
        PyBuffer_Release(&ids_b);
        PyBuffer_Release(&values_b);
        return NULL;
    }
    int64_t *ids = ids_b.buf, *lengths = lengths_b.buf;
    double *values = values_b.buf;
    Py_ssize_t n_occurrences = ids_b.len / 8, n_messages = PyList_GET_SIZE(xs);
    PyObject *result = NULL, *distinct = NULL, *new_keys = NULL;
    Int64s hashes = {NULL, 0, 0}, labelled_order = {NULL, 0, 0};
    Int64s labelled_seen = {NULL, 0, 0}, candidates = {NULL, 0, 0};
    PyObject **message_items = NULL; /* borrowed: one message's keys, then its values */
    Py_ssize_t message_capacity = 0;
    size_t capacity = 4096, used = 0;
    Slot *table = calloc(capacity, sizeof(Slot));
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (values_b.len / 8 != n_occurrences || lengths_b.len / 8 != n_messages
        || PyList_GET_SIZE(ys) != n_messages) {
        PyErr_SetString(PyExc_ValueError, "intern: buffer sizes do not match the batch");
        goto done;
    }
    distinct = PyList_New(0);
    new_keys = PyList_New(0);
    if (distinct == NULL || new_keys == NULL)
        goto done;
    Py_ssize_t at = 0;
    for (Py_ssize_t m = 0; m < n_messages; m++) {
        PyObject *x = PyList_GET_ITEM(xs, m);
        if (!PyDict_Check(x))
            goto reject;
        int labelled = PyList_GET_ITEM(ys, m) != Py_None;
        Py_ssize_t pos = 0, n = PyDict_GET_SIZE(x);
        if (at + n > n_occurrences) {
            PyErr_SetString(PyExc_ValueError, "intern: more occurrences than the buffers hold");
            goto done;
        }
        lengths[m] = n;
        if (n > message_capacity) {
            PyObject **grown = realloc(message_items, 2 * (size_t)n * sizeof(PyObject *));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            message_items = grown;
            message_capacity = n;
        }
        /* The message's keys and values first (its entry table, read in order), so that each
         * key's str, and then its slot in the table, can be fetched from memory ahead of use:
         * the strs of a batch are scattered over far more memory than the caches hold. */
        PyObject **keys = message_items, **counts = message_items + n, *next_key, *next_value;
        for (Py_ssize_t k = 0; k < n && PyDict_Next(x, &pos, &next_key, &next_value); k++) {
            keys[k] = next_key;
            counts[k] = next_value;
        }
        for (Py_ssize_t k = 0; k < n && k < KEY_AHEAD; k++)
            __builtin_prefetch(keys[k]);
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *key = keys[k], *value = counts[k];
            if (k + KEY_AHEAD < n)
                __builtin_prefetch(keys[k + KEY_AHEAD]);
            if (k + SLOT_AHEAD < n) {
                PyObject *ahead = keys[k + SLOT_AHEAD];
                if (PyUnicode_CheckExact(ahead) && ((PyASCIIObject *)ahead)->hash != -1)
                    __builtin_prefetch(&table[(size_t)((PyASCIIObject *)ahead)->hash
                                              & (capacity - 1)]);
            }
            if (!PyUnicode_CheckExact(key) || !PyLong_CheckExact(value))
                goto reject;
            int overflow;
            long long count = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow || count <= 0 || count >= EXACT_COUNT)
                goto reject;
            values[at] = (double)count;
            Py_hash_t hash = PyObject_Hash(key); /* cached in the str */
            if (hash == -1)
                goto done;
            size_t mask = capacity - 1, i = (size_t)hash & mask;
            while (table[i].key != NULL && table[i].key != key
                   && !(table[i].hash == hash && same_str(table[i].key, key)))
                i = (i + 1) & mask;
            int64_t id;
            if (table[i].key == NULL) { /* the token's first occurrence in the batch */
                id = (int64_t)used++;
                table[i].key = key;
                table[i].hash = hash;
                table[i].id = id;
                if (PyList_Append(distinct, key) < 0 || int64s_append(&hashes, hash) < 0
                    || int64s_append(&labelled_seen, 0) < 0)
                    goto done;
                if (2 * used > capacity) { /* grow: rehash every slot */
                    size_t bigger = 2 * capacity;
                    Slot *grown = calloc(bigger, sizeof(Slot));
                    if (grown == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    for (size_t j = 0; j < capacity; j++) {
                        if (table[j].key == NULL)
                            continue;
                        size_t k = (size_t)table[j].hash & (bigger - 1);
                        while (grown[k].key != NULL)
                            k = (k + 1) & (bigger - 1);
                        grown[k] = table[j];
                    }
                    free(table);
                    table = grown;
                    capacity = bigger;
                }
            } else {
                id = table[i].id;
            }
            if (labelled && !labelled_seen.items[id]) {
                labelled_seen.items[id] = 1;
                if (int64s_append(&labelled_order, id) < 0)
                    goto done;
            }
            ids[at++] = id;
        }
    }
    if (at != n_occurrences) {
        PyErr_SetString(PyExc_ValueError, "intern: fewer occurrences than the buffers hold");
        goto done;
    }
    /* each distinct token looked up once, then the ones the model will index: at their
     * first labelled occurrence, as the loop indexes them */
    PyObject *row_bytes = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(used * 8));
    if (row_bytes == NULL)
        goto done;
    int64_t *row_of = (int64_t *)PyByteArray_AS_STRING(row_bytes);
    candidates.items = malloc((used + 1) * sizeof(int64_t));
    if (candidates.items == NULL) {
        Py_DECREF(row_bytes);
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < used; i++)
        candidates.items[i] = -1;
    table_find_all(table_b.buf, table_mask, keys, ((PyListObject *)distinct)->ob_item,
                   hashes.items, used, row_of, candidates.items);
    for (size_t k = 0; k < labelled_order.n; k++) {
        int64_t id = labelled_order.items[k];
        if (row_of[id] == -1) {
            row_of[id] = n_indexed + PyList_GET_SIZE(new_keys);
            if (PyList_Append(new_keys, PyList_GET_ITEM(distinct, id)) < 0) {
                Py_DECREF(row_bytes);
                goto done;
            }
        }
    }
    result = PyTuple_Pack(3, distinct, row_bytes, new_keys);
    Py_DECREF(row_bytes);
    goto done;
reject:
    if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    free(table);
    free(message_items);
    free(hashes.items);
    free(labelled_order.items);
    free(labelled_seen.items);
    free(candidates.items);
    PyBuffer_Release(&table_b);
    Py_XDECREF(distinct);
    Py_XDECREF(new_keys);
    PyBuffer_Release(&ids_b);
    PyBuffer_Release(&values_b);
    PyBuffer_Release(&lengths_b);
    return result;
}

/* -- step --------------------------------------------------------------------------------- */

/* log(k + alpha) and log(1 + k) for the integer counts k below ``n``: the very bits libm's log
 * gives for them (the short path's math.log), looked up instead of computed, as most counts
 * are small. Kept between calls (the GIL is held throughout), for the last alpha used. */
static struct {
    double alpha;
    size_t n;
    double *log_smoothed, *log_one_plus;
} logs = {0.0, 0, NULL, NULL};

#define LOG_TABLE_MAX ((size_t)1 << 16)

static int
ensure_logs(double alpha, size_t n)
{
    if (n > LOG_TABLE_MAX)
        n = LOG_TABLE_MAX;
    if (logs.alpha == alpha && logs.n >= n)
        return 0;
    if (n < logs.n)
        n = logs.n;
    double *smoothed = malloc(n * sizeof(double)), *one_plus = malloc(n * sizeof(double));
    if (smoothed == NULL || one_plus == NULL) {
        free(smoothed);
        free(one_plus);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        smoothed[k] = log((double)k + alpha);
        one_plus[k] = log(1.0 + (double)k);
    }
    free(logs.log_smoothed);
    free(logs.log_one_plus);
    logs.alpha = alpha;
    logs.n = n;
    logs.log_smoothed = smoothed;
    logs.log_one_plus = one_plus;
    return 0;
}

static inline double
log_smoothed(double count, double alpha)
{
    return count < (double)logs.n ? logs.log_smoothed[(size_t)count] : log(count + alpha);
}

static inline double
log_one_plus(double count)
{
    return count < (double)logs.n ? logs.log_one_plus[(size_t)count] : log(1.0 + count);
}

/* Neumaier's compensated sum. */
typedef struct {
    double sum, compensation;
} Sum;

static inline void
sum_add(Sum *s, double x)
{
    double t = s->sum + x;
    if (fabs(s->sum) >= fabs(x))
        s->compensation += (s->sum - t) + x;
    else
        s->compensation += (x - t) + s->sum;
    s->sum = t;
}

static inline double
sum_value(const Sum *s)
{
    return s->sum + s->compensation;
}

typedef struct {
    double alpha, min_spread, band, temperature;
    double spread_weight; /* a scored term's weight times its spread to this power (0: off) */
    int count_scoring;  /* repeated_words == "count": a token scores its count, else 1 */
    int binary;         /* repeated_words == "binary": a token trains 1, else its count */
    int tf_log, idf, length_norm;
    Py_ssize_t short_limit;
} Options;

static PyObject *
step(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rows_o, *lengths_o, *values_o, *columns_o, *counts_o, *nnz_o, *n_docs_o, *totals_o,
        *seen_o, *labels;
    long long vocab, clock;
    Py_ssize_t start;
    Options o;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO!LLn(dddddiiiiin)", &rows_o, &lengths_o, &values_o,
                          &columns_o, &counts_o, &nnz_o, &n_docs_o, &totals_o, &seen_o,
                          &PyList_Type, &labels, &vocab, &clock, &start, &o.alpha,
                          &o.min_spread, &o.band, &o.temperature, &o.spread_weight,
                          &o.count_scoring, &o.binary,
                          &o.tf_log, &o.idf, &o.length_norm, &o.short_limit))
        return NULL;
    Py_buffer b[9];
    int n_buffers = 0;
    PyObject *result = NULL, *log_probas = NULL;
    double *scratch = NULL, *per_class = NULL;
    int *active = NULL;
    struct {
        PyObject *obj;
        Py_ssize_t itemsize;
        int writable;
        const char *name;
    } specs[9] = {
        {rows_o, 8, 0, "rows"},       {lengths_o, 8, 0, "lengths"}, {values_o, 8, 0, "values"},
        {columns_o, 8, 0, "columns"}, {counts_o, 8, 1, "counts"},   {nnz_o, 4, 1, "nnz"},
        {n_docs_o, 8, 1, "n_docs"},   {totals_o, 8, 1, "totals"},   {seen_o, 8, 1, "seen"},
    };
    int n_specs = seen_o == Py_None ? 8 : 9;
    for (; n_buffers < n_specs; n_buffers++) {
        if (get_buffer(specs[n_buffers].obj, &b[n_buffers], specs[n_buffers].itemsize,
                       specs[n_buffers].writable, specs[n_buffers].name) < 0)
            goto done;
    }
    const int64_t *rows = b[0].buf, *lengths = b[1].buf, *columns = b[3].buf;
    const double *values = b[2].buf;
    double *counts = b[4].buf, *n_docs = b[6].buf, *totals = b[7].buf;
    int32_t *nnz = b[5].buf;
    int64_t *seen = n_specs == 9 ? b[8].buf : NULL;
    Py_ssize_t n_occurrences = b[0].len / 8, n_messages = b[1].len / 8;
    Py_ssize_t n_columns = b[6].len / 8, n_rows = n_columns ? b[4].len / 8 / n_columns : 0;
    if (b[2].len / 8 != n_occurrences || b[3].len / 8 != n_messages || b[7].len / 8 != n_columns
        || PyList_GET_SIZE(labels) != n_columns || b[5].len / 4 < n_rows
        || (seen != NULL && b[8].len / 8 < n_rows) || start < 0 || start > n_messages) {
        PyErr_SetString(PyExc_ValueError, "step: array sizes do not match");
        goto done;
    }
    Py_ssize_t longest = 0, at = 0, first = 0;
    for (Py_ssize_t m = 0; m < n_messages; m++) {
        if (lengths[m] < 0 || lengths[m] > n_occurrences - at) {
            PyErr_SetString(PyExc_ValueError, "step: lengths do not match the occurrences");
            goto done;
        }
        if (m == start)
            first = at;
        if (m >= start && lengths[m] > longest)
            longest = lengths[m];
        at += lengths[m];
    }
    if (at != n_occurrences) {
        PyErr_SetString(PyExc_ValueError, "step: lengths do not match the occurrences");
        goto done;
    }
    at = first;
    for (Py_ssize_t i = 0; i < n_occurrences; i++) {
        if (rows[i] < -1 || rows[i] >= n_rows) {
            PyErr_SetString(PyExc_ValueError, "step: a row is out of range");
            goto done;
        }
    }
    /* per kept token: its weight, then its n_active log-counts */
    scratch = malloc(sizeof(double) * (size_t)(longest + 1) * (size_t)(n_columns + 1));
    active = malloc(sizeof(int) * (size_t)(n_columns + 1));
    per_class = malloc(sizeof(double) * 3 * (size_t)(n_columns + 1));
    log_probas = PyList_New(0);
    if (scratch == NULL || active == NULL || per_class == NULL || log_probas == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    double *log_prior = per_class, *log_denominators = per_class + n_columns + 1,
           *scores = per_class + 2 * (n_columns + 1);
    /* the counts are integers (the caller checks): most are below the messages learned */
    double most = 2.0;
    for (Py_ssize_t c = 0; c < n_columns; c++)
        most += n_docs[c];
    if (ensure_logs(o.alpha, (size_t)most + (size_t)(n_messages - start)) < 0)
        goto done;
    Py_ssize_t m = start;
    for (; m < n_messages; m++) {
        Py_ssize_t length = lengths[m];
        const int64_t *message_rows = rows + at;
        const double *message_values = values + at;
        int short_path = length <= o.short_limit;
        /* -- predict -- */
        int n_active = 0;
        double n_learned = 0.0;
        for (Py_ssize_t c = 0; c < n_columns; c++) {
            if (n_docs[c] > 0) {
                active[n_active++] = (int)c;
                n_learned += n_docs[c]; /* integers: exact in any order */
            }
        }
        PyObject *log_proba = PyDict_New();
        if (log_proba == NULL)
            goto done;
        if (n_active) {
            double log_total = log(n_learned), smoothing = o.alpha * (double)vocab;
            for (int j = 0; j < n_active; j++) {
                log_prior[j] = log(n_docs[active[j]]) - log_total;
                log_denominators[j] = log(totals[active[j]] + smoothing);
            }
            double log_n = log(1.0 + n_learned) + 1.0;
            Py_ssize_t kept = 0;
            int stop = 0;
            for (Py_ssize_t k = 0; k < length; k++) {
                int64_t row = message_rows[k];
                if (row < 0 || nnz[row] == 0)
                    continue; /* not in V */
                const double *cells = counts + row * n_columns;
                double *log_counts = scratch + kept * (n_columns + 1) + 1;
                double df = 0.0;
                for (int j = 0; j < n_active; j++) {
                    double n = cells[active[j]];
                    log_counts[j] = log_smoothed(n, o.alpha);
                    df += n;
                }
                double spread = 0.0;
                if (o.min_spread > 0 || o.spread_weight > 0) {
                    if (n_active == 2) {
                        spread = fabs((log_counts[0] - log_denominators[0])
                                      - (log_counts[1] - log_denominators[1]));
                    } else {
                        double high = -INFINITY, low = INFINITY;
                        for (int j = 0; j < n_active; j++) {
                            double term = log_counts[j] - log_denominators[j];
                            if (term > high)
                                high = term;
                            if (term < low)
                                low = term;
                        }
                        spread = high - low;
                    }
                }
                if (o.min_spread > 0) {
                    if (fabs(spread - o.min_spread) < o.band) {
                        stop = 1; /* the caller's loop decides this one */
                        break;
                    }
                    if (!(spread >= o.min_spread))
                        continue;
                }
                double weight = o.count_scoring ? message_values[k] : 1.0;
                if (o.tf_log)
                    weight = log1p(weight);
                if (o.idf) {
                    double idf = short_path ? log_n - log_one_plus(df)
                                            : log((1.0 + n_learned) / (df + 1.0)) + 1.0;
                    weight *= idf > 0.0 ? idf : 0.0;
                }
                if (o.spread_weight > 0)
                    weight *= pow(spread, o.spread_weight);
                scratch[kept * (n_columns + 1)] = weight;
                kept++;
            }
            if (stop) {
                Py_DECREF(log_proba);
                break;
            }
            if (kept) {
                if (o.length_norm) {
                    Sum squares = {0.0, 0.0};
                    for (Py_ssize_t k = 0; k < kept; k++) {
                        double w = scratch[k * (n_columns + 1)];
                        sum_add(&squares, w * w);
                    }
                    double norm = sqrt(sum_value(&squares));
                    if (norm > 0) {
                        for (Py_ssize_t k = 0; k < kept; k++)
                            scratch[k * (n_columns + 1)] /= norm;
                    }
                }
                Sum total_weight = {0.0, 0.0};
                for (Py_ssize_t k = 0; k < kept; k++)
                    sum_add(&total_weight, scratch[k * (n_columns + 1)]);
                double weight = sum_value(&total_weight);
                for (int j = 0; j < n_active; j++) {
                    Sum s = {0.0, 0.0};
                    for (Py_ssize_t k = 0; k < kept; k++) {
                        const double *entry = scratch + k * (n_columns + 1);
                        sum_add(&s, entry[0] * entry[1 + j]);
                    }
                    scores[j] = (log_prior[j] - weight * log_denominators[j]) + sum_value(&s);
                }
            } else {
                for (int j = 0; j < n_active; j++)
                    scores[j] = log_prior[j];
            }
            /* log_normalise(score / temperature): one class is certain (0.0) */
            double top = -INFINITY;
            for (int j = 0; j < n_active; j++) {
                scores[j] /= o.temperature;
                if (scores[j] > top)
                    top = scores[j];
            }
            double log_sum = 0.0;
            if (n_active > 1) {
                if (!isfinite(top)) {
                    Py_DECREF(log_proba);
                    PyErr_SetString(PyExc_ValueError, "cannot normalise the scores");
                    goto done;
                }
                Sum z = {0.0, 0.0};
                for (int j = 0; j < n_active; j++)
                    sum_add(&z, exp(scores[j] - top));
                log_sum = log(sum_value(&z));
            }
            for (int j = 0; j < n_active; j++) {
                /* (score - top) - log sum, as log_normalise: not rounded to top's ulp */
                PyObject *lp = PyFloat_FromDouble(n_active > 1 ? (scores[j] - top) - log_sum
                                                                : 0.0);
                if (lp == NULL
                    || PyDict_SetItem(log_proba, PyList_GET_ITEM(labels, active[j]), lp) < 0) {
                    Py_XDECREF(lp);
                    Py_DECREF(log_proba);
                    goto done;
                }
                Py_DECREF(lp);
            }
        }
        if (PyList_Append(log_probas, log_proba) < 0) {
            Py_DECREF(log_proba);
            goto done;
        }
        Py_DECREF(log_proba);
        /* -- learn -- */
        int64_t column = columns[m];
        if (column >= 0) {
            if (column >= n_columns) {
                PyErr_SetString(PyExc_ValueError, "step: a class column is out of range");
                goto done;
            }
            n_docs[column] += 1.0;
            if (seen != NULL)
                clock++;
            double added = 0.0;
            for (Py_ssize_t k = 0; k < length; k++) {
                int64_t row = message_rows[k];
                if (row < 0) {
                    PyErr_SetString(PyExc_ValueError, "step: a learned token has no row");
                    goto done;
                }
                double value = o.binary ? 1.0 : message_values[k];
                double *cell = counts + row * n_columns + column;
                if (*cell == 0.0) {
                    if (nnz[row] == 0)
                        vocab++;
                    nnz[row]++;
                }
                *cell += value;
                added += value;
                if (seen != NULL)
                    seen[row] = clock;
            }
            totals[column] += added;
        }
        at += length;
    }
    result = Py_BuildValue("nLLO", m, vocab, clock, log_probas);
done:
    free(scratch);
    free(per_class);
    free(active);
    Py_XDECREF(log_probas);
    for (int i = 0; i < n_buffers; i++)
        PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"table_insert", table_insert, METH_VARARGS,
     "table_insert(table, keys, start): add the rows keys[start:] to a token table"},
    {"table_rows", table_rows, METH_VARARGS,
     "table_rows(table, keys, tokens, rows): the rows of tokens through a token table"},
    {"intern", intern_, METH_VARARGS,
     "intern(xs, ys, index, n_indexed, ids, values, lengths): read a batch's tokens and counts (see the module doc)"},
    {"step", step, METH_VARARGS,
     "step(rows, lengths, values, columns, counts, nnz, n_docs, totals, seen, labels, vocab, "
     "clock, start, options): the prequential loop (see the module doc)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "streamnb.models._step",
    "MultinomialNB's prequential batch step in C (streamnb/models/_prequential.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__step(void)
{
    return PyModule_Create(&module);
}
