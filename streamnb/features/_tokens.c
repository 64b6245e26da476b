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
#include <stddef.h>
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

/* A new reference to the str prefix + data[start:start+len]; ``ascii``: data holds only
 * ASCII. (A cache of the words made before, shared by every call, was tried: on mail its
 * lookups miss the CPU caches, and counting was slower than making each str again.) */
static PyObject *
make_word(int kind, const void *data, int ascii, PyObject *prefix, Py_ssize_t start,
          Py_ssize_t len)
{
    Py_ssize_t plen = prefix == NULL ? 0 : PyUnicode_GET_LENGTH(prefix);
    if (ascii && (prefix == NULL || PyUnicode_IS_ASCII(prefix))) {
        /* nearly every word: one allocation, one or two copies */
        PyObject *word = PyUnicode_New(plen + len, 127);
        if (word == NULL)
            return NULL;
        if (plen)
            memcpy(PyUnicode_1BYTE_DATA(word), PyUnicode_1BYTE_DATA(prefix), (size_t)plen);
        memcpy(PyUnicode_1BYTE_DATA(word) + plen, (const Py_UCS1 *)data + start, (size_t)len);
        return word;
    }
    PyObject *word = PyUnicode_FromKindAndData(kind, (const char *)data + start * kind, len);
    if (word == NULL || plen == 0)
        return word;
    PyObject *joined = PyUnicode_Concat(prefix, word);
    Py_DECREF(word);
    return joined;
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

/* Calls emit(start, end, hash) for each word of data[0:n] under self's rule and bounds, the
 * hash going on from ``seed`` over the word's code points (hashed as they are scanned).
 * Returns the number of words, or -1 if emit failed. Inlined per string kind. */
typedef int (*emit_fn)(void *state, Py_ssize_t start, Py_ssize_t end, uint64_t hash);

#define HASH_STEP(h, c) (((h) ^ (c)) * FNV_PRIME)

static inline __attribute__((always_inline)) Py_ssize_t
scan(const WordCounter *self, int kind, const void *data, Py_ssize_t n, uint64_t seed,
     emit_fn emit, void *state)
{
    const Py_ssize_t lo = self->lo, hi = self->hi;
    const int mode = self->mode;
    Py_ssize_t i = 0, words = 0;
    Py_UCS4 ch;
    unsigned c;
#define NEXT(k) (ch = PyUnicode_READ(kind, data, (k)), c = char_class(self, ch))
    while (i < n) {
        NEXT(i);
        if (mode == MODE_PLAIN) {
            if (!(c & C_WORD)) {
                i++;
                continue;
            }
            /* \b before: the run's start; \b after: its end. A run starting with "_" has no
             * word boundary before any letter in it, so it gives nothing. */
            int starts_alnum = c & C_ALNUM;
            uint64_t h = HASH_STEP(seed, ch);
            Py_ssize_t start = i++;
            while (i < n && (NEXT(i), c & C_WORD)) {
                h = HASH_STEP(h, ch);
                i++;
            }
            if (starts_alnum && i - start >= lo && i - start <= hi) {
                if (emit(state, start, i, hash_final(h)) < 0)
                    return -1;
                words++;
            }
            continue;
        }
        if (!(c & C_ALNUM)) {
            i++;
            continue;
        }
        uint64_t h = HASH_STEP(seed, ch), h_end;
        Py_ssize_t start = i++, end;
        if (mode == MODE_JOINED) {
            for (;;) {
                while (i < n && (NEXT(i), c & C_WORD)) {
                    h = HASH_STEP(h, ch);
                    i++;
                }
                Py_ssize_t j = i;
                uint64_t hj = h;
                while (j < n && (NEXT(j), c & C_JOINER)) {
                    hj = HASH_STEP(hj, ch);
                    j++;
                }
                if (j > i && j < n && (c & C_LETTER)) { /* ch, c: data[j] */
                    h = HASH_STEP(hj, ch);
                    i = j + 1;
                    continue;
                }
                break;
            }
            end = i;
            h_end = h;
        }
        else { /* MODE_JOINED_DIGITS: up to the last letter or digit of the run of \w and joiners */
            end = i;
            h_end = h;
            while (i < n && (NEXT(i), c & (C_WORD | C_JOINER))) {
                h = HASH_STEP(h, ch);
                i++;
                if (c & C_ALNUM) {
                    end = i;
                    h_end = h;
                }
            }
            /* what follows ``end`` up to ``i`` is "_" and joiners: no word starts there */
        }
        if (end - start >= lo && end - start <= hi) {
            if (emit(state, start, end, hash_final(h_end)) < 0)
                return -1;
            words++;
        }
    }
#undef NEXT
    return words;
}

typedef struct {
    Table table;
    int kind;
    const void *data;
    Py_ssize_t n;
    int ascii;         /* data holds only ASCII */
    void *lowered;     /* count(lower=True), count_prepared(): the text read, owned */
    PyObject *prefix;  /* NULL: none */
    uint64_t seed;    /* the hash of the prefix */
    PyObject *list;   /* words(): the list the words go to */
} ScanState;

static int
emit_count(void *state, Py_ssize_t start, Py_ssize_t end, uint64_t hash)
{
    ScanState *st = state;
    Entry *e = table_find(&st->table, st->kind, st->data, start, end - start, hash);
    if (e == NULL)
        return -1;
    e->count++;
    return 0;
}

static int
emit_word(void *state, Py_ssize_t start, Py_ssize_t end, uint64_t hash)
{
    ScanState *st = state;
    Entry *e = table_find(&st->table, st->kind, st->data, start, end - start, hash);
    if (e == NULL)
        return -1;
    if (e->word == NULL) {
        e->word = make_word(st->kind, st->data, st->ascii, st->prefix, start, end - start);
        if (e->word == NULL)
            return -1;
    }
    e->count++;
    return PyList_Append(st->list, e->word); /* one object per distinct word, shared */
}

static inline __attribute__((always_inline)) Py_ssize_t
scan_text(const WordCounter *self, ScanState *st, emit_fn emit)
{
    Py_ssize_t n = st->n;
    switch (st->kind) {
    case PyUnicode_1BYTE_KIND:
        return scan(self, PyUnicode_1BYTE_KIND, st->data, n, st->seed, emit, st);
    case PyUnicode_2BYTE_KIND:
        return scan(self, PyUnicode_2BYTE_KIND, st->data, n, st->seed, emit, st);
    default:
        return scan(self, PyUnicode_4BYTE_KIND, st->data, n, st->seed, emit, st);
    }
}

/* The scan of kind/data[0:n] (``lower``: an ASCII text, read lower-cased). */
static int
state_init(ScanState *st, int kind, const void *data, Py_ssize_t n, int ascii, int lower,
           PyObject *prefix)
{
    st->kind = kind;
    st->data = data;
    st->n = n;
    st->ascii = ascii;
    st->lowered = NULL;
    st->prefix = prefix;
    st->seed = FNV_OFFSET;
    if (prefix != NULL)
        st->seed = hash_more(FNV_OFFSET, PyUnicode_KIND(prefix), PyUnicode_DATA(prefix), 0,
                             PyUnicode_GET_LENGTH(prefix));
    st->list = NULL;
    if (lower) {
        if (!ascii || kind != PyUnicode_1BYTE_KIND) {
            PyErr_SetString(PyExc_ValueError, "lower=True needs an ASCII text");
            return -1;
        }
        Py_UCS1 *lowered = PyMem_Malloc((size_t)n + 1);
        if (lowered == NULL)
            return PyErr_NoMemory(), -1;
        const Py_UCS1 *from = data;
        for (Py_ssize_t k = 0; k < n; k++)
            lowered[k] = (Py_UCS1)Py_TOLOWER(from[k]);
        st->lowered = lowered;
        st->data = lowered;
    }
    /* about one distinct word per 25 characters of mail text; the table grows if not */
    if (table_init(&st->table, n / 25) < 0) {
        PyMem_Free(st->lowered);
        return -1;
    }
    return 0;
}

static int
state_init_str(ScanState *st, PyObject *text, int lower, PyObject *prefix)
{
    return state_init(st, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text),
                      PyUnicode_IS_ASCII(text), lower, prefix);
}

static void
state_free(ScanState *st)
{
    table_free(&st->table);
    PyMem_Free(st->lowered);
    st->lowered = NULL;
}

/* counts[word] += n */
static int
add_count(PyObject *counts, PyObject *word, Py_ssize_t count)
{
    PyObject *n = PyLong_FromSsize_t(count);
    if (n == NULL)
        return -1;
    /* one lookup for a new word (nearly all): inserted if the dict grew */
    Py_ssize_t size = PyDict_GET_SIZE(counts);
    PyObject *old = PyDict_SetDefault(counts, word, n); /* borrowed */
    int failed = old == NULL;
    if (!failed && PyDict_GET_SIZE(counts) == size) { /* it was there: add to it */
        PyObject *sum = PyNumber_Add(old, n);
        failed = sum == NULL || PyDict_SetItem(counts, word, sum) < 0;
        Py_XDECREF(sum);
    }
    Py_DECREF(n);
    return failed ? -1 : 0;
}

/* counts[prefix + word] += occurrences, for each distinct word of the table. */
static int
add_counts(ScanState *st, PyObject *counts)
{
    for (Py_ssize_t k = 0; k < st->table.n; k++) {
        Entry *e = &st->table.entries[k];
        PyObject *word = make_word(st->kind, st->data, st->ascii, st->prefix, e->start, e->len);
        if (word == NULL)
            return -1;
        int failed = add_count(counts, word, e->count);
        Py_DECREF(word);
        if (failed)
            return -1;
    }
    return 0;
}

PyDoc_STRVAR(count_doc,
"count(text, counts, prefix=None, lower=False) -> int\n\n"
"Adds the words of ``text`` to the dict ``counts`` (``prefix + word`` with a prefix) and\n"
"returns how many words it found (occurrences, within the length bounds). ``lower``: read\n"
"an ASCII ``text`` lower-cased (ValueError for another text).");

static PyObject *
WordCounter_count(WordCounter *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"text", "counts", "prefix", "lower", NULL};
    PyObject *text, *counts, *prefix = Py_None;
    int lower = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO!|Op:count", keywords, &text, &PyDict_Type,
                                     &counts, &prefix, &lower))
        return NULL;
    if (prefix != Py_None && !PyUnicode_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "prefix must be a str or None");
        return NULL;
    }
    ScanState st;
    if (state_init_str(&st, text, lower, prefix == Py_None ? NULL : prefix) < 0)
        return NULL;
    Py_ssize_t words = scan_text(self, &st, emit_count);
    if (words < 0 || add_counts(&st, counts) < 0) {
        state_free(&st);
        return NULL;
    }
    state_free(&st);
    return PyLong_FromSsize_t(words);
}

PyDoc_STRVAR(count_prepared_doc,
"count_prepared(text, counts, separators, lower) -> int | None\n\n"
"``count(prepared, counts)`` of ``prepared``, ``text`` as the tokenizer prepares a text that is\n"
"not ASCII: lower-cased (``lower``: ``str.lower()``), then each character of ``separators``\n"
"(none of them ASCII) made a space. None, having counted nothing, where ``str.lower()`` is not one code point for\n"
"one (U+0130, two code points; U+03A3, final or not by its context): Python prepares those.");

/* A character of 128 or more as the tokenizer prepares a text that is not ASCII (lower-cased,
 * a separator made a space); (Py_UCS4)-1 for the two that str.lower() does not map one for
 * one: U+0130 (two code points) and U+03A3 (final sigma or not, by its context). Every other
 * character's str.lower() is its simple lower-case mapping, Py_UNICODE_TOLOWER: tests/features
 * compares the two over every code point. */
typedef struct {
    int lower;
    int kind;
    const void *data;
    Py_ssize_t n;
    Py_UCS4 first, last; /* the range of the separators */
} Separators;

static inline Py_UCS4
prepared_char(Py_UCS4 c, int lower, const Separators *sep)
{
    if (lower) {
        if (c == 0x130 || c == 0x3a3)
            return (Py_UCS4)-1;
        c = Py_UNICODE_TOLOWER(c);
    }
    if (c >= sep->first && c <= sep->last)
        for (Py_ssize_t j = 0; j < sep->n; j++)
            if (PyUnicode_READ(sep->kind, sep->data, j) == c)
                return ' ';
    return c;
}

/* out[0:n] = the prepared in[0:n], of the same kind; returns the widest character written, or
 * (Py_UCS4)-1 where Python must prepare the text. One pass: an ASCII character is a table
 * look-up, and nearly all of a mail's text is ASCII. */
#define PREPARE_AS(T, MAX)                                                                  \
    do {                                                                                    \
        const T *in = data;                                                                 \
        T *out = prepared;                                                                  \
        for (Py_ssize_t k = 0; k < n; k++) {                                                \
            Py_UCS4 c = in[k];                                                              \
            if (c < 128)                                                                    \
                c = lower ? (Py_UCS4)Py_TOLOWER(c) : c;                                     \
            else {                                                                          \
                c = prepared_char(c, lower, &sep);                                          \
                if (c == (Py_UCS4)-1 || c > (MAX))                                          \
                    goto python_prepares;                                                   \
                if (c > widest)                                                             \
                    widest = c;                                                             \
            }                                                                               \
            out[k] = (T)c;                                                                  \
        }                                                                                   \
    } while (0)

static PyObject *
WordCounter_count_prepared(WordCounter *self, PyObject *args)
{
    PyObject *text, *counts, *separators;
    int lower;
    if (!PyArg_ParseTuple(args, "UO!Up:count_prepared", &text, &PyDict_Type, &counts,
                          &separators, &lower))
        return NULL;
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Separators sep = {lower, PyUnicode_KIND(separators), PyUnicode_DATA(separators),
                      PyUnicode_GET_LENGTH(separators), 0x10ffff, 0};
    for (Py_ssize_t j = 0; j < sep.n; j++) {
        Py_UCS4 c = PyUnicode_READ(sep.kind, sep.data, j);
        if (c < 128) {
            PyErr_SetString(PyExc_ValueError, "count_prepared: the separators must not be ASCII");
            return NULL;
        }
        sep.first = c < sep.first ? c : sep.first;
        sep.last = c > sep.last ? c : sep.last;
    }
    void *prepared = PyMem_Malloc((size_t)(n > 0 ? n : 1) * (size_t)kind);
    if (prepared == NULL)
        return PyErr_NoMemory();
    Py_UCS4 widest = 0; /* of the characters of 128 or more */
    if (kind == PyUnicode_1BYTE_KIND)
        PREPARE_AS(Py_UCS1, 0xff);
    else if (kind == PyUnicode_2BYTE_KIND)
        PREPARE_AS(Py_UCS2, 0xffff);
    else
        PREPARE_AS(Py_UCS4, 0x10ffff);
    /* Most of a mail's text that is not ASCII is ASCII once its quotes and spaces are made
     * spaces: in 1-byte characters, its words are made with one copy each. */
    int out_kind = widest < 256 ? PyUnicode_1BYTE_KIND
                   : widest < 65536 ? PyUnicode_2BYTE_KIND : PyUnicode_4BYTE_KIND;
    if (out_kind < kind) {
        void *narrow = PyMem_Malloc((size_t)(n > 0 ? n : 1) * (size_t)out_kind);
        if (narrow == NULL) {
            PyMem_Free(prepared);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t k = 0; k < n; k++)
            PyUnicode_WRITE(out_kind, narrow, k, PyUnicode_READ(kind, prepared, k));
        PyMem_Free(prepared);
        prepared = narrow;
    }
    else
        out_kind = kind;
    ScanState st;
    if (state_init(&st, out_kind, prepared, n, widest == 0, 0, NULL) < 0) {
        PyMem_Free(prepared);
        return NULL;
    }
    st.lowered = prepared; /* owned by the state from here */
    Py_ssize_t words = scan_text(self, &st, emit_count);
    if (words < 0 || add_counts(&st, counts) < 0) {
        state_free(&st);
        return NULL;
    }
    state_free(&st);
    return PyLong_FromSsize_t(words);
python_prepares:
    PyMem_Free(prepared);
    Py_RETURN_NONE;
}
#undef PREPARE_AS

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
    if (state_init_str(&st, text, 0, NULL) < 0)
        return NULL;
    st.list = PyList_New(0);
    if (st.list == NULL || scan_text(self, &st, emit_word) < 0) {
        Py_XDECREF(st.list);
        state_free(&st);
        return NULL;
    }
    state_free(&st);
    return st.list;
}

/* ---- URL hosts (tokenize.url_hosts) ------------------------------------------------------ */

static inline int
is_host_char(Py_UCS4 c) /* [\w-] with re.ASCII */
{
    return c < 128 && (Py_ISALNUM(c) || c == '_' || c == '-');
}

static inline int
is_userinfo_char(Py_UCS4 c) /* [^\s/?#@"'<>] with re.ASCII */
{
    return !(c == ' ' || (c >= '\t' && c <= '\r') || c == '/' || c == '?' || c == '#'
             || c == '@' || c == '"' || c == '\'' || c == '<' || c == '>');
}

/* The end of [\w-]+(?:\.[\w-]+)+ matched at data[i:end], or -1 if it does not match there. */
static inline __attribute__((always_inline)) Py_ssize_t
match_host(int kind, const void *data, Py_ssize_t i, Py_ssize_t end)
{
    Py_ssize_t j = i;
    while (j < end && is_host_char(PyUnicode_READ(kind, data, j)))
        j++;
    if (j == i)
        return -1;
    int labels = 0;
    while (j < end && PyUnicode_READ(kind, data, j) == '.') {
        Py_ssize_t k = j + 1;
        while (k < end && is_host_char(PyUnicode_READ(kind, data, k)))
            k++;
        if (k == j + 1)
            break;
        j = k;
        labels++;
    }
    return labels ? j : -1;
}

/* Whether data[from:at] ends with ``scheme`` (lower-case ASCII), ignoring ASCII case. */
static inline int
ends_with_scheme(int kind, const void *data, Py_ssize_t from, Py_ssize_t at, const char *scheme)
{
    Py_ssize_t m = (Py_ssize_t)strlen(scheme);
    if (at - from < m)
        return 0;
    for (Py_ssize_t t = 0; t < m; t++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, at - m + t);
        if (c >= 'A' && c <= 'Z')
            c += 'a' - 'A';
        if (c != (Py_UCS4)scheme[t])
            return 0;
    }
    return 1;
}

/* Appends ``head`` + data[start:end] lower-cased (ASCII host characters) to ``hosts``. */
static int
append_host(PyObject *hosts, const char *head, int kind, const void *data, Py_ssize_t start,
            Py_ssize_t end)
{
    Py_ssize_t hlen = (Py_ssize_t)strlen(head);
    PyObject *host = PyUnicode_New(hlen + end - start, 127);
    if (host == NULL)
        return -1;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(host);
    memcpy(out, head, (size_t)hlen);
    for (Py_ssize_t k = start; k < end; k++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, k); /* a host character: ASCII */
        out[hlen + k - start] = (Py_UCS1)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
    int failed = PyList_Append(hosts, host);
    Py_DECREF(host);
    return failed;
}

static inline int
is_www(int kind, const void *data, Py_ssize_t n, Py_ssize_t k)
{
    if (k + 4 > n || PyUnicode_READ(kind, data, k + 3) != '.')
        return 0;
    Py_UCS4 a = PyUnicode_READ(kind, data, k), b = PyUnicode_READ(kind, data, k + 1),
            c = PyUnicode_READ(kind, data, k + 2);
    return (a == 'w' && b == 'w' && c == 'w') || (a == 'W' && b == 'W' && c == 'W');
}

static inline int
is_scheme_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t k) /* "://" at k */
{
    return k + 3 <= n && PyUnicode_READ(kind, data, k) == ':'
           && PyUnicode_READ(kind, data, k + 1) == '/' && PyUnicode_READ(kind, data, k + 2) == '/';
}

/* The first k >= from with "://" at k, or n. A str of 1-byte characters (nearly all mail) is
 * searched with memchr for the colons, the others a character at a time. */
static inline __attribute__((always_inline)) Py_ssize_t
next_scheme_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t from)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = data;
        for (Py_ssize_t k = from; k + 3 <= n; k++) {
            const Py_UCS1 *colon = memchr(d + k, ':', (size_t)(n - 2 - k));
            if (colon == NULL)
                break;
            k = colon - d;
            if (d[k + 1] == '/' && d[k + 2] == '/')
                return k;
        }
        return n;
    }
    while (from < n && !is_scheme_end(kind, data, n, from))
        from++;
    return from;
}

/* The first k >= from with "www." or "WWW." at k, or n (memchr for the dots, as above). */
static inline __attribute__((always_inline)) Py_ssize_t
next_www(int kind, const void *data, Py_ssize_t n, Py_ssize_t from)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = data;
        for (Py_ssize_t k = from + 3; k < n; k++) { /* k: where the dot would be */
            const Py_UCS1 *dot = memchr(d + k, '.', (size_t)(n - k));
            if (dot == NULL)
                break;
            k = dot - d;
            if (is_www(kind, data, n, k - 3))
                return k - 3;
        }
        return n;
    }
    while (from < n && !is_www(kind, data, n, from))
        from++;
    return from;
}

static inline __attribute__((always_inline)) int
find_hosts(PyObject *hosts, int kind, const void *data, Py_ssize_t n)
{
    /* "scheme://[userinfo@]host": each URL looked at between its marker and the next one */
    Py_ssize_t start = 0, at = next_scheme_end(kind, data, n, 0);
    while (at < n) {
        Py_ssize_t after = at + 3, following = next_scheme_end(kind, data, n, after);
        Py_ssize_t end = following, from = at - 5 > start ? at - 5 : start;
        if (ends_with_scheme(kind, data, from, at, "http")
            || ends_with_scheme(kind, data, from, at, "https")
            || ends_with_scheme(kind, data, from, at, "ftp")) {
            Py_ssize_t host = -1, host_end = -1, k = after;
            while (k < end && k - after <= 64 && is_userinfo_char(PyUnicode_READ(kind, data, k)))
                k++;
            if (k - after <= 64 && k < end && PyUnicode_READ(kind, data, k) == '@') {
                host_end = match_host(kind, data, k + 1, end);
                host = k + 1;
            }
            if (host_end < 0) {
                host_end = match_host(kind, data, after, end);
                host = after;
            }
            if (host_end >= 0 && append_host(hosts, "", kind, data, host, host_end) < 0)
                return -1;
        }
        start = after;
        at = following;
    }
    /* bare "www." (or "WWW."), not inside a word, a path or an address */
    start = 0;
    at = next_www(kind, data, n, 0);
    while (at < n) {
        Py_ssize_t after = at + 4, following = next_www(kind, data, n, after);
        int free_standing = at == start;
        if (!free_standing) {
            Py_UCS4 before = PyUnicode_READ(kind, data, at - 1);
            free_standing = !(is_host_char(before) || before == '.' || before == '/'
                              || before == '@');
        }
        if (free_standing) {
            Py_ssize_t host_end = match_host(kind, data, after, following);
            if (host_end >= 0 && append_host(hosts, "www.", kind, data, after, host_end) < 0)
                return -1;
        }
        start = after;
        at = following;
    }
    return 0;
}

PyDoc_STRVAR(url_hosts_doc,
"url_hosts(text) -> list[str]\n\n"
"tokenize.url_hosts: the host names of the http(s)://, ftp:// and bare www. URLs of text.");

static PyObject *
url_hosts(PyObject *Py_UNUSED(module), PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "url_hosts() takes a str, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    PyObject *hosts = PyList_New(0);
    if (hosts == NULL)
        return NULL;
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int failed;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        failed = find_hosts(hosts, PyUnicode_1BYTE_KIND, data, n);
        break;
    case PyUnicode_2BYTE_KIND:
        failed = find_hosts(hosts, PyUnicode_2BYTE_KIND, data, n);
        break;
    default:
        failed = find_hosts(hosts, PyUnicode_4BYTE_KIND, data, n);
    }
    if (failed) {
        Py_DECREF(hosts);
        return NULL;
    }
    return hosts;
}

/* ---- address fields (featurizer._count_header_tokens) ------------------------------------- */

static inline int
is_local_char(unsigned char c) /* [\w.!#$%&'*+/=?^`{|}~-] of mail.ADDRESS_RE, on ASCII */
{
    return Py_ISALNUM(c) || (c != 0 && strchr("_.!#$%&'*+/=?^`{|}~-", c) != NULL);
}

/* counts[prefix + lower(data[start:end])] += 1 */
static int
add_lowered(PyObject *counts, PyObject *prefix, const unsigned char *data, Py_ssize_t start,
            Py_ssize_t end)
{
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    PyObject *token = PyUnicode_New(plen + end - start, 127);
    if (token == NULL)
        return -1;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(token);
    memcpy(out, PyUnicode_1BYTE_DATA(prefix), (size_t)plen);
    for (Py_ssize_t k = start; k < end; k++)
        out[plen + k - start] = (Py_UCS1)Py_TOLOWER(data[k]);
    int failed = add_count(counts, token, 1);
    Py_DECREF(token);
    return failed;
}

/* The tokens of one address data[start:end] whose host starts at ``host``: prefix + address,
 * prefix + registrable domain, prefix + host if that is longer (featurizer._address_tokens,
 * mail.registrable_domain). */
/* The start of the registrable domain (mail.registrable_domain) of the host data[host:end],
 * a host of [\w-]+(?:\.[\w-]+)+ (at least one dot, no empty label); -1 on error. */
static Py_ssize_t
domain_start(PyObject *second_level, const unsigned char *data, Py_ssize_t host, Py_ssize_t end)
{
    Py_ssize_t dots[3] = {-1, -1, -1}, n_dots = 0; /* the last three dots of the host */
    for (Py_ssize_t k = end - 1; k >= host && n_dots < 3; k--)
        if (data[k] == '.')
            dots[n_dots++] = k;
    Py_ssize_t domain = n_dots >= 2 ? dots[1] + 1 : host;
    if (n_dots >= 2 && end - dots[0] - 1 == 2) { /* a two-letter last label: co.uk, com.cn */
        PyObject *label = PyUnicode_New(dots[0] - dots[1] - 1, 127);
        if (label == NULL)
            return -1;
        for (Py_ssize_t k = dots[1] + 1; k < dots[0]; k++)
            PyUnicode_1BYTE_DATA(label)[k - dots[1] - 1] = (Py_UCS1)Py_TOLOWER(data[k]);
        int known = PySequence_Contains(second_level, label);
        Py_DECREF(label);
        if (known < 0)
            return -1;
        if (known)
            domain = n_dots >= 3 ? dots[2] + 1 : host;
    }
    return domain;
}

static int
add_address(PyObject *counts, PyObject *prefix, PyObject *second_level,
            const unsigned char *data, Py_ssize_t start, Py_ssize_t host, Py_ssize_t end)
{
    if (add_lowered(counts, prefix, data, start, end) < 0)
        return -1;
    Py_ssize_t domain = domain_start(second_level, data, host, end);
    if (domain < 0 || add_lowered(counts, prefix, data, domain, end) < 0)
        return -1;
    if (domain != host && add_lowered(counts, prefix, data, host, end) < 0)
        return -1;
    return 0;
}

PyDoc_STRVAR(count_address_field_doc,
"count_address_field(prefix, value, counts, second_level, address_words, lower) -> None\n\n"
"The tokens of one ASCII value of an address field (From, To, ...), added to ``counts``:\n"
"each address (mail.ADDRESS_RE) as prefix + address, domain and host, and the words of the\n"
"rest of the value (of all of it with ``address_words``), lower-cased with ``lower``.\n"
"``second_level``: the labels under which a domain has three labels (co.uk).");

/* The first address (mail.ADDRESS_RE) of the ASCII data[from:n]: 1 with its start, the index
 * of its '@' and its end set; 0 when there is none. */
static int
next_address(const unsigned char *data, Py_ssize_t n, Py_ssize_t from, Py_ssize_t *start,
             Py_ssize_t *at_sign, Py_ssize_t *end)
{
    Py_ssize_t i = from;
    while (i < n) {
        /* an address starts only where a run of local-part characters starts */
        if (!is_local_char(data[i]) || (i > 0 && is_local_char(data[i - 1]))) {
            i++;
            continue;
        }
        Py_ssize_t at = i;
        while (at < n && is_local_char(data[at]))
            at++;
        Py_ssize_t host_end = at < n && data[at] == '@'
            ? match_host(PyUnicode_1BYTE_KIND, data, at + 1, n) : -1;
        if (host_end >= 0) {
            *start = i;
            *at_sign = at;
            *end = host_end;
            return 1;
        }
        i = at;
    }
    return 0;
}

/* count_address_field's work on an ASCII prefix and value; -1 with an exception set */
static int
count_address_value(WordCounter *self, PyObject *prefix, PyObject *value, PyObject *counts,
                    PyObject *second_level, int address_words, int lower)
{
    const unsigned char *data = PyUnicode_1BYTE_DATA(value);
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    /* the value with each address made one space (the words around them) */
    unsigned char *rest = PyMem_Malloc((size_t)n + 1);
    if (rest == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t rest_len = 0, kept_from = 0, i = 0, at, end;
    while (next_address(data, n, i, &i, &at, &end)) {
        if (add_address(counts, prefix, second_level, data, i, at + 1, end) < 0) {
            PyMem_Free(rest);
            return -1;
        }
        memcpy(rest + rest_len, data + kept_from, (size_t)(i - kept_from));
        rest_len += i - kept_from;
        rest[rest_len++] = ' ';
        kept_from = i = end;
    }
    memcpy(rest + rest_len, data + kept_from, (size_t)(n - kept_from));
    rest_len += n - kept_from;
    ScanState st;
    int failed = address_words
        ? state_init_str(&st, value, lower, prefix)
        : state_init(&st, PyUnicode_1BYTE_KIND, rest, rest_len, 1, lower, prefix);
    if (!failed) {
        failed = scan_text(self, &st, emit_count) < 0 || add_counts(&st, counts) < 0;
        state_free(&st);
    }
    PyMem_Free(rest);
    return failed ? -1 : 0;
}

static PyObject *
WordCounter_count_address_field(WordCounter *self, PyObject *args)
{
    PyObject *prefix, *value, *counts, *second_level;
    int address_words, lower;
    if (!PyArg_ParseTuple(args, "UUO!Opp:count_address_field", &prefix, &value, &PyDict_Type,
                          &counts, &second_level, &address_words, &lower))
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix) || !PyUnicode_IS_ASCII(value)) {
        PyErr_SetString(PyExc_ValueError, "count_address_field: prefix and value must be ASCII");
        return NULL;
    }
    if (count_address_value(self, prefix, value, counts, second_level, address_words, lower) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* counts[prefix + word] += n for the words of an ASCII ``text`` (count(text, counts, prefix,
 * lower)) */
static int
count_prefixed_ascii(WordCounter *self, PyObject *text, PyObject *prefix, int lower,
                     PyObject *counts)
{
    ScanState st;
    if (state_init_str(&st, text, lower, prefix) < 0)
        return -1;
    int failed = scan_text(self, &st, emit_count) < 0 || add_counts(&st, counts) < 0;
    state_free(&st);
    return failed ? -1 : 0;
}

/* (prefix, text, is_address) appended to ``left`` for the Python path */
static int
leave_to_python(PyObject *left, PyObject *prefix, PyObject *text, PyObject *is_address)
{
    PyObject *item = PyTuple_Pack(3, prefix, text, is_address);
    if (item == NULL)
        return -1;
    int failed = PyList_Append(left, item);
    Py_DECREF(item);
    return failed;
}

static int
count_header_field(WordCounter *self, PyObject *field, PyObject *headers, PyObject *counts,
                   PyObject *second_level, int address_words, int lower, PyObject *left)
{
    if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 3
        || !PyUnicode_Check(PyTuple_GET_ITEM(field, 1))) {
        PyErr_SetString(PyExc_TypeError,
                        "count_header_fields: fields are (name, prefix, is_address) tuples");
        return -1;
    }
    PyObject *name = PyTuple_GET_ITEM(field, 0), *prefix = PyTuple_GET_ITEM(field, 1);
    PyObject *is_address = PyTuple_GET_ITEM(field, 2);
    PyObject *values = PyDict_GetItemWithError(headers, name); /* borrowed */
    if (values == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int address = PyObject_IsTrue(is_address);
    if (address < 0)
        return -1;
    Py_INCREF(values); /* the dict calls below may run code that drops it from ``headers`` */
    int failed = 0;
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "count_header_fields: header values must be lists");
        failed = 1;
    }
    else if (!address && PyList_GET_SIZE(values)) {
        /* the words of all of a field's values at once: no word spans the newline */
        PyObject *text;
        if (PyList_GET_SIZE(values) == 1) {
            text = PyList_GET_ITEM(values, 0);
            Py_INCREF(text);
        }
        else {
            PyObject *newline = PyUnicode_FromOrdinal('\n');
            text = newline == NULL ? NULL : PyUnicode_Join(newline, values);
            Py_XDECREF(newline);
        }
        if (text == NULL)
            failed = 1;
        else if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "count_header_fields: header values must be str");
            failed = 1;
        }
        else if (PyUnicode_IS_ASCII(text))
            failed = count_prefixed_ascii(self, text, prefix, lower, counts) < 0;
        else
            failed = leave_to_python(left, prefix, text, is_address) < 0;
        Py_XDECREF(text);
    }
    else if (address) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(values) && !failed; k++) {
            PyObject *value = PyList_GET_ITEM(values, k);
            Py_INCREF(value);
            if (!PyUnicode_Check(value)) {
                PyErr_SetString(PyExc_TypeError, "count_header_fields: header values must be str");
                failed = 1;
            }
            else if (PyUnicode_IS_ASCII(value) && PyUnicode_IS_ASCII(prefix))
                failed = count_address_value(self, prefix, value, counts, second_level,
                                             address_words, lower) < 0;
            else
                failed = leave_to_python(left, prefix, value, is_address) < 0;
            Py_DECREF(value);
        }
    }
    Py_DECREF(values);
    return failed ? -1 : 0;
}

PyDoc_STRVAR(count_header_fields_doc,
"count_header_fields(fields, headers, counts, second_level, address_words, lower) -> list\n\n"
"The header tokens of a mail (featurizer._count_header_tokens) added to ``counts``: for each\n"
"(name, prefix, is_address) of ``fields`` with values in ``headers`` (name -> list of str),\n"
"an address field's ASCII values as count_address_field does, another field's values joined\n"
"by newlines, if ASCII, as count(text, counts, prefix, lower). Returns the (prefix, text,\n"
"is_address) of the values it left to the caller: those that are not ASCII.");

static PyObject *
WordCounter_count_header_fields(WordCounter *self, PyObject *args)
{
    PyObject *fields, *headers, *counts, *second_level;
    int address_words, lower;
    if (!PyArg_ParseTuple(args, "O!O!O!Opp:count_header_fields", &PyTuple_Type, &fields,
                          &PyDict_Type, &headers, &PyDict_Type, &counts, &second_level,
                          &address_words, &lower))
        return NULL;
    PyObject *left = PyList_New(0);
    if (left == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(fields); k++)
        if (count_header_field(self, PyTuple_GET_ITEM(fields, k), headers, counts, second_level,
                               address_words, lower, left) < 0) {
            Py_DECREF(left);
            return NULL;
        }
    return left;
}

static int append_addresses(PyObject *found, PyObject *value);

PyDoc_STRVAR(addresses_doc,
"addresses(value) -> list[str]\n\n"
"``[a.lower() for a in mail.ADDRESS_RE.findall(value)]`` for an ASCII ``value``.");

static PyObject *
addresses(PyObject *Py_UNUSED(module), PyObject *value)
{
    if (!PyUnicode_Check(value) || !PyUnicode_IS_ASCII(value)) {
        PyErr_SetString(PyExc_ValueError, "addresses: the value must be an ASCII str");
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found != NULL && append_addresses(found, value) < 0)
        Py_CLEAR(found);
    return found;
}

/* The addresses of the ASCII str ``value``, lower-cased, appended to ``found``; -1 on error */
static int
append_addresses(PyObject *found, PyObject *value)
{
    const unsigned char *data = PyUnicode_1BYTE_DATA(value);
    Py_ssize_t n = PyUnicode_GET_LENGTH(value), i = 0;
    Py_ssize_t at, end;
    while (next_address(data, n, i, &i, &at, &end)) {
        PyObject *address = PyUnicode_New(end - i, 127);
        if (address == NULL)
            return -1;
        for (Py_ssize_t k = i; k < end; k++)
            PyUnicode_1BYTE_DATA(address)[k - i] = (Py_UCS1)Py_TOLOWER(data[k]);
        int failed = PyList_Append(found, address);
        Py_DECREF(address);
        if (failed)
            return -1;
        i = end;
    }
    return 0;
}

/* ---- header values (mail._unfold) --------------------------------------------------------- */

static inline int
is_ascii_space(unsigned char c) /* str.isspace() of an ASCII character */
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static PyObject *unfold_data(const unsigned char *data, Py_ssize_t n);

/* ``" ".join(filter(None, map(str.strip, value.decode("ascii").split("\n"))))`` */
static PyObject *
unfold_value(PyObject *value, int known_ascii)
{
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(value);
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    for (Py_ssize_t k = 0; k < n && !known_ascii; k++)
        if (data[k] >= 128) {
            PyErr_SetString(PyExc_ValueError, "unfold_headers: a value is not ASCII");
            return NULL;
        }
    return unfold_data(data, n);
}

/* unfold_value of the ASCII data[0:n] */
static PyObject *
unfold_data(const unsigned char *data, Py_ssize_t n)
{
    Py_ssize_t out_len = 0;
    /* first pass: the length; second: the copy (no buffer beside the str) */
    PyObject *text = NULL;
    for (int pass = 0; pass < 2; pass++) {
        Py_UCS1 *out = pass ? PyUnicode_1BYTE_DATA(text) : NULL;
        Py_ssize_t at = 0, line = 0;
        while (line <= n) {
            const unsigned char *nl = memchr(data + line, '\n', (size_t)(n - line));
            Py_ssize_t end = nl == NULL ? n : nl - data, a = line, b = end;
            while (a < b && is_ascii_space(data[a]))
                a++;
            while (b > a && is_ascii_space(data[b - 1]))
                b--;
            if (b > a) {
                if (at) {
                    if (out)
                        out[at] = ' ';
                    at++;
                }
                if (out)
                    memcpy(out + at, data + a, (size_t)(b - a));
                at += b - a;
            }
            line = end + 1;
        }
        if (!pass) {
            out_len = at;
            text = PyUnicode_New(out_len, 127);
            if (text == NULL)
                return NULL;
        }
    }
    return text;
}

static int unfold_into(PyObject *fields, PyObject *headers, int known_ascii);

PyDoc_STRVAR(unfold_headers_doc,
"unfold_headers(fields, headers) -> None\n\n"
"For each (name, raw ASCII value) of ``fields``: ``headers.setdefault(name, []).append(v)``\n"
"where v is the value unfolded (each line stripped, the non-empty ones joined by a space),\n"
"as mail._unfold does.");

static PyObject *
unfold_headers(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *fields, *headers;
    if (!PyArg_ParseTuple(args, "O!O!:unfold_headers", &PyList_Type, &fields, &PyDict_Type,
                          &headers))
        return NULL;
    if (unfold_into(fields, headers, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* unfold_headers' work (``known_ascii``: the values are, no need to look); -1 with an
 * exception set */
static int
unfold_into(PyObject *fields, PyObject *headers, int known_ascii)
{
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(fields); k++) {
        PyObject *field = PyList_GET_ITEM(fields, k); /* borrowed; the list is not changed */
        if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 2
            || !PyBytes_Check(PyTuple_GET_ITEM(field, 1))) {
            PyErr_SetString(PyExc_TypeError, "unfold_headers: fields are (name, bytes) pairs");
            return -1;
        }
        Py_INCREF(field); /* the dict calls below may run code that empties the list */
        PyObject *name = PyTuple_GET_ITEM(field, 0);
        PyObject *text = unfold_value(PyTuple_GET_ITEM(field, 1), known_ascii);
        int failed = text == NULL;
        if (!failed) {
            PyObject *values = PyDict_GetItemWithError(headers, name); /* borrowed */
            if (values == NULL && !PyErr_Occurred()) {
                values = PyList_New(0);
                failed = values == NULL || PyDict_SetItem(headers, name, values) < 0;
                Py_XDECREF(values); /* the dict holds it */
            }
            else if (values == NULL || !PyList_Check(values)) {
                if (values != NULL)
                    PyErr_SetString(PyExc_TypeError, "unfold_headers: values must be lists");
                failed = 1;
            }
            failed = failed || PyList_Append(values, text) < 0;
        }
        Py_XDECREF(text);
        Py_DECREF(field);
        if (failed)
            return -1;
        if (k >= PyList_GET_SIZE(fields))
            break;
    }
    return 0;
}

/* ---- header layout tokens (header_layout.header_layout_tokens) ------------------------------ */

enum { LAYOUT_MAX_FIELDS = 256, SHAPE_CHARS = 60, SHAPED_BYTES = 4 * SHAPE_CHARS };

typedef struct {
    Py_ssize_t name, name_len, value, value_len; /* offsets into the block */
} LayoutField;

static inline int
is_field_name_byte(unsigned char c) /* [!-9;-~] */
{
    return c >= '!' && c <= '~' && c != ':';
}

static inline int
is_bytes_space(unsigned char c) /* bytes.strip()'s white space */
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The offset of the first byte of a field's value after ``name_end`` (the name run), or -1 if
 * the line is not ``name[ \t]*:``; the white space after the colon is skipped. */
static inline Py_ssize_t
field_value_start(const unsigned char *b, Py_ssize_t n, Py_ssize_t name_end)
{
    Py_ssize_t j = name_end;
    while (j < n && (b[j] == ' ' || b[j] == '\t'))
        j++;
    if (j >= n || b[j] != ':')
        return -1;
    j++;
    while (j < n && (b[j] == ' ' || b[j] == '\t'))
        j++;
    return j;
}

/* The end of a value starting at ``j``: its line and each continuation line, up to the \n. */
static inline Py_ssize_t
field_value_end(const unsigned char *b, Py_ssize_t n, Py_ssize_t j)
{
    Py_ssize_t end = j;
    for (;;) {
        const unsigned char *nl = memchr(b + end, '\n', (size_t)(n - end));
        end = nl == NULL ? n : nl - b;
        if (end + 1 < n && (b[end + 1] == ' ' || b[end + 1] == '\t'))
            end++;
        else
            return end;
    }
}

/* Where the line after the one at b[line] starts; -1 when that line is the last. */
static inline Py_ssize_t
next_line(const unsigned char *b, Py_ssize_t n, Py_ssize_t line)
{
    const unsigned char *nl = memchr(b + line, '\n', (size_t)(n - line));
    return nl == NULL ? -1 : nl - b + 1;
}

/* The fields of header_layout._FIELD_RE (``^([!-9;-~]+)[ \t]*:[ \t]*(.*(?:\n[ \t].*)*)``,
 * re.M) as findall finds them, the first ``max`` of them. ``.`` is every byte but \n. */
static Py_ssize_t
layout_fields(const unsigned char *b, Py_ssize_t n, LayoutField *fields, Py_ssize_t max)
{
    Py_ssize_t found = 0, line = 0;
    while (line < n && found < max) {
        Py_ssize_t name_end = line;
        while (name_end < n && is_field_name_byte(b[name_end]))
            name_end++;
        Py_ssize_t start = name_end > line ? field_value_start(b, n, name_end) : -1;
        if (start < 0) { /* not a field line: on to the next line */
            if ((line = next_line(b, n, line)) < 0)
                break;
            continue;
        }
        Py_ssize_t end = field_value_end(b, n, start);
        fields[found++] = (LayoutField){line, name_end - line, start, end - start};
        line = end + 1; /* the match ends on a \n (or the end); the next line starts after it */
    }
    return found;
}

static int
add_one(PyObject *counts, PyObject *token) /* counts[token] += 1; steals ``token`` */
{
    if (token == NULL)
        return -1;
    int failed = add_count(counts, token, 1);
    Py_DECREF(token);
    return failed;
}

static inline void
put_lower(Py_UCS1 *out, const unsigned char *from, Py_ssize_t len)
{
    for (Py_ssize_t k = 0; k < len; k++)
        out[k] = (Py_UCS1)(from[k] >= 'A' && from[k] <= 'Z' ? from[k] + 32 : from[k]);
}

/* "order:" + ">".join(window) for each window of ``size`` of ["^", *names, "$"] */
static int
add_order_tokens(PyObject *counts, const unsigned char *b, const LayoutField *fields,
                 Py_ssize_t n_fields, Py_ssize_t size)
{
    Py_ssize_t framed = n_fields + 2;
    for (Py_ssize_t start = 0; start + size <= framed; start++) {
        Py_ssize_t len = 6 + (size - 1); /* "order:" and the ">"s */
        for (Py_ssize_t k = start; k < start + size; k++)
            len += k == 0 || k == framed - 1 ? 1 : fields[k - 1].name_len;
        PyObject *token = PyUnicode_New(len, 127);
        if (token == NULL)
            return -1;
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(token);
        memcpy(out, "order:", 6);
        Py_ssize_t at = 6;
        for (Py_ssize_t k = start; k < start + size; k++) {
            if (k > start)
                out[at++] = '>';
            if (k == 0)
                out[at++] = '^';
            else if (k == framed - 1)
                out[at++] = '$';
            else {
                put_lower(out + at, b + fields[k - 1].name, fields[k - 1].name_len);
                at += fields[k - 1].name_len;
            }
        }
        if (add_one(counts, token) < 0)
            return -1;
    }
    return 0;
}

/* Each byte's class in a value's shape (ASCII letter a, digit 0, 8-bit h, white space a space,
 * any other byte itself), and whether a class's runs are made one character: made at import. */
static Py_UCS1 shape_class[256];
static unsigned char shape_runs[256];

static void
init_shape_classes(void)
{
    for (int c = 0; c < 256; c++) {
        shape_class[c] = (Py_UCS1)((c | 32) >= 'a' && (c | 32) <= 'z' ? 'a'
                                   : c >= '0' && c <= '9'             ? '0'
                                   : c >= 0x80                        ? 'h'
                                   : is_bytes_space((unsigned char)c) ? ' '
                                                                      : c);
    }
    shape_runs['a'] = shape_runs['0'] = shape_runs['h'] = shape_runs[' '] = 1;
}

/* header_layout.value_shape: the value's first SHAPED_BYTES bytes stripped, each byte as its
 * class (ASCII letter a, digit 0, 8-bit h, white space a space, others themselves), each run
 * of one of those four classes one character, cut at SHAPE_CHARS. Returns the length. */
static Py_ssize_t
value_shape_into(const unsigned char *v, Py_ssize_t len, Py_UCS1 *shape)
{
    if (len > SHAPED_BYTES)
        len = SHAPED_BYTES;
    Py_ssize_t a = 0, z = len, at = 0;
    while (a < z && is_bytes_space(v[a]))
        a++;
    while (z > a && is_bytes_space(v[z - 1]))
        z--;
    /* Without a branch per byte: each byte's class is written, and the shape moves on unless
     * it continues a run of its class (a branch mispredicted at each change of class, every
     * few bytes of a header value, cost more than the classification). ``shape`` has room
     * for one byte past SHAPE_CHARS. The first byte is never a run's continuation. */
    Py_UCS1 previous = 0; /* no class: no byte of a value is NUL-classed as a run */
    for (Py_ssize_t k = a; k < z && at < SHAPE_CHARS; k++) {
        const Py_UCS1 cls = shape_class[v[k]];
        shape[at] = cls;
        at += !(cls == previous && shape_runs[cls]);
        previous = cls;
    }
    return at;
}

static int
add_shape_tokens(PyObject *counts, const unsigned char *b, const LayoutField *fields,
                 Py_ssize_t n_fields)
{
    for (Py_ssize_t f = 0; f < n_fields; f++) {
        Py_UCS1 shape[SHAPE_CHARS + 1];
        Py_ssize_t shape_len = value_shape_into(b + fields[f].value, fields[f].value_len, shape);
        Py_ssize_t name_len = fields[f].name_len;
        PyObject *token = PyUnicode_New(6 + name_len + 1 + shape_len, 127);
        if (token == NULL)
            return -1;
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(token);
        memcpy(out, "shape:", 6);
        put_lower(out + 6, b + fields[f].name, name_len);
        out[6 + name_len] = ':';
        memcpy(out + 7 + name_len, shape, (size_t)shape_len);
        if (add_one(counts, token) < 0)
            return -1;
    }
    return 0;
}

PyDoc_STRVAR(header_layout_doc,
"header_layout(block, shortest, longest, shapes, counts) -> None\n\n"
"Adds header_layout.header_layout_tokens(block, shortest, longest, shapes) to the dict\n"
"``counts``, in that order: the field-order runs (none when ``longest`` is 0), then with\n"
"``shapes`` the value shapes. ``shortest`` must be at least 1.");

static PyObject *
header_layout(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer block;
    Py_ssize_t shortest, longest;
    int shapes;
    PyObject *counts;
    if (!PyArg_ParseTuple(args, "y*nnpO!:header_layout", &block, &shortest, &longest, &shapes,
                          &PyDict_Type, &counts))
        return NULL;
    if (shortest < 1 || longest < 0) {
        PyBuffer_Release(&block);
        PyErr_SetString(PyExc_ValueError, "header_layout needs shortest >= 1, longest >= 0");
        return NULL;
    }
    LayoutField fields[LAYOUT_MAX_FIELDS];
    const unsigned char *b = block.buf;
    Py_ssize_t n_fields = layout_fields(b, block.len, fields, LAYOUT_MAX_FIELDS);
    int failed = 0;
    if (longest && n_fields)
        for (Py_ssize_t size = shortest; size <= longest && !failed; size++)
            failed = add_order_tokens(counts, b, fields, n_fields, size) < 0;
    if (shapes && !failed)
        failed = add_shape_tokens(counts, b, fields, n_fields) < 0;
    PyBuffer_Release(&block);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- the header fields the reader reads (mail._parse_headers) ----------------------------- */

/* The str of the wanted name ``b[start:end]`` is (compared without case), borrowed; NULL if
 * none. ``names`` holds (lower-case bytes, str) pairs. */
static PyObject *
wanted_name(PyObject *names, const unsigned char *b, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t len = end - start;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++) {
        PyObject *pair = PyTuple_GET_ITEM(names, k);
        PyObject *raw = PyTuple_GET_ITEM(pair, 0);
        if (PyBytes_GET_SIZE(raw) != len)
            continue;
        const unsigned char *name = (const unsigned char *)PyBytes_AS_STRING(raw);
        Py_ssize_t i = 0;
        while (i < len && Py_TOLOWER(b[start + i]) == name[i])
            i++;
        if (i == len)
            return PyTuple_GET_ITEM(pair, 1);
    }
    return NULL;
}

/* The header line at b[line] as a field read: its name as a new reference, and where its
 * value starts in *start. NULL with no error set for a line that is not a field, or whose
 * name is not among ``names`` ((lower-case bytes, str) pairs; None reads every field, its
 * name lower-cased); NULL with an error set when the name's str cannot be made. */
static PyObject *
field_read_at(const unsigned char *b, Py_ssize_t n, Py_ssize_t line, PyObject *names,
              Py_ssize_t *start)
{
    Py_ssize_t name_end = line;
    while (name_end < n && is_field_name_byte(b[name_end]))
        name_end++;
    *start = name_end > line ? field_value_start(b, n, name_end) : -1;
    if (*start < 0)
        return NULL;
    if (names != Py_None)
        return Py_XNewRef(wanted_name(names, b, line, name_end));
    PyObject *name = PyUnicode_New(name_end - line, 127);
    if (name != NULL)
        put_lower(PyUnicode_1BYTE_DATA(name), b + line, name_end - line);
    return name;
}

static PyObject *scan_header_fields(const unsigned char *b, Py_ssize_t n, PyObject *names);

/* 0 if ``names`` is None or a tuple of (lower-case name as bytes, as str) pairs of field-name
 * bytes; -1 with a TypeError set if not. */
static int
check_field_names(PyObject *names)
{
    if (names == Py_None)
        return 0;
    int ok = PyTuple_Check(names);
    for (Py_ssize_t k = 0; ok && k < PyTuple_GET_SIZE(names); k++) {
        PyObject *pair = PyTuple_GET_ITEM(names, k);
        ok = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2
             && PyBytes_Check(PyTuple_GET_ITEM(pair, 0))
             && PyUnicode_Check(PyTuple_GET_ITEM(pair, 1));
        for (Py_ssize_t i = 0; ok && i < PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)); i++) {
            unsigned char c = (unsigned char)PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 0))[i];
            ok = is_field_name_byte(c) && Py_TOLOWER(c) == c;
        }
        ok = ok && PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)) > 0;
    }
    if (!ok) {
        PyErr_SetString(PyExc_TypeError,
                        "header_fields: names must be None or a tuple of (bytes, str) "
                        "pairs, lower-case field names");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(header_fields_doc,
"header_fields(block, names) -> list[tuple[str, bytes]]\n\n"
"(lower-case name, raw value) of the fields of the header ``block`` that mail._parse_headers\n"
"reads with its regex ``^(name|...)[ \\t]*:[ \\t]*(.*(?:\\n[ \\t].*)*)`` (re.M, re.I), in\n"
"order. ``names``: a tuple of (lower-case name as bytes, as str) pairs, names of printable\n"
"ASCII without ':' (compared without case), or None for every field.");

static PyObject *
header_fields(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer block;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*O:header_fields", &block, &names))
        return NULL;
    if (check_field_names(names) < 0) {
        PyBuffer_Release(&block);
        return NULL;
    }
    PyObject *fields = scan_header_fields(block.buf, block.len, names);
    PyBuffer_Release(&block);
    return fields;
}

/* header_fields' scan of b[0:n]; ``names`` checked already. A new list, NULL on error. */
static PyObject *
scan_header_fields(const unsigned char *b, Py_ssize_t n, PyObject *names)
{
    Py_ssize_t line = 0;
    PyObject *fields = PyList_New(0);
    while (fields != NULL && line < n) {
        Py_ssize_t start;
        PyObject *name = field_read_at(b, n, line, names, &start);
        if (name == NULL && PyErr_Occurred()) {
            Py_CLEAR(fields);
            break;
        }
        if (name == NULL) { /* not a field read: on to the next line */
            if ((line = next_line(b, n, line)) < 0)
                break;
            continue;
        }
        Py_ssize_t end = field_value_end(b, n, start);
        PyObject *value = PyBytes_FromStringAndSize((const char *)b + start, end - start);
        PyObject *field = value == NULL ? NULL : PyTuple_Pack(2, name, value);
        if (field == NULL || PyList_Append(fields, field) < 0)
            Py_CLEAR(fields);
        Py_XDECREF(field);
        Py_XDECREF(value);
        Py_DECREF(name);
        line = end + 1;
    }
    return fields;
}

/* ---- URL tokens (tokenize.url_tokens of tokenize.url_hosts) ------------------------------- */

/* \d{1,3}(?:\.\d{1,3}){3}, the whole of h[0:n] (tokenize._IP_RE.fullmatch of an ASCII host) */
static int
is_ip_address(const unsigned char *h, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (int group = 0; group < 4; group++) {
        if (group && (i >= n || h[i++] != '.'))
            return 0;
        Py_ssize_t digits = 0;
        while (i < n && h[i] >= '0' && h[i] <= '9' && digits < 3) {
            i++;
            digits++;
        }
        if (!digits)
            return 0;
    }
    return i == n;
}

PyDoc_STRVAR(count_url_tokens_doc,
"count_url_tokens(text, counts, second_level) -> None\n\n"
"``counts.update(tokenize.url_tokens(url_hosts(text)))``: ``url:<host>`` and, if another,\n"
"``url:<registrable domain>`` of each URL host of ``text`` in order (``url:ip`` and\n"
"``url:<address>`` for a numeric one), counted into the dict ``counts``.");

static PyObject *
count_url_tokens(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *text, *counts, *second_level;
    if (!PyArg_ParseTuple(args, "UO!O:count_url_tokens", &text, &PyDict_Type, &counts,
                          &second_level))
        return NULL;
    PyObject *hosts = url_hosts(NULL, text);
    if (hosts == NULL)
        return NULL;
    PyObject *prefix = PyUnicode_FromString("url:"), *ip = NULL;
    int failed = prefix == NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(hosts) && !failed; k++) {
        PyObject *host = PyList_GET_ITEM(hosts, k); /* ASCII, lower-case: append_host made it */
        const unsigned char *h = PyUnicode_1BYTE_DATA(host);
        Py_ssize_t n = PyUnicode_GET_LENGTH(host);
        if (is_ip_address(h, n)) {
            if (ip == NULL && (ip = PyUnicode_FromString("url:ip")) == NULL)
                failed = 1;
            else
                failed = add_count(counts, ip, 1) < 0 || add_lowered(counts, prefix, h, 0, n) < 0;
            continue;
        }
        Py_ssize_t domain = domain_start(second_level, h, 0, n);
        failed = domain < 0 || add_lowered(counts, prefix, h, 0, n) < 0
                 || (domain > 0 && add_lowered(counts, prefix, h, domain, n) < 0);
    }
    Py_XDECREF(ip);
    Py_XDECREF(prefix);
    Py_DECREF(hosts);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- where an entity's header lines end (mail._HEADER_LINES_RE) --------------------------- */

static inline int
is_header_name_byte(unsigned char c) /* [!-.0-9;=-~]: printable ASCII but '/', ':' and '<' */
{
    return c >= '!' && c <= '~' && c != '/' && c != ':' && c != '<';
}

/* The start of the line after the one at b[i] (n at the end). */
static inline Py_ssize_t
line_after(const unsigned char *b, Py_ssize_t n, Py_ssize_t i)
{
    const unsigned char *newline = i < n ? memchr(b + i, '\n', (size_t)(n - i)) : NULL;
    return newline == NULL ? n : newline - b + 1;
}

static Py_ssize_t lines_end(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos);

PyDoc_STRVAR(header_lines_end_doc,
"header_lines_end(data, pos=0) -> int\n\n"
"``mail._HEADER_LINES_RE.match(data, pos).end()``: the end of the run of header lines from\n"
"``pos`` (an mbox \"From \" line first, then fields and continuation lines).");

static PyObject *
header_lines_end(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer data;
    Py_ssize_t pos = 0;
    if (!PyArg_ParseTuple(args, "y*|n:header_lines_end", &data, &pos))
        return NULL;
    Py_ssize_t end = lines_end(data.buf, data.len, pos);
    PyBuffer_Release(&data);
    return PyLong_FromSsize_t(end);
}

/* header_lines_end of b[0:n] from ``pos`` */
static Py_ssize_t
lines_end(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos)
{
    Py_ssize_t i = pos < 0 ? 0 : pos > n ? n : pos;
    if (n - i >= 5 && memcmp(b + i, "From ", 5) == 0)
        i = line_after(b, n, i);
    while (i < n) {
        if (b[i] != ' ' && b[i] != '\t') { /* a field: name, white space, ':' not before "//" */
            Py_ssize_t j = i;
            while (j < n && is_header_name_byte(b[j]))
                j++;
            if (j == i)
                break;
            while (j < n && (b[j] == ' ' || b[j] == '\t'))
                j++;
            if (j >= n || b[j] != ':' || (j + 2 < n && b[j + 1] == '/' && b[j + 2] == '/'))
                break;
        }
        i = line_after(b, n, i);
    }
    return i;
}

/* ---- the first value of a few fields (mail._read_entities' MIME fields) ------------------ */

static PyObject *first_values_of(PyObject *fields, PyObject *names);

PyDoc_STRVAR(first_values_doc,
"first_values(fields, names) -> tuple\n\n"
"For each name of the tuple ``names``, the value of the first (name, value) pair of the list\n"
"``fields`` whose name equals it, or None: one pass for all the names.");

static PyObject *
first_values(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *fields, *names;
    if (!PyArg_ParseTuple(args, "O!O!:first_values", &PyList_Type, &fields, &PyTuple_Type,
                          &names))
        return NULL;
    return first_values_of(fields, names);
}

/* first_values of the list ``fields`` and the tuple ``names`` */
static PyObject *
first_values_of(PyObject *fields, PyObject *names)
{
    Py_ssize_t n_names = PyTuple_GET_SIZE(names), missing = n_names;
    PyObject *found = PyTuple_New(n_names);
    if (found == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(fields) && missing; k++) {
        PyObject *field = PyList_GET_ITEM(fields, k);
        if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 2) {
            Py_DECREF(found);
            PyErr_SetString(PyExc_TypeError, "first_values: fields are (name, value) pairs");
            return NULL;
        }
        Py_INCREF(field); /* a comparison below may run code that changes ``fields`` */
        PyObject *name = PyTuple_GET_ITEM(field, 0);
        for (Py_ssize_t j = 0; j < n_names; j++) {
            if (PyTuple_GET_ITEM(found, j) != NULL)
                continue;
            int equal = PyObject_RichCompareBool(name, PyTuple_GET_ITEM(names, j), Py_EQ);
            if (equal < 0) {
                Py_DECREF(field);
                Py_DECREF(found);
                return NULL;
            }
            if (equal) {
                PyObject *value = PyTuple_GET_ITEM(field, 1);
                Py_INCREF(value);
                PyTuple_SET_ITEM(found, j, value);
                missing--;
            }
        }
        Py_DECREF(field);
    }
    for (Py_ssize_t j = 0; j < n_names; j++)
        if (PyTuple_GET_ITEM(found, j) == NULL) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(found, j, Py_None);
        }
    return found;
}

/* ---- Han characters (tokenize._HAN_CHAR_RE) ---------------------------------------------- */

static inline int
is_han(Py_UCS4 c)
{
    return (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff)
           || (c >= 0xf900 && c <= 0xfaff) || (c >= 0x20000 && c <= 0x2ebef);
}

/* Whether "=?" occurs in b[0:n] */
static int
encoded_word_in(const char *b, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n;) {
        const char *q = memchr(b + i, '?', (size_t)(n - i));
        if (q == NULL)
            break;
        if (q[-1] == '=')
            return 1;
        i = q - b + 1;
    }
    return 0;
}

PyDoc_STRVAR(has_encoded_word_doc,
"has_encoded_word(data) -> bool\n\n"
"``b\"=?\" in data``, with memchr over the ``?``s: Python's search for a two-byte needle\n"
"steps through a mail's header block a byte or two at a time.");

static PyObject *
has_encoded_word(PyObject *Py_UNUSED(module), PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_Format(PyExc_TypeError, "has_encoded_word() takes bytes, not %.100s",
                     Py_TYPE(data)->tp_name);
        return NULL;
    }
    return PyBool_FromLong(encoded_word_in(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)));
}

PyDoc_STRVAR(has_field_doc,
"has_field(block, names) -> bool\n\n"
"Whether a header block (line ends \\n) has a line that starts with one of ``names``\n"
"(lower-case bytes) compared without case, then spaces or tabs, then a colon: the\n"
"featurizer's look for ignore_fields (featurizer.has_field is the reference).");

/* One pass over the line starts (memchr from line to line): a mail's block of 2 KB in a
 * fraction of a microsecond, where lower() and a search a name cost the Python path 3 us. */
static PyObject *
has_field(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer block;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*O!:has_field", &block, &PyTuple_Type, &names)) {
        return NULL;
    }
    const char *start = block.buf, *end = start + block.len;
    Py_ssize_t n_names = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < n_names; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyBuffer_Release(&block);
            PyErr_SetString(PyExc_TypeError, "has_field() takes a tuple of bytes names");
            return NULL;
        }
    }
    int found = 0;
    for (const char *line = start; line < end && !found;) {
        Py_ssize_t room = end - line;
        for (Py_ssize_t i = 0; i < n_names && !found; i++) {
            PyObject *name = PyTuple_GET_ITEM(names, i);
            Py_ssize_t len = PyBytes_GET_SIZE(name);
            const char *wanted = PyBytes_AS_STRING(name);
            if (len == 0 || len >= room) {
                continue;
            }
            Py_ssize_t k = 0;
            while (k < len && Py_TOLOWER(Py_CHARMASK(line[k])) == wanted[k]) {
                k++;
            }
            if (k < len) {
                continue;
            }
            while (k < room && (line[k] == ' ' || line[k] == '\t')) {
                k++;
            }
            found = k < room && line[k] == ':';
        }
        const char *newline = memchr(line, '\n', (size_t)(end - line));
        if (newline == NULL) {
            break;
        }
        line = newline + 1;
    }
    PyBuffer_Release(&block);
    return PyBool_FromLong(found);
}

PyDoc_STRVAR(reserve_doc,
"reserve(counts, n) -> None\n\n"
"Gives the empty dict ``counts`` (a Counter too) a table that holds ``n`` keys, so that\n"
"counting a mail's few hundred tokens into it does not grow it seven times over. Nothing\n"
"else changes: a dict that is not empty, ``n`` under 9, or a Python where dicts are built\n"
"otherwise (3.13 and later, free threading) are left as they are.");

/* The table of a presized dict moved into an empty one: CPython 3.11 and 3.12 have no way
 * to presize a dict subclass, and a Counter's seven resizes (8 to 512 slots) cost about 4 us
 * a mail. Both dicts are empty, so swapping their key tables changes no content. */
static PyObject *
reserve(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *counts;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n:reserve", &PyDict_Type, &counts, &n))
        return NULL;
#if PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
    PyDictObject *d = (PyDictObject *)counts;
    if (d->ma_used == 0 && d->ma_values == NULL && n > 8) {
        PyObject *sized = _PyDict_NewPresized(n < (1 << 16) ? n : (1 << 16));
        if (sized == NULL)
            return NULL;
        PyDictObject *s = (PyDictObject *)sized;
        if (s->ma_used == 0 && s->ma_values == NULL) {
            PyDictKeysObject *keys = d->ma_keys;
            d->ma_keys = s->ma_keys;
            s->ma_keys = keys; /* freed with ``sized`` */
        }
        Py_DECREF(sized);
    }
#else
    (void)counts;
    (void)n;
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(has_han_doc,
"has_han(text) -> bool\n\n"
"Whether ``text`` holds a Han character (``tokenize._HAN_CHAR_RE.search(text)``): one pass\n"
"over its code points, none for a str of 1-byte characters.");

static PyObject *
has_han(PyObject *Py_UNUSED(module), PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "has_han() takes a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = PyUnicode_2BYTE_DATA(text);
        for (Py_ssize_t k = 0; k < n; k++)
            if (d[k] >= 0x3400 && is_han(d[k]))
                Py_RETURN_TRUE;
    }
    else if (kind == PyUnicode_4BYTE_KIND) {
        const Py_UCS4 *d = PyUnicode_4BYTE_DATA(text);
        for (Py_ssize_t k = 0; k < n; k++)
            if (d[k] >= 0x3400 && is_han(d[k]))
                Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE; /* 1-byte characters: all below U+0100 */
}

PyDoc_STRVAR(count_money_doc,
"count_money(text, counts) -> None\n\n"
"``counts[amount] += 1`` for each ``amount`` of ``tokenize._MONEY_RE.findall(text)`` (a ``$``\n"
"and the decimal digits after it, ``re``'s ``\\d``: ``str.isdecimal``), in the order found:\n"
"a ``memchr`` for each ``$`` of a str of 1-byte characters.");

/* Where the run of decimal digits from ``k`` ends in ``d`` (any kind). */
#define MONEY_DIGITS_END(d, k, n) do { \
        while ((k) < (n) && Py_UNICODE_ISDECIMAL((d)[k])) (k)++; \
    } while (0)

static PyObject *
count_money(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *text, *counts;
    if (!PyArg_ParseTuple(args, "UO!:count_money", &text, &PyDict_Type, &counts))
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t k = 0;
    while (k < n) {
        Py_ssize_t dollar;
        if (kind == PyUnicode_1BYTE_KIND) {
            const Py_UCS1 *d = data;
            const Py_UCS1 *found = memchr(d + k, '$', (size_t)(n - k));
            if (found == NULL)
                break;
            dollar = found - d;
        }
        else {
            dollar = PyUnicode_FindChar(text, '$', k, n, 1);
            if (dollar < 0) {
                if (dollar == -2)
                    return NULL;
                break;
            }
        }
        Py_ssize_t end = dollar + 1;
        if (kind == PyUnicode_1BYTE_KIND)
            MONEY_DIGITS_END((const Py_UCS1 *)data, end, n);
        else if (kind == PyUnicode_2BYTE_KIND)
            MONEY_DIGITS_END((const Py_UCS2 *)data, end, n);
        else
            MONEY_DIGITS_END((const Py_UCS4 *)data, end, n);
        if (end == dollar + 1) { /* a "$" with no digit after it: the regex goes on from the
                                    next character */
            k = dollar + 1;
            continue;
        }
        PyObject *amount = PyUnicode_Substring(text, dollar, end);
        if (amount == NULL)
            return NULL;
        int failed = add_count(counts, amount, 1);
        Py_DECREF(amount);
        if (failed)
            return NULL;
        k = end;
    }
    Py_RETURN_NONE;
}

/* ---- the top-level entity of a mail (mail.read_mail) ------------------------------------ */

/* The names read_top looks up in a mail's headers: subject, then the author fields in the
 * order read_mail tries them, then the recipient fields. Made at import. */
enum { TOP_SUBJECT, TOP_FROM, TOP_SENDER, TOP_REPLY_TO, TOP_TO, TOP_CC, TOP_NAMES };
static const char *const top_name_text[TOP_NAMES] = {"subject", "from", "sender", "reply-to",
                                                     "to", "cc"};
static PyObject *top_names[TOP_NAMES];

/* The addresses of the values of headers[names[first..last]] appended to ``found``, each name's
 * values in turn; with ``stop_at_first``, no name after the first that gave one. */
static int
header_addresses(PyObject *headers, int first, int last, int stop_at_first, PyObject *found)
{
    for (int k = first; k <= last; k++) {
        PyObject *values = PyDict_GetItemWithError(headers, top_names[k]); /* borrowed */
        if (values == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(values); j++)
            if (append_addresses(found, PyList_GET_ITEM(values, j)) < 0)
                return -1;
        if (stop_at_first && PyList_GET_SIZE(found))
            break;
    }
    return 0;
}

/* header_fields(block, names) of the ASCII block b[0:n], unfolded straight into the dict
 * ``headers`` as unfold_headers does, without making the (name, bytes) pairs; and the raw
 * value of the first field of each of ``mime_names`` (a tuple of str) set in the tuple
 * ``mime_values`` of as many NULLs (left NULL for a name absent). -1 on error. */
static int
unfold_fields(const unsigned char *b, Py_ssize_t n, PyObject *names, PyObject *mime_names,
              PyObject *headers, PyObject *mime_values)
{
    Py_ssize_t line = 0;
    while (line < n) {
        Py_ssize_t start;
        PyObject *name = field_read_at(b, n, line, names, &start);
        if (name == NULL && PyErr_Occurred())
            return -1;
        if (name == NULL) { /* not a field read: on to the next line */
            if ((line = next_line(b, n, line)) < 0)
                break;
            continue;
        }
        Py_ssize_t end = field_value_end(b, n, start);
        int failed = 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(mime_names) && !failed; j++) {
            if (PyTuple_GET_ITEM(mime_values, j) != NULL)
                continue;
            int equal = PyObject_RichCompareBool(name, PyTuple_GET_ITEM(mime_names, j), Py_EQ);
            if (equal < 0)
                failed = 1;
            else if (equal) {
                PyObject *raw = PyBytes_FromStringAndSize((const char *)b + start, end - start);
                if (raw == NULL)
                    failed = 1;
                else
                    PyTuple_SET_ITEM(mime_values, j, raw);
            }
        }
        PyObject *text = failed ? NULL : unfold_data(b + start, end - start);
        PyObject *values = text == NULL ? NULL : PyDict_GetItemWithError(headers, name);
        if (text != NULL && values == NULL && !PyErr_Occurred()) {
            values = PyList_New(0);
            if (values != NULL && PyDict_SetItem(headers, name, values) < 0)
                Py_CLEAR(values);
            Py_XDECREF(values); /* the dict holds it */
        }
        failed = values == NULL || PyList_Append(values, text) < 0;
        Py_XDECREF(text);
        Py_DECREF(name);
        if (failed)
            return -1;
        line = end + 1;
    }
    return 0;
}

/* Whether b[0:n] is ASCII: eight bytes or'ed at a time (a loop of bytes is not vectorized) */
static int
is_ascii_data(const unsigned char *b, Py_ssize_t n)
{
    uint64_t high = 0;
    Py_ssize_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t word;
        memcpy(&word, b + k, 8);
        high |= word;
    }
    for (; k < n; k++)
        high |= b[k];
    return (high & 0x8080808080808080ULL) == 0;
}

PyDoc_STRVAR(read_top_doc,
"read_top(raw, names, mime_names) -> tuple | None\n\n"
"The top-level entity of the mail ``raw`` (line ends \\n) as mail.read_mail reads it, when\n"
"its header lines are closed by an empty line (nearly all mail); None for any other (the\n"
"Python split reads it, with its defects). Returns (header_block, body, fields, mime_values,\n"
"encoded_words, headers, subject, from_addrs, to_addrs): ``mime_values`` as\n"
"first_values(header_fields(header_block, names), mime_names), ``encoded_words`` as\n"
"has_encoded_word(header_block). For a block of ASCII without an encoded word, ``headers``\n"
"as unfold_headers(header_fields(header_block, names), {}) and the subject, the author's and\n"
"the recipients' addresses as read_mail finds them in it, and ``fields`` None; for another,\n"
"``fields`` as header_fields(header_block, names) and those four None.");

static PyObject *
read_top(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *raw, *names, *mime_names;
    if (!PyArg_ParseTuple(args, "O!OO!:read_top", &PyBytes_Type, &raw, &names, &PyTuple_Type,
                          &mime_names))
        return NULL;
    if (check_field_names(names) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
    const Py_ssize_t n = PyBytes_GET_SIZE(raw);
    if (n == 0 || b[0] == '\n' || b[0] == ' ' || b[0] == '\t')
        Py_RETURN_NONE;
    Py_ssize_t end = lines_end(b, n, 0);
    if (end == 0 || end >= n || b[end] != '\n')
        Py_RETURN_NONE;
    const Py_ssize_t block_len = end - 1; /* the block without the \n of its last line */
    const int ascii = is_ascii_data(b, block_len);
    int encoded_words = encoded_word_in((const char *)b, block_len);
    PyObject *block = NULL, *body = NULL, *fields = NULL, *mime_values = NULL;
    PyObject *headers = NULL, *subject = NULL, *from_addrs = NULL, *to_addrs = NULL;
    PyObject *result = NULL;
    if ((block = PyBytes_FromStringAndSize((const char *)b, block_len)) == NULL
        || (body = PyBytes_FromStringAndSize((const char *)b + end + 1, n - end - 1)) == NULL)
        goto done;
    if (ascii && !encoded_words) {
        if ((headers = PyDict_New()) == NULL
            || (mime_values = PyTuple_New(PyTuple_GET_SIZE(mime_names))) == NULL)
            goto done;
        int failed = unfold_fields(b, block_len, names, mime_names, headers, mime_values);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(mime_names); j++)
            if (PyTuple_GET_ITEM(mime_values, j) == NULL)
                PyTuple_SET_ITEM(mime_values, j, Py_NewRef(Py_None));
        fields = Py_NewRef(Py_None);
        if (failed || (from_addrs = PyList_New(0)) == NULL || (to_addrs = PyList_New(0)) == NULL)
            goto done;
        PyObject *values = PyDict_GetItemWithError(headers, top_names[TOP_SUBJECT]);
        if (values == NULL && PyErr_Occurred())
            goto done;
        subject = values != NULL && PyList_GET_SIZE(values)
                      ? Py_NewRef(PyList_GET_ITEM(values, 0)) : PyUnicode_New(0, 127);
        if (subject == NULL
            || header_addresses(headers, TOP_FROM, TOP_REPLY_TO, 1, from_addrs) < 0
            || header_addresses(headers, TOP_TO, TOP_CC, 0, to_addrs) < 0)
            goto done;
    }
    else {
        if ((fields = scan_header_fields(b, block_len, names)) == NULL
            || (mime_values = first_values_of(fields, mime_names)) == NULL)
            goto done;
        headers = Py_NewRef(Py_None);
        subject = Py_NewRef(Py_None);
        from_addrs = Py_NewRef(Py_None);
        to_addrs = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(OOOOOOOOO)", block, body, fields, mime_values,
                           encoded_words ? Py_True : Py_False, headers, subject, from_addrs,
                           to_addrs);
done:
    Py_XDECREF(block);
    Py_XDECREF(body);
    Py_XDECREF(fields);
    Py_XDECREF(mime_values);
    Py_XDECREF(headers);
    Py_XDECREF(subject);
    Py_XDECREF(from_addrs);
    Py_XDECREF(to_addrs);
    return result;
}

/* ---- HTML to text ----------------------------------------------------------------------
 *
 * html_text(markup) gives what streamnb.features.html's selectolax path gives before its
 * strip(): the text nodes of the tree Lexbor's HTML5 parser builds, in document order, joined
 * by " ", or None where this scanner cannot be sure of that tree. It tokenizes as the HTML5
 * tokenizer does (data state, tags and their attributes, comments, bogus comments, doctypes,
 * character references, RCDATA for <title>, CR LF and CR read as LF) and follows the tree
 * builder's insertion modes only as far as they decide the text: which character tokens are
 * dropped (whitespace before <head>), and whether a character joins the text node before it
 * (nothing was inserted into the current node and it did not change since) or starts a new
 * one. The open elements and the active formatting elements are kept as the standard says,
 * so an end tag that the tree builder ignores is ignored here too.
 *
 * None (the caller parses with Lexbor) for everything whose tree it does not build: a NUL or
 * a lone surrogate; the elements whose content is not plain markup or whose text the caller
 * strips (script, style, noscript, template, textarea, iframe, xmp, ...); foreign content
 * (svg, math); frames; text, or any element other than the table's own, directly in a table
 * (foster parenting moves it); misnested formatting elements that the adoption agency would
 * move (a "furthest block"), a fourth open element of one formatting tag (Noah's ark), an <a>
 * inside an <a>; more than HTML_MAX_DEPTH open elements. Every step is bounded by those
 * sizes, so a scan is linear in the markup. A <select> is read by the select parsing Lexbor
 * follows (html_pop_to_select); the doctype decides quirks mode (html_doctype_quirks). */

#include "_html_entities.h"

enum {
    T_OTHER = 0, T_A, T_ADDRESS, T_APPLET, T_AREA, T_ARTICLE, T_ASIDE, T_B, T_BASE, T_BASEFONT,
    T_BGSOUND, T_BIG, T_BLOCKQUOTE, T_BODY, T_BR, T_BUTTON, T_CAPTION, T_CENTER, T_CODE, T_COL,
    T_COLGROUP, T_DD, T_DETAILS, T_DIALOG, T_DIR, T_DIV, T_DL, T_DT, T_EM, T_EMBED, T_FIELDSET,
    T_FIGCAPTION, T_FIGURE, T_FONT, T_FOOTER, T_FORM, T_FRAME, T_FRAMESET, T_H1, T_H2, T_H3,
    T_H4, T_H5, T_H6, T_HEAD, T_HEADER, T_HGROUP, T_HR, T_HTML, T_I, T_IFRAME, T_IMAGE, T_IMG,
    T_INPUT, T_ISINDEX, T_KEYGEN, T_LI, T_LINK, T_LISTING, T_MAIN, T_MARQUEE, T_MATH, T_MENU,
    T_META, T_NAV, T_NOBR, T_NOEMBED, T_NOFRAMES, T_NOSCRIPT, T_OBJECT, T_OL, T_OPTGROUP,
    T_OPTION, T_P, T_PARAM, T_PLAINTEXT, T_PRE, T_RB, T_RP, T_RT, T_RTC, T_S, T_SCRIPT,
    T_SEARCH, T_SECTION, T_SELECT, T_SELECTEDCONTENT, T_SMALL, T_SOURCE, T_STRIKE, T_STRONG, T_STYLE, T_SUMMARY,
    T_SVG, T_TABLE, T_TBODY, T_TD, T_TEMPLATE, T_TEXTAREA, T_TFOOT, T_TH, T_THEAD, T_TITLE,
    T_TR, T_TRACK, T_TT, T_U, T_UL, T_WBR, T_XMP, T_COUNT
};

/* flags of a tag */
#define HF_SPECIAL 0x001    /* the standard's "special" category */
#define HF_SCOPE 0x002      /* ends "has an element in scope" */
#define HF_IMPLIED 0x004    /* "generate implied end tags" pops it */
#define HF_FORMAT 0x008     /* a formatting element */
#define HF_CLOSE_P 0x010    /* its start tag closes an open <p> first */
#define HF_BLOCK_END 0x020  /* its end tag closes it when in scope */
#define HF_VOID 0x040       /* a void element inserted after reconstructing formatting */
#define HF_HEAD_VOID 0x080  /* base, link, meta...: a void element, no reconstruction */
#define HF_UNSURE 0x100     /* not followed here: the caller parses with Lexbor */
#define HF_HEADING 0x200
#define HF_TABLE_PART 0x400 /* table sections, rows, cells: ignored as start tags in body */

typedef struct { const char *name; unsigned char id; unsigned short flags; } HtmlTag;

#define SP HF_SPECIAL
static const HtmlTag html_tags[] = {  /* sorted by name */
    {"a", T_A, HF_FORMAT},
    {"address", T_ADDRESS, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"applet", T_APPLET, SP | HF_SCOPE | HF_UNSURE},
    {"area", T_AREA, SP | HF_VOID},
    {"article", T_ARTICLE, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"aside", T_ASIDE, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"b", T_B, HF_FORMAT},
    {"base", T_BASE, SP | HF_HEAD_VOID},
    {"basefont", T_BASEFONT, SP | HF_HEAD_VOID},
    {"bgsound", T_BGSOUND, SP | HF_HEAD_VOID},
    {"big", T_BIG, HF_FORMAT},
    {"blockquote", T_BLOCKQUOTE, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"body", T_BODY, SP},
    {"br", T_BR, SP | HF_VOID},
    {"button", T_BUTTON, SP | HF_BLOCK_END},
    {"caption", T_CAPTION, SP | HF_SCOPE | HF_UNSURE},
    {"center", T_CENTER, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"code", T_CODE, HF_FORMAT},
    {"col", T_COL, SP | HF_UNSURE},
    {"colgroup", T_COLGROUP, SP | HF_UNSURE},
    {"dd", T_DD, SP | HF_IMPLIED},
    {"details", T_DETAILS, SP | HF_UNSURE},
    {"dialog", T_DIALOG, HF_UNSURE},
    {"dir", T_DIR, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"div", T_DIV, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"dl", T_DL, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"dt", T_DT, SP | HF_IMPLIED},
    {"em", T_EM, HF_FORMAT},
    {"embed", T_EMBED, SP | HF_VOID},
    {"fieldset", T_FIELDSET, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"figcaption", T_FIGCAPTION, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"figure", T_FIGURE, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"font", T_FONT, HF_FORMAT},
    {"footer", T_FOOTER, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"form", T_FORM, SP},
    {"frame", T_FRAME, SP | HF_UNSURE},
    {"frameset", T_FRAMESET, SP | HF_UNSURE},
    {"h1", T_H1, SP | HF_HEADING},
    {"h2", T_H2, SP | HF_HEADING},
    {"h3", T_H3, SP | HF_HEADING},
    {"h4", T_H4, SP | HF_HEADING},
    {"h5", T_H5, SP | HF_HEADING},
    {"h6", T_H6, SP | HF_HEADING},
    {"head", T_HEAD, SP},
    {"header", T_HEADER, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"hgroup", T_HGROUP, SP | HF_UNSURE},
    {"hr", T_HR, SP},
    {"html", T_HTML, SP | HF_SCOPE},
    {"i", T_I, HF_FORMAT},
    {"iframe", T_IFRAME, SP},
    {"image", T_IMAGE, HF_UNSURE},
    {"img", T_IMG, SP | HF_VOID},
    {"input", T_INPUT, SP | HF_VOID},
    {"isindex", T_ISINDEX, HF_UNSURE},
    {"keygen", T_KEYGEN, SP | HF_UNSURE},
    {"li", T_LI, SP | HF_IMPLIED},
    {"link", T_LINK, SP | HF_HEAD_VOID},
    {"listing", T_LISTING, SP | HF_UNSURE},
    {"main", T_MAIN, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"marquee", T_MARQUEE, SP | HF_SCOPE | HF_UNSURE},
    {"math", T_MATH, HF_UNSURE},
    {"menu", T_MENU, SP | HF_UNSURE},
    {"meta", T_META, SP | HF_HEAD_VOID},
    {"nav", T_NAV, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"nobr", T_NOBR, HF_FORMAT | HF_UNSURE},
    {"noembed", T_NOEMBED, SP},
    {"noframes", T_NOFRAMES, SP},
    {"noscript", T_NOSCRIPT, SP | HF_UNSURE},
    {"object", T_OBJECT, SP | HF_SCOPE | HF_UNSURE},
    {"ol", T_OL, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"optgroup", T_OPTGROUP, HF_IMPLIED},
    {"option", T_OPTION, HF_IMPLIED},
    {"p", T_P, SP | HF_CLOSE_P | HF_IMPLIED},
    {"param", T_PARAM, SP},
    {"plaintext", T_PLAINTEXT, SP | HF_UNSURE},
    {"pre", T_PRE, SP | HF_BLOCK_END},
    {"rb", T_RB, HF_IMPLIED | HF_UNSURE},
    {"rp", T_RP, HF_IMPLIED | HF_UNSURE},
    {"rt", T_RT, HF_IMPLIED | HF_UNSURE},
    {"rtc", T_RTC, HF_IMPLIED | HF_UNSURE},
    {"s", T_S, HF_FORMAT},
    {"script", T_SCRIPT, SP},
    {"search", T_SEARCH, SP | HF_UNSURE},
    {"section", T_SECTION, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"select", T_SELECT, SP | HF_SCOPE | HF_BLOCK_END},  /* a scope boundary in Lexbor */
    {"selectedcontent", T_SELECTEDCONTENT, HF_UNSURE},  /* an option's content is cloned in */
    {"small", T_SMALL, HF_FORMAT},
    {"source", T_SOURCE, SP},
    {"strike", T_STRIKE, HF_FORMAT},
    {"strong", T_STRONG, HF_FORMAT},
    {"style", T_STYLE, SP},
    {"summary", T_SUMMARY, SP | HF_UNSURE},
    {"svg", T_SVG, HF_UNSURE},
    {"table", T_TABLE, SP | HF_SCOPE},
    {"tbody", T_TBODY, SP | HF_TABLE_PART},
    {"td", T_TD, SP | HF_SCOPE | HF_TABLE_PART},
    {"template", T_TEMPLATE, SP | HF_SCOPE | HF_UNSURE},
    {"textarea", T_TEXTAREA, SP},
    {"tfoot", T_TFOOT, SP | HF_TABLE_PART},
    {"th", T_TH, SP | HF_SCOPE | HF_TABLE_PART},
    {"thead", T_THEAD, SP | HF_TABLE_PART},
    {"title", T_TITLE, SP},
    {"tr", T_TR, SP | HF_TABLE_PART},
    {"track", T_TRACK, SP},
    {"tt", T_TT, HF_FORMAT},
    {"u", T_U, HF_FORMAT},
    {"ul", T_UL, SP | HF_CLOSE_P | HF_BLOCK_END},
    {"wbr", T_WBR, SP | HF_VOID},
    {"xmp", T_XMP, SP},
};
#undef SP
#define HTML_TAGS ((int)(sizeof html_tags / sizeof html_tags[0]))
static unsigned short html_flags[T_COUNT];
/* the characters that end a run of plain text: markup, references, CR, NUL */
static const unsigned char html_stop[256] = {[0] = 1, ['\r'] = 1, ['&'] = 1, ['<'] = 1};

enum { M_INITIAL, M_BEFORE_HTML, M_BEFORE_HEAD, M_IN_HEAD, M_AFTER_HEAD, M_IN_BODY,
       M_IN_TABLE, M_IN_TABLE_BODY, M_IN_ROW, M_IN_CELL, M_AFTER_BODY, M_AFTER_AFTER_BODY };

/* what the tokenizer reads after a start tag */
#define RAW_NONE 0
#define RAW_KEEP 1      /* RAWTEXT kept as text: iframe, noembed, noframes, xmp */
#define RAW_RCDATA 2    /* RCDATA (references decoded) kept as text: title, textarea */
#define RAW_DROP 3      /* RAWTEXT or script data of an element the caller strips */

#define HTML_MAX_DEPTH 256
#define HTML_MAX_ATTRIBUTES 16
#define HTML_MAX_FORMATTING 64
#define HTML_NAME_MAX 24

typedef struct {
    unsigned char id;
    unsigned char len;               /* of name, for T_OTHER */
    char name[HTML_NAME_MAX];        /* lower-cased, T_OTHER only */
    uint32_t serial;
    unsigned char merge_after;       /* the merge flag once it is popped (html_foster_start) */
    Py_ssize_t start;                /* a table: where its text starts in out (html_foster_char) */
} HtmlOpen;

typedef struct {
    unsigned char id;                /* 0: a marker */
    unsigned char on_stack;
    unsigned char attributes_unsure;
    uint32_t serial;
    uint64_t attributes;             /* the digest of its token's attributes */
} HtmlActive;

typedef struct {
    const void *data;
    int kind;
    Py_ssize_t n;
    Py_UCS4 *out;
    Py_ssize_t out_len, out_cap;
    int mode;
    int merge;          /* the current node's last child is a text node */
    int any_text;       /* a text node was made: the next one is preceded by " " */
    int skip_lf;        /* the token right after <pre> is a LF: dropped */
    int formatting_ok;  /* every active formatting element is open (nothing to reconstruct) */
    int unsure;         /* give up: the caller parses with Lexbor */
    int nomem;
    int rcdata;         /* inside <title>: every character goes into its text */
    int strip;          /* script and style elements are stripped from the tree */
    int hidden;         /* the tag just read has type=hidden */
    int raw;            /* the element just opened holds raw text (RAW_*) */
    int raw_merge;      /* -1, or the merge flag to restore after it (one put in the head) */
    int quirks;         /* 1: quirks mode (no doctype, or an old one), 0: (limited) no quirks */
    int fostering;      /* a start tag in a table, read by the rules for in body */
    Py_ssize_t moved;   /* the characters of text moved to put text before a table */
    uint64_t attributes;        /* the digest of the tag's attributes (html_attribute) */
    int attributes_unsure;
    int n_attributes;
    Py_ssize_t attribute_names[HTML_MAX_ATTRIBUTES][2];  /* (start, length) */
    uint32_t serial;
    uint32_t form;      /* the form element pointer (a serial), 0 if none */
    int depth;
    int n_active;
    HtmlOpen open[HTML_MAX_DEPTH];
    HtmlActive active[HTML_MAX_FORMATTING];
} HtmlScan;

#define H_AT(h, i) PyUnicode_READ((h)->kind, (h)->data, (i))
#define H_FLAGS(id) html_flags[id]
#define H_TOP(h) ((h)->open[(h)->depth - 1])

static inline int
html_space(Py_UCS4 c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\f' || c == '\r';
}

static inline int
html_alpha(Py_UCS4 c)
{
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

static inline int
html_alnum(Py_UCS4 c)
{
    return html_alpha(c) || (c >= '0' && c <= '9');
}

static int
html_grow(HtmlScan *h, Py_ssize_t more)
{
    if (h->out_len + more > h->out_cap) {
        Py_ssize_t cap = h->out_cap * 2 + more + 64;
        Py_UCS4 *grown = PyMem_Realloc(h->out, (size_t)cap * sizeof(Py_UCS4));
        if (grown == NULL) {
            h->nomem = 1;
            h->unsure = __LINE__;
            return -1;
        }
        h->out = grown;
        h->out_cap = cap;
    }
    return 0;
}

static inline void
html_put(HtmlScan *h, Py_UCS4 c)
{
    if (h->out_len == h->out_cap && html_grow(h, 1) < 0)
        return;
    h->out[h->out_len++] = c;
}

/* ---- the stack of open elements and the active formatting elements ---- */

static int
html_tableish(int id)
{
    return id == T_TABLE || id == T_TBODY || id == T_THEAD || id == T_TFOOT || id == T_TR;
}

/* Whether an element opened now goes before the table (foster parenting): a start tag read
 * by the rules for in body while the current node is the table's own. Such an element leaves
 * the table's children (and whether the last of them is a text node) as they were. */
static int
html_fostered_here(const HtmlScan *h)
{
    return h->fostering && html_tableish(H_TOP(h).id);
}

static void
html_push(HtmlScan *h, int id, const char *name, int len)
{
    if (h->depth == HTML_MAX_DEPTH) {
        h->unsure = __LINE__;
        return;
    }
    int fostered = html_fostered_here(h);
    HtmlOpen *e = &h->open[h->depth++];
    e->id = (unsigned char)id;
    e->len = (unsigned char)len;
    if (id == T_OTHER)
        memcpy(e->name, name, (size_t)len);
    e->serial = ++h->serial;
    e->merge_after = (unsigned char)(fostered && h->merge);
    e->start = h->out_len;
    h->merge = 0;
}

static void
html_pop(HtmlScan *h)
{
    if (h->depth <= 1) {  /* the html element is never popped by the paths followed here */
        h->unsure = __LINE__;
        return;
    }
    HtmlOpen *e = &h->open[--h->depth];
    int merge_after = e->merge_after;
    if (H_FLAGS(e->id) & HF_FORMAT) {
        for (int k = h->n_active - 1; k >= 0; k--)
            if (h->active[k].id != 0 && h->active[k].serial == e->serial) {
                h->active[k].on_stack = 0;
                h->formatting_ok = 0;
                break;
            }
    }
    h->merge = merge_after;
}

static int
html_same(const HtmlOpen *e, int id, const char *name, int len)
{
    return e->id == id && (id != T_OTHER || (e->len == len && memcmp(e->name, name, (size_t)len) == 0));
}

/* "has an element in scope": extra is the flag of the scope's additional boundaries */
#define SCOPE_DEFAULT 0
#define SCOPE_BUTTON 1
#define SCOPE_LIST 2
#define SCOPE_TABLE 3

static int
html_boundary(int id, int scope)
{
    switch (scope) {
    case SCOPE_TABLE:
        return id == T_HTML || id == T_TABLE || id == T_TEMPLATE;
    case SCOPE_BUTTON:
        if (id == T_BUTTON)
            return 1;
        break;
    case SCOPE_LIST:
        if (id == T_OL || id == T_UL)
            return 1;
        break;
    }
    return (H_FLAGS(id) & HF_SCOPE) != 0;
}

/* the index of the topmost element with this id in scope, or -1 (ids in mask: any heading) */
static int
html_in_scope(HtmlScan *h, int id, int scope)
{
    for (int k = h->depth - 1; k >= 0; k--) {
        int here = h->open[k].id;
        if (here == id || (id == T_H1 && (H_FLAGS(here) & HF_HEADING)))
            return k;
        if (html_boundary(here, scope))
            return -1;
    }
    return -1;
}

static void
html_pop_to(HtmlScan *h, int k)  /* pops open[k] and everything above it */
{
    while (h->depth > k && !h->unsure)
        html_pop(h);
}

static void
html_implied_end_tags(HtmlScan *h, int except)
{
    while (!h->unsure && (H_FLAGS(H_TOP(h).id) & HF_IMPLIED) && H_TOP(h).id != except)
        html_pop(h);
}

static void
html_close_p(HtmlScan *h)
{
    html_implied_end_tags(h, T_P);
    int k = html_in_scope(h, T_P, SCOPE_BUTTON);
    if (k < 0)
        h->unsure = __LINE__;
    else
        html_pop_to(h, k);
}

static void
html_close_p_if_open(HtmlScan *h)
{
    if (html_in_scope(h, T_P, SCOPE_BUTTON) >= 0)
        html_close_p(h);
}

static void
html_reconstruct(HtmlScan *h)
{
    if (h->formatting_ok)
        return;
    h->formatting_ok = 1;
    int k = h->n_active;
    while (k > 0 && h->active[k - 1].id != 0 && !h->active[k - 1].on_stack)
        k--;
    for (; k < h->n_active && !h->unsure; k++) {
        html_push(h, h->active[k].id, NULL, 0);
        h->active[k].serial = h->serial;
        h->active[k].on_stack = 1;
    }
}

static void html_remove_active(HtmlScan *h, int k);

static void
html_push_active(HtmlScan *h, int id)
{
    /* Noah's ark: of three entries after the last marker with this tag and these attributes,
     * the earliest leaves the list */
    int same = 0, earliest = -1, named = 0;
    for (int k = h->n_active - 1; k >= 0 && h->active[k].id != 0; k--)
        if (h->active[k].id == id) {
            named++;
            if (h->active[k].attributes_unsure)
                h->attributes_unsure = 1;
            if (h->active[k].attributes == h->attributes) {
                same++;
                earliest = k;
            }
        }
    if (named >= 3 && h->attributes_unsure) {
        h->unsure = __LINE__;
        return;
    }
    if (same >= 3)
        html_remove_active(h, earliest);
    if (h->n_active == HTML_MAX_FORMATTING) {
        h->unsure = __LINE__;
        return;
    }
    HtmlActive *a = &h->active[h->n_active++];
    a->id = (unsigned char)id;
    a->on_stack = 1;
    a->attributes_unsure = (unsigned char)h->attributes_unsure;
    a->attributes = h->attributes;
    a->serial = H_TOP(h).serial;
}

static void
html_push_marker(HtmlScan *h)
{
    if (h->n_active == HTML_MAX_FORMATTING) {
        h->unsure = __LINE__;
        return;
    }
    h->active[h->n_active++] = (HtmlActive){0};
}

static void
html_clear_to_marker(HtmlScan *h)
{
    while (h->n_active > 0 && h->active[--h->n_active].id != 0)
        ;
    h->formatting_ok = 0;
}

static void
html_remove_active(HtmlScan *h, int k)
{
    memmove(&h->active[k], &h->active[k + 1], (size_t)(h->n_active - k - 1) * sizeof(HtmlActive));
    h->n_active--;
    h->formatting_ok = 0;
}

/* the index in the active list of the last formatting element id after the last marker */
static int
html_active_index(HtmlScan *h, int id)
{
    for (int k = h->n_active - 1; k >= 0 && h->active[k].id != 0; k--)
        if (h->active[k].id == id)
            return k;
    return -1;
}

static int
html_open_index(HtmlScan *h, uint32_t serial)
{
    for (int k = h->depth - 1; k >= 0; k--)
        if (h->open[k].serial == serial)
            return k;
    return -1;
}

/* ---- the text ---- */

static void
html_insert_text(HtmlScan *h, Py_UCS4 c)
{
    if (!h->merge) {
        if (h->any_text)
            html_put(h, ' ');
        h->any_text = 1;
        h->merge = 1;
    }
    html_put(h, c);
}

/* A character in a table mode whose current node is an element that foster parenting put
 * before the table (html_foster_start), by the rules for in body: its text goes before the
 * table's, at the table's start in out, which moves on past it. Nothing else is open there
 * (a cell or a table start tag closes the elements put before the table), so only that
 * table's start moves. The characters of the table's text moved for it are counted, and past
 * a few times the markup's length the scan gives up, so that it stays linear. */
static void
html_foster_char(HtmlScan *h, Py_UCS4 c)
{
    h->fostering = 1;
    html_reconstruct(h);
    h->fostering = 0;
    int k = h->depth - 1;
    while (k > 0 && h->open[k].id != T_TABLE)
        k--;
    HtmlOpen *table = &h->open[k];
    Py_ssize_t at = table->start, after = h->out_len - at;
    Py_UCS4 add[2] = {' ', c};
    int len = 1, skip = 0;
    if (!h->merge) {  /* a new text node: a separator from the text before or after it */
        if (at > 0)
            len = 2;
        else if (after > 0) {
            add[0] = c;
            add[1] = ' ';
            len = 2;
            skip = 1;  /* the separator belongs before the table's text */
        }
        h->any_text = 1;
        h->merge = 1;
    }
    h->moved += after;
    if (h->moved > 4 * h->n + 4096) {
        h->unsure = __LINE__;
        return;
    }
    if (html_grow(h, len) < 0)
        return;
    memmove(h->out + at + len, h->out + at, (size_t)after * sizeof(Py_UCS4));
    memcpy(h->out + at, len == 1 ? add + 1 : add, (size_t)len * sizeof(Py_UCS4));
    h->out_len += len;
    table->start = at + len - skip;
}

/* one character token */
static void
html_char(HtmlScan *h, Py_UCS4 c)
{
    if (h->rcdata) {
        html_insert_text(h, c);
        return;
    }
    int space = html_space(c);
    if (h->skip_lf) {
        h->skip_lf = 0;
        if (c == '\n')
            return;
    }
    for (;;) {
        switch (h->mode) {
        case M_INITIAL:
        case M_BEFORE_HTML:
            if (space)
                return;
            html_push(h, T_HTML, NULL, 0);
            h->mode = M_BEFORE_HEAD;
            /* fall through */
        case M_BEFORE_HEAD:
            if (space)
                return;
            html_push(h, T_HEAD, NULL, 0);
            h->mode = M_IN_HEAD;
            /* fall through */
        case M_IN_HEAD:
            if (space) {
                html_insert_text(h, c);
                return;
            }
            html_pop(h);
            h->mode = M_AFTER_HEAD;
            /* fall through */
        case M_AFTER_HEAD:
            if (space) {
                html_insert_text(h, c);
                return;
            }
            html_push(h, T_BODY, NULL, 0);
            h->mode = M_IN_BODY;
            continue;
        case M_IN_TABLE:
        case M_IN_TABLE_BODY:
        case M_IN_ROW:
            if (!html_tableish(H_TOP(h).id)) {  /* in an element put before the table */
                html_foster_char(h, c);
                return;
            }
            if (!space) {
                h->unsure = __LINE__;  /* text in the table itself goes before it */
                return;
            }
            html_insert_text(h, c);
            return;
        case M_AFTER_BODY:
        case M_AFTER_AFTER_BODY:
            if (!space)
                h->mode = M_IN_BODY;
            /* fall through */
        default:  /* in body, in cell */
            html_reconstruct(h);
            html_insert_text(h, c);
            return;
        }
    }
}

/* the code points of the character reference at markup[i] == '&', or 0; *end past it */
static int
html_reference(HtmlScan *h, Py_ssize_t i, Py_ssize_t *end, Py_UCS4 points[2])
{
    Py_ssize_t n = h->n, j = i + 1;
    if (j < n && H_AT(h, j) == '#') {
        j++;
        int hex = j < n && (H_AT(h, j) | 0x20) == 'x';
        if (hex)
            j++;
        Py_ssize_t start = j;
        uint32_t value = 0;
        for (; j < n; j++) {
            Py_UCS4 c = H_AT(h, j);
            int digit;
            if (c >= '0' && c <= '9')
                digit = (int)(c - '0');
            else if (hex && (c | 0x20) >= 'a' && (c | 0x20) <= 'f')
                digit = (int)((c | 0x20) - 'a' + 10);
            else
                break;
            value = value > 0x10FFFF ? value : value * (hex ? 16 : 10) + (uint32_t)digit;
        }
        if (j == start)
            return 0;  /* "&#" or "&#x" with no digits: text */
        if (j < n && H_AT(h, j) == ';')
            j++;
        static const uint16_t c1[32] = {
            0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030,
            0x0160, 0x2039, 0x0152, 0x8D, 0x017D, 0x8F, 0x90, 0x2018, 0x2019, 0x201C, 0x201D,
            0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E,
            0x0178};
        if (value == 0 || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF))
            value = 0xFFFD;
        else if (value >= 0x80 && value <= 0x9F)
            value = c1[value - 0x80];
        *end = j;
        points[0] = value;
        return 1;
    }
    /* a named reference: the longest name of the table that the markup starts with */
    char name[33];
    int len = 0;
    while (len < 32 && j + len < n && html_alnum(H_AT(h, j + len))) {
        name[len] = (char)H_AT(h, j + len);
        len++;
    }
    if (len < 32 && j + len < n && H_AT(h, j + len) == ';')
        name[len++] = ';';
    for (; len > 0; len--) {
        int lo = 0, hi = HTML_ENTITIES - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            const HtmlEntity *e = &html_entities[mid];
            int cmp = memcmp(e->name, name, (size_t)(e->len < len ? e->len : len));
            if (cmp == 0)
                cmp = (int)e->len - len;
            if (cmp == 0) {
                *end = j + len;
                points[0] = e->points[0];
                points[1] = e->points[1];
                return e->points[1] ? 2 : 1;
            }
            if (cmp < 0)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
    }
    return 0;
}

/* the text at markup[i] (not '<'): one character or reference; the index after it */
static Py_ssize_t
html_text_at(HtmlScan *h, Py_ssize_t i)
{
    Py_UCS4 c = H_AT(h, i);
    if (c == '&') {
        Py_UCS4 points[2];
        Py_ssize_t end;
        int got = html_reference(h, i, &end, points);
        if (got) {
            if (h->skip_lf) {  /* a LF from a reference right after <pre>: not followed */
                h->unsure = __LINE__;
                return h->n;
            }
            for (int k = 0; k < got; k++)
                html_char(h, points[k]);
            return end;
        }
        html_char(h, '&');
        return i + 1;
    }
    if (c == '\r') {
        html_char(h, '\n');
        return i + 1 < h->n && H_AT(h, i + 1) == '\n' ? i + 2 : i + 1;
    }
    if (c == 0 || (c >= 0xD800 && c <= 0xDFFF)) {
        h->unsure = __LINE__;
        return h->n;
    }
    html_char(h, c);
    return i + 1;
}

static int
html_ascii_is(HtmlScan *h, Py_ssize_t start, Py_ssize_t end, const char *lower)
{
    Py_ssize_t len = (Py_ssize_t)strlen(lower);
    if (end - start != len)
        return 0;
    for (Py_ssize_t k = 0; k < len; k++) {
        Py_UCS4 c = H_AT(h, start + k);
        if ((c >= 'A' && c <= 'Z' ? c + 0x20 : c) != (Py_UCS4)lower[k])
            return 0;
    }
    return 1;
}

/* One attribute of the tag being read, into h->attributes: an order-blind 64-bit digest of
 * the (name, value) pairs that Noah's ark compares. A later attribute of the same name is
 * dropped, as the tokenizer drops it; a value whose text the tokenizer would change (a
 * reference, CR, NUL) or a tag of many attributes is not digested (attributes_unsure). */
static void
html_attribute(HtmlScan *h, Py_ssize_t name, Py_ssize_t name_end, Py_ssize_t value,
               Py_ssize_t value_end)
{
    if (h->n_attributes == HTML_MAX_ATTRIBUTES) {
        h->attributes_unsure = 1;
        return;
    }
    Py_ssize_t len = name_end - name;
    for (int k = 0; k < h->n_attributes; k++) {
        Py_ssize_t other = h->attribute_names[k][0];
        if (h->attribute_names[k][1] != len)
            continue;
        Py_ssize_t j = 0;
        for (; j < len; j++) {
            Py_UCS4 a = H_AT(h, name + j), b = H_AT(h, other + j);
            if ((a >= 'A' && a <= 'Z' ? a + 0x20 : a) != (b >= 'A' && b <= 'Z' ? b + 0x20 : b))
                break;
        }
        if (j == len)
            return;  /* a duplicate: dropped */
    }
    h->attribute_names[h->n_attributes][0] = name;
    h->attribute_names[h->n_attributes][1] = len;
    h->n_attributes++;
    uint64_t digest = FNV_OFFSET;
    for (Py_ssize_t j = name; j < name_end; j++) {
        Py_UCS4 c = H_AT(h, j);
        if (c == 0)
            h->attributes_unsure = 1;
        digest = (digest ^ (c >= 'A' && c <= 'Z' ? c + 0x20 : c)) * FNV_PRIME;
    }
    digest = (digest ^ 0x110000) * FNV_PRIME;  /* not a code point: ends the name */
    for (Py_ssize_t j = value; j < value_end; j++) {
        Py_UCS4 c = H_AT(h, j);
        if (c == '&' || c == '\r' || c == 0)
            h->attributes_unsure = 1;
        digest = (digest ^ c) * FNV_PRIME;
    }
    digest ^= digest >> 29;  /* mixed, then summed: the order of the attributes is no matter */
    h->attributes += digest * 0x9E3779B97F4A7C15ULL + 1;
}

/* past the attributes of a tag whose name ends at i: the index after its '>', or n (EOF:
 * the tag is dropped, *complete = 0); h->hidden: its first type attribute is "hidden" */
static Py_ssize_t
html_tag_end(HtmlScan *h, Py_ssize_t i, int *complete)
{
    Py_ssize_t n = h->n;
    int seen_type = 0;
    *complete = 0;
    h->hidden = 0;
    h->attributes = 0;
    h->n_attributes = 0;
    h->attributes_unsure = 0;
    for (;;) {
        /* before attribute name */
        while (i < n && (html_space(H_AT(h, i)) || H_AT(h, i) == '/'))
            i++;
        if (i >= n)
            return n;
        if (H_AT(h, i) == '>') {
            *complete = 1;
            return i + 1;
        }
        Py_ssize_t name_start = i++;  /* the name's first character, '=' included */
        /* attribute name */
        while (i < n) {
            Py_UCS4 c = H_AT(h, i);
            if (html_space(c) || c == '/' || c == '>' || c == '=')
                break;
            i++;
        }
        Py_ssize_t name_end = i;
        int is_type = !seen_type && html_ascii_is(h, name_start, i, "type");
        seen_type |= is_type;
        /* after attribute name */
        while (i < n && html_space(H_AT(h, i)))
            i++;
        if (i >= n)
            return n;
        if (H_AT(h, i) != '=') {
            html_attribute(h, name_start, name_end, 0, 0);
            continue;  /* '/', '>' or a new attribute's name */
        }
        i++;
        /* before attribute value */
        while (i < n && html_space(H_AT(h, i)))
            i++;
        if (i >= n)
            return n;
        Py_UCS4 quote = H_AT(h, i);
        Py_ssize_t value_start = i;
        if (quote == '"' || quote == '\'') {
            value_start = ++i;
            if (h->kind == PyUnicode_1BYTE_KIND) {
                const Py_UCS1 *at = memchr((const Py_UCS1 *)h->data + i, (int)quote, (size_t)(n - i));
                i = at == NULL ? n : at - (const Py_UCS1 *)h->data;
            }
            else
                while (i < n && H_AT(h, i) != quote)
                    i++;
            if (i >= n)
                return n;
            if (is_type)
                h->hidden = html_ascii_is(h, value_start, i, "hidden");
            html_attribute(h, name_start, name_end, value_start, i);
            i++;  /* after the quoted value: anything is the next attribute or the end */
        }
        else if (quote != '>') {
            while (i < n && !html_space(H_AT(h, i)) && H_AT(h, i) != '>')
                i++;
            if (is_type)
                h->hidden = html_ascii_is(h, value_start, i, "hidden");
            html_attribute(h, name_start, name_end, value_start, i);
        }
        else
            html_attribute(h, name_start, name_end, 0, 0);
    }
}

static unsigned char html_tag_len[HTML_TAGS];
static unsigned char html_letter_start[27];  /* the tags whose name starts with 'a' + k */

static void
init_html_tags(void)
{
    for (int k = 0; k < HTML_TAGS; k++) {
        html_flags[html_tags[k].id] = html_tags[k].flags;
        html_tag_len[k] = (unsigned char)strlen(html_tags[k].name);
    }
    int k = 0;
    for (int letter = 0; letter < 27; letter++) {
        while (k < HTML_TAGS && html_tags[k].name[0] - 'a' < letter)
            k++;
        html_letter_start[letter] = (unsigned char)k;
    }
}

static int
html_tag_id(const char *name, int len)
{
    int letter = name[0] - 'a';
    if (letter < 0 || letter >= 26)
        return T_OTHER;
    for (int k = html_letter_start[letter]; k < html_letter_start[letter + 1]; k++)
        if (html_tag_len[k] == len && memcmp(html_tags[k].name, name, (size_t)len) == 0)
            return html_tags[k].id;
    return T_OTHER;
}

/* ---- the tree builder, as far as the text goes ---- */

typedef struct {
    int id;
    int len;
    char name[HTML_NAME_MAX];
} HtmlTagToken;

static void html_start(HtmlScan *h, HtmlTagToken *t);
static void html_end(HtmlScan *h, HtmlTagToken *t);

static void
html_comment(HtmlScan *h)
{
    h->skip_lf = 0;
    switch (h->mode) {
    case M_INITIAL:
    case M_BEFORE_HTML:
    case M_AFTER_BODY:         /* appended to the html element, not the current node */
    case M_AFTER_AFTER_BODY:   /* appended to the document */
        return;
    default:
        h->merge = 0;
    }
}

static void
html_generic_end(HtmlScan *h, HtmlTagToken *t)
{
    for (int k = h->depth - 1; k >= 0; k--) {
        HtmlOpen *e = &h->open[k];
        if (html_same(e, t->id, t->name, t->len)) {
            html_implied_end_tags(h, t->id == T_OTHER ? -1 : t->id);
            html_pop_to(h, k);  /* open[k] is not an implied one: still there */
            return;
        }
        if (H_FLAGS(e->id) & HF_SPECIAL)
            return;
    }
}

static int
html_active_of(HtmlScan *h, uint32_t serial)
{
    for (int k = h->n_active - 1; k >= 0; k--)
        if (h->active[k].id != 0 && h->active[k].serial == serial)
            return k;
    return -1;
}

static void
html_insert_active(HtmlScan *h, int at, HtmlActive entry)
{
    if (h->n_active == HTML_MAX_FORMATTING) {
        h->unsure = __LINE__;
        return;
    }
    memmove(&h->active[at + 1], &h->active[at], (size_t)(h->n_active - at) * sizeof(HtmlActive));
    h->active[at] = entry;
    h->n_active++;
}

static void
html_remove_open(HtmlScan *h, int k)
{
    memmove(&h->open[k], &h->open[k + 1], (size_t)(h->depth - k - 1) * sizeof(HtmlOpen));
    h->depth--;
}

/* The adoption agency algorithm on the stack and the list. Where a furthest block exists, the
 * nodes it moves keep the text's order (the moved subtree was the last child of the chain it
 * leaves) and the current node either stays or is the new formatting element that took the
 * furthest block's children: the text node a next character would join is the same, so only
 * the stack and the list change here. */
static void
html_adoption_agency(HtmlScan *h, HtmlTagToken *t)
{
    HtmlOpen *top = &H_TOP(h);
    if (top->id == t->id && html_active_of(h, top->serial) < 0) {
        html_pop(h);
        return;
    }
    for (int outer = 0; outer < 8 && !h->unsure; outer++) {
        int a = html_active_index(h, t->id);
        if (a < 0) {
            html_generic_end(h, t);
            return;
        }
        int k = html_open_index(h, h->active[a].serial);
        if (k < 0) {
            html_remove_active(h, a);
            return;
        }
        for (int j = h->depth - 1; j > k; j--)
            if (html_boundary(h->open[j].id, SCOPE_DEFAULT))
                return;  /* not in scope: ignored */
        int f = k + 1;
        while (f < h->depth && !(H_FLAGS(h->open[f].id) & HF_SPECIAL))
            f++;
        if (f == h->depth) {  /* no furthest block */
            html_pop_to(h, k);
            html_remove_active(h, a);  /* html_pop marked it off the stack; a still holds */
            return;
        }
        if (k == 0 || html_tableish(h->open[k - 1].id)) {
            h->unsure = __LINE__;  /* the common ancestor would foster-parent */
            return;
        }
        uint32_t fe = h->open[k].serial, furthest = h->open[f].serial, last = furthest;
        int bookmark = a;  /* the new element's place in the list: before this entry */
        int node = f;
        for (int inner = 1;; inner++) {
            node--;
            if (h->open[node].serial == fe)
                break;
            int in_list = html_active_of(h, h->open[node].serial);
            if (inner > 3 && in_list >= 0) {
                html_remove_active(h, in_list);
                if (in_list < bookmark)
                    bookmark--;
                in_list = -1;
            }
            if (in_list < 0) {
                html_remove_open(h, node);
                continue;
            }
            uint32_t clone = ++h->serial;  /* a new element for node's token */
            h->active[in_list].serial = clone;
            h->open[node].serial = clone;
            if (last == furthest)
                bookmark = in_list + 1;
            last = clone;
        }
        /* the new element for the formatting element's token: in the list at the bookmark
         * (the formatting element leaves it), in the stack just below the furthest block */
        uint32_t fresh = ++h->serial;
        a = html_active_of(h, fe);
        HtmlActive made = h->active[a];
        made.serial = fresh;
        made.on_stack = 1;
        html_insert_active(h, bookmark, made);
        if (bookmark <= a)
            a++;
        html_remove_active(h, a);
        k = html_open_index(h, fe);
        html_remove_open(h, k);
        f = html_open_index(h, furthest);
        if (h->depth == HTML_MAX_DEPTH) {
            h->unsure = __LINE__;
            return;
        }
        memmove(&h->open[f + 2], &h->open[f + 1], (size_t)(h->depth - f - 1) * sizeof(HtmlOpen));
        h->open[f + 1] = (HtmlOpen){(unsigned char)t->id, 0, {0}, fresh, 0, 0};
        h->depth++;
    }
}

static void
html_body_end(HtmlScan *h, HtmlTagToken *t)
{
    int id = t->id, f = H_FLAGS(id), k;
    if (f & HF_UNSURE) {
        h->unsure = __LINE__;
        return;
    }
    switch (id) {
    case T_BODY:
    case T_HTML:
        if (html_in_scope(h, T_BODY, SCOPE_DEFAULT) < 0)
            return;
        h->mode = id == T_HTML ? M_AFTER_AFTER_BODY : M_AFTER_BODY;
        return;
    case T_FORM: {
        uint32_t form = h->form;
        h->form = 0;
        k = form ? html_open_index(h, form) : -1;
        if (k < 0)
            return;
        for (int j = h->depth - 1; j > k; j--)
            if (html_boundary(h->open[j].id, SCOPE_DEFAULT))
                return;
        html_implied_end_tags(h, -1);
        k = html_open_index(h, form);
        if (k == h->depth - 1)
            html_pop(h);
        else if (k > 0) {  /* taken out of the stack; the current node stays */
            memmove(&h->open[k], &h->open[k + 1], (size_t)(h->depth - k - 1) * sizeof(HtmlOpen));
            h->depth--;
        }
        return;
    }
    case T_P:
        if (html_in_scope(h, T_P, SCOPE_BUTTON) < 0) {
            if (html_tableish(H_TOP(h).id)) {
                h->unsure = __LINE__;
                return;
            }
            html_push(h, T_P, NULL, 0);
        }
        html_close_p(h);
        return;
    case T_LI:
        if ((k = html_in_scope(h, T_LI, SCOPE_LIST)) < 0)
            return;
        html_implied_end_tags(h, T_LI);
        html_pop_to(h, html_in_scope(h, T_LI, SCOPE_LIST));
        return;
    case T_DD:
    case T_DT:
        if (html_in_scope(h, id, SCOPE_DEFAULT) < 0)
            return;
        html_implied_end_tags(h, id);
        html_pop_to(h, html_in_scope(h, id, SCOPE_DEFAULT));
        return;
    case T_BR:
        if (html_tableish(H_TOP(h).id)) {
            h->unsure = __LINE__;
            return;
        }
        html_reconstruct(h);
        h->merge = 0;
        return;
    }
    if (f & HF_HEADING) {
        if (html_in_scope(h, T_H1, SCOPE_DEFAULT) < 0)
            return;
        html_implied_end_tags(h, -1);
        html_pop_to(h, html_in_scope(h, T_H1, SCOPE_DEFAULT));
        return;
    }
    if (f & HF_BLOCK_END) {
        if (html_in_scope(h, id, SCOPE_DEFAULT) < 0)
            return;
        html_implied_end_tags(h, -1);
        html_pop_to(h, html_in_scope(h, id, SCOPE_DEFAULT));
        return;
    }
    if (f & HF_FORMAT) {
        html_adoption_agency(h, t);
        return;
    }
    html_generic_end(h, t);
}

/* Pops the select in scope and everything above it, if there is one: whether it did. The
 * select parsing Lexbor follows (whatwg/html#10548, Lexbor 2025-09) has no select insertion
 * mode: a select's content is read by the rules for in body, and a select is a scope
 * boundary of its own (Lexbor's tag categories). */
static int
html_pop_to_select(HtmlScan *h)
{
    int k = html_in_scope(h, T_SELECT, SCOPE_DEFAULT);
    if (k < 0)
        return 0;
    html_pop_to(h, k);
    return 1;
}

/* an element whose content the tokenizer reads as raw text (html_raw_text) */
static void
html_raw_element(HtmlScan *h, int id, int kind)
{
    if (kind == RAW_DROP && !h->strip) {
        h->unsure = __LINE__;
        return;
    }
    html_push(h, id, NULL, 0);
    h->raw = kind;
}

static void
html_body_start_tag(HtmlScan *h, HtmlTagToken *t)
{
    int id = t->id, f = H_FLAGS(id);
    if (f & HF_UNSURE) {
        h->unsure = __LINE__;
        return;
    }
    if (f & HF_HEAD_VOID) {
        if (!html_fostered_here(h))
            h->merge = 0;
        return;
    }
    if (f & HF_CLOSE_P) {
        html_close_p_if_open(h);
        html_push(h, id, NULL, 0);
        return;
    }
    if (f & HF_HEADING) {
        html_close_p_if_open(h);
        if (H_FLAGS(H_TOP(h).id) & HF_HEADING)
            html_pop(h);
        html_push(h, id, NULL, 0);
        return;
    }
    if (f & HF_VOID) {
        if (id == T_INPUT)  /* an <input> closes an open select first */
            html_pop_to_select(h);
        html_reconstruct(h);
        if (!html_fostered_here(h))
            h->merge = 0;
        return;
    }
    if (f & HF_FORMAT) {
        int open_a = id == T_A ? html_active_index(h, T_A) : -1;
        if (open_a >= 0) {  /* an <a> in an <a>: the adoption agency for </a>, then it goes */
            uint32_t old = h->active[open_a].serial;
            HtmlTagToken end_a = {T_A, 1, "a"};
            html_adoption_agency(h, &end_a);
            int k = html_active_of(h, old);
            if (k >= 0)
                html_remove_active(h, k);
            k = html_open_index(h, old);
            if (k == h->depth - 1)
                html_pop(h);
            else if (k >= 0)
                html_remove_open(h, k);  /* the current node stays */
            if (h->unsure)
                return;
        }
        html_reconstruct(h);
        html_push(h, id, NULL, 0);
        html_push_active(h, id);
        return;
    }
    switch (id) {
    case T_HTML:
    case T_BODY:
    case T_HEAD:
        return;
    case T_PRE:
        html_close_p_if_open(h);
        html_push(h, id, NULL, 0);
        h->skip_lf = 1;
        return;
    case T_FORM:
        if (h->form)
            return;
        html_close_p_if_open(h);
        html_push(h, id, NULL, 0);
        h->form = h->serial;
        return;
    case T_LI:
    case T_DD:
    case T_DT:
        for (int k = h->depth - 1; k >= 0; k--) {
            int here = h->open[k].id;
            if (id == T_LI ? here == T_LI : (here == T_DD || here == T_DT)) {
                html_implied_end_tags(h, here);
                html_pop_to(h, k);
                break;
            }
            if ((H_FLAGS(here) & HF_SPECIAL) && here != T_ADDRESS && here != T_DIV && here != T_P)
                break;
        }
        html_close_p_if_open(h);
        html_push(h, id, NULL, 0);
        return;
    case T_BUTTON: {
        int k = html_in_scope(h, T_BUTTON, SCOPE_DEFAULT);
        if (k >= 0) {
            html_implied_end_tags(h, -1);
            html_pop_to(h, html_in_scope(h, T_BUTTON, SCOPE_DEFAULT));
        }
        html_reconstruct(h);
        html_push(h, id, NULL, 0);
        return;
    }
    case T_TABLE:
        if (!h->quirks)  /* an open <p> is closed first unless in quirks mode */
            html_close_p_if_open(h);
        html_push(h, id, NULL, 0);
        h->mode = M_IN_TABLE;
        return;
    case T_HR:
        html_close_p_if_open(h);
        if (html_in_scope(h, T_SELECT, SCOPE_DEFAULT) >= 0)
            html_implied_end_tags(h, -1);
        h->merge = 0;
        return;
    case T_SELECT:  /* a <select> in a select closes it and is dropped */
        if (html_pop_to_select(h))
            return;
        html_reconstruct(h);
        html_push(h, id, NULL, 0);
        return;
    case T_OPTION:
    case T_OPTGROUP:
        if (html_in_scope(h, T_SELECT, SCOPE_DEFAULT) >= 0)
            html_implied_end_tags(h, id == T_OPTION ? T_OPTGROUP : -1);
        else if (H_TOP(h).id == T_OPTION)
            html_pop(h);
        html_reconstruct(h);
        html_push(h, id, NULL, 0);
        return;
    case T_PARAM:
    case T_SOURCE:
    case T_TRACK:
        h->merge = 0;
        return;
    case T_TBODY: case T_TD: case T_TFOOT: case T_TH: case T_THEAD: case T_TR:
        return;  /* ignored in body */
    case T_TITLE:  /* the rules for in head: no reconstruction */
    case T_TEXTAREA:
        html_raw_element(h, id, RAW_RCDATA);
        return;
    case T_STYLE:
    case T_SCRIPT:
        html_raw_element(h, id, RAW_DROP);
        return;
    case T_XMP:
        html_close_p_if_open(h);
        html_reconstruct(h);
        /* fall through */
    case T_IFRAME:
    case T_NOEMBED:
    case T_NOFRAMES:
        html_raw_element(h, id, RAW_KEEP);
        return;
    }
    html_reconstruct(h);
    html_push(h, id, t->name, t->len);
}

static void
html_reset_mode(HtmlScan *h)
{
    for (int k = h->depth - 1; k >= 0; k--) {
        int id = h->open[k].id;
        if ((id == T_TD || id == T_TH) && k > 0) { h->mode = M_IN_CELL; return; }
        if (id == T_TR) { h->mode = M_IN_ROW; return; }
        if (id == T_TBODY || id == T_THEAD || id == T_TFOOT) { h->mode = M_IN_TABLE_BODY; return; }
        if (id == T_TABLE) { h->mode = M_IN_TABLE; return; }
        if (id == T_BODY) { h->mode = M_IN_BODY; return; }
        if (H_FLAGS(id) & HF_UNSURE || id == T_HTML || id == T_HEAD) break;
    }
    h->unsure = __LINE__;
}

static void
html_clear_to(HtmlScan *h, int a, int b, int c)
{
    while (!h->unsure) {
        int id = H_TOP(h).id;
        if (id == a || id == b || id == c || id == T_HTML || id == T_TEMPLATE)
            return;
        html_pop(h);
    }
}

static int
html_table_section_in_scope(HtmlScan *h)
{
    return html_in_scope(h, T_TBODY, SCOPE_TABLE) >= 0 || html_in_scope(h, T_THEAD, SCOPE_TABLE) >= 0
           || html_in_scope(h, T_TFOOT, SCOPE_TABLE) >= 0;
}

static void
html_close_cell(HtmlScan *h)
{
    html_implied_end_tags(h, -1);
    while (!h->unsure) {
        int id = H_TOP(h).id;
        html_pop(h);
        if (id == T_TD || id == T_TH)
            break;
    }
    html_clear_to_marker(h);
    h->mode = M_IN_ROW;
}

/* The index of the topmost table, table section or row of the stack: in a table mode, the
 * elements above it are the ones foster parenting put before the table */
static int
html_table_context(HtmlScan *h)
{
    int k = h->depth - 1;
    while (k > 0 && !html_tableish(h->open[k].id))
        k--;
    return k;
}

/* A start tag in a table that is not the table's own: by the rules for in body, the element
 * going before the table (foster parenting). Followed for the elements whose content goes on
 * in them (formatting but <a>, blocks that close a <p>, unknown ones) and the void ones; the
 * text that would go before the table is not (html_char gives up on text in a table mode
 * whose current node is not the table's), so the text keeps its order. */
static void
html_foster_start(HtmlScan *h, HtmlTagToken *t)
{
    int id = t->id, f = H_FLAGS(id);
    if (!(((f & HF_FORMAT) && id != T_A) || (f & (HF_CLOSE_P | HF_VOID | HF_HEAD_VOID))
          || id == T_OTHER)
        || (f & HF_UNSURE)) {
        h->unsure = __LINE__;  /* caption, col, <a>, ... */
        return;
    }
    int k = html_table_context(h), mode = h->mode;
    uint32_t serial = h->open[k].serial;
    h->fostering = 1;
    html_body_start_tag(h, t);
    h->fostering = 0;
    if (h->depth <= k || h->open[k].serial != serial || h->mode != mode)
        h->unsure = __LINE__;
}

/* A <table> start tag in a table (the rules for in table): the open table ends, and the
 * tag is read again in the mode that leaves (whether to read it again; not: ignored). */
static int
html_table_in_table(HtmlScan *h)
{
    int k = html_in_scope(h, T_TABLE, SCOPE_TABLE);
    if (k < 0)
        return 0;
    html_pop_to(h, k);
    html_reset_mode(h);
    return 1;
}

static void
html_start(HtmlScan *h, HtmlTagToken *t)
{
    int id = t->id;
    h->skip_lf = 0;
    while (!h->unsure) {
        switch (h->mode) {
        case M_INITIAL:
        case M_BEFORE_HTML:
            html_push(h, T_HTML, NULL, 0);
            h->mode = M_BEFORE_HEAD;
            if (id == T_HTML)
                return;
            continue;
        case M_BEFORE_HEAD:
            if (id == T_HTML)
                return;
            html_push(h, T_HEAD, NULL, 0);
            h->mode = M_IN_HEAD;
            if (id == T_HEAD)
                return;
            continue;
        case M_IN_HEAD:
            if (id == T_HTML || id == T_HEAD)
                return;
            if (H_FLAGS(id) & HF_HEAD_VOID) {
                h->merge = 0;
                return;
            }
            if (id == T_TITLE || id == T_NOFRAMES || id == T_STYLE || id == T_SCRIPT) {
                html_raw_element(h, id, id == T_TITLE      ? RAW_RCDATA
                                        : id == T_NOFRAMES ? RAW_KEEP
                                                           : RAW_DROP);
                return;
            }
            if (id == T_NOSCRIPT || id == T_TEMPLATE) {
                h->unsure = __LINE__;
                return;
            }
            html_pop(h);
            h->mode = M_AFTER_HEAD;
            continue;
        case M_AFTER_HEAD:
            if (id == T_HTML || id == T_HEAD)
                return;
            if (id == T_BODY) {
                html_push(h, T_BODY, NULL, 0);
                h->mode = M_IN_BODY;
                return;
            }
            if (H_FLAGS(id) & HF_HEAD_VOID)
                return;  /* into the head element: the current node has no new child */
            if (id == T_STYLE || id == T_SCRIPT) {  /* into the head: html's children stay */
                h->raw_merge = h->merge;
                html_raw_element(h, id, RAW_DROP);
                return;
            }
            if (id == T_FRAMESET || id == T_TITLE || id == T_NOFRAMES || id == T_TEMPLATE) {
                h->unsure = __LINE__;
                return;
            }
            html_push(h, T_BODY, NULL, 0);
            h->mode = M_IN_BODY;
            continue;
        case M_AFTER_BODY:
        case M_AFTER_AFTER_BODY:
            if (id == T_HTML)
                return;
            h->mode = M_IN_BODY;
            continue;
        case M_IN_TABLE:
            switch (id) {
            case T_TBODY: case T_THEAD: case T_TFOOT:
                html_clear_to(h, T_TABLE, T_TABLE, T_TABLE);
                html_push(h, id, NULL, 0);
                h->mode = M_IN_TABLE_BODY;
                return;
            case T_TD: case T_TH: case T_TR:
                html_clear_to(h, T_TABLE, T_TABLE, T_TABLE);
                html_push(h, T_TBODY, NULL, 0);
                h->mode = M_IN_TABLE_BODY;
                continue;
            case T_FORM:
                if (h->form)
                    return;
                html_push(h, T_FORM, NULL, 0);
                h->form = h->serial;
                html_pop(h);
                return;
            case T_STYLE:
            case T_SCRIPT:
                html_raw_element(h, id, RAW_DROP);
                return;
            case T_TABLE:
                if (!html_table_in_table(h))
                    return;
                continue;
            case T_INPUT:
                if (h->hidden) {  /* stays in the table */
                    h->merge = 0;
                    return;
                }
                break;
            }
            html_foster_start(h, t);
            return;
        case M_IN_TABLE_BODY:
            switch (id) {
            case T_TR:
                html_clear_to(h, T_TBODY, T_THEAD, T_TFOOT);
                html_push(h, T_TR, NULL, 0);
                h->mode = M_IN_ROW;
                return;
            case T_TD: case T_TH:
                html_clear_to(h, T_TBODY, T_THEAD, T_TFOOT);
                html_push(h, T_TR, NULL, 0);
                h->mode = M_IN_ROW;
                continue;
            case T_TBODY: case T_THEAD: case T_TFOOT:
                if (!html_table_section_in_scope(h))
                    return;
                html_clear_to(h, T_TBODY, T_THEAD, T_TFOOT);
                html_pop(h);
                h->mode = M_IN_TABLE;
                continue;
            case T_TABLE:  /* by the rules for in table, which change the mode */
                if (!html_table_in_table(h))
                    return;
                continue;
            }
            h->mode = M_IN_TABLE;  /* "process using the rules for in table" */
            html_start(h, t);
            if (h->mode == M_IN_TABLE)
                h->mode = M_IN_TABLE_BODY;
            return;
        case M_IN_ROW:
            switch (id) {
            case T_TD: case T_TH:
                html_clear_to(h, T_TR, T_TR, T_TR);
                html_push(h, id, NULL, 0);
                h->mode = M_IN_CELL;
                html_push_marker(h);
                return;
            case T_TBODY: case T_THEAD: case T_TFOOT: case T_TR:
                if (html_in_scope(h, T_TR, SCOPE_TABLE) < 0)
                    return;
                html_clear_to(h, T_TR, T_TR, T_TR);
                html_pop(h);
                h->mode = M_IN_TABLE_BODY;
                continue;
            case T_TABLE:  /* by the rules for in table, which change the mode */
                if (!html_table_in_table(h))
                    return;
                continue;
            }
            h->mode = M_IN_TABLE;
            html_start(h, t);
            if (h->mode == M_IN_TABLE)
                h->mode = M_IN_ROW;
            return;
        case M_IN_CELL:
            if (H_FLAGS(id) & HF_TABLE_PART) {
                if (html_in_scope(h, T_TD, SCOPE_TABLE) < 0 && html_in_scope(h, T_TH, SCOPE_TABLE) < 0)
                    return;
                html_close_cell(h);
                continue;
            }
            html_body_start_tag(h, t);
            return;
        default:
            html_body_start_tag(h, t);
            return;
        }
    }
}

static void
html_end(HtmlScan *h, HtmlTagToken *t)
{
    int id = t->id;
    h->skip_lf = 0;
    while (!h->unsure) {
        switch (h->mode) {
        case M_INITIAL:
        case M_BEFORE_HTML:
            if (id != T_HEAD && id != T_BODY && id != T_HTML && id != T_BR)
                return;
            html_push(h, T_HTML, NULL, 0);
            h->mode = M_BEFORE_HEAD;
            continue;
        case M_BEFORE_HEAD:
            if (id != T_HEAD && id != T_BODY && id != T_HTML && id != T_BR)
                return;
            html_push(h, T_HEAD, NULL, 0);
            h->mode = M_IN_HEAD;
            continue;
        case M_IN_HEAD:
            if (id == T_TEMPLATE) {
                h->unsure = __LINE__;
                return;
            }
            if (id != T_HEAD && id != T_BODY && id != T_HTML && id != T_BR)
                return;
            html_pop(h);
            h->mode = M_AFTER_HEAD;
            if (id == T_HEAD)
                return;
            continue;
        case M_AFTER_HEAD:
            if (id == T_TEMPLATE) {
                h->unsure = __LINE__;
                return;
            }
            if (id != T_BODY && id != T_HTML && id != T_BR)
                return;
            html_push(h, T_BODY, NULL, 0);
            h->mode = M_IN_BODY;
            continue;
        case M_AFTER_BODY:
            if (id == T_HTML) {
                h->mode = M_AFTER_AFTER_BODY;
                return;
            }
            h->mode = M_IN_BODY;
            continue;
        case M_AFTER_AFTER_BODY:
            h->mode = M_IN_BODY;
            continue;
        case M_IN_TABLE:
            switch (id) {
            case T_TABLE: {
                int k = html_in_scope(h, T_TABLE, SCOPE_TABLE);
                if (k < 0)
                    return;
                html_pop_to(h, k);
                html_reset_mode(h);
                return;
            }
            case T_BODY: case T_CAPTION: case T_COL: case T_COLGROUP: case T_HTML: case T_TBODY:
            case T_TD: case T_TFOOT: case T_TH: case T_THEAD: case T_TR:
                return;
            }
            /* in body, with foster parenting: followed where it closes at most the elements
             * put before the table */
            {
                int k = html_table_context(h);
                uint32_t serial = h->open[k].serial;
                html_body_end(h, t);
                if (h->depth <= k || h->open[k].serial != serial || h->mode != M_IN_TABLE)
                    h->unsure = __LINE__;
            }
            return;
        case M_IN_TABLE_BODY:
            switch (id) {
            case T_TBODY: case T_THEAD: case T_TFOOT:
                if (html_in_scope(h, id, SCOPE_TABLE) < 0)
                    return;
                html_clear_to(h, T_TBODY, T_THEAD, T_TFOOT);
                html_pop(h);
                h->mode = M_IN_TABLE;
                return;
            case T_TABLE:
                if (!html_table_section_in_scope(h))
                    return;
                html_clear_to(h, T_TBODY, T_THEAD, T_TFOOT);
                html_pop(h);
                h->mode = M_IN_TABLE;
                continue;
            case T_BODY: case T_CAPTION: case T_COL: case T_COLGROUP: case T_HTML: case T_TD:
            case T_TH: case T_TR:
                return;
            }
            h->mode = M_IN_TABLE;
            html_end(h, t);
            if (h->mode == M_IN_TABLE)
                h->mode = M_IN_TABLE_BODY;
            return;
        case M_IN_ROW:
            switch (id) {
            case T_TR:
                if (html_in_scope(h, T_TR, SCOPE_TABLE) < 0)
                    return;
                html_clear_to(h, T_TR, T_TR, T_TR);
                html_pop(h);
                h->mode = M_IN_TABLE_BODY;
                return;
            case T_TABLE:
                if (html_in_scope(h, T_TR, SCOPE_TABLE) < 0)
                    return;
                html_clear_to(h, T_TR, T_TR, T_TR);
                html_pop(h);
                h->mode = M_IN_TABLE_BODY;
                continue;
            case T_TBODY: case T_THEAD: case T_TFOOT:
                if (html_in_scope(h, id, SCOPE_TABLE) < 0 || html_in_scope(h, T_TR, SCOPE_TABLE) < 0)
                    return;
                html_clear_to(h, T_TR, T_TR, T_TR);
                html_pop(h);
                h->mode = M_IN_TABLE_BODY;
                continue;
            case T_BODY: case T_CAPTION: case T_COL: case T_COLGROUP: case T_HTML: case T_TD:
            case T_TH:
                return;
            }
            h->mode = M_IN_TABLE;
            html_end(h, t);
            if (h->mode == M_IN_TABLE)
                h->mode = M_IN_ROW;
            return;
        case M_IN_CELL:
            switch (id) {
            case T_TD: case T_TH: {
                int k = html_in_scope(h, id, SCOPE_TABLE);
                if (k < 0)
                    return;
                html_implied_end_tags(h, -1);
                html_pop_to(h, html_in_scope(h, id, SCOPE_TABLE));
                html_clear_to_marker(h);
                h->mode = M_IN_ROW;
                return;
            }
            case T_BODY: case T_CAPTION: case T_COL: case T_COLGROUP: case T_HTML:
                return;
            case T_TABLE: case T_TBODY: case T_TFOOT: case T_THEAD: case T_TR:
                if (html_in_scope(h, id, SCOPE_TABLE) < 0)
                    return;
                html_close_cell(h);
                continue;
            }
            html_body_end(h, t);
            return;
        default:
            html_body_end(h, t);
            return;
        }
    }
}

/* markup[j..] starts with an ASCII-case-blind "script" that the next character ends */
static int
html_script_name(HtmlScan *h, Py_ssize_t j)
{
    if (j + 6 >= h->n || !html_ascii_is(h, j, j + 6, "script"))
        return 0;
    Py_UCS4 after = H_AT(h, j + 6);
    return html_space(after) || after == '/' || after == '>';
}

/* A script's data from j, just past a "<!--" in it: the escaped and double escaped states
 * of the tokenizer, back to plain script data after a "-->". The index after the script's
 * end tag, or n. */
static Py_ssize_t
html_script_escaped(HtmlScan *h, Py_ssize_t j)
{
    Py_ssize_t n = h->n;
    int escaped = 1, doubly = 0, dashes = 2, complete;
    while (j < n) {
        Py_UCS4 c = H_AT(h, j);
        if (!escaped) {  /* script data */
            if (c == '<' && j + 1 < n && H_AT(h, j + 1) == '/' && html_script_name(h, j + 2))
                return html_tag_end(h, j + 8, &complete);
            if (c == '<' && j + 3 < n && H_AT(h, j + 1) == '!' && H_AT(h, j + 2) == '-'
                && H_AT(h, j + 3) == '-') {
                escaped = 1;
                dashes = 2;
                j += 4;
                continue;
            }
            j++;
            continue;
        }
        if (c == '-') {
            dashes += dashes < 2;
            j++;
            continue;
        }
        if (c == '>' && dashes == 2) {
            escaped = doubly = 0;
            j++;
            continue;
        }
        dashes = 0;
        if (c == '<') {
            if (j + 1 < n && H_AT(h, j + 1) == '/' && html_script_name(h, j + 2)) {
                if (!doubly)
                    return html_tag_end(h, j + 8, &complete);
                doubly = 0;  /* the end of the double escape */
                j += 8;
                continue;
            }
            if (!doubly && html_script_name(h, j + 1)) {
                doubly = 1;
                j += 7;
                continue;
            }
        }
        j++;
    }
    return n;
}

/* the content of the raw text element t just opened, from j: the index after its end tag */
static Py_ssize_t
html_raw_text(HtmlScan *h, Py_ssize_t j, HtmlTagToken *t)
{
    Py_ssize_t n = h->n;
    int kind = h->raw, keep = kind != RAW_DROP, complete;
    h->raw = 0;
    h->rcdata = keep;
    if (t->id == T_TEXTAREA && j < n) {  /* a LF right after the start tag is dropped */
        Py_UCS4 c = H_AT(h, j);
        if (c == '\n')
            j++;
        else if (c == '\r')
            j += j + 1 < n && H_AT(h, j + 1) == '\n' ? 2 : 1;
        else if (c == '&')
            h->unsure = __LINE__;
    }
    while (j < n && !h->unsure) {
        Py_UCS4 c = H_AT(h, j);
        if (c == '<') {
            if (j + 2 + t->len < n && H_AT(h, j + 1) == '/') {
                int match = 1;
                for (int k = 0; match && k < t->len; k++) {
                    Py_UCS4 d = H_AT(h, j + 2 + k);
                    match = (d >= 'A' && d <= 'Z' ? d + 0x20 : d) == (Py_UCS4)t->name[k];
                }
                Py_UCS4 after = H_AT(h, j + 2 + t->len);
                if (match && (html_space(after) || after == '/' || after == '>')) {
                    j = html_tag_end(h, j + 2 + t->len, &complete);
                    break;
                }
            }
            if (t->id == T_SCRIPT && j + 3 < n && H_AT(h, j + 1) == '!' && H_AT(h, j + 2) == '-'
                && H_AT(h, j + 3) == '-') {
                j = html_script_escaped(h, j + 4);
                break;
            }
            if (keep)
                html_char(h, '<');
            j++;
        }
        else if (!keep)
            j++;
        else if (kind == RAW_RCDATA || c == '\r' || c == 0 || (c >= 0xD800 && c <= 0xDFFF))
            j = kind == RAW_RCDATA || c != '&' ? html_text_at(h, j) : j + 1;
        else {
            html_char(h, c);
            j++;
        }
    }
    h->rcdata = 0;
    if (H_TOP(h).id == t->id)
        html_pop(h);
    else
        h->unsure = __LINE__;
    if (h->raw_merge >= 0) {
        h->merge = h->raw_merge;
        h->raw_merge = -1;
    }
    return j;
}

/* The public identifiers of quirks mode (the standard's list, as Lexbor has it) */
static const char *const html_quirks_public_is[] = {
    "-//W3O//DTD W3 HTML Strict 3.0//EN//", "-/W3C/DTD HTML 4.0 Transitional/EN", "HTML"};
static const char *const html_quirks_public_start[] = {
    "+//Silmaril//dtd html Pro v0r11 19970101//", "-//AS//DTD HTML 3.0 asWedit + extensions//",
    "-//AdvaSoft Ltd//DTD HTML 3.0 asWedit + extensions//", "-//IETF//DTD HTML 2.0 Level 1//",
    "-//IETF//DTD HTML 2.0 Level 2//", "-//IETF//DTD HTML 2.0 Strict Level 1//",
    "-//IETF//DTD HTML 2.0 Strict Level 2//", "-//IETF//DTD HTML 2.0 Strict//",
    "-//IETF//DTD HTML 2.0//", "-//IETF//DTD HTML 2.1E//", "-//IETF//DTD HTML 3.0//",
    "-//IETF//DTD HTML 3.2 Final//", "-//IETF//DTD HTML 3.2//", "-//IETF//DTD HTML 3//",
    "-//IETF//DTD HTML Level 0//", "-//IETF//DTD HTML Level 1//", "-//IETF//DTD HTML Level 2//",
    "-//IETF//DTD HTML Level 3//", "-//IETF//DTD HTML Strict Level 0//",
    "-//IETF//DTD HTML Strict Level 1//", "-//IETF//DTD HTML Strict Level 2//",
    "-//IETF//DTD HTML Strict Level 3//", "-//IETF//DTD HTML Strict//", "-//IETF//DTD HTML//",
    "-//Metrius//DTD Metrius Presentational//",
    "-//Microsoft//DTD Internet Explorer 2.0 HTML Strict//",
    "-//Microsoft//DTD Internet Explorer 2.0 HTML//",
    "-//Microsoft//DTD Internet Explorer 2.0 Tables//",
    "-//Microsoft//DTD Internet Explorer 3.0 HTML Strict//",
    "-//Microsoft//DTD Internet Explorer 3.0 HTML//",
    "-//Microsoft//DTD Internet Explorer 3.0 Tables//", "-//Netscape Comm. Corp.//DTD HTML//",
    "-//Netscape Comm. Corp.//DTD Strict HTML//", "-//O'Reilly and Associates//DTD HTML 2.0//",
    "-//O'Reilly and Associates//DTD HTML Extended 1.0//",
    "-//O'Reilly and Associates//DTD HTML Extended Relaxed 1.0//",
    "-//SQ//DTD HTML 2.0 HoTMetaL + extensions//",
    "-//SoftQuad Software//DTD HoTMetaL PRO 6.0::19990601::extensions to HTML 4.0//",
    "-//SoftQuad//DTD HoTMetaL PRO 4.0::19971010::extensions to HTML 4.0//",
    "-//Spyglass//DTD HTML 2.0 Extended//", "-//Sun Microsystems Corp.//DTD HotJava HTML//",
    "-//Sun Microsystems Corp.//DTD HotJava Strict HTML//", "-//W3C//DTD HTML 3 1995-03-24//",
    "-//W3C//DTD HTML 3.2 Draft//", "-//W3C//DTD HTML 3.2 Final//", "-//W3C//DTD HTML 3.2//",
    "-//W3C//DTD HTML 3.2S Draft//", "-//W3C//DTD HTML 4.0 Frameset//",
    "-//W3C//DTD HTML 4.0 Transitional//", "-//W3C//DTD HTML Experimental 19960712//",
    "-//W3C//DTD HTML Experimental 970421//", "-//W3C//DTD W3 HTML//",
    "-//W3O//DTD W3 HTML 3.0//", "-//WebTechs//DTD Mozilla HTML 2.0//",
    "-//WebTechs//DTD Mozilla HTML//"};
/* quirks where the doctype has no system identifier (limited quirks where it has one) */
static const char *const html_quirks_public_start_no_system[] = {
    "-//W3C//DTD HTML 4.01 Frameset//", "-//W3C//DTD HTML 4.01 Transitional//"};
#define HTML_COUNT(a) ((int)(sizeof a / sizeof a[0]))

/* Whether markup[at:end] is (``prefix``: starts with) ``text``, ignoring ASCII case */
static int
html_ascii_starts(HtmlScan *h, Py_ssize_t at, Py_ssize_t end, const char *text, int prefix)
{
    Py_ssize_t len = (Py_ssize_t)strlen(text);
    if (end - at < len || (!prefix && end - at != len))
        return 0;
    for (Py_ssize_t k = 0; k < len; k++) {
        Py_UCS4 c = H_AT(h, at + k), t = (Py_UCS4)(unsigned char)text[k];
        if ((c >= 'A' && c <= 'Z' ? c + 0x20 : c) != (t >= 'A' && t <= 'Z' ? t + 0x20 : t))
            return 0;
    }
    return 1;
}

/* A quoted identifier of a doctype at markup[*i] (a quote): its start and end; 0 where it is
 * not closed before the doctype's end (force-quirks) */
static int
html_doctype_identifier(HtmlScan *h, Py_ssize_t *i, Py_ssize_t end, Py_ssize_t span[2])
{
    Py_UCS4 quote = H_AT(h, *i);
    Py_ssize_t k = *i + 1;
    span[0] = k;
    while (k < end && H_AT(h, k) != quote)
        k++;
    if (k == end)
        return 0;
    span[1] = k;
    *i = k + 1;
    return 1;
}

/* Whether the doctype whose text after "<!DOCTYPE" is markup[i:end] (end: its '>', or the
 * markup's end) puts the document in quirks mode: the tokenizer's doctype states (name,
 * PUBLIC and SYSTEM keywords, quoted identifiers, force-quirks), then the initial insertion
 * mode's rules as Lexbor applies them (an empty identifier counts as a missing one). Only
 * quirks against no quirks matters here (limited quirks reads <table> as no quirks does). */
static int
html_doctype_quirks(HtmlScan *h, Py_ssize_t i, Py_ssize_t end)
{
    if (end == h->n)
        return 1;  /* ended by the end of the markup: force-quirks */
    for (Py_ssize_t k = i; k < end; k++)
        if (H_AT(h, k) == 0) {
            h->unsure = __LINE__;  /* a NUL is read as U+FFFD */
            return 1;
        }
    while (i < end && html_space(H_AT(h, i)))
        i++;
    if (i == end)
        return 1;  /* no name */
    Py_ssize_t name = i;
    while (i < end && !html_space(H_AT(h, i)))
        i++;
    int is_html = html_ascii_starts(h, name, i, "html", 0);
    Py_ssize_t public[2] = {0, 0}, system[2] = {0, 0};
    while (i < end && html_space(H_AT(h, i)))
        i++;
    if (i < end) {
        int is_public = html_ascii_starts(h, i, end, "public", 1);
        if (!is_public && !html_ascii_starts(h, i, end, "system", 1))
            return 1;  /* bogus: force-quirks */
        i += 6;
        for (int id = is_public ? 0 : 1; id < 2; id++) {
            Py_ssize_t *span = id == 0 ? public : system;
            while (i < end && html_space(H_AT(h, i)))
                i++;
            if (i == end) {
                if (id == 1 && is_public)
                    break;  /* a public identifier only */
                return 1;  /* a keyword without its identifier */
            }
            Py_UCS4 c = H_AT(h, i);
            if ((c != '"' && c != '\'') || !html_doctype_identifier(h, &i, end, span))
                return 1;
        }
        /* after the system identifier anything is bogus, without force-quirks */
    }
    if (!is_html)
        return 1;
    Py_ssize_t public_len = public[1] - public[0], system_len = system[1] - system[0];
    if (public_len) {
        for (int k = 0; k < HTML_COUNT(html_quirks_public_is); k++)
            if (html_ascii_starts(h, public[0], public[1], html_quirks_public_is[k], 0))
                return 1;
        for (int k = 0; k < HTML_COUNT(html_quirks_public_start); k++)
            if (html_ascii_starts(h, public[0], public[1], html_quirks_public_start[k], 1))
                return 1;
    }
    if (system_len && html_ascii_starts(h, system[0], system[1],
                                        "http://www.ibm.com/data/dtd/v11/ibmxhtml1-transitional.dtd", 0))
        return 1;
    if (public_len && !system_len)
        for (int k = 0; k < HTML_COUNT(html_quirks_public_start_no_system); k++)
            if (html_ascii_starts(h, public[0], public[1], html_quirks_public_start_no_system[k], 1))
                return 1;
    return 0;
}

/* markup[i] == '<': the token it starts; the index after it */
static Py_ssize_t
html_markup_at(HtmlScan *h, Py_ssize_t i)
{
    Py_ssize_t n = h->n, j = i + 1;
    Py_UCS4 c = j < n ? H_AT(h, j) : 0;
    int end_tag = 0;
    if (c == '/') {
        end_tag = 1;
        j++;
        c = j < n ? H_AT(h, j) : 0;
        if (j >= n) {  /* "</" at the end: text */
            html_char(h, '<');
            html_char(h, '/');
            return n;
        }
        if (c == '>')
            return j + 1;  /* "</>": no token at all */
        if (!html_alpha(c))
            goto bogus_comment;
    }
    else if (c == '!') {
        if (j + 2 < n && H_AT(h, j + 1) == '-' && H_AT(h, j + 2) == '-') {
            Py_ssize_t k = j + 3;  /* the comment's first character */
            if (k < n && H_AT(h, k) == '>')
                k += 1;
            else if (k + 1 < n && H_AT(h, k) == '-' && H_AT(h, k + 1) == '>')
                k += 2;
            else {
                for (; k < n; k++)
                    if (H_AT(h, k) == '-' && k + 2 < n && H_AT(h, k + 1) == '-') {
                        if (H_AT(h, k + 2) == '>') {
                            k += 3;
                            break;
                        }
                        if (H_AT(h, k + 2) == '!' && k + 3 < n && H_AT(h, k + 3) == '>') {
                            k += 4;
                            break;
                        }
                    }
            }
            html_comment(h);
            return k < n ? k : n;
        }
        static const char doctype[] = "doctype";
        int is_doctype = j + 7 < n + 0;
        for (int k = 0; is_doctype && k < 7; k++)
            is_doctype = (H_AT(h, j + 1 + k) | 0x20) == (Py_UCS4)doctype[k];
        if (is_doctype) {
            Py_ssize_t k = j + 8;
            while (k < n && H_AT(h, k) != '>')
                k++;
            h->skip_lf = 0;
            if (h->mode == M_INITIAL) {
                h->mode = M_BEFORE_HTML;
                h->quirks = html_doctype_quirks(h, j + 8, k);
            }
            return k < n ? k + 1 : n;
        }
        goto bogus_comment;
    }
    else if (c == '?') {
        goto bogus_comment;
    }
    else if (!html_alpha(c)) {
        html_char(h, '<');
        return i + 1;
    }
    /* a tag name */
    HtmlTagToken t;
    int len = 0;
    while (j < n) {
        c = H_AT(h, j);
        if (html_space(c) || c == '/' || c == '>')
            break;
        if (c >= 128 || c == 0 || len == HTML_NAME_MAX) {
            h->unsure = __LINE__;
            return n;
        }
        t.name[len++] = (char)(c >= 'A' && c <= 'Z' ? c + 0x20 : c);
        j++;
    }
    t.len = len;
    t.id = html_tag_id(t.name, len);
    int complete;
    j = html_tag_end(h, j, &complete);
    if (!complete)
        return n;  /* EOF in a tag: dropped */
    if (end_tag) {
        html_end(h, &t);
        return j;
    }
    html_start(h, &t);
    if (h->raw && !h->unsure)
        j = html_raw_text(h, j, &t);
    return j;
bogus_comment:
    while (j < n && H_AT(h, j) != '>')
        j++;
    html_comment(h);
    return j < n ? j + 1 : n;
}

PyDoc_STRVAR(html_text_doc,
"html_text(markup, strip, /)\n--\n\n"
"The text nodes of the HTML5 tree of ``markup``, joined by ' ', where this scanner is sure\n"
"of them (the selectolax path's text before its strip); None where it is not.");

static PyObject *
html_text(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *markup;
    int strip;
    if (!PyArg_ParseTuple(args, "Up:html_text", &markup, &strip))
        return NULL;
    HtmlScan *h = PyMem_Malloc(sizeof(HtmlScan));
    if (h == NULL)
        return PyErr_NoMemory();
    memset(h, 0, offsetof(HtmlScan, open));
    h->data = PyUnicode_DATA(markup);
    h->kind = PyUnicode_KIND(markup);
    h->n = PyUnicode_GET_LENGTH(markup);
    h->formatting_ok = 1;
    h->strip = strip;
    h->raw_merge = -1;
    h->quirks = 1;
    h->out_cap = h->n + 64;  /* the text is never longer, but for a separator or two */
    h->out = PyMem_Malloc((size_t)h->out_cap * sizeof(Py_UCS4));
    if (h->out == NULL) {
        PyMem_Free(h);
        return PyErr_NoMemory();
    }
    Py_ssize_t i = 0, n = h->n;
    if (h->kind != PyUnicode_1BYTE_KIND)  /* selectolax drops lone surrogates, markup included */
        for (Py_ssize_t k = 0; k < n && !h->unsure; k++) {
            Py_UCS4 c = H_AT(h, k);
            if (c >= 0xD800 && c <= 0xDFFF)
                h->unsure = __LINE__;
        }
    while (i < n && !h->unsure) {
        Py_UCS4 c = H_AT(h, i);
        if (c == '<')
            i = html_markup_at(h, i);
        else if (c != '&' && c != '\r' && c != 0 && !(c >= 0xD800 && c <= 0xDFFF) && h->merge
                 && h->formatting_ok && !h->skip_lf
                 && (h->mode == M_IN_BODY || h->mode == M_IN_CELL)) {
            /* the common case: more characters of the same text node, up to the next one
             * that is not plain text */
            Py_ssize_t end = i + 1;
            if (h->kind == PyUnicode_1BYTE_KIND) {
                const Py_UCS1 *d = h->data;
                while (end < n && !html_stop[d[end]])
                    end++;
                if (html_grow(h, end - i) < 0)
                    break;
                for (Py_ssize_t k = i; k < end; k++)
                    h->out[h->out_len++] = d[k];
            }
            else {
                for (; end < n; end++) {
                    Py_UCS4 d = H_AT(h, end);
                    if ((d < 256 && html_stop[d]) || (d >= 0xD800 && d <= 0xDFFF))
                        break;
                }
                if (html_grow(h, end - i) < 0)
                    break;
                for (Py_ssize_t k = i; k < end; k++)
                    h->out[h->out_len++] = H_AT(h, k);
            }
            i = end;
        }
        else
            i = html_text_at(h, i);
    }
    PyObject *result;
    if (h->nomem)
        result = PyErr_NoMemory();
    else if (h->unsure)
#ifdef HTML_WHY_UNSURE  /* a development build: the line that gave up, to find what to add */
        result = PyLong_FromLong(h->unsure);
#else
        result = Py_NewRef(Py_None);
#endif
    else
        result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, h->out, h->out_len);
    PyMem_Free(h->out);
    PyMem_Free(h);
    return result;
}

static PyMethodDef module_methods[] = {
    {"html_text", (PyCFunction)html_text, METH_VARARGS, html_text_doc},
    {"read_top", (PyCFunction)read_top, METH_VARARGS, read_top_doc},
    {"has_han", (PyCFunction)has_han, METH_O, has_han_doc},
    {"count_money", (PyCFunction)count_money, METH_VARARGS, count_money_doc},
    {"has_encoded_word", (PyCFunction)has_encoded_word, METH_O, has_encoded_word_doc},
    {"has_field", (PyCFunction)has_field, METH_VARARGS, has_field_doc},
    {"reserve", (PyCFunction)reserve, METH_VARARGS, reserve_doc},
    {"first_values", (PyCFunction)first_values, METH_VARARGS, first_values_doc},
    {"count_url_tokens", (PyCFunction)count_url_tokens, METH_VARARGS, count_url_tokens_doc},
    {"header_lines_end", (PyCFunction)header_lines_end, METH_VARARGS, header_lines_end_doc},
    {"url_hosts", (PyCFunction)url_hosts, METH_O, url_hosts_doc},
    {"unfold_headers", (PyCFunction)unfold_headers, METH_VARARGS, unfold_headers_doc},
    {"header_layout", (PyCFunction)header_layout, METH_VARARGS, header_layout_doc},
    {"header_fields", (PyCFunction)header_fields, METH_VARARGS, header_fields_doc},
    {"addresses", (PyCFunction)addresses, METH_O, addresses_doc},
    {NULL, NULL, 0, NULL},
};

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
    {"count_prepared", (PyCFunction)WordCounter_count_prepared, METH_VARARGS,
     count_prepared_doc},
    {"words", (PyCFunction)WordCounter_words, METH_O, words_doc},
    {"count_address_field", (PyCFunction)WordCounter_count_address_field, METH_VARARGS,
     count_address_field_doc},
    {"count_header_fields", (PyCFunction)WordCounter_count_header_fields, METH_VARARGS,
     count_header_fields_doc},
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
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__tokens(void)
{
    if (PyType_Ready(&WordCounterType) < 0)
        return NULL;
    init_shape_classes();
    init_html_tags();
    for (int k = 0; k < TOP_NAMES; k++)
        if (top_names[k] == NULL
            && (top_names[k] = PyUnicode_InternFromString(top_name_text[k])) == NULL)
            return NULL;
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
