/* Compiled fast paths of the exchange: splitting a batch by destination worker and encoding
 * the common record shapes without pickle.  Optional: pytimely/_native.py loads this module
 * if it was built, and every function here has a pure-Python equivalent that is used
 * otherwise (and that the tests run too).
 *
 * RouteCache().split(batch, memo, peers, key_index, keys) -> list of `peers` lists, or None
 *     The records of the list `batch`, one list per destination worker, record order kept.
 *     A record's key is `keys[i]` if `keys` is a list, else the record itself
 *     (key_index < 0), else `record[key_index]` of an exact tuple or list record.  Its
 *     destination is `memo[key]` (a dict lookup, so equal keys find one entry whatever their
 *     type, as in pytimely/communication/routing.py), cached per key object.  None means
 *     "not every key is known" (a miss, an unhashable key, a record that is not a tuple):
 *     the caller routes in Python.
 *
 * encode(obj) -> bytes or None
 *     `obj` in the records codec (format in pytimely/communication/codec.py), or None if it
 *     holds anything but exact None, bool, int (64-bit), float, str, bytes, tuple or list, or
 *     nests deeper than MAX_DEPTH: the caller pickles it instead.
 *
 * decode(buffer) -> object
 *     The inverse of encode; ValueError for a malformed payload.  Tuples whose items are all
 *     atomic are untracked by the garbage collector at once (CPython does the same lazily,
 *     at their first collection), so that decoding a batch of (str, int) records does not
 *     make every young-generation collection walk them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC 0xC5
#define MAX_DEPTH 32

enum {
    T_NONE = 'N',
    T_TRUE = 'T',
    T_FALSE = 'F',
    T_UINT8 = 'j',   /* int in [0, 255]: one byte */
    T_UINT16 = 'h',  /* int in [0, 65535]: 2 bytes little-endian */
    T_INT32 = 'k',   /* int in the int32 range: 4 bytes little-endian */
    T_INT64 = 'i',   /* int in the int64 range: 8 bytes little-endian */
    T_FLOAT = 'f',   /* IEEE-754 double, 8 bytes little-endian */
    T_STR8 = 's',    /* str, UTF-8, length < 256: 1-byte length */
    T_STR32 = 'S',   /* str, UTF-8: 4-byte length */
    T_BYTES8 = 'b',
    T_BYTES32 = 'B',
    T_TUPLE = 't',   /* 4-byte count, then the items */
    T_LIST = 'l',
};

/* ---- strings shared by the split and the decoder ------------------------------------------ */

/* Short ASCII strings, by a hash of their bytes: those this process's exchanges routed
 * (offered by the split) and those it decoded.  A word decoded from a peer is then the very
 * str object this worker already holds for it, as sys.intern would give: no allocation, its
 * hash already cached, and the consumer's dict lookups match it by identity instead of
 * comparing bytes with a second object.  A slot holds one reference; a newcomer replaces
 * it, so the table never holds more than STR_CACHE_SLOTS strings of at most STR_CACHE_MAX
 * bytes. */
#define STR_CACHE_SLOTS (1 << 15)
#define STR_CACHE_MAX 32
static PyObject *str_cache[STR_CACHE_SLOTS];

/* The slot of the n bytes at p, or NULL if they are not short ASCII. */
static inline PyObject **
str_cache_slot(const unsigned char *p, Py_ssize_t n)
{
    if (n > STR_CACHE_MAX)
        return NULL;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80)
            return NULL;
        h = (h ^ p[i]) * 16777619u;
    }
    return &str_cache[(h ^ (h >> 15)) & (STR_CACHE_SLOTS - 1)];
}

static inline int
str_equals(PyObject *s, const unsigned char *p, Py_ssize_t n)
{
    return PyUnicode_GET_LENGTH(s) == n && memcmp(PyUnicode_DATA(s), p, n) == 0;
}

/* Make `key` (an exact str whose hash is computed) the cached object for its text. */
static void
str_cache_offer(PyObject *key)
{
    if (!PyUnicode_IS_COMPACT_ASCII(key))
        return;
    PyObject **slot = str_cache_slot(PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key));
    if (slot != NULL && *slot != key)
        Py_XSETREF(*slot, Py_NewRef(key));
}

/* ---- split ------------------------------------------------------------------------------ */

/* A RouteCache remembers, for the key *objects* it saw last, the worker the memo gave them: a
 * batch of words drawn from a vocabulary holds the same str objects again and again, and one
 * probe of a table indexed by the object's address is cheaper than a dict lookup (which must
 * read the key's hash and probe two tables).  It is only a cache of memo lookups: an entry
 * holds a reference to its key, so the address cannot be reused by another object, and the
 * memo never changes the route of a key (routes are a function of the key), so an entry never
 * goes stale.  Only exact str, int, bytes and float keys are cached (releasing one runs no
 * Python code).
 *
 * Sizing, per window of CACHE_WINDOW lookups: a window that hits less than half the time
 * doubles the table (up to CACHE_MAX_SLOTS); at the largest size it means the keys are new
 * objects every time (words parsed from text): the cache then stops inserting, shrinks to
 * CACHE_MIN_SLOTS (releasing what it held) and tries again after 1, 2, 4 ... 64 windows, so
 * such a stream pays little more than the dict lookups. */
#define CACHE_MIN_SLOTS (1 << 10)
#define CACHE_MAX_SLOTS (1 << 16)
#define CACHE_WINDOW (1 << 14)
#define CACHE_MAX_BACKOFF 64

typedef struct {
    PyObject *key;
    Py_ssize_t dest;
} CacheSlot;

typedef struct {
    PyObject_HEAD
    CacheSlot *slots;
    Py_ssize_t mask;
    Py_ssize_t hits;      /* in this window */
    Py_ssize_t misses;    /* in this window */
    int inserting;        /* 0 while backing off */
    int backoff;          /* windows to back off for next time */
    int idle_windows;     /* windows left before inserting again */
    Py_ssize_t size;      /* the table size to use when inserting */
} RouteCache;

static void
cache_clear_slots(CacheSlot *slots, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(slots[i].key);
}

static int
cache_resize(RouteCache *self, Py_ssize_t n)
{
    CacheSlot *slots = PyMem_Calloc(n, sizeof(CacheSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (self->slots != NULL) {
        cache_clear_slots(self->slots, self->mask + 1);
        PyMem_Free(self->slots);
    }
    self->slots = slots;
    self->mask = n - 1;
    return 0;
}

static PyObject *
cache_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "RouteCache() takes no arguments");
        return NULL;
    }
    RouteCache *self = (RouteCache *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->inserting = 1;
    self->backoff = 1;
    self->size = CACHE_MIN_SLOTS;
    if (cache_resize(self, CACHE_MIN_SLOTS) < 0)
        Py_CLEAR(self);
    return (PyObject *)self;
}

static void
cache_dealloc(RouteCache *self)
{
    if (self->slots != NULL) {
        cache_clear_slots(self->slots, self->mask + 1);
        PyMem_Free(self->slots);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline Py_ssize_t
cache_index(RouteCache *self, PyObject *key)
{
    uint64_t h = ((uint64_t)(uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull;
    return (Py_ssize_t)(h >> 40) & self->mask;
}

/* The route of `key`: from the cache, else from the memo (then cached).  -1: not in the memo
 * (or not hashable: the exception is cleared, the Python path reports it). */
static Py_ssize_t
cache_route(RouteCache *self, PyObject *memo, PyObject *key, long peers)
{
    CacheSlot *slot = &self->slots[cache_index(self, key)];
    if (slot->key == key) {
        self->hits++;
        return slot->dest;
    }
    self->misses++;
    Py_INCREF(key);
    PyObject *dest = PyDict_GetItemWithError(memo, key); /* borrowed */
    Py_ssize_t w = -1;
    if (dest != NULL && PyLong_CheckExact(dest))
        w = PyLong_AsSsize_t(dest);
    if (w < 0 || w >= peers) {
        PyErr_Clear();
        Py_DECREF(key);
        return -1;
    }
    if (self->inserting && (PyUnicode_CheckExact(key) || PyLong_CheckExact(key) ||
                            PyBytes_CheckExact(key) || PyFloat_CheckExact(key))) {
        /* Found again: a key's __eq__ may have run Python code that re-entered this cache
         * (and resized it) during the lookup. */
        slot = &self->slots[cache_index(self, key)];
        Py_XSETREF(slot->key, key); /* the reference taken above */
        slot->dest = w;
        if (PyUnicode_CheckExact(key)) /* hashed by the lookup */
            str_cache_offer(key);
    }
    else {
        Py_DECREF(key);
    }
    return w;
}

/* The end of a window: grow, back off or resume (see the sizing rule above). */
static int
cache_next_window(RouteCache *self)
{
    int poor = self->misses > self->hits;
    self->hits = self->misses = 0;
    if (!self->inserting) {
        if (--self->idle_windows > 0)
            return 0;
        self->inserting = 1;
        return cache_resize(self, self->size);
    }
    if (!poor) {
        self->backoff = 1;
        return 0;
    }
    if (self->size < CACHE_MAX_SLOTS) {
        self->size *= 2;
        return cache_resize(self, self->size);
    }
    self->inserting = 0;
    self->idle_windows = self->backoff;
    if (self->backoff < CACHE_MAX_BACKOFF)
        self->backoff *= 2;
    return cache_resize(self, CACHE_MIN_SLOTS);
}

static PyObject *
cache_split(RouteCache *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "split(batch, memo, peers, key_index, keys)");
        return NULL;
    }
    PyObject *batch = args[0], *memo = args[1], *keys = args[4];
    if (!PyList_CheckExact(batch) || !PyDict_CheckExact(memo)) {
        PyErr_SetString(PyExc_TypeError, "split needs a list batch and a dict memo");
        return NULL;
    }
    long peers = PyLong_AsLong(args[2]);
    if (peers == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t key_index = PyLong_AsSsize_t(args[3]);
    if (key_index == -1 && PyErr_Occurred())
        return NULL;
    if (peers < 1) {
        PyErr_SetString(PyExc_ValueError, "peers must be positive");
        return NULL;
    }
    if (keys != Py_None && (!PyList_CheckExact(keys) ||
                            PyList_GET_SIZE(keys) != PyList_GET_SIZE(batch))) {
        PyErr_SetString(PyExc_ValueError, "keys must be a list as long as the batch");
        return NULL;
    }
    if (self->hits + self->misses >= CACHE_WINDOW && cache_next_window(self) < 0)
        return NULL;
    PyObject *parts = PyList_New(peers);
    if (parts == NULL)
        return NULL;
    for (long w = 0; w < peers; w++) {
        PyObject *part = PyList_New(0);
        if (part == NULL)
            goto error;
        PyList_SET_ITEM(parts, w, part);
    }
    /* The sizes are read at every step: a key's __eq__ (Python code) could change the lists. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        PyObject *record = PyList_GET_ITEM(batch, i);
        PyObject *key;
        if (keys != Py_None) {
            if (i >= PyList_GET_SIZE(keys))
                goto miss;
            key = PyList_GET_ITEM(keys, i);
        }
        else if (key_index < 0) {
            key = record;
        }
        else if (PyTuple_CheckExact(record) && key_index < PyTuple_GET_SIZE(record)) {
            key = PyTuple_GET_ITEM(record, key_index);
        }
        else if (PyList_CheckExact(record) && key_index < PyList_GET_SIZE(record)) {
            key = PyList_GET_ITEM(record, key_index);
        }
        else {
            goto miss;
        }
        Py_INCREF(record);
        Py_ssize_t w = cache_route(self, memo, key, peers);
        if (w < 0) {
            Py_DECREF(record);
            goto miss;
        }
        int failed = PyList_Append(PyList_GET_ITEM(parts, w), record);
        Py_DECREF(record);
        if (failed)
            goto error;
    }
    return parts;
miss:
    Py_DECREF(parts);
    Py_RETURN_NONE;
error:
    Py_DECREF(parts);
    return NULL;
}

static PyMethodDef cache_methods[] = {
    {"split", (PyCFunction)(void (*)(void))cache_split, METH_FASTCALL,
     "split(batch, memo, peers, key_index, keys): the records of the list `batch`, one list "
     "per destination worker, record order kept.  A record's key is keys[i] if `keys` is a "
     "list, else the record itself (key_index < 0), else record[key_index] of an exact tuple "
     "or list.  Its worker is memo[key] (a dict lookup, cached per key object).  None if some "
     "key is not in the memo, is unhashable, or cannot be read: the caller routes in Python."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RouteCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pytimely._speedups.RouteCache",
    .tp_basicsize = sizeof(RouteCache),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The routes of recently seen key objects, by address (a cache of memo lookups).",
    .tp_new = cache_new,
    .tp_dealloc = (destructor)cache_dealloc,
    .tp_methods = cache_methods,
};

/* ---- encode ----------------------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
} Buffer;

static int
reserve(Buffer *b, Py_ssize_t extra)
{
    if (b->size + extra <= b->capacity)
        return 0;
    Py_ssize_t capacity = b->capacity * 2;
    if (capacity < b->size + extra)
        capacity = b->size + extra;
    char *data = PyMem_Realloc(b->data, capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static inline void
put_u32(char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (char)((v >> (8 * k)) & 0xFF);
}

static inline void
put_u64(char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (char)((v >> (8 * k)) & 0xFF);
}

static inline uint32_t
get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t
get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | p[k];
    return v;
}

/* A length-prefixed blob: the 1-byte form below 256 bytes. */
static int
put_blob(Buffer *b, char short_tag, char long_tag, const char *data, Py_ssize_t n)
{
    if (n > (Py_ssize_t)UINT32_MAX)
        return 1;
    if (reserve(b, 5 + n))
        return -1;
    char *p = b->data + b->size;
    if (n < 256) {
        *p++ = short_tag;
        *p++ = (char)n;
    }
    else {
        *p++ = long_tag;
        put_u32(p, (uint32_t)n);
        p += 4;
    }
    memcpy(p, data, n);
    b->size = (p - b->data) + n;
    return 0;
}

/* 0: encoded; 1: not encodable (no exception set); -1: error (exception set). */
static int
encode_value(Buffer *b, PyObject *obj, int depth)
{
    if (obj == Py_None || obj == Py_True || obj == Py_False) {
        if (reserve(b, 1))
            return -1;
        b->data[b->size++] = obj == Py_None ? T_NONE : obj == Py_True ? T_TRUE : T_FALSE;
        return 0;
    }
    if (PyUnicode_CheckExact(obj)) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
        if (utf8 == NULL) { /* lone surrogates: pickle keeps them */
            PyErr_Clear();
            return 1;
        }
        return put_blob(b, T_STR8, T_STR32, utf8, n);
    }
    if (PyLong_CheckExact(obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow)
            return 1;
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (reserve(b, 9))
            return -1;
        if (v >= 0 && v < 256) {
            b->data[b->size++] = T_UINT8;
            b->data[b->size++] = (char)v;
        }
        else if (v >= 0 && v < 65536) {
            b->data[b->size++] = T_UINT16;
            b->data[b->size++] = (char)(v & 0xFF);
            b->data[b->size++] = (char)(v >> 8);
        }
        else if (v >= INT32_MIN && v <= INT32_MAX) {
            b->data[b->size++] = T_INT32;
            put_u32(b->data + b->size, (uint32_t)(int32_t)v);
            b->size += 4;
        }
        else {
            b->data[b->size++] = T_INT64;
            put_u64(b->data + b->size, (uint64_t)v);
            b->size += 8;
        }
        return 0;
    }
    if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) {
        if (depth >= MAX_DEPTH)
            return 1;
        int is_tuple = PyTuple_CheckExact(obj);
        Py_ssize_t n = is_tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
        if (n > (Py_ssize_t)UINT32_MAX)
            return 1;
        if (reserve(b, 5))
            return -1;
        b->data[b->size++] = is_tuple ? T_TUPLE : T_LIST;
        put_u32(b->data + b->size, (uint32_t)n);
        b->size += 4;
        for (Py_ssize_t i = 0; i < n; i++) {
            /* A list holds only exact atoms and containers here: nothing runs Python code
             * while it is encoded, so its size cannot change under us. */
            PyObject *item = is_tuple ? PyTuple_GET_ITEM(obj, i) : PyList_GET_ITEM(obj, i);
            int r = encode_value(b, item, depth + 1);
            if (r)
                return r;
        }
        return 0;
    }
    if (PyFloat_CheckExact(obj)) {
        double x = PyFloat_AS_DOUBLE(obj);
        uint64_t bits;
        memcpy(&bits, &x, 8);
        if (reserve(b, 9))
            return -1;
        b->data[b->size++] = T_FLOAT;
        put_u64(b->data + b->size, bits);
        b->size += 8;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        return put_blob(b, T_BYTES8, T_BYTES32, PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj));
    }
    return 1;
}

static PyObject *
encode(PyObject *self, PyObject *obj)
{
    Buffer b = {NULL, 0, 0};
    if (reserve(&b, 4096))
        return NULL;
    b.data[b.size++] = (char)MAGIC;
    int r = encode_value(&b, obj, 0);
    PyObject *out = NULL;
    if (r == 0)
        out = PyBytes_FromStringAndSize(b.data, b.size);
    else if (r == 1)
        out = Py_NewRef(Py_None);
    PyMem_Free(b.data);
    return out;
}

/* ---- decode ----------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Reader;

static PyObject *
malformed(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed records-codec payload: %s", what);
    return NULL;
}

static PyObject *
decode_str(const unsigned char *p, Py_ssize_t n)
{
    PyObject **slot = str_cache_slot(p, n);
    if (slot == NULL) {
        const unsigned char *q = p, *end = p + n;
        while (q < end && *q < 0x80)
            q++;
        if (q != end)
            return PyUnicode_DecodeUTF8((const char *)p, n, "surrogatepass");
    }
    else if (*slot != NULL && str_equals(*slot, p, n)) {
        return Py_NewRef(*slot);
    }
    PyObject *s = PyUnicode_New(n, 127); /* ASCII: one allocation and a copy */
    if (s == NULL)
        return NULL;
    memcpy(PyUnicode_DATA(s), p, n);
    if (slot != NULL) {
        if (PyObject_Hash(s) == -1) { /* cannot fail for a str; cached on it from now on */
            Py_DECREF(s);
            return NULL;
        }
        Py_XSETREF(*slot, Py_NewRef(s));
    }
    return s;
}

static PyObject *
decode_value(Reader *r, int depth)
{
    if (r->p >= r->end)
        return malformed("truncated");
    unsigned char tag = *r->p++;
    Py_ssize_t avail = r->end - r->p;
    switch (tag) {
    case T_NONE:
        Py_RETURN_NONE;
    case T_TRUE:
        Py_RETURN_TRUE;
    case T_FALSE:
        Py_RETURN_FALSE;
    case T_UINT8:
        if (avail < 1)
            return malformed("truncated int");
        return PyLong_FromLong(*r->p++);
    case T_UINT16: {
        if (avail < 2)
            return malformed("truncated int");
        long v = r->p[0] | ((long)r->p[1] << 8);
        r->p += 2;
        return PyLong_FromLong(v);
    }
    case T_INT32: {
        if (avail < 4)
            return malformed("truncated int");
        int32_t v = (int32_t)get_u32(r->p);
        r->p += 4;
        return PyLong_FromLong(v);
    }
    case T_INT64: {
        if (avail < 8)
            return malformed("truncated int");
        int64_t v = (int64_t)get_u64(r->p);
        r->p += 8;
        return PyLong_FromLongLong(v);
    }
    case T_FLOAT: {
        if (avail < 8)
            return malformed("truncated float");
        uint64_t bits = get_u64(r->p);
        double x;
        memcpy(&x, &bits, 8);
        r->p += 8;
        return PyFloat_FromDouble(x);
    }
    case T_STR8:
    case T_STR32:
    case T_BYTES8:
    case T_BYTES32: {
        Py_ssize_t n;
        if (tag == T_STR8 || tag == T_BYTES8) {
            if (avail < 1)
                return malformed("truncated length");
            n = *r->p++;
        }
        else {
            if (avail < 4)
                return malformed("truncated length");
            n = get_u32(r->p);
            r->p += 4;
        }
        if (r->end - r->p < n)
            return malformed("truncated string");
        const unsigned char *p = r->p;
        r->p += n;
        if (tag == T_STR8 || tag == T_STR32)
            return decode_str(p, n);
        return PyBytes_FromStringAndSize((const char *)p, n);
    }
    case T_TUPLE:
    case T_LIST: {
        if (depth >= MAX_DEPTH)
            return malformed("nested too deeply");
        if (avail < 4)
            return malformed("truncated count");
        Py_ssize_t n = get_u32(r->p);
        r->p += 4;
        if (n > r->end - r->p) /* every item takes at least one byte */
            return malformed("count beyond the payload");
        PyObject *out = tag == T_TUPLE ? PyTuple_New(n) : PyList_New(n);
        if (out == NULL)
            return NULL;
        int atomic = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = decode_value(r, depth + 1);
            if (item == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            if (PyTuple_CheckExact(item) || PyList_CheckExact(item))
                atomic = 0;
            if (tag == T_TUPLE)
                PyTuple_SET_ITEM(out, i, item);
            else
                PyList_SET_ITEM(out, i, item);
        }
        if (tag == T_TUPLE && atomic && n > 0 && PyObject_GC_IsTracked(out))
            PyObject_GC_UnTrack(out);
        return out;
    }
    default:
        PyErr_Format(PyExc_ValueError, "malformed records-codec payload: unknown tag %d",
                     (int)tag);
        return NULL;
    }
}

static PyObject *
decode(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *out = NULL;
    if (view.len < 1 || r.p[0] != MAGIC) {
        malformed("not a records-codec payload");
    }
    else {
        r.p++;
        out = decode_value(&r, 0);
        if (out != NULL && r.p != r.end) {
            Py_CLEAR(out);
            malformed("trailing bytes");
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"encode", encode, METH_O,
     "encode(obj): obj in the records codec, or None if it holds another type."},
    {"decode", decode, METH_O, "decode(buffer): the object encoded by encode()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pytimely._speedups",
    "Compiled fast paths of the exchange (optional; see pytimely/_native.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&RouteCacheType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAGIC", MAGIC) < 0 ||
        PyModule_AddObjectRef(m, "RouteCache", (PyObject *)&RouteCacheType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
