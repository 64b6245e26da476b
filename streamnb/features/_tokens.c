/* streamnb.features._tokens: the word rules of streamnb.features.tokenize, in C.
 *
 * A WordCounter finds the words of a str exactly as the tokenizer's word regex does (Python's
 * re on str: \w is str.isalnum() or "_", \d is str.isdecimal()), within its length bounds, and
 * counts them in a hash table over the text's own code points: one str object is made per
 * DISTINCT word, where re.findall / str.split + Counter make one per occurrence. That object
 * creation is what bounds a pure-Python tokenizer (bench/features_floor.py).
 *
 * The three word rules (tokenize.Tokenizer builds the same ones as regexes):
 *   PLAIN          \b[^\W_]\w{lo-1,hi-1}\b     a run of \w that starts with a letter or digit,
 *                                              lo..hi long (a longer run gives nothing)
 *   JOINED         [^\W_]\w*(?:[J]+[^\W\d_]\w*)*   joiners inside, each run of them followed
 *                                              by a letter; lo..hi applied to the match
 *   JOINED_DIGITS  [^\W_](?:[\wJ]*[^\W_])?      joiners followed by a letter or a digit
 * Every scan is one pass over the text (linear time on any input).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { MODE_PLAIN = 0, MODE_JOINED = 1, MODE_JOINED_DIGITS = 2 };

/* Character classes: \w, [^\W_] (alnum), [^\W\d_] (a letter a joiner may precede), joiner. */
enum { C_WORD = 1, C_ALNUM = 2, C_LETTER = 4, C_JOINER = 8 };

typedef struct {
    PyObject_HEAD
    Py_ssize_t lo, hi;
    int mode;
    Py_ssize_t n_joiners;
    Py_UCS4 *joiners;        /* all of them, ASCII ones too (for the non-ASCII lookup) */
    unsigned char ascii[128];
} WordCounter;

static inline unsigned
char_class(const WordCounter *self, Py_UCS4 c)
{
    if (c < 128)
        return self->ascii[c];
    if (Py_UNICODE_ISALNUM(c))
        return C_WORD | C_ALNUM | (Py_UNICODE_ISDECIMAL(c) ? 0 : C_LETTER);
    for (Py_ssize_t k = 0; k < self->n_joiners; k++)
        if (self->joiners[k] == c)
            return C_JOINER;
    return 0;
}

/* ---- a hash table of the distinct words of one text, in order of first occurrence ------ */

typedef struct {
    Py_ssize_t start, len, count;
    uint64_t hash;
    PyObject *word; /* made on demand (words()), owned */
} Entry;

typedef struct {
    Entry *entries;
    Py_ssize_t n, cap;  /* entries used / allocated */
    Py_ssize_t *slots;  /* index + 1 into entries, 0 = empty */
    size_t mask;        /* slots - 1, a power of two minus one */
} Table;

static int
table_init(Table *t, Py_ssize_t expected)
{
    size_t n_slots = 64;
    while ((Py_ssize_t)(n_slots / 2) < expected && n_slots < ((size_t)1 << 40))
        n_slots <<= 1;
    t->n = 0;
    t->cap = (Py_ssize_t)(n_slots / 2);
    t->entries = PyMem_Malloc((size_t)t->cap * sizeof(Entry));
    t->slots = PyMem_Calloc(n_slots, sizeof(Py_ssize_t));
    t->mask = n_slots - 1;
    if (t->entries == NULL || t->slots == NULL) {
        PyMem_Free(t->entries);
        PyMem_Free(t->slots);
        t->entries = NULL;
        t->slots = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
table_free(Table *t)
{
    if (t->entries != NULL)
        for (Py_ssize_t k = 0; k < t->n; k++)
            Py_XDECREF(t->entries[k].word);
    PyMem_Free(t->entries);
    PyMem_Free(t->slots);
    t->entries = NULL;
    t->slots = NULL;
}

/* Doubles the slots and the entries (the table stays at most half full). */
static int
table_grow(Table *t)
{
    size_t n_slots = (t->mask + 1) * 2;
    if (n_slots > ((size_t)PY_SSIZE_T_MAX / sizeof(Entry)))
        return PyErr_NoMemory(), -1;
    Entry *entries = PyMem_Realloc(t->entries, (n_slots / 2) * sizeof(Entry));
    if (entries == NULL)
        return PyErr_NoMemory(), -1;
    t->entries = entries;
    Py_ssize_t *slots = PyMem_Calloc(n_slots, sizeof(Py_ssize_t));
    if (slots == NULL)
        return PyErr_NoMemory(), -1;
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = n_slots - 1;
    t->cap = (Py_ssize_t)(n_slots / 2);
    for (Py_ssize_t k = 0; k < t->n; k++) {
        size_t s = (size_t)t->entries[k].hash & t->mask;
        while (slots[s])
            s = (s + 1) & t->mask;
        slots[s] = k + 1;
    }
    return 0;
}

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

/* FNV-1a over code points (the same value for a word whatever the kind of its str), going on
 * from ``h``: the hash of a prefix is the seed of its words'. */
static inline uint64_t
hash_more(uint64_t h, int kind, const void *data, Py_ssize_t start, Py_ssize_t len)
{
    for (Py_ssize_t k = start; k < start + len; k++) {
        h ^= PyUnicode_READ(kind, data, k);
        h *= FNV_PRIME;
    }
    return h;
}

/* MurmurHash3's finalizer: FNV's low bits depend only on the low bits of the code points,
 * and the tables index by the low bits. */
static inline uint64_t
hash_final(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

/* ---- the words made before, shared by every call ----------------------------------------
 * A stream's mail repeats the same few thousand words: their str objects are kept here and
 * handed out again (with their Python hash already computed), so most words of a mail cost no
 * allocation at all. Bounded: when full it is emptied and fills again with what comes next. */

#define CACHE_SLOTS ((size_t)1 << 16)
#define CACHE_MAX (CACHE_SLOTS / 2)

typedef struct {
    uint64_t hash;
    PyObject *word; /* owned; NULL = empty */
} CacheSlot;

static CacheSlot *cache;
static size_t cache_used;

static void
cache_clear(void)
{
    if (cache == NULL)
        return;
    for (size_t s = 0; s < CACHE_SLOTS; s++)
        Py_CLEAR(cache[s].word);
    cache_used = 0;
}

/* Whether ``word`` is prefix + data[start:start+len], code point by code point. */
static inline int
same_word(PyObject *word, PyObject *prefix, int kind, const void *data, Py_ssize_t start,
          Py_ssize_t len)
{
    Py_ssize_t plen = prefix == NULL ? 0 : PyUnicode_GET_LENGTH(prefix);
    if (PyUnicode_GET_LENGTH(word) != plen + len)
        return 0;
    int wkind = PyUnicode_KIND(word);
    const void *wdata = PyUnicode_DATA(word);
    if (plen) {
        int pkind = PyUnicode_KIND(prefix);
        const void *pdata = PyUnicode_DATA(prefix);
        if (pkind == wkind) {
            if (memcmp(wdata, pdata, (size_t)(plen * wkind)) != 0)
                return 0;
        }
        else {
            for (Py_ssize_t k = 0; k < plen; k++)
                if (PyUnicode_READ(wkind, wdata, k) != PyUnicode_READ(pkind, pdata, k))
                    return 0;
        }
    }
    if (wkind == kind)
        return memcmp((const char *)wdata + plen * kind, (const char *)data + start * kind,
                      (size_t)(len * kind)) == 0;
    for (Py_ssize_t k = 0; k < len; k++)
        if (PyUnicode_READ(wkind, wdata, plen + k) != PyUnicode_READ(kind, data, start + k))
            return 0;
    return 1;
}

/* A new reference to the str prefix + text[start:start+len], from the cache if it is there. */
static PyObject *
cached_word(PyObject *text, PyObject *prefix, Py_ssize_t start, Py_ssize_t len, uint64_t h)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    size_t s = 0;
    if (cache != NULL) {
        s = (size_t)h & (CACHE_SLOTS - 1);
        for (; cache[s].word != NULL; s = (s + 1) & (CACHE_SLOTS - 1))
            if (cache[s].hash == h && same_word(cache[s].word, prefix, kind, data, start, len))
                return Py_NewRef(cache[s].word);
    }
    PyObject *word = PyUnicode_Substring(text, start, start + len);
    if (word == NULL || prefix == NULL || PyUnicode_GET_LENGTH(prefix) == 0) {
        if (word == NULL || cache == NULL || len > 64)
            return word;
    }
    else {
        PyObject *joined = PyUnicode_Concat(prefix, word);
        Py_DECREF(word);
        if (joined == NULL || cache == NULL || len > 64)
            return joined;
        word = joined;
    }
    if (cache_used >= CACHE_MAX) {
        cache_clear();
        s = (size_t)h & (CACHE_SLOTS - 1);
    }
    cache[s].hash = h;
    cache[s].word = Py_NewRef(word);
    cache_used++;
    return word;
}

/* The entry of the word data[start:start+len], added (count 0) if new; NULL on error. */
static inline Entry *
table_find(Table *t, int kind, const void *data, Py_ssize_t start, Py_ssize_t len, uint64_t h)
{
    size_t s = (size_t)h & t->mask;
    const char *bytes = data;
    for (;;) {
        Py_ssize_t k = t->slots[s];
        if (!k)
            break;
        Entry *e = &t->entries[k - 1];
        if (e->hash == h && e->len == len
            && memcmp(bytes + e->start * kind, bytes + start * kind, (size_t)(len * kind)) == 0)
            return e;
        s = (s + 1) & t->mask;
    }
    if (t->n >= t->cap) {
        if (table_grow(t) < 0)
            return NULL;
        s = (size_t)h & t->mask;
        while (t->slots[s])
            s = (s + 1) & t->mask;
    }
    Entry *e = &t->entries[t->n];
    e->start = start;
    e->len = len;
    e->count = 0;
    e->hash = h;
    e->word = NULL;
    t->slots[s] = ++t->n;
    return e;
}

/* ---- the scan ---------------------------------------------------------------------------- */

/* Calls emit(start, end) for each word of data[0:n] under self's rule and bounds. Returns the
 * number of words, or -1 if emit failed. Inlined per string kind (constant ``kind``). */
typedef int (*emit_fn)(void *state, Py_ssize_t start, Py_ssize_t end);

static inline __attribute__((always_inline)) Py_ssize_t
scan(const WordCounter *self, int kind, const void *data, Py_ssize_t n, emit_fn emit,
     void *state)
{
    const Py_ssize_t lo = self->lo, hi = self->hi;
    const int mode = self->mode;
    Py_ssize_t i = 0, words = 0;
#define CLASS(k) char_class(self, PyUnicode_READ(kind, data, (k)))
    while (i < n) {
        unsigned c = CLASS(i);
        if (mode == MODE_PLAIN) {
            if (!(c & C_WORD)) {
                i++;
                continue;
            }
            Py_ssize_t start = i++;
            while (i < n && (CLASS(i) & C_WORD))
                i++;
            /* \b before: the run's start; \b after: its end. A run starting with "_" has no
             * word boundary before any letter in it, so it gives nothing. */
            if ((c & C_ALNUM) && i - start >= lo && i - start <= hi) {
                if (emit(state, start, i) < 0)
                    return -1;
                words++;
            }
            continue;
        }
        if (!(c & C_ALNUM)) {
            i++;
            continue;
        }
        Py_ssize_t start = i++, end;
        if (mode == MODE_JOINED) {
            for (;;) {
                while (i < n && (CLASS(i) & C_WORD))
                    i++;
                Py_ssize_t j = i;
                while (j < n && (CLASS(j) & C_JOINER))
                    j++;
                if (j > i && j < n && (CLASS(j) & C_LETTER)) {
                    i = j + 1;
                    continue;
                }
                break;
            }
            end = i;
        }
        else { /* MODE_JOINED_DIGITS: up to the last letter or digit of the run of \w and joiners */
            end = i;
            while (i < n) {
                unsigned d = CLASS(i);
                if (!(d & (C_WORD | C_JOINER)))
                    break;
                i++;
                if (d & C_ALNUM)
                    end = i;
            }
            /* what follows ``end`` up to ``i`` is "_" and joiners: no word starts there */
        }
        if (end - start >= lo && end - start <= hi) {
            if (emit(state, start, end) < 0)
                return -1;
            words++;
        }
    }
#undef CLASS
    return words;
}

typedef struct {
    Table table;
    int kind;
    const void *data;
    PyObject *text;
    PyObject *prefix; /* NULL: none */
    uint64_t seed;    /* the hash of the prefix */
    PyObject *list;   /* words(): the list the words go to */
} ScanState;

static inline Entry *
find_entry(ScanState *st, Py_ssize_t start, Py_ssize_t end)
{
    uint64_t h = hash_final(hash_more(st->seed, st->kind, st->data, start, end - start));
    return table_find(&st->table, st->kind, st->data, start, end - start, h);
}

static int
emit_count(void *state, Py_ssize_t start, Py_ssize_t end)
{
    Entry *e = find_entry(state, start, end);
    if (e == NULL)
        return -1;
    e->count++;
    return 0;
}

static int
emit_word(void *state, Py_ssize_t start, Py_ssize_t end)
{
    ScanState *st = state;
    Entry *e = find_entry(st, start, end);
    if (e == NULL)
        return -1;
    if (e->word == NULL) {
        e->word = cached_word(st->text, st->prefix, start, end - start, e->hash);
        if (e->word == NULL)
            return -1;
    }
    e->count++;
    return PyList_Append(st->list, e->word); /* one object per distinct word, shared */
}

static inline __attribute__((always_inline)) Py_ssize_t
scan_text(const WordCounter *self, ScanState *st, emit_fn emit)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(st->text);
    switch (st->kind) {
    case PyUnicode_1BYTE_KIND:
        return scan(self, PyUnicode_1BYTE_KIND, st->data, n, emit, st);
    case PyUnicode_2BYTE_KIND:
        return scan(self, PyUnicode_2BYTE_KIND, st->data, n, emit, st);
    default:
        return scan(self, PyUnicode_4BYTE_KIND, st->data, n, emit, st);
    }
}

static int
state_init(ScanState *st, PyObject *text, PyObject *prefix)
{
    st->text = text;
    st->kind = PyUnicode_KIND(text);
    st->data = PyUnicode_DATA(text);
    st->prefix = prefix;
    st->seed = FNV_OFFSET;
    if (prefix != NULL)
        st->seed = hash_more(FNV_OFFSET, PyUnicode_KIND(prefix), PyUnicode_DATA(prefix), 0,
                             PyUnicode_GET_LENGTH(prefix));
    st->list = NULL;
    /* about one distinct word per 25 characters of mail text; the table grows if not */
    return table_init(&st->table, PyUnicode_GET_LENGTH(text) / 25);
}

/* counts[prefix + word] += occurrences, for each distinct word of the table. */
static int
add_counts(ScanState *st, PyObject *counts)
{
    for (Py_ssize_t k = 0; k < st->table.n; k++) {
        Entry *e = &st->table.entries[k];
        PyObject *word = cached_word(st->text, st->prefix, e->start, e->len, e->hash);
        if (word == NULL)
            return -1;
        PyObject *n = PyLong_FromSsize_t(e->count);
        if (n == NULL) {
            Py_DECREF(word);
            return -1;
        }
        PyObject *old = PyDict_GetItemWithError(counts, word); /* borrowed */
        if (old != NULL) {
            PyObject *sum = PyNumber_Add(old, n);
            Py_DECREF(n);
            n = sum;
        }
        else if (PyErr_Occurred()) {
            Py_DECREF(n);
            n = NULL;
        }
        int failed = n == NULL || PyDict_SetItem(counts, word, n) < 0;
        Py_DECREF(word);
        Py_XDECREF(n);
        if (failed)
            return -1;
    }
    return 0;
}

PyDoc_STRVAR(count_doc,
"count(text, counts, prefix=None) -> int\n\n"
"Adds the words of ``text`` to the dict ``counts`` (``prefix + word`` with a prefix) and\n"
"returns how many words it found (occurrences, within the length bounds).");

static PyObject *
WordCounter_count(WordCounter *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"text", "counts", "prefix", NULL};
    PyObject *text, *counts, *prefix = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO!|O:count", keywords, &text, &PyDict_Type,
                                     &counts, &prefix))
        return NULL;
    if (prefix != Py_None && !PyUnicode_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "prefix must be a str or None");
        return NULL;
    }
    ScanState st;
    if (state_init(&st, text, prefix == Py_None ? NULL : prefix) < 0)
        return NULL;
    Py_ssize_t words = scan_text(self, &st, emit_count);
    if (words < 0 || add_counts(&st, counts) < 0) {
        table_free(&st.table);
        return NULL;
    }
    table_free(&st.table);
    return PyLong_FromSsize_t(words);
}

PyDoc_STRVAR(words_doc,
"words(text) -> list[str]\n\n"
"The words of ``text`` in order (within the length bounds); equal words share one object.");

static PyObject *
WordCounter_words(WordCounter *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "words() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    ScanState st;
    if (state_init(&st, text, NULL) < 0)
        return NULL;
    st.list = PyList_New(0);
    if (st.list == NULL || scan_text(self, &st, emit_word) < 0) {
        Py_XDECREF(st.list);
        table_free(&st.table);
        return NULL;
    }
    table_free(&st.table);
    return st.list;
}

/* ---- the type ------------------------------------------------------------------------- */

static int
WordCounter_init(WordCounter *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"lo", "hi", "joiners", "join_digits", NULL};
    Py_ssize_t lo, hi;
    PyObject *joiners;
    int join_digits;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nnUp:WordCounter", keywords, &lo, &hi,
                                     &joiners, &join_digits))
        return -1;
    if (lo < 0 || hi < lo) {
        PyErr_SetString(PyExc_ValueError, "WordCounter needs 0 <= lo <= hi");
        return -1;
    }
    Py_ssize_t n_joiners = PyUnicode_GET_LENGTH(joiners);
    Py_UCS4 *list = PyMem_Malloc((size_t)(n_joiners + 1) * sizeof(Py_UCS4));
    if (list == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n_joiners; k++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(joiners, k);
        if (Py_UNICODE_ISALNUM(c) || c == '_') {
            PyMem_Free(list);
            PyErr_SetString(PyExc_ValueError, "joiners must not be letters, digits or '_'");
            return -1;
        }
        list[k] = c;
    }
    PyMem_Free(self->joiners);
    self->joiners = list;
    self->n_joiners = n_joiners;
    self->lo = lo;
    self->hi = hi;
    self->mode = n_joiners == 0 ? MODE_PLAIN : join_digits ? MODE_JOINED_DIGITS : MODE_JOINED;
    for (Py_UCS4 c = 0; c < 128; c++) {
        unsigned cls = 0;
        if (Py_UNICODE_ISALNUM(c))
            cls = C_WORD | C_ALNUM | (Py_UNICODE_ISDECIMAL(c) ? 0 : C_LETTER);
        else if (c == '_')
            cls = C_WORD;
        self->ascii[c] = (unsigned char)cls;
    }
    for (Py_ssize_t k = 0; k < n_joiners; k++)
        if (list[k] < 128)
            self->ascii[list[k]] |= C_JOINER;
    return 0;
}

static void
WordCounter_dealloc(WordCounter *self)
{
    PyMem_Free(self->joiners);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef WordCounter_methods[] = {
    {"count", (PyCFunction)(void (*)(void))WordCounter_count, METH_VARARGS | METH_KEYWORDS,
     count_doc},
    {"words", (PyCFunction)WordCounter_words, METH_O, words_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(WordCounter_doc,
"WordCounter(lo, hi, joiners, join_digits)\n\n"
"The words of a text under the tokenizer's word rule: no joiners (a run of \\w starting with\n"
"a letter or digit, lo..hi long), ``joiners`` inside a word before a letter, or (with\n"
"``join_digits``) before a letter or a digit; words outside lo..hi are dropped whole.");

static PyTypeObject WordCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamnb.features._tokens.WordCounter",
    .tp_basicsize = sizeof(WordCounter),
    .tp_dealloc = (destructor)WordCounter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = WordCounter_doc,
    .tp_methods = WordCounter_methods,
    .tp_init = (initproc)WordCounter_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "streamnb.features._tokens",
    .m_doc = "The tokenizer's word rules in C: words found and counted without one object per "
             "occurrence.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__tokens(void)
{
    if (PyType_Ready(&WordCounterType) < 0)
        return NULL;
    if (cache == NULL) {
        cache = PyMem_Calloc(CACHE_SLOTS, sizeof(CacheSlot));
        if (cache == NULL)
            return PyErr_NoMemory();
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WordCounterType);
    if (PyModule_AddObject(m, "WordCounter", (PyObject *)&WordCounterType) < 0) {
        Py_DECREF(&WordCounterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
