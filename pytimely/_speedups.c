/* Compiled fast paths of the exchange (splitting a batch by destination worker, encoding the
 * common record shapes without pickle) and of observed operators (timing and logging their
 * invocations).  Optional: pytimely/_native.py loads this module
 * if it was built, and every function here has a pure-Python equivalent that is used
 * otherwise (and that the tests run too).
 *
 * RouteCache().split(batch, memo, peers, key_index, keys[, me]) -> `peers` lists, or None
 *     The records of the list `batch`, one list per destination worker, record order kept.
 *     A record's key is `keys[i]` if `keys` is a list, else the record itself
 *     (key_index < 0), else `record[key_index]` of an exact tuple or list record.  The
 *     destination of an exact ASCII str or 64-bit int key is computed here by the rule of
 *     pytimely/dataflow/exchange/routing.py; any other key's is `memo[key]` (a dict lookup, so
 *     equal keys find one entry whatever their type), cached per key object.  None means
 *     "not every key is known" (a miss, an unhashable key, a record that is not a tuple):
 *     the caller routes in Python.  `me`, this worker's index, lets the split offer the str
 *     keys it keeps to the decoder (see OFFER_EVERY).
 *
 * encode(obj) -> bytes or None
 *     `obj` in the records codec (format in pytimely/communication/codec.py), or None if it
 *     holds anything but exact None, bool, int (64-bit), float, str, bytes, tuple, list or
 *     dict, or nests deeper than MAX_DEPTH: the caller pickles it instead.
 *
 * decode(buffer) -> object
 *     The inverse of encode; ValueError for a malformed payload.  Tuples whose items are all
 *     atomic are untracked by the garbage collector at once (CPython does the same lazily,
 *     at their first collection), so that decoding a batch of (str, int) records does not
 *     make every young-generation collection walk them.
 *
 * InvocationClock(outputs)
 *     start(), stop(), log_to(...), log_edges(...), total, longest: the clock of an observed
 *     operator, as pytimely/dataflow/invocation.py describes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <string.h>

#define MAGIC 0xC5
/* The functions pytimely calls here, as a number (pytimely/_native.py's API): bump both when
 * a function is added or changes its signature, or the records codec gains a form, so that a
 * stale build is not loaded. */
#define API_VERSION 5
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
    T_TUPLE8 = 'r',  /* tuple of < 256 items (a record): 1-byte count, then the items */
    T_TUPLE = 't',   /* 4-byte count, then the items */
    T_LIST = 'l',
    T_WORDS = 'W',   /* list of word records (str of < 256 ASCII bytes, int in [0, 256)): u32
                      * count, then per record its length byte, its text and its int byte */
    T_DICT = 'd',    /* dict: u32 count, then per entry its key and its value, in order */
};

/* ---- strings shared by the split and the decoder ------------------------------------------ */

/* Short ASCII strings, by a hash of their bytes: those this process's exchanges routed
 * (offered by the split) and those it decoded.  A word decoded from a peer is then the very
 * str object this worker already holds for it, as sys.intern would give: no allocation, its
 * hash already cached, and the consumer's dict lookups match it by identity instead of
 * comparing bytes with a second object.
 *
 * The table is STR_CACHE_WAYS-way set associative: a vocabulary of 10,000 words in a
 * direct-mapped table of 32,768 slots sees a quarter of its words share a slot with another
 * and evict each other at every turn (in 8,192 sets of 4, about 4 % do).  An entry keeps the
 * text of a string of up to 16 bytes as two zero-padded 8-byte words beside the reference,
 * so that a lookup compares integers instead of calling memcmp on the str object.  An entry
 * holds one reference; a newcomer takes the first way of its set and pushes the others one
 * way down (the last is dropped), so the table never holds more than
 * STR_CACHE_WAYS * STR_CACHE_SETS strings of at most STR_CACHE_MAX bytes. */
#define STR_CACHE_SETS (1 << 13)
#define STR_CACHE_WAYS 4
#define STR_CACHE_MAX 32
#define ASCII_HIGH_BITS 0x8080808080808080ull

typedef struct {
    PyObject *str;
    uint64_t w0, w1; /* the text if at most 16 bytes, zero-padded; else 0 */
    /* The record (str, atom) the decoder made last for this str and a one-byte atom (None,
     * True, False or an int below 256, see decode_record), or NULL; `atom` is its tag and
     * byte.  Tuples are immutable, so equal records decoded again may be this very object:
     * a batch of (word, 1) pairs then costs a reference per record, not a tuple. */
    PyObject *record;
    unsigned atom;
    uint32_t len; /* the str's length: a lookup compares it without reading the str object */
} StrEntry;

static StrEntry str_cache[STR_CACHE_SETS][STR_CACHE_WAYS];

/* Where a text belongs in the table, and its words. */
typedef struct {
    StrEntry *set;
    uint64_t w0, w1;
} StrKey;

static inline uint64_t
load_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The key of the n bytes at p; 0 if they are not short ASCII.  `readable` is how many bytes
 * from p may be read (at least n): with 16 of them a string of up to 16 bytes is loaded as two
 * 8-byte words, the bytes past n masked off, instead of byte by byte.  Every caller must find
 * the same key for the same text, so the masked loads are used only where they give what the
 * zero-padded copy gives (a little-endian machine). */
static inline int
str_cache_key(const unsigned char *p, Py_ssize_t n, Py_ssize_t readable, StrKey *key)
{
    if (n > STR_CACHE_MAX)
        return 0;
    uint64_t h;
    if (n <= 16) {
        uint64_t w0, w1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (readable >= 16) {
            w0 = load_u64(p);
            w1 = load_u64(p + 8);
            if (n < 8) {
                w0 &= (n ? ~0ull >> (64 - 8 * n) : 0);
                w1 = 0;
            }
            else if (n < 16) {
                w1 &= (n > 8 ? ~0ull >> (128 - 8 * n) : 0);
            }
        }
        else
#endif
        {
            unsigned char words[16] = {0};
            memcpy(words, p, n);
            w0 = load_u64(words);
            w1 = load_u64(words + 8);
        }
        if ((w0 | w1) & ASCII_HIGH_BITS)
            return 0;
        key->w0 = w0;
        key->w1 = w1;
        h = (w0 * 0x9E3779B97F4A7C15ull) ^ (w1 * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)n;
        h = (h ^ (h >> 29)) * 0x94D049BB133111EBull;
        h >>= 40;
    }
    else {
        h = 2166136261u; /* FNV-1a */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (p[i] >= 0x80)
                return 0;
            h = (uint32_t)((h ^ p[i]) * 16777619u);
        }
        key->w0 = key->w1 = 0;
        h ^= h >> 15;
    }
    key->set = str_cache[h & (STR_CACHE_SETS - 1)];
    return 1;
}

static inline int
str_entry_holds(const StrEntry *e, const StrKey *key, const unsigned char *p, Py_ssize_t n)
{
    return e->str != NULL && e->w0 == key->w0 && e->w1 == key->w1 && e->len == (uint32_t)n &&
           (n <= 16 || memcmp(PyUnicode_DATA(e->str), p, n) == 0);
}

/* The entry holding the n bytes at p (whose key is `key`), or NULL. */
static inline StrEntry *
str_cache_find(const StrKey *key, const unsigned char *p, Py_ssize_t n)
{
    for (int way = 0; way < STR_CACHE_WAYS; way++) {
        if (str_entry_holds(&key->set[way], key, p, n))
            return &key->set[way];
    }
    return NULL;
}

/* Add `s` (an exact ASCII str whose text is not in the table and whose hash is computed). */
static void
str_cache_put(const StrKey *key, PyObject *s)
{
    StrEntry *set = key->set;
    PyObject *dropped = set[STR_CACHE_WAYS - 1].str;
    PyObject *dropped_record = set[STR_CACHE_WAYS - 1].record;
    memmove(set + 1, set, (STR_CACHE_WAYS - 1) * sizeof(StrEntry));
    set[0].str = Py_NewRef(s);
    set[0].w0 = key->w0;
    set[0].w1 = key->w1;
    set[0].record = NULL;
    set[0].atom = 0;
    set[0].len = (uint32_t)PyUnicode_GET_LENGTH(s);
    /* A str, and a tuple of a str and an atom: releasing them runs no Python code. */
    Py_XDECREF(dropped);
    Py_XDECREF(dropped_record);
}

/* Make `s` (an exact str whose hash is computed) the cached object for its text. */
static void
str_cache_offer(PyObject *s)
{
    if (!PyUnicode_IS_COMPACT_ASCII(s))
        return;
    const unsigned char *p = PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    StrKey key;
    if (!str_cache_key(p, n, n, &key))
        return;
    StrEntry *e = str_cache_find(&key, p, n);
    if (e == NULL)
        str_cache_put(&key, s);
    else if (e->str != s) {
        Py_SETREF(e->str, Py_NewRef(s));
        Py_CLEAR(e->record); /* it holds the str replaced */
    }
}

/* ---- split ------------------------------------------------------------------------------ */

/* The routes of the commonest keys, computed here as pytimely/dataflow/exchange/routing.py and
 * hashing.py define them, without any table: an exact int that fits 64 bits goes to
 * `key % peers` (Python's modulo: never negative); an exact str whose UTF-8 is its own storage
 * (compact ASCII) to `mix(crc32(text) ^ STR_SALT) % peers`, crc32 being zlib's (reflected
 * polynomial 0xEDB88320) and mix that of hashing.py.  Reading the key object is all it costs:
 * a table of routes by key object (the RouteCache below) costs a probe that misses the caches
 * once the keys are many, and a dict lookup and more for every key object it does not hold.
 * Any other key returns -1 and takes the RouteCache path.
 * TWIN: this restates the rule of pytimely/dataflow/exchange/routing.py and the hash of
 * pytimely/dataflow/exchange/hashing.py (whose package docstring says so too); change one and
 * the other must follow -- tests/test_speedups.py and tests/test_routing.py compare them. */
#define HASH_GOLDEN 0x9E3779B97F4A7C15ull
#define HASH_STR_SALT 0x27D4EB2F165667C5ull

/* crc32_table[k][i]: the CRC of byte i followed by k zero bytes ("slicing by 8", Kounavis and
 * Berry, 2008): eight bytes cost eight independent lookups instead of a chain of eight. */
static uint32_t crc32_table[8][256];

static void
crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[0][i] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) {
            uint32_t c = crc32_table[k - 1][i];
            crc32_table[k][i] = (c >> 8) ^ crc32_table[0][c & 0xFF];
        }
}

static inline uint32_t
load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint32_t
crc32_slice8(uint32_t c, uint64_t word)
{
    const uint32_t(*t)[256] = crc32_table;
    uint32_t lo = (uint32_t)word ^ c, hi = (uint32_t)(word >> 32);
    return t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
           t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
}

static inline uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    const uint32_t(*t)[256] = crc32_table;
    uint32_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8)
        c = crc32_slice8(c, (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32);
    if (n >= 4) {
        uint32_t lo = load_le32(p) ^ c;
        c = t[3][lo & 0xFF] ^ t[2][(lo >> 8) & 0xFF] ^ t[1][(lo >> 16) & 0xFF] ^ t[0][lo >> 24];
        p += 4;
        n -= 4;
    }
    for (; n > 0; p++, n--)
        c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* The CRC-32 of a text of n <= 16 bytes that is preceded in memory by at least 16 - n
 * readable bytes (a compact ASCII str's text: its object header, of more than 16 bytes, comes
 * first), on a little-endian machine, without a branch or a loop whose length depends on n:
 * word lengths vary from record to record, and a mispredicted branch costs more than the CRC.
 * How: the CRC register is linear, so
 * crc(m) = crc_raw(init, 0^n) ^ crc_raw(0, m) ^ final_xor, the first term a table by n
 * (crc32_zeros), and crc_raw(0, m) does not change when zero bytes are put before m; so m is
 * read as the 16 bytes that end with it, the bytes before it masked to zero, and run through
 * two slicing-by-8 steps. */
static uint32_t crc32_zeros[17]; /* crc_raw(0xFFFFFFFF, n zero bytes) */
static uint64_t crc32_keep_last[9]; /* mask keeping the last k bytes of a little-endian word */

static void
crc32_short_init(void)
{
    for (int n = 0; n <= 16; n++) {
        uint32_t c = 0xFFFFFFFFu;
        for (int i = 0; i < n; i++)
            c = crc32_table[0][c & 0xFF] ^ (c >> 8);
        crc32_zeros[n] = c;
    }
    for (int k = 0; k <= 8; k++)
        crc32_keep_last[k] = k == 0 ? 0 : ~0ull << (8 * (8 - k));
}

static inline uint32_t
crc32_short(const unsigned char *p, Py_ssize_t n)
{
    uint64_t first, last;
    memcpy(&first, p + n - 16, 8);
    memcpy(&last, p + n - 8, 8);
    Py_ssize_t in_last = n < 8 ? n : 8;
    first &= crc32_keep_last[n - in_last];
    last &= crc32_keep_last[in_last];
    uint32_t c = crc32_slice8(crc32_slice8(0, first), last);
    return c ^ crc32_zeros[n] ^ 0xFFFFFFFFu;
}

/* x % peers, without a division when peers is a power of two (two workers, most often). */
static inline Py_ssize_t
modulo_peers(uint64_t x, long peers)
{
    if ((peers & (peers - 1)) == 0)
        return (Py_ssize_t)(x & (uint64_t)(peers - 1));
    return (Py_ssize_t)(x % (uint64_t)peers);
}

static inline Py_ssize_t
direct_route(PyObject *key, long peers)
{
    if (PyUnicode_CheckExact(key)) {
        if (!PyUnicode_IS_COMPACT_ASCII(key))
            return -1;
        const unsigned char *text = PyUnicode_DATA(key);
        Py_ssize_t n = PyUnicode_GET_LENGTH(key);
        /* The text follows the object's header (more than 16 bytes): see crc32_short. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint64_t x = n <= 16 ? crc32_short(text, n) : crc32_of(text, n);
#else
        uint64_t x = crc32_of(text, n);
#endif
        x = (x ^ HASH_STR_SALT) * HASH_GOLDEN;
        x ^= x >> 32;
        return modulo_peers(x, peers);
    }
    if (PyLong_CheckExact(key)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
        long long r = v % peers;
        return (Py_ssize_t)(r < 0 ? r + peers : r);
    }
    return -1;
}

/* Every OFFER_EVERY-th str key a split keeps on this worker is offered to the decoder's string
 * table, so that records arriving from other workers with that key decode to this very object
 * (equal keys that are one object compare by address in the operators' dicts).  Sampling keeps
 * the cost (a probe of the table) off most records; a frequent key is offered soon enough. */
#define OFFER_EVERY 16

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
    unsigned offer_tick;  /* str keys kept here since the last offer (see OFFER_EVERY) */
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

/* A new empty list with room for `room` items: appending up to that many costs a store. */
static PyObject *
list_with_room(Py_ssize_t room)
{
    PyListObject *list = (PyListObject *)PyList_New(0);
    if (list == NULL || room <= 0)
        return (PyObject *)list;
    list->ob_item = PyMem_New(PyObject *, room);
    if (list->ob_item == NULL) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    list->allocated = room;
    return (PyObject *)list;
}

/* Append `item` (taking a new reference) to `list`, a list made by list_with_room. */
static inline int
list_push(PyObject *list, PyObject *item)
{
    PyListObject *l = (PyListObject *)list;
    Py_ssize_t n = Py_SIZE(l);
    if (n < l->allocated) {
        l->ob_item[n] = Py_NewRef(item);
        Py_SET_SIZE(l, n + 1);
        return 0;
    }
    return PyList_Append(list, item);
}

#define SPLIT_AHEAD 8

static PyObject *
cache_split(RouteCache *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "split(batch, memo, peers, key_index, keys[, me])");
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
    Py_ssize_t me = -1;
    if (nargs == 6) {
        me = PyLong_AsSsize_t(args[5]);
        if (me == -1 && PyErr_Occurred())
            return NULL;
    }
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
    /* Room for a fair share and a quarter more: most splits never grow a part. */
    Py_ssize_t room = PyList_GET_SIZE(batch) / peers;
    room += room / 4 + 8;
    for (long w = 0; w < peers; w++) {
        PyObject *part = list_with_room(room);
        if (part == NULL)
            goto error;
        PyList_SET_ITEM(parts, w, part);
    }
    /* The sizes are read at every step: a key's __eq__ (Python code) could change the lists. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        if (i + SPLIT_AHEAD < PyList_GET_SIZE(batch) && keys == Py_None && key_index >= 0) {
            /* The key SPLIT_AHEAD records on: asked for now, in cache when its turn comes. */
            PyObject *later = PyList_GET_ITEM(batch, i + SPLIT_AHEAD);
            if (PyTuple_CheckExact(later) && key_index < PyTuple_GET_SIZE(later)) {
                /* Both lines a small object may straddle: a str's length, state and text
                 * lie past its first 32 bytes. */
                const char *object = (const char *)PyTuple_GET_ITEM(later, key_index);
                __builtin_prefetch(object);
                __builtin_prefetch(object + 48);
            }
        }
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
        Py_ssize_t w = direct_route(key, peers);
        if (w >= 0) { /* no Python code ran: the batch is as it was */
            /* Counted without a branch: which records stay here is a coin toss for the
             * branch predictor.  The tick reaches OFFER_EVERY on a record that stays. */
            self->offer_tick += (w == me);
            if (self->offer_tick >= OFFER_EVERY) {
                self->offer_tick = 0;
                if (PyUnicode_CheckExact(key))
                    str_cache_offer(key);
            }
            if (list_push(PyList_GET_ITEM(parts, w), record) < 0)
                goto error;
            continue;
        }
        Py_INCREF(record);
        w = cache_route(self, memo, key, peers);
        if (w < 0) {
            Py_DECREF(record);
            goto miss;
        }
        int failed = list_push(PyList_GET_ITEM(parts, w), record);
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
static inline int
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

/* A container's head: its tag and its u32 count.  0, or -1 if out of memory (exception set). */
static inline int
put_head(Buffer *b, char tag, Py_ssize_t n)
{
    if (reserve(b, 5))
        return -1;
    b->data[b->size++] = tag;
    put_u32(b->data + b->size, (uint32_t)n);
    b->size += 4;
    return 0;
}

/* The value of the exact int v if it lies in [0, 256), else -1 (no exception set). */
static inline long
small_count(PyObject *v)
{
#if PY_VERSION_HEX < 0x030C0000
    /* CPython 3.11's layout: the sign in the size, 30-bit digits. */
    Py_ssize_t size = Py_SIZE(v);
    if (size == 0)
        return 0;
    if (size == 1) {
        long d = (long)((PyLongObject *)v)->ob_digit[0];
        return d < 256 ? d : -1;
    }
    return -1;
#else
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow || x < 0 || x > 255 ? -1 : (long)x;
#endif
}

/* A word record's parts: its text and length, and its count. */
typedef struct {
    const char *text;
    Py_ssize_t len;
    long count;
} Word;

/* Whether t is a word record (an exact tuple of a compact ASCII str of under 256 bytes and an
 * exact int in [0, 256)); if so, its parts in *word. */
static inline int
as_word_record(PyObject *t, Word *word)
{
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 2)
        return 0;
    PyObject *s = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_COMPACT_ASCII(s) || !PyLong_CheckExact(v))
        return 0;
    word->len = PyUnicode_GET_LENGTH(s);
    word->count = small_count(v);
    word->text = (const char *)PyUnicode_DATA(s);
    return word->len <= 255 && word->count >= 0;
}

/* The commonest record of a batch that crosses workers, a word and a count (an exact tuple of
 * a compact ASCII str of under 256 bytes and an exact int below 256), written in one go, as
 * encode_value would write it.  1: written; 0: not such a record (nothing written); -1: error
 * (exception set). */
static inline int
encode_word_record(Buffer *b, PyObject *t)
{
    Word word;
    if (!as_word_record(t, &word))
        return 0;
    Py_ssize_t n = word.len;
    if (reserve(b, n + 6))
        return -1;
    char *p = b->data + b->size;
    p[0] = T_TUPLE8;
    p[1] = 2;
    p[2] = T_STR8;
    p[3] = (char)n;
    memcpy(p + 4, word.text, n);
    p[4 + n] = T_UINT8;
    p[5 + n] = (char)word.count;
    b->size += n + 6;
    return 1;
}

/* A list whose items are all word records (see encode_word_record), as T_WORDS: a third
 * smaller than the general form (no tags per record) and read without any dispatch.  1:
 * written; 0: not such a list (nothing written); -1: error (exception set). */
static int
encode_word_list(Buffer *b, PyObject *list)
{
    Py_ssize_t n = PyList_GET_SIZE(list), start = b->size;
    if (n < 1 || n > (Py_ssize_t)UINT32_MAX)
        return 0;
    if (put_head(b, T_WORDS, n))
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Word word;
        if (!as_word_record(PyList_GET_ITEM(list, i), &word)) {
            b->size = start;
            return 0;
        }
        Py_ssize_t len = word.len;
        if (b->capacity - b->size < len + 2 && reserve(b, len + 2))
            return -1;
        char *p = b->data + b->size;
        p[0] = (char)len;
        memcpy(p + 1, word.text, len);
        p[1 + len] = (char)word.count;
        b->size += len + 2;
    }
    return 1;
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
        const char *utf8;
        if (PyUnicode_IS_COMPACT_ASCII(obj)) { /* its text is its UTF-8 */
            utf8 = (const char *)PyUnicode_DATA(obj);
            n = PyUnicode_GET_LENGTH(obj);
        }
        else {
            utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
        }
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
        if (!is_tuple && depth + 1 < MAX_DEPTH) {
            int written = encode_word_list(b, obj);
            if (written)
                return written < 0 ? -1 : 0;
        }
        Py_ssize_t n = is_tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
        if (n > (Py_ssize_t)UINT32_MAX)
            return 1;
        if (reserve(b, 5))
            return -1;
        if (is_tuple && n < 256) { /* a record: a 1-byte count */
            b->data[b->size++] = T_TUPLE8;
            b->data[b->size++] = (char)n;
        }
        else {
            b->data[b->size++] = is_tuple ? T_TUPLE : T_LIST;
            put_u32(b->data + b->size, (uint32_t)n);
            b->size += 4;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            /* A list holds only exact atoms and containers here: nothing runs Python code
             * while it is encoded, so its size cannot change under us. */
            PyObject *item = is_tuple ? PyTuple_GET_ITEM(obj, i) : PyList_GET_ITEM(obj, i);
            if (!is_tuple && depth + 1 < MAX_DEPTH) {
                int written = encode_word_record(b, item);
                if (written < 0)
                    return -1;
                if (written)
                    continue;
            }
            int r = encode_value(b, item, depth + 1);
            if (r)
                return r;
        }
        return 0;
    }
    if (PyDict_CheckExact(obj)) {
        if (depth >= MAX_DEPTH)
            return 1;
        Py_ssize_t n = PyDict_GET_SIZE(obj);
        if (n > (Py_ssize_t)UINT32_MAX)
            return 1;
        if (put_head(b, T_DICT, n))
            return -1;
        /* Its keys and values are exact atoms and containers, read without running Python
         * code: the dict cannot change while it is walked. */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(obj, &pos, &key, &value)) {
            int r = encode_value(b, key, depth + 1);
            if (r)
                return r;
            r = encode_value(b, value, depth + 1);
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
    const unsigned char *ahead_at; /* the text whose cache key `ahead` holds, or NULL */
    StrKey ahead;
} Reader;

static PyObject *
malformed(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed records-codec payload: %s", what);
    return NULL;
}

/* The str of the n UTF-8 bytes at p (`readable` bytes may be read from p). */
static PyObject *
decode_str(Reader *r, const unsigned char *p, Py_ssize_t n)
{
    StrKey key;
    int cacheable;
    if (p == r->ahead_at) {
        key = r->ahead;
        cacheable = 1;
    }
    else {
        cacheable = str_cache_key(p, n, r->end - p, &key);
    }
    if (cacheable) {
        StrEntry *e = str_cache_find(&key, p, n);
        if (e != NULL)
            return Py_NewRef(e->str);
    }
    else {
        const unsigned char *q = p, *end = p + n;
        while (q < end && *q < 0x80)
            q++;
        if (q != end)
            return PyUnicode_DecodeUTF8((const char *)p, n, "surrogatepass");
    }
    PyObject *s = PyUnicode_New(n, 127); /* ASCII: one allocation and a copy */
    if (s == NULL)
        return NULL;
    memcpy(PyUnicode_DATA(s), p, n);
    if (cacheable) {
        if (PyObject_Hash(s) == -1) { /* cannot fail for a str; cached on it from now on */
            Py_DECREF(s);
            return NULL;
        }
        str_cache_put(&key, s);
    }
    return s;
}

static PyObject *decode_value(Reader *r, int depth);

/* The next value: the atoms records are mostly made of (a short str, an int below 256) are
 * read here, without the switch of decode_value. */
static inline PyObject *
decode_item(Reader *r, int depth)
{
    Py_ssize_t avail = r->end - r->p;
    if (avail >= 2) {
        unsigned char tag = r->p[0];
        if (tag == T_STR8) {
            Py_ssize_t n = r->p[1];
            if (avail - 2 >= n) {
                const unsigned char *p = r->p + 2;
                r->p = p + n;
                return decode_str(r, p, n);
            }
        }
        else if (tag == T_UINT8) {
            long v = r->p[1];
            r->p += 2;
            return PyLong_FromLong(v);
        }
    }
    return decode_value(r, depth);
}

/* A tuple of the next n values (the caller checked that n bytes remain and the depth).  A
 * tuple that holds no tracked container is untracked by the garbage collector at once
 * (CPython does the same lazily, at its first collection), so that decoding a batch of
 * (str, int) records does not make every young-generation collection walk them. */
static PyObject *
decode_tuple(Reader *r, Py_ssize_t n, int depth)
{
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    int atomic = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = decode_item(r, depth);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        if (PyList_CheckExact(item) || (PyTuple_CheckExact(item) && PyObject_GC_IsTracked(item)))
            atomic = 0;
        PyTuple_SET_ITEM(out, i, item);
    }
    if (atomic && n > 0)
        PyObject_GC_UnTrack(out);
    return out;
}

/* The size of the atom at p (tag included) if it is one of fixed size, else 0. */
static inline Py_ssize_t
fixed_atom_size(unsigned char tag)
{
    switch (tag) {
    case T_NONE:
    case T_TRUE:
    case T_FALSE:
        return 1;
    case T_UINT8:
        return 2;
    case T_UINT16:
        return 3;
    case T_INT32:
        return 5;
    case T_INT64:
    case T_FLOAT:
        return 9;
    default:
        return 0;
    }
}

/* Decoding a list of records waits on memory: the string table is larger than the caches, and
 * each record needs one of its sets and the tuple last decoded for its str.  decode_list
 * therefore reads records in runs of up to SCAN_RUN ahead of decoding them: the first pass
 * parses each record (a short ASCII str and a fixed-size atom), computes its str's key and
 * asks the CPU for its set; the second looks the sets up and asks for the cached tuples.  The
 * loads of a pass are independent of each other, so the CPU overlaps their misses instead of
 * taking them one record at a time; decoding the run then finds both in cache.  The passes
 * only read and prefetch: decoding looks everything up again, so a record's decoding may
 * change the table (a new str, an evicted tuple) without a later record trusting stale
 * pointers. */
#define SCAN_RUN 64

typedef struct {
    const unsigned char *text; /* the record's str bytes */
    Py_ssize_t n;              /* their number */
    StrKey key;
} Scanned;

/* Ask for the lines of a set that a lookup reads (its first ways; a set spans three lines). */
static inline void
prefetch_set(const StrKey *key)
{
    const char *set = (const char *)key->set;
    __builtin_prefetch(set);
    __builtin_prefetch(set + 64);
    __builtin_prefetch(set + 128);
}

/* The second pass over a scanned run: look the sets up (asked for by the first) and ask for
 * the cached tuples, to be written (a reference is taken).  Entries without a set (texts the
 * table does not keep) are skipped. */
static void
prefetch_records(const Scanned *run, Py_ssize_t k)
{
    for (Py_ssize_t i = 0; i < k; i++) {
        if (run[i].key.set == NULL)
            continue;
        StrEntry *e = str_cache_find(&run[i].key, run[i].text, run[i].n);
        if (e != NULL && e->record != NULL)
            __builtin_prefetch(e->record, 1);
    }
}

/* Scan up to `max` consecutive records from p (see above); returns how many. */
static Py_ssize_t
scan_records(const unsigned char *p, const unsigned char *end, Py_ssize_t max, Scanned *out)
{
    Py_ssize_t k = 0;
    while (k < max) {
        if (end - p < 5 || p[0] != T_TUPLE8 || p[1] != 2 || p[2] != T_STR8)
            break;
        Py_ssize_t n = p[3];
        const unsigned char *text = p + 4;
        if (n >= end - text) /* the atom's tag must follow */
            break;
        const unsigned char *atom = text + n;
        Py_ssize_t size = fixed_atom_size(atom[0]);
        if (size == 0 || size > end - atom || !str_cache_key(text, n, end - text, &out[k].key))
            break;
        prefetch_set(&out[k].key);
        out[k].text = text;
        out[k].n = n;
        k++;
        p = atom + size;
    }
    prefetch_records(out, k);
    return k;
}

/* The record the table holds for the text of n bytes at `text` (whose key is `key`) and the
 * one-byte atom `key_atom` (tag and byte, see StrEntry.record), as a new reference, or NULL. */
static inline PyObject *
cached_record(const StrKey *key, const unsigned char *text, Py_ssize_t n, unsigned key_atom)
{
    StrEntry *e = str_cache_find(key, text, n);
    if (e != NULL && e->record != NULL && e->atom == key_atom)
        return Py_NewRef(e->record);
    return NULL;
}

/* Have the table hold `record`, just decoded for that text and atom, if the table holds its
 * str (decoding it put the str there, unless the table dropped it meanwhile). */
static inline void
remember_record(const StrKey *key, const unsigned char *text, Py_ssize_t n, PyObject *record,
                unsigned key_atom)
{
    StrEntry *e = str_cache_find(key, text, n);
    if (e != NULL && e->str == PyTuple_GET_ITEM(record, 0)) {
        Py_XSETREF(e->record, Py_NewRef(record));
        e->atom = key_atom;
    }
}

/* A record of two items whose first is a short str (at r->p, the tuple's header read; the
 * caller checked the depth): if the second is a one-byte atom, the tuple decoded last for the
 * same str and atom (see StrEntry.record), else a new tuple. */
static PyObject *
decode_record(Reader *r, int depth)
{
    const unsigned char *p = r->p;
    Py_ssize_t n = p[1];
    const unsigned char *text = p + 2, *atom = text + n;
    if (r->end - atom < 2 || !(atom[0] == T_UINT8 || fixed_atom_size(atom[0]) == 1))
        return decode_tuple(r, 2, depth);
    unsigned key_atom = ((unsigned)atom[0] << 8) | (atom[0] == T_UINT8 ? atom[1] : 0);
    StrKey key;
    if (text == r->ahead_at)
        key = r->ahead;
    else if (!str_cache_key(text, n, r->end - text, &key))
        return decode_tuple(r, 2, depth);
    PyObject *record = cached_record(&key, text, n, key_atom);
    if (record != NULL) {
        r->p = atom + (atom[0] == T_UINT8 ? 2 : 1);
        return record;
    }
    record = decode_tuple(r, 2, depth); /* puts the str in the cache if new */
    if (record != NULL)
        remember_record(&key, text, n, record, key_atom);
    return record;
}

/* The record (str, int) of the word of n bytes at `text` (its key computed) and the int v:
 * the tuple decoded last for that word and int if the table holds it, else a new one, which
 * the table then holds (see StrEntry.record). */
static PyObject *
decode_word(Reader *r, const unsigned char *text, Py_ssize_t n, const StrKey *key, unsigned v)
{
    unsigned key_atom = ((unsigned)T_UINT8 << 8) | v;
    PyObject *record = cached_record(key, text, n, key_atom);
    if (record != NULL)
        return record;
    r->ahead = *key;
    r->ahead_at = text;
    PyObject *word = decode_str(r, text, n); /* puts the str in the table if new */
    if (word == NULL)
        return NULL;
    PyObject *value = PyLong_FromLong((long)v);
    if (value == NULL) {
        Py_DECREF(word);
        return NULL;
    }
    record = PyTuple_New(2);
    if (record == NULL) {
        Py_DECREF(word);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(record, 0, word);
    PyTuple_SET_ITEM(record, 1, value);
    PyObject_GC_UnTrack(record); /* atoms only: see decode_tuple */
    remember_record(key, text, n, record, key_atom);
    return record;
}

/* The n word records of a T_WORDS list (its count read; the caller checked that 2n bytes
 * remain).  As decode_list, in runs: keys computed and sets asked for first, then the cached
 * tuples, then the records made. */
static PyObject *
decode_words(Reader *r, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    Scanned run[SCAN_RUN];
    const unsigned char *p = r->p, *end = r->end;
    for (Py_ssize_t i = 0; i < n;) {
        /* Scan up to SCAN_RUN records: where each text lies, its key, its set asked for. */
        Py_ssize_t k = 0;
        const unsigned char *q = p;
        for (; k < SCAN_RUN && i + k < n; k++) {
            if (end - q < 2 || q[0] > end - q - 2) {
                Py_DECREF(out);
                return malformed("truncated word record");
            }
            Py_ssize_t len = q[0];
            run[k].text = q + 1;
            run[k].n = len;
            if (str_cache_key(q + 1, len, end - q - 1, &run[k].key))
                prefetch_set(&run[k].key);
            else
                run[k].key.set = NULL; /* not cacheable (a long or non-ASCII text) */
            q += len + 2;
        }
        prefetch_records(run, k);
        for (Py_ssize_t j = 0; j < k; j++, i++) {
            const unsigned char *text = run[j].text;
            Py_ssize_t len = run[j].n;
            unsigned v = text[len];
            PyObject *item;
            if (run[j].key.set != NULL) {
                item = decode_word(r, text, len, &run[j].key, v);
            }
            else {
                PyObject *word = PyUnicode_DecodeUTF8((const char *)text, len, "surrogatepass");
                item = word == NULL ? NULL : Py_BuildValue("(Nl)", word, (long)v);
                if (item != NULL)
                    PyObject_GC_UnTrack(item);
            }
            if (item == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, i, item);
        }
        p = q;
    }
    r->p = p;
    return out;
}

/* A list of the next n values (the caller checked that n bytes remain and the depth); its
 * small tuples (records) are read without the switch of decode_value. */
static PyObject *
decode_list(Reader *r, Py_ssize_t n, int depth)
{
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    Scanned run[SCAN_RUN];
    Py_ssize_t run_len = 0, run_at = 0; /* scanned records, and the next one to decode */
    Py_ssize_t unscanned = 0; /* items to decode without scanning: the last scan found none */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item;
        if (run_at == run_len && unscanned-- <= 0) {
            Py_ssize_t left = n - i;
            run_len = scan_records(r->p, r->end, left < SCAN_RUN ? left : SCAN_RUN, run);
            run_at = 0;
            unscanned = run_len ? 0 : SCAN_RUN;
        }
        if (run_at < run_len && run[run_at].text == r->p + 4) {
            r->ahead = run[run_at].key; /* decode_record and decode_str take it from here */
            r->ahead_at = run[run_at].text;
            run_at++;
        }
        else {
            run_len = run_at = 0;
        }
        if (r->end - r->p >= 2 && r->p[0] == T_TUPLE8 && depth < MAX_DEPTH &&
            r->p[1] <= r->end - r->p - 2) {
            Py_ssize_t size = r->p[1];
            r->p += 2;
            if (size == 2 && r->end - r->p >= 2 && r->p[0] == T_STR8 &&
                r->p[1] <= r->end - r->p - 2)
                item = decode_record(r, depth + 1);
            else
                item = decode_tuple(r, size, depth + 1);
        }
        else {
            item = decode_item(r, depth);
        }
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* A dict of n entries (its key, then its value, each), in the order they were written.  A key
 * that cannot be hashed (only a malformed payload has one) is a ValueError like any other
 * malformation. */
static PyObject *
decode_dict(Reader *r, Py_ssize_t n, int depth)
{
#if PY_VERSION_HEX < 0x030D0000
    /* Sized for its entries at once: an event of more than five fields would otherwise grow
     * its table, and move every entry, once on the way. */
    PyObject *d = n > 5 ? _PyDict_NewPresized(n) : PyDict_New();
#else
    PyObject *d = PyDict_New();
#endif
    if (d == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = decode_value(r, depth);
        if (key == NULL)
            goto error;
        PyObject *value = decode_value(r, depth);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        /* Decoded keys are exact atoms and tuples: hashing them runs no Python code. */
        int failed = PyDict_SetItem(d, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                malformed("a dict key that cannot be hashed");
            }
            goto error;
        }
    }
    return d;
error:
    Py_DECREF(d);
    return NULL;
}

/* The u32 count at the reader, moved past: -1 (ValueError set) if it is truncated or if its
 * items, of at least `item_bytes` bytes each, could not fit in the rest of the payload. */
static Py_ssize_t
read_count(Reader *r, Py_ssize_t item_bytes)
{
    if (r->end - r->p < 4) {
        malformed("truncated count");
        return -1;
    }
    Py_ssize_t n = get_u32(r->p);
    r->p += 4;
    if (n > (r->end - r->p) / item_bytes) {
        malformed("count beyond the payload");
        return -1;
    }
    return n;
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
            return decode_str(r, p, n);
        return PyBytes_FromStringAndSize((const char *)p, n);
    }
    case T_WORDS: {
        if (depth >= MAX_DEPTH - 1)
            return malformed("nested too deeply");
        Py_ssize_t n = read_count(r, 2); /* every record takes at least two bytes */
        return n < 0 ? NULL : decode_words(r, n);
    }
    case T_TUPLE8:
    case T_TUPLE:
    case T_LIST: {
        if (depth >= MAX_DEPTH)
            return malformed("nested too deeply");
        Py_ssize_t n;
        if (tag == T_TUPLE8) {
            if (avail < 1)
                return malformed("truncated count");
            n = *r->p++;
            if (n > r->end - r->p) /* every item takes at least one byte */
                return malformed("count beyond the payload");
        }
        else if ((n = read_count(r, 1)) < 0) {
            return NULL;
        }
        return tag == T_LIST ? decode_list(r, n, depth + 1) : decode_tuple(r, n, depth + 1);
    }
    case T_DICT: {
        if (depth >= MAX_DEPTH)
            return malformed("nested too deeply");
        Py_ssize_t n = read_count(r, 2); /* every entry takes at least two bytes */
        return n < 0 ? NULL : decode_dict(r, n, depth + 1);
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
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len,
                NULL};
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

/* ---- invocation clock ------------------------------------------------------------------- */

/* The observation of one operator (pytimely/dataflow/invocation.py has the pure-Python class
 * with the same behaviour and documentation): times its invocations and, while logging,
 * records each one and what its outputs sent since the last one, without a Python frame.
 *
 * What an invocation reads is kept in the object itself (one PortLog per output, the counts
 * last logged as C integers, the edges as a tuple): a chain of a thousand operators has more
 * state than the caches hold, and every separate object read is a miss. */
typedef struct {
    PyObject *port;
    PyObject *edges; /* tuple */
    long long records, batches; /* the port's counts when last logged */
} PortLog;

typedef struct {
    PyObject_VAR_HEAD /* ob_size: the number of outputs */
    double start;
    double total;
    double longest;
    PyObject *schedules; /* list, or NULL when not logging */
    PyObject *log_id;
    PyObject *internals; /* tuple of dicts (the operator's capability changes per output) */
    PyObject *sent;      /* list */
    PortLog ports[1];
} InvocationClock;

static PyObject *str_records, *str_batches;
#if !defined(__linux__)
static PyObject *perf_counter;
#endif

/* time.perf_counter(), the same double. */
static inline int
clock_now(double *out)
{
#if defined(__linux__)
    /* What CPython's time.perf_counter reads on Linux, converted as it converts. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    *out = (double)ns / 1e9;
    return 0;
#else
    PyObject *t = PyObject_CallNoArgs(perf_counter);
    if (t == NULL)
        return -1;
    *out = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return PyErr_Occurred() ? -1 : 0;
#endif
}

static int
iclock_traverse(InvocationClock *self, visitproc visit, void *arg)
{
    Py_VISIT(self->schedules);
    Py_VISIT(self->log_id);
    Py_VISIT(self->internals);
    Py_VISIT(self->sent);
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_VISIT(self->ports[i].port);
        Py_VISIT(self->ports[i].edges);
    }
    return 0;
}

static int
iclock_clear(InvocationClock *self)
{
    Py_CLEAR(self->schedules);
    Py_CLEAR(self->log_id);
    Py_CLEAR(self->internals);
    Py_CLEAR(self->sent);
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_CLEAR(self->ports[i].port);
        Py_CLEAR(self->ports[i].edges);
    }
    return 0;
}

static void
iclock_dealloc(InvocationClock *self)
{
    PyObject_GC_UnTrack(self);
    iclock_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
iclock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t outputs;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) ||
        !PyArg_ParseTuple(args, "n:InvocationClock", &outputs))
        return NULL;
    if (outputs < 0) {
        PyErr_SetString(PyExc_ValueError, "InvocationClock(outputs): outputs must be >= 0");
        return NULL;
    }
    return type->tp_alloc(type, outputs); /* zeroed */
}

static PyObject *
iclock_start(InvocationClock *self, PyObject *unused)
{
    if (clock_now(&self->start) < 0)
        return NULL;
    if (self->schedules != NULL) {
        /* What stop() will read: fetched while the logic runs. */
        for (Py_ssize_t i = 0; i < Py_SIZE(self); i++)
            __builtin_prefetch(self->ports[i].edges);
    }
    Py_RETURN_NONE;
}

static inline int
append3(PyObject *list, PyObject *a, PyObject *b, PyObject *c)
{
    return PyList_Append(list, a) < 0 || PyList_Append(list, b) < 0 || PyList_Append(list, c) < 0
               ? -1
               : 0;
}

/* The port's count `name` as a C integer (-1 with an exception set if it is not one). */
static inline long long
port_count(PyObject *port, PyObject *name)
{
    PyObject *n = PyObject_GetAttr(port, name);
    if (n == NULL)
        return -1;
    long long v = PyLong_AsLongLong(n);
    Py_DECREF(n);
    return v;
}

/* Log what output `log` sent since it was last logged, on each of its edges. */
static int
iclock_log_sends(InvocationClock *self, PortLog *log)
{
    long long batches = port_count(log->port, str_batches);
    if (batches == -1 && PyErr_Occurred())
        return -1;
    if (batches == log->batches)
        return 0;
    long long records = port_count(log->port, str_records);
    if (records == -1 && PyErr_Occurred())
        return -1;
    PyObject *dr = PyLong_FromLongLong(records - log->records);
    PyObject *db = PyLong_FromLongLong(batches - log->batches);
    int failed = dr == NULL || db == NULL;
    for (Py_ssize_t e = 0; !failed && e < PyTuple_GET_SIZE(log->edges); e++)
        failed = append3(self->sent, PyTuple_GET_ITEM(log->edges, e), dr, db) < 0;
    Py_XDECREF(dr);
    Py_XDECREF(db);
    if (failed)
        return -1;
    log->records = records;
    log->batches = batches;
    return 0;
}

static PyObject *
iclock_stop(InvocationClock *self, PyObject *unused)
{
    double now;
    if (clock_now(&now) < 0)
        return NULL;
    double start = self->start, elapsed = now - start;
    self->total += elapsed;
    if (elapsed > self->longest)
        self->longest = elapsed;
    if (self->schedules == NULL)
        Py_RETURN_NONE;
    PyObject *s = PyFloat_FromDouble(start), *d = PyFloat_FromDouble(elapsed);
    int failed = s == NULL || d == NULL || append3(self->schedules, self->log_id, s, d) < 0;
    Py_XDECREF(s);
    Py_XDECREF(d);
    if (failed)
        return NULL;
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        if (iclock_log_sends(self, &self->ports[i]) < 0)
            return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->internals); i++) {
        PyObject *changes = PyTuple_GET_ITEM(self->internals, i);
        if (PyDict_Check(changes) && PyDict_GET_SIZE(changes))
            return PyFloat_FromDouble(start + elapsed);
    }
    Py_RETURN_NONE;
}

static int
check_edges(PyObject *edges)
{
    if (PyTuple_CheckExact(edges))
        return 0;
    PyErr_SetString(PyExc_TypeError, "an output's edges must be a tuple");
    return -1;
}

static PyObject *
iclock_log_to(InvocationClock *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 1 && args[0] == Py_None) {
        iclock_clear(self);
        Py_RETURN_NONE;
    }
    Py_ssize_t n = Py_SIZE(self);
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyTuple_CheckExact(args[2]) ||
        !PyList_CheckExact(args[3]) || !PyTuple_CheckExact(args[4]) ||
        !PyTuple_CheckExact(args[5]) || PyTuple_GET_SIZE(args[4]) != n ||
        PyTuple_GET_SIZE(args[5]) != n) {
        PyErr_SetString(PyExc_TypeError,
                        "log_to(schedules: list, log_id, internals: tuple, sent: list, ports: "
                        "tuple, edges: tuple of tuples, one per output) or log_to(None)");
        return NULL;
    }
    long long *counts = PyMem_Malloc(sizeof(long long) * 2 * (n ? n : 1));
    if (counts == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) { /* count from now on */
        PyObject *port = PyTuple_GET_ITEM(args[4], i);
        if (check_edges(PyTuple_GET_ITEM(args[5], i)) < 0 ||
            ((counts[2 * i] = port_count(port, str_records)) == -1 && PyErr_Occurred()) ||
            ((counts[2 * i + 1] = port_count(port, str_batches)) == -1 && PyErr_Occurred())) {
            PyMem_Free(counts);
            return NULL;
        }
    }
    iclock_clear(self);
    self->schedules = Py_NewRef(args[0]);
    self->log_id = Py_NewRef(args[1]);
    self->internals = Py_NewRef(args[2]);
    self->sent = Py_NewRef(args[3]);
    for (Py_ssize_t i = 0; i < n; i++) {
        self->ports[i].port = Py_NewRef(PyTuple_GET_ITEM(args[4], i));
        self->ports[i].edges = Py_NewRef(PyTuple_GET_ITEM(args[5], i));
        self->ports[i].records = counts[2 * i];
        self->ports[i].batches = counts[2 * i + 1];
    }
    PyMem_Free(counts);
    Py_RETURN_NONE;
}

static PyObject *
iclock_log_edges(InvocationClock *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (nargs != 2 || (i = PyLong_AsSsize_t(args[0])) < 0 || i >= Py_SIZE(self)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "log_edges(output: int, edges: tuple)");
        return NULL;
    }
    if (check_edges(args[1]) < 0)
        return NULL;
    if (self->schedules != NULL)
        Py_XSETREF(self->ports[i].edges, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef iclock_methods[] = {
    {"start", (PyCFunction)iclock_start, METH_NOARGS, "start(): an invocation begins."},
    {"stop", (PyCFunction)iclock_stop, METH_NOARGS,
     "stop(): the invocation ended; its stop time if it changed capabilities while logging, "
     "else None."},
    {"log_to", (PyCFunction)(void (*)(void))iclock_log_to, METH_FASTCALL,
     "log_to(schedules, log_id, internals, sent, ports, edges), or log_to(None) to stop."},
    {"log_edges", (PyCFunction)(void (*)(void))iclock_log_edges, METH_FASTCALL,
     "log_edges(output, edges): while logging, log output's sends on these edges."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
iclock_total(InvocationClock *self, void *unused)
{
    return PyFloat_FromDouble(self->total);
}

static PyObject *
iclock_longest(InvocationClock *self, void *unused)
{
    return PyFloat_FromDouble(self->longest);
}

static PyGetSetDef iclock_getset[] = {
    {"total", (getter)iclock_total, NULL, "seconds spent in invocations", NULL},
    {"longest", (getter)iclock_longest, NULL, "the longest invocation, in seconds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject InvocationClockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pytimely._speedups.InvocationClock",
    .tp_basicsize = offsetof(InvocationClock, ports),
    .tp_itemsize = sizeof(PortLog),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Times an operator's invocations and logs them (pytimely/dataflow/invocation.py).",
    .tp_new = iclock_new,
    .tp_dealloc = (destructor)iclock_dealloc,
    .tp_traverse = (traverseproc)iclock_traverse,
    .tp_clear = (inquiry)iclock_clear,
    .tp_methods = iclock_methods,
    .tp_getset = iclock_getset,
};

/* ---- progress counts: ChangeBatch drains (pytimely/progress/change_batch.py) ------------
 *
 * After every operator invocation its scope moves the invocation's counts (a ChangeBatch: a
 * dict of time -> nonzero delta) into the scope's batch of located counts ((location, time)
 * -> nonzero delta), then empties them.  These are the compiled forms of
 * ChangeBatch.drain_at_into and ChangeBatch.drain_located_into, with the same results: both
 * batches stay consolidated (no zero delta is stored). */

/* into[key] += delta (deleted at zero); delta is never zero. */
static int
add_count(PyObject *into, PyObject *key, PyObject *delta)
{
    PyObject *old = PyDict_GetItemWithError(into, key); /* borrowed */
    if (old == NULL) {
        if (PyErr_Occurred())
            return -1;
        return PyDict_SetItem(into, key, delta);
    }
    PyObject *total = PyNumber_Add(old, delta);
    if (total == NULL)
        return -1;
    int truth = PyObject_IsTrue(total);
    int rc = truth < 0 ? -1 : truth ? PyDict_SetItem(into, key, total) : PyDict_DelItem(into, key);
    Py_DECREF(total);
    return rc;
}

/* Whether weight is the int 1 (then d * weight is d itself); no exception either way. */
static int
is_one(PyObject *weight)
{
    int overflow;
    return PyLong_CheckExact(weight) && PyLong_AsLongAndOverflow(weight, &overflow) == 1 &&
           !overflow;
}

/* into[(loc, t)] += d * weight (unit: weight is 1); d is never zero, nor is weight. */
static int
add_located(PyObject *into, PyObject *loc, PyObject *t, PyObject *d, PyObject *weight, int unit)
{
    PyObject *key = PyTuple_Pack(2, loc, t);
    if (key == NULL)
        return -1;
    PyObject *delta = unit ? Py_NewRef(d) : PyNumber_Multiply(d, weight);
    int rc = delta == NULL ? -1 : add_count(into, key, delta);
    Py_XDECREF(delta);
    Py_DECREF(key);
    return rc;
}

/* The checked (batch, into) of a drain's nargs arguments, or -1 with an exception set. */
static int
drain_batches(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *usage,
              PyObject **batch, PyObject **into)
{
    if (nargs != expected) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *batch = args[0];
    *into = args[1];
    if (!PyDict_Check(*batch) || !PyDict_Check(*into)) {
        PyErr_Format(PyExc_TypeError, "%s: the batches must be ChangeBatch (dict) objects", usage);
        return -1;
    }
    if (*batch == *into) {
        PyErr_Format(PyExc_ValueError, "%s: a batch cannot be drained into itself", usage);
        return -1;
    }
    return 0;
}

static PyObject *
drain_at_into(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *batch, *into;
    if (drain_batches(args, nargs, 4, "drain_at_into(batch, into, loc, weight)", &batch, &into) < 0)
        return NULL;
    int unit = is_one(args[3]);
    Py_ssize_t pos = 0;
    PyObject *t, *d;
    while (PyDict_Next(batch, &pos, &t, &d))
        if (add_located(into, args[2], t, d, args[3], unit) < 0)
            return NULL;
    PyDict_Clear(batch);
    Py_RETURN_NONE;
}

static PyObject *
drain_located_into(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *batch, *into;
    if (drain_batches(args, nargs, 3, "drain_located_into(batch, into, locations)", &batch,
                      &into) < 0)
        return NULL;
    PyObject *locations = PySequence_Fast(args[2], "drain_located_into: locations must be a sequence");
    if (locations == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(locations);
    PyObject **items = PySequence_Fast_ITEMS(locations);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyTuple_Check(items[i]) || PyTuple_GET_SIZE(items[i]) != 2) {
            PyErr_SetString(PyExc_TypeError,
                            "drain_located_into: locations must be (location, weight) pairs");
            Py_DECREF(locations);
            return NULL;
        }
    }
    Py_ssize_t pos = 0;
    PyObject *t, *d;
    while (PyDict_Next(batch, &pos, &t, &d)) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *loc = PyTuple_GET_ITEM(items[i], 0), *weight = PyTuple_GET_ITEM(items[i], 1);
            if (add_located(into, loc, t, d, weight, is_one(weight)) < 0) {
                Py_DECREF(locations);
                return NULL;
            }
        }
    }
    Py_DECREF(locations);
    PyDict_Clear(batch);
    Py_RETURN_NONE;
}

/* ---- differential dataflow: a key's updates across a trace's batches --------------------- */

/* updates_of(key, datas): the compiled form of pytimely.differential.reduce._updates_of.
 * datas is a list of dicts (batches' indexes, oldest first) mapping a key to its list of
 * updates.  The result is () when no batch has the key, the batch's own list when one has
 * (not a copy: the caller must not change it), and a new list, the lists concatenated in
 * order, when several have. */
static PyObject *
updates_of(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "updates_of(key, datas): datas must be a list");
        return NULL;
    }
    PyObject *key = args[0], *datas = args[1];
    PyObject *found = NULL; /* borrowed */
    PyObject *joined = NULL; /* owned */
    Py_ssize_t n = PyList_GET_SIZE(datas);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(datas, i);
        if (!PyDict_CheckExact(d)) {
            Py_XDECREF(joined);
            PyErr_SetString(PyExc_TypeError, "updates_of(key, datas): datas holds a non-dict");
            return NULL;
        }
        PyObject *updates = PyDict_GetItemWithError(d, key); /* borrowed */
        if (updates == NULL) {
            if (PyErr_Occurred()) {
                Py_XDECREF(joined);
                return NULL;
            }
            continue;
        }
        if (found == NULL) {
            found = updates;
        } else if (joined == NULL) {
            joined = PySequence_Concat(found, updates);
            if (joined == NULL)
                return NULL;
        } else {
            PyObject *more = PySequence_InPlaceConcat(joined, updates);
            if (more == NULL) {
                Py_DECREF(joined);
                return NULL;
            }
            Py_DECREF(joined);
            joined = more;
        }
    }
    if (joined != NULL)
        return joined;
    if (found != NULL)
        return Py_NewRef(found);
    return PyTuple_New(0);
}

/* merge_keys(keys, pos, fuel, other, base, data, older_first, floor, known, advance): the
 * compiled form of pytimely.differential.trace._Merge._work, with the same results.
 *
 * For each key of the list keys from pos while fuel > 0: other[key] is the key's list in the
 * batch being merged into data (a copy of base's index).  A key base lacks takes that list as
 * it is (fuel 1).  A key in both gets the two lists, the older first (older_first: other's),
 * compacted (fuel: their length): every update (v, t, d) has its time advanced -- to
 * max(t, floor) when floor is an int, to known[t] (advance(t) on a miss, which fills known)
 * when known is a dict, not at all when both are None -- and updates equal in (v, advanced
 * time) are added up, in the order of their first occurrence, zero sums dropped; data[key]
 * becomes the result, or is deleted when nothing is left.  An update whose time did not move
 * and that met no other is kept as the very same tuple.  Returns (pos, fuel, dropped): dropped
 * counts the updates the consolidation removed. */

typedef struct {
    PyObject *v, *t, *d; /* owned */
    PyObject *orig;      /* borrowed: the update's tuple while it is unchanged, else NULL */
} MergedUpdate;

static PyObject *
advanced_time(PyObject *t, PyObject *floor, PyObject *known, PyObject *advance)
{
    if (floor != Py_None) {
        int ge = PyObject_RichCompareBool(t, floor, Py_GE);
        if (ge < 0)
            return NULL;
        return Py_NewRef(ge ? t : floor);
    }
    if (known == Py_None)
        return Py_NewRef(t);
    PyObject *a = PyDict_GetItemWithError(known, t); /* borrowed */
    if (a != NULL)
        return Py_NewRef(a);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(advance, t);
}

static void
clear_merged(MergedUpdate *out, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(out[i].v);
        Py_DECREF(out[i].t);
        Py_DECREF(out[i].d);
    }
}

/* Add the updates of list src into out[0 .. *n): returns 0, or -1 with an exception. */
static int
merge_updates(PyObject *src, MergedUpdate *out, Py_ssize_t *n, PyObject *floor, PyObject *known,
              PyObject *advance)
{
    Py_ssize_t len = PyList_GET_SIZE(src);
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *u = PyList_GET_ITEM(src, i);
        if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 3) {
            PyErr_SetString(PyExc_TypeError, "merge_keys: an update is not a (val, time, diff)");
            return -1;
        }
        PyObject *v = PyTuple_GET_ITEM(u, 0), *t = PyTuple_GET_ITEM(u, 1);
        PyObject *d = PyTuple_GET_ITEM(u, 2);
        PyObject *a = advanced_time(t, floor, known, advance);
        if (a == NULL)
            return -1;
        Py_ssize_t j = 0;
        for (; j < *n; j++) {
            int same = out[j].t == a ? 1 : PyObject_RichCompareBool(out[j].t, a, Py_EQ);
            if (same > 0)
                same = out[j].v == v ? 1 : PyObject_RichCompareBool(out[j].v, v, Py_EQ);
            if (same < 0) {
                Py_DECREF(a);
                return -1;
            }
            if (same)
                break;
        }
        if (j < *n) {
            PyObject *sum = PyNumber_Add(out[j].d, d);
            Py_DECREF(a);
            if (sum == NULL)
                return -1;
            Py_SETREF(out[j].d, sum);
            out[j].orig = NULL;
        } else {
            out[j].v = Py_NewRef(v);
            out[j].t = a;
            out[j].d = Py_NewRef(d);
            out[j].orig = a == t ? u : NULL;
            (*n)++;
        }
    }
    return 0;
}

/* The compacted list of la + lb (both lists), or None when every update cancelled. */
static PyObject *
compact_pair(PyObject *la, PyObject *lb, PyObject *floor, PyObject *known, PyObject *advance)
{
    Py_ssize_t total = PyList_GET_SIZE(la) + PyList_GET_SIZE(lb);
    MergedUpdate small[16];
    MergedUpdate *out = total <= 16 ? small : PyMem_New(MergedUpdate, total);
    if (out == NULL)
        return PyErr_NoMemory();
    Py_ssize_t n = 0;
    PyObject *result = NULL;
    if (merge_updates(la, out, &n, floor, known, advance) < 0 ||
        merge_updates(lb, out, &n, floor, known, advance) < 0)
        goto done;
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int truth = PyObject_IsTrue(out[i].d);
        if (truth < 0)
            goto done;
        if (!truth) {
            Py_CLEAR(out[i].d);
            out[i].d = Py_NewRef(Py_None); /* marks a dropped update */
        } else {
            live++;
        }
    }
    if (live == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyList_New(live);
    if (result == NULL)
        goto done;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (out[i].d == Py_None)
            continue;
        PyObject *u = out[i].orig != NULL ? Py_NewRef(out[i].orig)
                                          : PyTuple_Pack(3, out[i].v, out[i].t, out[i].d);
        if (u == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, k++, u);
    }
done:
    clear_merged(out, n);
    if (out != small)
        PyMem_Free(out);
    return result;
}

static PyObject *
merge_keys(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "merge_keys takes 10 arguments");
        return NULL;
    }
    PyObject *keys = args[0], *other = args[3], *base = args[4], *data = args[5];
    PyObject *floor = args[7], *known = args[8], *advance = args[9];
    if (!PyList_Check(keys) || !PyDict_Check(other) || !PyDict_Check(base) ||
        !PyDict_Check(data) || (known != Py_None && !PyDict_Check(known))) {
        PyErr_SetString(PyExc_TypeError, "merge_keys: keys must be a list, the indexes dicts");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t fuel = PyLong_AsSsize_t(args[2]);
    int older_first = PyObject_IsTrue(args[6]);
    if ((pos == -1 || fuel == -1 || older_first < 0) && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), dropped = 0;
    while (pos < n && fuel > 0) {
        PyObject *key = PyList_GET_ITEM(keys, pos);
        pos++;
        PyObject *lo = PyDict_GetItemWithError(other, key); /* borrowed */
        if (lo == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key);
            return NULL;
        }
        PyObject *lb = PyDict_GetItemWithError(base, key); /* borrowed */
        if (lb == NULL) {
            if (PyErr_Occurred())
                return NULL;
            fuel -= 1;
            if (PyDict_SetItem(data, key, lo) < 0)
                return NULL;
            continue;
        }
        if (!PyList_Check(lo) || !PyList_Check(lb)) {
            PyErr_SetString(PyExc_TypeError, "merge_keys: a key's updates are not a list");
            return NULL;
        }
        PyObject *first = older_first ? lo : lb, *second = older_first ? lb : lo;
        Py_INCREF(first);
        Py_INCREF(second);
        Py_ssize_t both = PyList_GET_SIZE(first) + PyList_GET_SIZE(second);
        fuel -= both;
        PyObject *merged = compact_pair(first, second, floor, known, advance);
        Py_DECREF(first);
        Py_DECREF(second);
        if (merged == NULL)
            return NULL;
        dropped += both - (merged == Py_None ? 0 : PyList_GET_SIZE(merged));
        int rc = merged == Py_None ? PyDict_DelItem(data, key) : PyDict_SetItem(data, key, merged);
        Py_DECREF(merged);
        if (rc < 0)
            return NULL;
    }
    return Py_BuildValue("(nnn)", pos, fuel, dropped);
}

/* Append item to the list dict[key], a new list for a new key: 0, or -1 with an exception. */
static int
dict_list_append(PyObject *dict, PyObject *key, PyObject *item)
{
    PyObject *list = PyDict_GetItemWithError(dict, key); /* borrowed */
    if (list != NULL)
        return PyList_Append(list, item);
    if (PyErr_Occurred())
        return -1;
    list = PyList_New(1);
    if (list == NULL)
        return -1;
    PyList_SET_ITEM(list, 0, Py_NewRef(item));
    int rc = PyDict_SetItem(dict, key, list);
    Py_DECREF(list);
    return rc;
}

/* index_updates(updates, time): the compiled core of pytimely.differential.trace.Batch
 * .from_updates, with the same result.  updates is a list of ((key, val), t, diff); when every
 * t equals time they are added up by (key, val), else by ((key, val), t).  Returns
 * (data, size): data maps each key to its list of (val, t, diff) with nonzero sums, in the
 * order of first occurrence; size counts them.  None when an update is not a tuple of a
 * (key, val) tuple, a time and a diff (the caller takes the Python path). */
static PyObject *
index_updates(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "index_updates(updates, time): updates must be a list");
        return NULL;
    }
    PyObject *updates = args[0], *time = args[1];
    Py_ssize_t n = PyList_GET_SIZE(updates);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *u = PyList_GET_ITEM(updates, i);
        if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 3 ||
            !PyTuple_Check(PyTuple_GET_ITEM(u, 0)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(u, 0)) != 2)
            Py_RETURN_NONE; /* another shape: the Python path unpacks what it can */
    }
    int one_time = 1;
    for (Py_ssize_t i = 0; i < n && one_time; i++) {
        PyObject *t = PyTuple_GET_ITEM(PyList_GET_ITEM(updates, i), 1);
        if (t != time) {
            int eq = PyObject_RichCompareBool(t, time, Py_EQ);
            if (eq < 0)
                return NULL;
            one_time = eq;
        }
    }
    PyObject *acc = PyDict_New(); /* (key, val) or ((key, val), t) -> diff */
    PyObject *data = NULL, *result = NULL;
    if (acc == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *u = PyList_GET_ITEM(updates, i);
        PyObject *d = PyTuple_GET_ITEM(u, 2);
        PyObject *k = one_time ? Py_NewRef(PyTuple_GET_ITEM(u, 0))
                               : PyTuple_Pack(2, PyTuple_GET_ITEM(u, 0), PyTuple_GET_ITEM(u, 1));
        if (k == NULL)
            goto done;
        PyObject *old = PyDict_GetItemWithError(acc, k); /* borrowed */
        int rc;
        if (old == NULL) {
            rc = PyErr_Occurred() ? -1 : PyDict_SetItem(acc, k, d);
        } else {
            PyObject *sum = PyNumber_Add(old, d);
            rc = sum == NULL ? -1 : PyDict_SetItem(acc, k, sum);
            Py_XDECREF(sum);
        }
        Py_DECREF(k);
        if (rc < 0)
            goto done;
    }
    data = PyDict_New();
    if (data == NULL)
        goto done;
    Py_ssize_t pos = 0, size = 0;
    PyObject *k, *d;
    while (PyDict_Next(acc, &pos, &k, &d)) {
        int truth = PyObject_IsTrue(d);
        if (truth < 0)
            goto done;
        if (!truth)
            continue;
        PyObject *kv = one_time ? k : PyTuple_GET_ITEM(k, 0);
        PyObject *t = one_time ? time : PyTuple_GET_ITEM(k, 1);
        PyObject *key = PyTuple_GET_ITEM(kv, 0), *val = PyTuple_GET_ITEM(kv, 1);
        PyObject *entry = PyTuple_Pack(3, val, t, d);
        if (entry == NULL)
            goto done;
        int rc = dict_list_append(data, key, entry);
        Py_DECREF(entry);
        if (rc < 0)
            goto done;
        size++;
    }
    result = Py_BuildValue("(On)", data, size);
done:
    Py_DECREF(acc);
    Py_XDECREF(data);
    return result;
}

/* count_changes(key, times, ins, outs, f, corrections, product): the compiled form of
 * pytimely.differential.reduce._count_changes for a loop's times, with the same result (f None:
 * distinct's threshold, pytimely.differential.reduce.positive).  count_core's corrections
 * are records (key, time, diff) instead when as_record is set.
 * Every time (of times, and of the (val, time, diff) updates ins and outs) must be a
 * product (the Product type) of two ints, every diff an int, all within 64 bits; otherwise
 * nothing is done and None is returned (the caller takes the Python path), as when f returns
 * anything but such an int.  Returns outs with the corrections added (a new list); appends
 * ((key, ()), t, diff) to corrections. */

typedef struct {
    long long t0, t1, d;
} CountedUpdate;

/* The two ints of a product time, or -1 (no exception) when t is not one. */
static int
product_ints(PyObject *t, PyObject *product, long long *t0, long long *t1)
{
    if ((PyObject *)Py_TYPE(t) != product || PyTuple_GET_SIZE(t) != 2)
        return -1;
    PyObject *a = PyTuple_GET_ITEM(t, 0), *b = PyTuple_GET_ITEM(t, 1);
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
        return -1;
    int oa, ob;
    *t0 = PyLong_AsLongLongAndOverflow(a, &oa);
    *t1 = PyLong_AsLongLongAndOverflow(b, &ob);
    return oa || ob ? -1 : 0;
}

/* updates (a list or a tuple of (val, time, diff)) into out; -1 (no exception) on another
 * shape. */
static int
counted_updates(PyObject *updates, PyObject *product, CountedUpdate *out)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(updates);
    PyObject **items = PySequence_Fast_ITEMS(updates);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *u = items[i];
        if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 3 ||
            product_ints(PyTuple_GET_ITEM(u, 1), product, &out[i].t0, &out[i].t1) < 0 ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(u, 2)))
            return -1;
        int overflow;
        out[i].d = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(u, 2), &overflow);
        if (overflow)
            return -1;
    }
    return 0;
}

/* A packed history of a key (pytimely.differential.reduce._History, packed): a bytearray of
 * a header of two int64, the length at which the history is next compacted and its length,
 * then room for updates, the first (length) of them one CountedUpdate (t0, t1, diff) each,
 * for ((), Product(t0, t1), diff).  The room doubles as it fills (a bytearray grown by one
 * update at a time would be reallocated each time). */
#define PACK_HEADER ((Py_ssize_t)(2 * sizeof(long long)))

static inline Py_ssize_t
packed_len(PyObject *ba)
{
    return (Py_ssize_t)((long long *)PyByteArray_AS_STRING(ba))[1];
}

static inline void
packed_set_len(PyObject *ba, Py_ssize_t n)
{
    ((long long *)PyByteArray_AS_STRING(ba))[1] = n;
}

static inline Py_ssize_t
packed_room(PyObject *ba)
{
    return (PyByteArray_GET_SIZE(ba) - PACK_HEADER) / (Py_ssize_t)sizeof(CountedUpdate);
}

static inline CountedUpdate *
packed_items(PyObject *ba)
{
    return (CountedUpdate *)(PyByteArray_AS_STRING(ba) + PACK_HEADER);
}

static inline long long *
packed_limit(PyObject *ba)
{
    return (long long *)PyByteArray_AS_STRING(ba);
}

/* The number of updates of ins (a packed history, a list or a tuple). */
static inline Py_ssize_t
update_count(PyObject *ins)
{
    return PyByteArray_CheckExact(ins) ? packed_len(ins) : PySequence_Fast_GET_SIZE(ins);
}

/* ins (a packed history, a list or a tuple of (val, time, diff)) as counted updates into out;
 * -1 (no exception) when a list's update is of another shape. */
static int
load_counted(PyObject *ins, PyObject *product, CountedUpdate *out)
{
    if (!PyByteArray_CheckExact(ins))
        return counted_updates(ins, product, out);
    memcpy(out, packed_items(ins), packed_len(ins) * sizeof(CountedUpdate));
    return 0;
}

/* The corrections of count_changes for one key: appended to corrections (and to result, as
 * (val, time, diff), unless result is NULL).  1: done; 0: the times, updates or f's answers
 * are not of the compiled shape (nothing is left appended); -1: an exception. */
static int
count_core(PyObject *key, PyObject *times, PyObject *ins, PyObject *outs, PyObject *f,
           PyObject *corrections, PyObject *product, PyObject *result, int as_record)
{
    Py_ssize_t n_times = PyList_GET_SIZE(times);
    Py_ssize_t n_in = update_count(ins), n_out = update_count(outs);
    Py_ssize_t first_fix = PyList_GET_SIZE(corrections);
    Py_ssize_t first_out = result == NULL ? 0 : PyList_GET_SIZE(result);
    CountedUpdate small_in[16], small_out[24];
    CountedUpdate *in_ = n_in < 16 ? small_in : PyMem_New(CountedUpdate, n_in + 1);
    CountedUpdate *out_ = n_out + n_times < 24 ? small_out
                                                : PyMem_New(CountedUpdate, n_out + n_times + 1);
    PyObject *empty = NULL, *tag = NULL;
    int status = 1;
    if (in_ == NULL || out_ == NULL) {
        PyErr_NoMemory();
        status = -1;
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_times; i++) {
        long long t0, t1;
        if (product_ints(PyList_GET_ITEM(times, i), product, &t0, &t1) < 0) {
            status = 0;
            goto done;
        }
    }
    if (load_counted(ins, product, in_) < 0 || load_counted(outs, product, out_) < 0) {
        status = 0;
        goto done;
    }
    empty = PyTuple_New(0);
    if (empty == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n_times; i++) {
        PyObject *t = PyList_GET_ITEM(times, i);
        long long t0, t1, want = 0, have = 0;
        product_ints(t, product, &t0, &t1);
        for (Py_ssize_t j = 0; j < n_in; j++)
            if (in_[j].t0 <= t0 && in_[j].t1 <= t1)
                want += in_[j].d;
        for (Py_ssize_t j = 0; j < n_out; j++)
            if (out_[j].t0 <= t0 && out_[j].t1 <= t1)
                have += out_[j].d;
        if (want && f == Py_None) { /* distinct's threshold */
            want = want > 0;
        } else if (want) {
            PyObject *count = PyLong_FromLongLong(want);
            PyObject *got = count == NULL ? NULL : PyObject_CallOneArg(f, count);
            Py_XDECREF(count);
            if (got == NULL)
                goto fail;
            int overflow = 0;
            want = PyLong_Check(got) ? PyLong_AsLongLongAndOverflow(got, &overflow) : 0;
            int other = !PyLong_Check(got) || overflow;
            Py_DECREF(got);
            if (other) { /* not a 64-bit int: undo, and let the Python path count */
                status = 0;
                goto undo;
            }
        }
        if (want == have)
            continue;
        if (tag == NULL && (tag = as_record ? Py_NewRef(key) : PyTuple_Pack(2, key, empty)) == NULL)
            goto fail;
        PyObject *delta = PyLong_FromLongLong(want - have);
        if (delta == NULL)
            goto fail;
        PyObject *fix_out = result == NULL ? NULL : PyTuple_Pack(3, empty, t, delta);
        PyObject *fix = PyTuple_Pack(3, tag, t, delta);
        Py_DECREF(delta);
        int rc = (result != NULL && fix_out == NULL) || fix == NULL ? -1
                 : result != NULL && PyList_Append(result, fix_out) < 0 ? -1
                                                                        : PyList_Append(corrections, fix);
        Py_XDECREF(fix_out);
        Py_XDECREF(fix);
        if (rc < 0)
            goto fail;
        out_[n_out].t0 = t0;
        out_[n_out].t1 = t1;
        out_[n_out].d = want - have;
        n_out++;
    }
    goto done;
fail:
    status = -1;
undo:
    if (PyList_SetSlice(corrections, first_fix, PyList_GET_SIZE(corrections), NULL) < 0 ||
        (result != NULL &&
         PyList_SetSlice(result, first_out, PyList_GET_SIZE(result), NULL) < 0))
        status = -1;
done:
    Py_XDECREF(empty);
    Py_XDECREF(tag);
    if (in_ != small_in)
        PyMem_Free(in_);
    if (out_ != small_out)
        PyMem_Free(out_);
    return status;
}

static PyObject *
count_changes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "count_changes takes 7 arguments");
        return NULL;
    }
    PyObject *key = args[0], *times = args[1], *ins = args[2], *outs = args[3];
    PyObject *f = args[4], *corrections = args[5], *product = args[6];
    if (!PyList_Check(times) || !(PyList_Check(ins) || PyTuple_Check(ins)) ||
        !(PyList_Check(outs) || PyTuple_Check(outs)) || !PyList_Check(corrections))
        Py_RETURN_NONE;
    PyObject *result = PySequence_List(outs);
    if (result == NULL)
        return NULL;
    int status = count_core(key, times, ins, outs, f, corrections, product, result, 0);
    if (status == 1)
        return result;
    Py_DECREF(result);
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A new product(a, b) of the Product type product (a tuple subclass: made as tuples are,
 * without a call of its __new__). */
static PyObject *
new_product(PyObject *product, long long a, long long b)
{
    PyTypeObject *type = (PyTypeObject *)product;
    PyObject *x = PyLong_FromLongLong(a);
    PyObject *y = x == NULL ? NULL : PyLong_FromLongLong(b);
    PyObject *out = y == NULL ? NULL : type->tp_alloc(type, 2);
    if (out == NULL) {
        Py_XDECREF(x);
        Py_XDECREF(y);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, x);
    PyTuple_SET_ITEM(out, 1, y);
    return out;
}

/* advance_product(frontier, product, fallback, t): pytimely.differential.lattice.advance_by
 * (t, frontier) for a loop time, compiled: when t and every element of the tuple frontier
 * (nonempty) are products of two ints, the coordinate-wise min over the frontier of the max
 * with t (t itself when that is t); otherwise fallback(t). */
static PyObject *
advance_product(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "advance_product(frontier, product, fallback, t)");
        return NULL;
    }
    PyObject *frontier = args[0], *product = args[1], *t = args[3];
    Py_ssize_t n = PyTuple_GET_SIZE(frontier);
    long long t0, t1, r0 = 0, r1 = 0;
    if (n == 0 || product_ints(t, product, &t0, &t1) < 0)
        return PyObject_CallOneArg(args[2], t);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long f0, f1;
        if (product_ints(PyTuple_GET_ITEM(frontier, i), product, &f0, &f1) < 0)
            return PyObject_CallOneArg(args[2], t);
        long long j0 = t0 >= f0 ? t0 : f0, j1 = t1 >= f1 ? t1 : f1;
        if (i == 0 || j0 < r0)
            r0 = j0;
        if (i == 0 || j1 < r1)
            r1 = j1;
    }
    if (r0 == t0 && r1 == t1)
        return Py_NewRef(t);
    return new_product(product, r0, r1);
}

/* ---- a reduce's private histories (pytimely.differential.reduce) ------------------------ */

/* history_extend(index, data): _History.extend: the updates of each key of the dict data
 * appended to index[key], a new list for a key index lacks (data's lists are never shared). */
static PyObject *
history_extend(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "history_extend(index, data): two dicts");
        return NULL;
    }
    PyObject *index = args[0], *data = args[1], *key, *updates;
    Py_ssize_t pos = 0;
    while (PyDict_Next(data, &pos, &key, &updates)) {
        PyObject *have = PyDict_GetItemWithError(index, key); /* borrowed */
        if (have == NULL) {
            if (PyErr_Occurred())
                return NULL;
            PyObject *copy = PySequence_List(updates);
            if (copy == NULL)
                return NULL;
            int rc = PyDict_SetItem(index, key, copy);
            Py_DECREF(copy);
            if (rc < 0)
                return NULL;
        } else if (!PyList_Check(have) ||
                   PyList_SetSlice(have, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, updates) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "history_extend: a key's updates are not a list");
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* index_self(records, index, fresh): the records (x, t, diff) of the list records, each
 * appended to index[x] as ((), t, diff) (a new list for a new x), its time added to fresh[x]
 * (a new set for a new x): a threshold's input indexed by record as it arrives. */
static PyObject *
index_self(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "index_self(records, index, fresh): a list, two dicts");
        return NULL;
    }
    PyObject *records = args[0], *index = args[1], *fresh = args[2];
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
            PyErr_SetString(PyExc_TypeError, "index_self: a record is not a (data, time, diff)");
            goto fail;
        }
        PyObject *x = PyTuple_GET_ITEM(r, 0), *t = PyTuple_GET_ITEM(r, 1);
        PyObject *u = PyTuple_Pack(3, empty, t, PyTuple_GET_ITEM(r, 2));
        if (u == NULL)
            goto fail;
        int rc = dict_list_append(index, x, u);
        Py_DECREF(u);
        if (rc < 0)
            goto fail;
        PyObject *times = PyDict_GetItemWithError(fresh, x); /* borrowed */
        if (times != NULL) {
            rc = PySet_Add(times, t);
        } else if (PyErr_Occurred()) {
            rc = -1;
        } else {
            PyObject *set = PySet_New(NULL);
            rc = set == NULL || PySet_Add(set, t) < 0 ? -1 : PyDict_SetItem(fresh, x, set);
            Py_XDECREF(set);
        }
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(empty);
    Py_RETURN_NONE;
fail:
    Py_DECREF(empty);
    return NULL;
}

/* history_compact(index, limits, keys, floor, known, advance): _History.compact_grown: each
 * key of the iterable keys whose list in index holds at least limits.get(key, 4) updates is
 * compacted (as merge_keys compacts: times advanced by floor, known or advance, equal
 * (val, time) added up, zero sums dropped); its limit becomes max(4, twice what is left), or
 * the key leaves both dicts when nothing is. */
static PyObject *
history_compact(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        (args[4] != Py_None && !PyDict_Check(args[4]))) {
        PyErr_SetString(PyExc_TypeError,
                        "history_compact(index, limits, keys, floor, known, advance)");
        return NULL;
    }
    PyObject *index = args[0], *limits = args[1];
    PyObject *floor = args[3], *known = args[4], *advance = args[5];
    PyObject *it = PyObject_GetIter(args[2]);
    PyObject *none = PyList_New(0);
    PyObject *key;
    if (it == NULL || none == NULL)
        goto fail;
    while ((key = PyIter_Next(it)) != NULL) {
        PyObject *have = PyDict_GetItemWithError(index, key); /* borrowed */
        Py_ssize_t limit = 4;
        int rc = 0;
        if (have == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        PyObject *lim = PyDict_GetItemWithError(limits, key); /* borrowed */
        if (lim != NULL)
            limit = PyLong_AsSsize_t(lim);
        if (PyErr_Occurred() || !PyList_Check(have)) {
            Py_DECREF(key);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "history_compact: a key's updates are not a list");
            goto fail;
        }
        if (PyList_GET_SIZE(have) < limit) {
            Py_DECREF(key);
            continue;
        }
        Py_INCREF(have);
        PyObject *kept = compact_pair(have, none, floor, known, advance);
        Py_DECREF(have);
        if (kept == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        if (kept == Py_None) {
            rc = PyDict_DelItem(index, key);
            if (rc == 0 && lim != NULL)
                rc = PyDict_DelItem(limits, key);
        } else {
            Py_ssize_t twice = 2 * PyList_GET_SIZE(kept);
            PyObject *next = PyLong_FromSsize_t(twice > 4 ? twice : 4);
            rc = next == NULL || PyDict_SetItem(index, key, kept) < 0 ? -1
                                                                      : PyDict_SetItem(limits, key, next);
            Py_XDECREF(next);
        }
        Py_DECREF(kept);
        Py_DECREF(key);
        if (rc < 0)
            goto fail;
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(it);
    Py_DECREF(none);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(it);
    Py_XDECREF(none);
    return NULL;
}

/* ---- packed histories of a threshold in a loop ------------------------------------------ */

/* The counted form of a time and a diff; -1 (no exception) when t is not a product of two
 * ints or d not an int, within 64 bits. */
static int
counted_of(PyObject *t, PyObject *d, PyObject *product, CountedUpdate *out)
{
    int overflow = 0;
    if (product_ints(t, product, &out->t0, &out->t1) < 0 || !PyLong_CheckExact(d))
        return -1;
    out->d = PyLong_AsLongLongAndOverflow(d, &overflow);
    return overflow ? -1 : 0;
}

/* Append u to the packed history index[key] (a new one, to be compacted at 4, for a new key);
 * have: the key's history when the caller holds it (else NULL: looked up). */
static int
packed_append_to(PyObject *index, PyObject *key, PyObject *have, const CountedUpdate *u)
{
    PyObject *ba = have != NULL ? have : PyDict_GetItemWithError(index, key); /* borrowed */
    if (ba == NULL) {
        if (PyErr_Occurred())
            return -1;
        ba = PyByteArray_FromStringAndSize(NULL, PACK_HEADER + 2 * (Py_ssize_t)sizeof(CountedUpdate));
        if (ba == NULL)
            return -1;
        *packed_limit(ba) = 4;
        packed_set_len(ba, 1);
        *packed_items(ba) = *u;
        int rc = PyDict_SetItem(index, key, ba);
        Py_DECREF(ba);
        return rc;
    }
    if (!PyByteArray_CheckExact(ba)) {
        PyErr_SetString(PyExc_TypeError, "a packed history holds a non-bytearray");
        return -1;
    }
    Py_ssize_t n = packed_len(ba);
    if (n == packed_room(ba) &&
        PyByteArray_Resize(ba, PACK_HEADER + 2 * (n + 1) * (Py_ssize_t)sizeof(CountedUpdate)) < 0)
        return -1;
    packed_items(ba)[n] = *u;
    packed_set_len(ba, n + 1);
    return 0;
}

static int
packed_append(PyObject *index, PyObject *key, const CountedUpdate *u)
{
    return packed_append_to(index, key, NULL, u);
}

/* pack_records(records, index, fresh): index_self into packed histories: each record
 * (x, t, diff) appended to index[x] as (t0, t1, diff); fresh[x] becomes t, or a set of the
 * times when there are several (a batch's records mostly share one time).  False,
 * with nothing done, when a record's time is not a product of two ints or its diff not a
 * 64-bit int. */
static PyObject *
pack_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pack_records(records, index, fresh, product)");
        return NULL;
    }
    PyObject *records = args[0], *index = args[1], *fresh = args[2], *product = args[3];
    Py_ssize_t n = PyList_GET_SIZE(records);
    CountedUpdate u;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3 ||
            counted_of(PyTuple_GET_ITEM(r, 1), PyTuple_GET_ITEM(r, 2), product, &u) < 0)
            Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        PyObject *x = PyTuple_GET_ITEM(r, 0), *t = PyTuple_GET_ITEM(r, 1);
        counted_of(t, PyTuple_GET_ITEM(r, 2), product, &u);
        if (packed_append(index, x, &u) < 0)
            return NULL;
        PyObject *times = PyDict_GetItemWithError(fresh, x); /* borrowed */
        int rc = 0;
        if (times == NULL) {
            rc = PyErr_Occurred() ? -1 : PyDict_SetItem(fresh, x, t);
        } else if (PyAnySet_CheckExact(times)) {
            rc = PySet_Add(times, t);
        } else if (times != t) {
            int same = PyObject_RichCompareBool(times, t, Py_EQ);
            if (same < 0)
                return NULL;
            if (!same) {
                PyObject *set = PySet_New(NULL);
                rc = set == NULL || PySet_Add(set, times) < 0 || PySet_Add(set, t) < 0
                         ? -1
                         : PyDict_SetItem(fresh, x, set);
                Py_XDECREF(set);
            }
        }
        if (rc < 0)
            return NULL;
    }
    Py_RETURN_TRUE;
}

/* pack_extend(index, data, product): history_extend into packed histories: every update
 * ((), t, diff) of data's lists appended to index[key].  False, with nothing done, when an
 * update has another value than (), a time not a product of two ints or a diff not a 64-bit
 * int. */
static PyObject *
pack_extend(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pack_extend(index, data, product)");
        return NULL;
    }
    PyObject *index = args[0], *data = args[1], *product = args[2], *key, *updates;
    CountedUpdate u;
    for (int pass = 0; pass < 2; pass++) {
        Py_ssize_t pos = 0;
        while (PyDict_Next(data, &pos, &key, &updates)) {
            if (!PyList_Check(updates))
                Py_RETURN_FALSE;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(updates); i++) {
                PyObject *w = PyList_GET_ITEM(updates, i);
                if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 3 ||
                    !PyTuple_CheckExact(PyTuple_GET_ITEM(w, 0)) ||
                    PyTuple_GET_SIZE(PyTuple_GET_ITEM(w, 0)) != 0 ||
                    counted_of(PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 2), product, &u) < 0)
                    Py_RETURN_FALSE; /* (only ever in the first pass) */
                if (pass == 1 && packed_append(index, key, &u) < 0)
                    return NULL;
            }
        }
    }
    Py_RETURN_TRUE;
}

static int
compare_counted(const void *a, const void *b)
{
    const CountedUpdate *x = a, *y = b;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1)
        return x->t1 < y->t1 ? -1 : 1;
    return 0;
}

/* Compact the packed history ba of key in index by the frontier f (nf pairs of ints): each
 * time advanced to the coordinate-wise min over f of its max with the time, equal times'
 * diffs added up, zero sums dropped; its next count becomes max(4, twice what is left), or
 * the key leaves index when nothing is.  0, or -1 with an exception. */
static int
compact_packed_key(PyObject *index, PyObject *key, PyObject *ba, const long long *f,
                   Py_ssize_t nf)
{
    Py_ssize_t n = packed_len(ba), kept = 0;
    CountedUpdate *u = packed_items(ba);
    for (Py_ssize_t i = 0; nf && i < n; i++) {
        long long r0 = 0, r1 = 0;
        for (Py_ssize_t j = 0; j < nf; j++) {
            long long j0 = u[i].t0 >= f[2 * j] ? u[i].t0 : f[2 * j];
            long long j1 = u[i].t1 >= f[2 * j + 1] ? u[i].t1 : f[2 * j + 1];
            if (j == 0 || j0 < r0)
                r0 = j0;
            if (j == 0 || j1 < r1)
                r1 = j1;
        }
        u[i].t0 = r0;
        u[i].t1 = r1;
    }
    qsort(u, n, sizeof(CountedUpdate), compare_counted);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kept && u[kept - 1].t0 == u[i].t0 && u[kept - 1].t1 == u[i].t1) {
            u[kept - 1].d += u[i].d;
        } else {
            if (kept && u[kept - 1].d == 0)
                kept--;
            u[kept++] = u[i];
        }
    }
    if (kept && u[kept - 1].d == 0)
        kept--;
    if (kept == 0)
        return PyDict_DelItem(index, key);
    /* (room kept for growth up to the next compaction, at twice what is left) */
    Py_ssize_t limit = 2 * kept > 4 ? 2 * kept : 4;
    if (packed_room(ba) > 2 * limit &&
        PyByteArray_Resize(ba, PACK_HEADER + limit * (Py_ssize_t)sizeof(CountedUpdate)) < 0)
        return -1;
    *packed_limit(ba) = limit;
    packed_set_len(ba, kept);
    return 0;
}

/* packed_compact(index, keys, frontier, product): _History.compact_grown over packed
 * histories: each key of the iterable keys whose history holds at least its header's count
 * of updates has every time advanced by the frontier (a tuple of products of two ints: the
 * coordinate-wise min over it of the max with the time; none when it is empty), equal times'
 * diffs added up and zero sums dropped; its next count becomes max(4, twice what is left), or
 * the key leaves index when nothing is.  False, with nothing done, when a frontier element is
 * not a product of two ints. */
static PyObject *
packed_compact(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "packed_compact(index, keys, frontier, product)");
        return NULL;
    }
    PyObject *index = args[0], *frontier = args[2], *product = args[3];
    Py_ssize_t nf = PyTuple_GET_SIZE(frontier);
    long long small[8], *f = nf <= 4 ? small : PyMem_New(long long, 2 * nf);
    if (f == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (product_ints(PyTuple_GET_ITEM(frontier, i), product, &f[2 * i], &f[2 * i + 1]) < 0) {
            if (f != small)
                PyMem_Free(f);
            Py_RETURN_FALSE;
        }
    }
    PyObject *it = PyObject_GetIter(args[1]), *key;
    if (it == NULL)
        goto fail;
    while ((key = PyIter_Next(it)) != NULL) {
        PyObject *ba = PyDict_GetItemWithError(index, key); /* borrowed */
        if (ba == NULL || !PyByteArray_CheckExact(ba) || packed_len(ba) < *packed_limit(ba)) {
            int bad = PyErr_Occurred() || (ba != NULL && !PyByteArray_CheckExact(ba));
            Py_DECREF(key);
            if (bad) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "a packed history holds a non-bytearray");
                goto fail;
            }
            continue;
        }
        int rc = compact_packed_key(index, key, ba, f, nf);
        Py_DECREF(key);
        if (rc < 0)
            goto fail;
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(it);
    if (f != small)
        PyMem_Free(f);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(it);
    if (f != small)
        PyMem_Free(f);
    return NULL;
}

/* Add t to the set pending and key to waiting[t] (a new set), unless pending has t. */
static int
pend(PyObject *key, PyObject *t, PyObject *pending, PyObject *waiting)
{
    int has = PySet_Contains(pending, t);
    if (has != 0)
        return has < 0 ? -1 : 0;
    if (PySet_Add(pending, t) < 0)
        return -1;
    PyObject *keys = PyDict_GetItemWithError(waiting, t); /* borrowed */
    if (keys != NULL)
        return PySet_Add(keys, key);
    if (PyErr_Occurred())
        return -1;
    keys = PySet_New(NULL);
    int rc = keys == NULL || PySet_Add(keys, key) < 0 ? -1 : PyDict_SetItem(waiting, t, keys);
    Py_XDECREF(keys);
    return rc;
}

/* 1 when every time of the set times is product(outer, round) of ints (*least: the least
 * round), 0 when one is not, -1 on an exception. */
static int
rounds_at(PyObject *times, PyObject *product, long long outer, long long *least)
{
    PyObject *it = PyObject_GetIter(times), *t;
    if (it == NULL)
        return -1;
    int shaped = 1, first = 1;
    while ((t = PyIter_Next(it)) != NULL) {
        long long t0, t1;
        if (product_ints(t, product, &t0, &t1) < 0 || t0 != outer)
            shaped = 0;
        else if (first || t1 < *least)
            *least = t1;
        first = 0;
        Py_DECREF(t);
        if (!shaped)
            break;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : shaped;
}

/* chain_pending(fresh, index, pending, waiting, outer, floor, made, product): for each key of
 * fresh (key -> its new time, or a set of them), what pytimely.differential.reduce._ChainTimes.closure
 * adds to its pending times: the new times, and the rounds of its history (index[key], times
 * advanced: a round below floor to floor) at or after the least new round, as
 * product(outer, round) (made caches them by round); each added to the set pending[key] (a new
 * set for a new key) and to waiting[time] (a set of keys).  A key whose new times, pending
 * times or history are not loop times at outer (ints; a history time's outer at most outer)
 * is left untouched and listed in the result, for the caller's general path. */
static PyObject *
chain_pending(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[2]) || !PyDict_Check(args[3]) || !PyDict_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "chain_pending(fresh, index, pending, waiting, outer, floor, made, product)");
        return NULL;
    }
    PyObject *fresh = args[0], *index = args[1], *pending = args[2], *waiting = args[3];
    PyObject *made = args[6], *product = args[7];
    int overflow = 0;
    long long outer = PyLong_AsLongLongAndOverflow(args[4], &overflow);
    long long floor = overflow ? 0 : PyLong_AsLongLongAndOverflow(args[5], &overflow);
    if (PyErr_Occurred())
        return NULL;
    PyObject *rest = PyList_New(0);
    if (rest == NULL)
        return NULL;
    if (overflow) { /* every key to the general path */
        PyObject *keys = PyDict_Keys(fresh);
        Py_DECREF(rest);
        return keys;
    }
    long long small[32];
    long long *rounds = small;
    Py_ssize_t cap = 32;
    PyObject *key, *times;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fresh, &pos, &key, &times)) {
        long long t0, t1, least = 0;
        int one = !PyAnySet_Check(times); /* one time, not a set of them */
        int shaped = one ? product_ints(times, product, &t0, &least) == 0 && t0 == outer
                     : PySet_GET_SIZE(times) > 0 ? rounds_at(times, product, outer, &least)
                                                 : 0;
        if (shaped < 0)
            goto fail;
        PyObject *p = PyDict_GetItemWithError(pending, key); /* borrowed */
        if (p == NULL && PyErr_Occurred())
            goto fail;
        if (shaped && p != NULL) {
            long long ignored;
            shaped = PyAnySet_Check(p) ? rounds_at(p, product, outer, &ignored) : 0;
            if (shaped < 0)
                goto fail;
        }
        PyObject *ins = PyDict_GetItemWithError(index, key); /* borrowed */
        if (ins == NULL && PyErr_Occurred())
            goto fail;
        int packed = ins != NULL && PyByteArray_CheckExact(ins);
        if (ins != NULL && !packed && !PyList_Check(ins))
            shaped = 0;
        Py_ssize_t n_rounds = 0;
        Py_ssize_t n_in = ins == NULL ? 0 : packed ? packed_len(ins) : PyList_GET_SIZE(ins);
        if (shaped && n_in > cap) {
            long long *more = PyMem_New(long long, n_in);
            if (more == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            if (rounds != small)
                PyMem_Free(rounds);
            rounds = more;
            cap = n_in;
        }
        for (Py_ssize_t i = 0; shaped && i < n_in; i++) {
            if (packed) {
                t0 = packed_items(ins)[i].t0;
                t1 = packed_items(ins)[i].t1;
                if (t0 > outer) {
                    shaped = 0;
                    break;
                }
            } else {
                PyObject *u = PyList_GET_ITEM(ins, i);
                if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 3 ||
                    product_ints(PyTuple_GET_ITEM(u, 1), product, &t0, &t1) < 0 || t0 > outer) {
                    shaped = 0;
                    break;
                }
            }
            if (t1 < floor)
                t1 = floor;
            if (t1 >= least)
                rounds[n_rounds++] = t1;
        }
        if (!shaped) {
            if (PyList_Append(rest, key) < 0)
                goto fail;
            continue;
        }
        if (p == NULL) {
            PyObject *fresh_set = PySet_New(NULL);
            int rc = fresh_set == NULL ? -1 : PyDict_SetItem(pending, key, fresh_set);
            Py_XDECREF(fresh_set);
            if (rc < 0)
                goto fail;
            p = fresh_set; /* borrowed: pending holds it */
        }
        if (one) {
            if (pend(key, times, p, waiting) < 0)
                goto fail;
        } else {
            PyObject *it = PyObject_GetIter(times), *t;
            if (it == NULL)
                goto fail;
            while ((t = PyIter_Next(it)) != NULL) {
                int rc = pend(key, t, p, waiting);
                Py_DECREF(t);
                if (rc < 0) {
                    Py_DECREF(it);
                    goto fail;
                }
            }
            Py_DECREF(it);
            if (PyErr_Occurred())
                goto fail;
        }
        for (Py_ssize_t i = 0; i < n_rounds; i++) {
            PyObject *r = PyLong_FromLongLong(rounds[i]);
            if (r == NULL)
                goto fail;
            PyObject *at = PyDict_GetItemWithError(made, r); /* borrowed */
            if (at == NULL) {
                PyObject *o = PyErr_Occurred() ? NULL : PyLong_FromLongLong(outer);
                PyObject *fresh_t = o == NULL ? NULL : PyObject_CallFunctionObjArgs(product, o, r, NULL);
                Py_XDECREF(o);
                int rc = fresh_t == NULL ? -1 : PyDict_SetItem(made, r, fresh_t);
                Py_XDECREF(fresh_t);
                if (rc < 0) {
                    Py_DECREF(r);
                    goto fail;
                }
                at = fresh_t; /* borrowed: made holds it */
            }
            Py_DECREF(r);
            if (pend(key, at, p, waiting) < 0)
                goto fail;
        }
    }
    if (rounds != small)
        PyMem_Free(rounds);
    return rest;
fail:
    if (rounds != small)
        PyMem_Free(rounds);
    Py_DECREF(rest);
    return NULL;
}

/* The threshold's evaluation of every key of ready (key -> list of its pending times the
 * frontier has passed): the list sorted, the key's corrections at those times appended to
 * corrections (count_core over in_index.get(key) and out_index.get(key)), the times removed
 * from the set pending[key] (the key removed when none is left).  A key whose times or
 * updates are not of count_core's shape is left untouched and listed in rest.  With records
 * set, the corrections are records (key, time, diff), the histories must be packed, and each
 * correction is also appended to the key's output history, which is then compacted by the nf
 * pairs of bounds (none when compact is 0) once it holds its header's count.  0, or -1 with
 * an exception. */
static int
evaluate_keys(PyObject *ready, PyObject *at, PyObject *pending, PyObject *in_index,
              PyObject *out_index, PyObject *f, PyObject *corrections, PyObject *product,
              PyObject *rest, int records, const long long *bounds, Py_ssize_t nf, int compact)
{
    PyObject *none = PyTuple_New(0);
    PyObject *key, *times = at, *key_held = NULL;
    PyObject *keys = at == NULL ? NULL : PyObject_GetIter(ready); /* (a set of keys) */
    Py_ssize_t pos = 0;
    if (none == NULL || (at != NULL && keys == NULL)) {
        Py_XDECREF(none);
        return -1;
    }
    for (;;) {
        if (at != NULL) {
            Py_XDECREF(key_held);
            key = key_held = PyIter_Next(keys);
            if (key == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                break;
            }
        } else if (!PyDict_Next(ready, &pos, &key, &times)) {
            break;
        }
        if (!PyList_Check(times) || (at == NULL && PyList_Sort(times) < 0)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a threshold's ready times are not a list");
            goto fail;
        }
        PyObject *ins = PyDict_GetItemWithError(in_index, key); /* borrowed */
        PyObject *outs = ins == NULL && PyErr_Occurred() ? NULL
                                                        : PyDict_GetItemWithError(out_index, key);
        if (PyErr_Occurred())
            goto fail;
        int shaped = 1;
        for (int side = 0; side < 2; side++) {
            PyObject *h = side ? outs : ins;
            if (h == NULL || PyByteArray_CheckExact(h))
                continue;
            if (records) {
                PyErr_SetString(PyExc_TypeError, "a threshold's history is not packed");
                goto fail;
            }
            shaped = shaped && (PyList_Check(h) || PyTuple_Check(h));
        }
        Py_ssize_t first = PyList_GET_SIZE(corrections);
        int status = !shaped ? 0
                             : count_core(key, times, ins == NULL ? none : ins,
                                          outs == NULL ? none : outs, f, corrections, product,
                                          NULL, records);
        if (status < 0)
            goto fail;
        if (status == 0) {
            if (PyList_Append(rest, key) < 0)
                goto fail;
            continue;
        }
        Py_ssize_t last = PyList_GET_SIZE(corrections);
        for (Py_ssize_t i = first; records && i < last; i++) {
            PyObject *fix = PyList_GET_ITEM(corrections, i);
            CountedUpdate u;
            counted_of(PyTuple_GET_ITEM(fix, 1), PyTuple_GET_ITEM(fix, 2), product, &u);
            if (packed_append_to(out_index, key, outs, &u) < 0)
                goto fail;
            if (outs == NULL) { /* made by the first append */
                outs = PyDict_GetItemWithError(out_index, key);
                if (outs == NULL) {
                    if (!PyErr_Occurred())
                        PyErr_SetObject(PyExc_KeyError, key);
                    goto fail;
                }
            }
        }
        if (records && compact && last > first && packed_len(outs) >= *packed_limit(outs) &&
            compact_packed_key(out_index, key, outs, bounds, nf) < 0)
            goto fail;
        PyObject *left = PyDict_GetItemWithError(pending, key); /* borrowed */
        if (left == NULL || !PyAnySet_Check(left)) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key);
            goto fail;
        }
        if (PySet_GET_SIZE(left) == PyList_GET_SIZE(times)) {
            if (PyDict_DelItem(pending, key) < 0)
                goto fail;
            continue;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(times); i++)
            if (PySet_Discard(left, PyList_GET_ITEM(times, i)) < 0)
                goto fail;
    }
    Py_DECREF(none);
    Py_XDECREF(keys);
    return 0;
fail:
    Py_DECREF(none);
    Py_XDECREF(key_held);
    Py_XDECREF(keys);
    return -1;
}

/* threshold_ready(ready, pending, ins, outs, f, corrections, product): the threshold's
 * evaluation in pytimely.differential.reduce over private histories (evaluate_keys: packed
 * or lists; f None for distinct's threshold, as in count_changes); returns the keys handed
 * back untouched. */
static PyObject *
threshold_ready(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) ||
        !PyDict_Check(args[2]) || !PyDict_Check(args[3]) || !PyList_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "threshold_ready(ready, pending, ins, outs, f, corrections, product)");
        return NULL;
    }
    PyObject *rest = PyList_New(0);
    if (rest == NULL || evaluate_keys(args[0], NULL, args[1], args[2], args[3], args[4],
                                      args[5], args[6], rest, 0, NULL, 0, 0) < 0) {
        Py_XDECREF(rest);
        return NULL;
    }
    return rest;
}

/* records_ready(ready, pending, ins, outs, f, corrections, product, frontier[, at]):
 * threshold_ready for a threshold whose output is a collection and whose histories are
 * packed: the corrections are records (key, time, diff), each also appended to the key's
 * packed output history outs[key] (a new one for a new key), which is then compacted by
 * frontier (a tuple of products of two ints; None: not compacted) once it holds its header's
 * count.  With at (a list of the one time ready), ready is the set of the keys ready at it
 * alone (no dict of one-time lists to build).  Keys handed back as by threshold_ready. */
static PyObject *
records_ready(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *at = nargs == 9 ? args[8] : NULL;
    if ((nargs != 8 && nargs != 9) ||
        !(at == NULL ? PyDict_Check(args[0]) : PyAnySet_Check(args[0]) && PyList_Check(at) &&
                                                   PyList_GET_SIZE(at) == 1) ||
        !PyDict_Check(args[1]) || !PyDict_Check(args[2]) || !PyDict_Check(args[3]) ||
        !PyList_Check(args[5]) || (args[7] != Py_None && !PyTuple_Check(args[7]))) {
        PyErr_SetString(PyExc_TypeError,
                        "records_ready(ready, pending, ins, outs, f, corrections, product, "
                        "frontier[, at]): ready a dict, or a set with at a list of one time");
        return NULL;
    }
    PyObject *frontier = args[7], *product = args[6];
    Py_ssize_t nf = frontier == Py_None ? 0 : PyTuple_GET_SIZE(frontier);
    long long small[8], *bounds = nf <= 4 ? small : PyMem_New(long long, 2 * nf);
    if (bounds == NULL)
        return PyErr_NoMemory();
    PyObject *rest = NULL;
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (product_ints(PyTuple_GET_ITEM(frontier, i), product, &bounds[2 * i],
                         &bounds[2 * i + 1]) < 0) {
            PyErr_SetString(PyExc_TypeError, "records_ready: a frontier time is not a loop time");
            goto done;
        }
    }
    rest = PyList_New(0);
    if (rest != NULL && evaluate_keys(args[0], at, args[1], args[2], args[3], args[4], args[5],
                                      product, rest, 1, bounds, nf, frontier != Py_None) < 0)
        Py_CLEAR(rest);
done:
    if (bounds != small)
        PyMem_Free(bounds);
    return rest;
}

/* gather_ready(waiting, times, ready): for each time t of the list times, the set of keys
 * waiting.pop(t), each key's list ready[key] (a new one for a new key) given t: the keys a
 * reduce evaluates, with their times the frontier has passed. */
static PyObject *
gather_ready(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyList_Check(args[1]) ||
        !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "gather_ready(waiting, times, ready)");
        return NULL;
    }
    PyObject *waiting = args[0], *times = args[1], *ready = args[2];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(times); i++) {
        PyObject *t = PyList_GET_ITEM(times, i);
        PyObject *keys = PyDict_GetItemWithError(waiting, t); /* borrowed */
        if (keys == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, t);
            return NULL;
        }
        Py_INCREF(keys);
        if (PyDict_DelItem(waiting, t) < 0) {
            Py_DECREF(keys);
            return NULL;
        }
        PyObject *it = PyObject_GetIter(keys), *key;
        Py_DECREF(keys); /* (the iterator holds it) */
        if (it == NULL)
            return NULL;
        while ((key = PyIter_Next(it)) != NULL) {
            int rc = dict_list_append(ready, key, t);
            Py_DECREF(key);
            if (rc < 0) {
                Py_DECREF(it);
                return NULL;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- differential dataflow: a join's pairs --------------------------------------------- */

/* memo(t) of a TimeMemo (its answers in memo.known, a call on a miss), or t when memo is None. */
static PyObject *
memo_time(PyObject *memo, PyObject *known, PyObject *t)
{
    if (memo == Py_None)
        return Py_NewRef(t);
    PyObject *got = PyDict_GetItemWithError(known, t); /* borrowed */
    if (got != NULL)
        return Py_NewRef(got);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(memo, t);
}

/* The least upper bound of two times: max of ints, the coordinate-wise max of products of
 * two ints (one of them when it is at or after the other), else lub(a, b). */
static PyObject *
time_lub(PyObject *a, PyObject *b, PyObject *product, PyObject *lub)
{
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int ge = PyObject_RichCompareBool(a, b, Py_GE);
        return ge < 0 ? NULL : Py_NewRef(ge ? a : b);
    }
    long long a0, a1, b0, b1;
    if (product_ints(a, product, &a0, &a1) < 0 || product_ints(b, product, &b0, &b1) < 0)
        return PyObject_CallFunctionObjArgs(lub, a, b, NULL);
    if (a0 >= b0 && a1 >= b1)
        return Py_NewRef(a);
    if (b0 >= a0 && b1 >= a1)
        return Py_NewRef(b);
    return new_product(product, a0 >= b0 ? a0 : b0, a1 >= b1 ? a1 : b1);
}

/* A time as two ints (an int t: (t, 0)), for comparing advanced times; -1 (no exception)
 * when it is neither an int nor a product of two ints.  kind: 1 for an int, 2 a product. */
static int
time_ints(PyObject *t, PyObject *product, long long *a0, long long *a1, int *kind)
{
    if (PyLong_CheckExact(t)) {
        int overflow = 0;
        *a0 = PyLong_AsLongLongAndOverflow(t, &overflow);
        *a1 = 0;
        *kind = 1;
        return overflow ? -1 : 0;
    }
    *kind = 2;
    return product_ints(t, product, a0, a1);
}

/* One update of the other side of a join, its time advanced by the batch's meet (a0, a1):
 * the value and the (mapped) time and diff it came with (new references), and the hash of
 * the value. */
typedef struct {
    long long a0, a1;
    Py_hash_t h;
    PyObject *v, *t, *d;
} JoinMatch;

static int
join_match_order(const void *x, const void *y)
{
    const JoinMatch *p = x, *q = y;
    if (p->a0 != q->a0)
        return p->a0 < q->a0 ? -1 : 1;
    if (p->a1 != q->a1)
        return p->a1 < q->a1 ? -1 : 1;
    return p->h < q->h ? -1 : p->h > q->h;
}

static void
join_matches_clear(JoinMatch *ms, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(ms[i].v);
        Py_XDECREF(ms[i].t);
        Py_XDECREF(ms[i].d);
    }
}

/* The updates of a key in the lists found[0 .. n_found), times mapped by theirs and advanced
 * by the meet (m0, m1, of kind), consolidated: equal values at equal advanced times summed
 * (the first's time kept: its lub with any time at or after the meet is theirs too), zero
 * sums dropped.  Into ms (room for every update); the number kept, -1 with an exception, or
 * -2 (no exception, nothing held) when a time is not of the meet's shape or a value is
 * unhashable. */
static Py_ssize_t
join_consolidate(PyObject **found, Py_ssize_t n_found, PyObject *theirs, PyObject *known,
                 PyObject *product, long long m0, long long m1, int kind, JoinMatch *ms)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t b = 0; b < n_found; b++) {
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(found[b]); j++) {
            PyObject *w = PyList_GET_ITEM(found[b], j);
            if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 3) {
                join_matches_clear(ms, n);
                PyErr_SetString(PyExc_TypeError, "join_pairs: an update is not a triple");
                return -1;
            }
            PyObject *t = memo_time(theirs, known, PyTuple_GET_ITEM(w, 1));
            if (t == NULL) {
                join_matches_clear(ms, n);
                return -1;
            }
            JoinMatch *e = &ms[n];
            int k;
            e->h = PyObject_Hash(PyTuple_GET_ITEM(w, 0));
            if (e->h == -1 || time_ints(t, product, &e->a0, &e->a1, &k) < 0 || k != kind) {
                PyErr_Clear();
                Py_DECREF(t);
                join_matches_clear(ms, n);
                return -2;
            }
            if (e->a0 < m0)
                e->a0 = m0;
            if (e->a1 < m1)
                e->a1 = m1;
            e->v = Py_NewRef(PyTuple_GET_ITEM(w, 0));
            e->t = t;
            e->d = Py_NewRef(PyTuple_GET_ITEM(w, 2));
            n++;
        }
    }
    qsort(ms, (size_t)n, sizeof(JoinMatch), join_match_order);
    /* Within each run of equal (time, hash), fold equal values into the first of them. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ms[i].d == NULL)
            continue;
        for (Py_ssize_t j = i + 1; j < n && join_match_order(&ms[i], &ms[j]) == 0; j++) {
            if (ms[j].d == NULL)
                continue;
            int eq = PyObject_RichCompareBool(ms[i].v, ms[j].v, Py_EQ);
            PyObject *sum = eq > 0 ? PyNumber_Add(ms[i].d, ms[j].d) : NULL;
            if (eq < 0 || (eq > 0 && sum == NULL)) {
                join_matches_clear(ms, n);
                return -1;
            }
            if (eq > 0) {
                Py_SETREF(ms[i].d, sum);
                Py_CLEAR(ms[j].d);
            }
        }
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int nonzero = ms[i].d == NULL ? 0 : PyObject_IsTrue(ms[i].d);
        if (nonzero < 0) {
            join_matches_clear(ms + i, n - i);
            join_matches_clear(ms, kept);
            return -1;
        }
        if (nonzero)
            ms[kept++] = ms[i];
        else
            join_matches_clear(&ms[i], 1);
    }
    return kept;
}

/* The pairs of one update (v1 at t1, diff d1) of key with the updates ms[0 .. n) of the other
 * side, appended to out: (f(key, v1, v2) -- f(key, v2, v1) when swap --, the lub of the times,
 * d1 * d2).  0, or -1 with an exception. */
static int
join_emit(PyObject *out, PyObject *f, int swap, PyObject *key, PyObject *v1, PyObject *t1,
          PyObject *d1, const JoinMatch *ms, Py_ssize_t n, PyObject *product, PyObject *lub)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v2 = ms[j].v;
        PyObject *r = swap ? PyObject_CallFunctionObjArgs(f, key, v2, v1, NULL)
                           : PyObject_CallFunctionObjArgs(f, key, v1, v2, NULL);
        PyObject *t = r == NULL ? NULL : time_lub(t1, ms[j].t, product, lub);
        PyObject *d = t == NULL ? NULL : PyNumber_Multiply(d1, ms[j].d);
        PyObject *res = d == NULL ? NULL : PyTuple_Pack(3, r, t, d);
        Py_XDECREF(r);
        Py_XDECREF(t);
        Py_XDECREF(d);
        int rc = res == NULL ? -1 : PyList_Append(out, res);
        Py_XDECREF(res);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* join_pairs(data, others, f, swap, mine, theirs, lub, product[, meet]): the pairs of
 * pytimely.differential.join (its pairs(), not flat), compiled: for each key of the batch
 * index data and each index of the list others holding the key, every update (v1, t1, d1)
 * of the key in data with every (v2, t2, d2) in the other gives (f(key, v1, v2), the lub of
 * the two times, d1 * d2) -- f(key, v2, v1) when swap.  Times of data are mapped by mine,
 * those of others by theirs (TimeMemo objects, or None for none).
 *
 * With meet (a time at or before every time of data, mapped; an int or a product of two
 * ints), the updates of a key held by more than one of others are first consolidated as
 * differential dataflow's join reads a trace: their times advanced by meet (which changes
 * no lub with a time of data), equal values at equal advanced times summed, zero sums
 * dropped; an insertion and its later retraction in two batches not merged yet then make no
 * pair.  Returns the list. */
static PyObject *
join_pairs(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 8 && nargs != 9) || !PyDict_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "join_pairs(data, others, f, swap, mine, theirs, lub, product[, meet])");
        return NULL;
    }
    PyObject *data = args[0], *others = args[1], *f = args[2];
    PyObject *mine = args[4], *theirs = args[5], *lub = args[6], *product = args[7];
    PyObject *meet = nargs == 9 ? args[8] : Py_None;
    long long m0 = 0, m1 = 0;
    int kind = 0; /* 0: no consolidation */
    if (meet != Py_None && time_ints(meet, product, &m0, &m1, &kind) < 0)
        kind = 0;
    int swap = PyObject_IsTrue(args[3]);
    if (swap < 0)
        return NULL;
    Py_ssize_t n_others = PyList_GET_SIZE(others);
    for (Py_ssize_t o = 0; o < n_others; o++) {
        if (!PyDict_Check(PyList_GET_ITEM(others, o))) {
            PyErr_SetString(PyExc_TypeError, "join_pairs: others holds a non-dict");
            return NULL;
        }
    }
    PyObject *mine_known = mine == Py_None ? NULL : PyObject_GetAttrString(mine, "known");
    PyObject *theirs_known = theirs == Py_None ? NULL : PyObject_GetAttrString(theirs, "known");
    PyObject *out = PyList_New(0);
    PyObject *small_found[8], **found = n_others <= 8 ? small_found : PyMem_New(PyObject *, n_others);
    JoinMatch small_ms[32], *ms = small_ms;
    Py_ssize_t ms_room = 32;
    if (found == NULL)
        PyErr_NoMemory();
    if (out == NULL || found == NULL || (mine != Py_None && mine_known == NULL) ||
        (theirs != Py_None && theirs_known == NULL))
        goto fail;
    PyObject *key, *ups;
    Py_ssize_t pos = 0;
    while (PyDict_Next(data, &pos, &key, &ups)) {
        if (!PyList_Check(ups)) {
            PyErr_SetString(PyExc_TypeError, "join_pairs: a key's updates are not a list");
            goto fail;
        }
        Py_ssize_t n_found = 0, n_matches = 0;
        for (Py_ssize_t o = 0; o < n_others; o++) {
            PyObject *matches = PyDict_GetItemWithError(PyList_GET_ITEM(others, o), key);
            if (matches == NULL) {
                if (PyErr_Occurred())
                    goto held;
                continue;
            }
            if (!PyList_Check(matches)) {
                PyErr_SetString(PyExc_TypeError, "join_pairs: a key's updates are not a list");
                goto held;
            }
            /* (held: the user's function runs in between) */
            found[n_found++] = Py_NewRef(matches);
            n_matches += PyList_GET_SIZE(matches);
        }
        if (n_found == 0)
            continue;
        Py_INCREF(ups);
        Py_INCREF(key);
        Py_ssize_t n_ms = -2;
        if (kind != 0 && n_found > 1) {
            if (n_matches > ms_room) {
                JoinMatch *more = PyMem_New(JoinMatch, n_matches);
                if (more == NULL) {
                    PyErr_NoMemory();
                    goto release;
                }
                if (ms != small_ms)
                    PyMem_Free(ms);
                ms = more;
                ms_room = n_matches;
            }
            n_ms = join_consolidate(found, n_found, theirs, theirs_known, product, m0, m1, kind,
                                    ms);
            if (n_ms == -1)
                goto release;
        }
        /* Consolidated: every update of data with the key's kept updates; else batch by
         * batch, in order, as the Python loop pairs them. */
        for (Py_ssize_t b = 0; b < (n_ms >= 0 ? 1 : n_found); b++) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ups); i++) {
                PyObject *u = PyList_GET_ITEM(ups, i);
                if (!PyTuple_Check(u) || PyTuple_GET_SIZE(u) != 3) {
                    PyErr_SetString(PyExc_TypeError, "join_pairs: an update is not a triple");
                    goto release;
                }
                PyObject *t1 = memo_time(mine, mine_known, PyTuple_GET_ITEM(u, 1));
                if (t1 == NULL)
                    goto release;
                int rc = 0;
                if (n_ms >= 0)
                    rc = join_emit(out, f, swap, key, PyTuple_GET_ITEM(u, 0), t1,
                                   PyTuple_GET_ITEM(u, 2), ms, n_ms, product, lub);
                for (Py_ssize_t j = 0; n_ms < 0 && rc == 0 && j < PyList_GET_SIZE(found[b]); j++) {
                    PyObject *w = PyList_GET_ITEM(found[b], j);
                    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 3) {
                        PyErr_SetString(PyExc_TypeError, "join_pairs: an update is not a triple");
                        rc = -1;
                        break;
                    }
                    JoinMatch one = {0, 0, 0, PyTuple_GET_ITEM(w, 0), NULL, PyTuple_GET_ITEM(w, 2)};
                    one.t = memo_time(theirs, theirs_known, PyTuple_GET_ITEM(w, 1));
                    rc = one.t == NULL ? -1
                                       : join_emit(out, f, swap, key, PyTuple_GET_ITEM(u, 0), t1,
                                                   PyTuple_GET_ITEM(u, 2), &one, 1, product, lub);
                    Py_XDECREF(one.t);
                }
                Py_DECREF(t1);
                if (rc < 0)
                    goto release;
            }
        }
        if (n_ms > 0)
            join_matches_clear(ms, n_ms);
        Py_DECREF(ups);
        Py_DECREF(key);
        for (Py_ssize_t b = 0; b < n_found; b++)
            Py_DECREF(found[b]);
        continue;
    release:
        if (n_ms > 0)
            join_matches_clear(ms, n_ms);
        Py_DECREF(ups);
        Py_DECREF(key);
    held:
        for (Py_ssize_t b = 0; b < n_found; b++)
            Py_DECREF(found[b]);
        goto fail;
    }
    if (found != small_found)
        PyMem_Free(found);
    if (ms != small_ms)
        PyMem_Free(ms);
    Py_XDECREF(mine_known);
    Py_XDECREF(theirs_known);
    return out;
fail:
    if (found != NULL && found != small_found)
        PyMem_Free(found);
    if (ms != small_ms)
        PyMem_Free(ms);
    Py_XDECREF(mine_known);
    Py_XDECREF(theirs_known);
    Py_XDECREF(out);
    return NULL;
}

/* ---- the cyclic collector paused during steps ------------------------------------------- */

/* pytimely.worker._pause_collector and _resume_collector without their lock: a C function runs
 * whole under the GIL, so the count of pauses needs none.  pause_collector() returns False
 * (nothing to resume) if the program had switched the collector off, else counts a pause and
 * switches it off on the first.  resume_collector(long) ends a pause and switches the collector
 * back on with the last one, unless ``long`` is true for the last one: it then returns True
 * and leaves the pause counted, for the caller to freeze what the step left and call
 * resume_collector(False) after (the collector stays off meanwhile, whatever other threads'
 * steps do). */
static Py_ssize_t collector_pauses = 0;

static PyObject *
pause_collector(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(noargs))
{
    if (collector_pauses == 0) {
        if (!PyGC_IsEnabled())
            Py_RETURN_FALSE;
        PyGC_Disable();
    }
    collector_pauses++;
    Py_RETURN_TRUE;
}

static PyObject *
collector_paused(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(noargs))
{
    return PyBool_FromLong(collector_pauses > 0);
}

static PyObject *
resume_collector(PyObject *Py_UNUSED(module), PyObject *is_long)
{
    if (collector_pauses <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "resume_collector: the collector is not paused");
        return NULL;
    }
    if (collector_pauses == 1) {
        int long_ = PyObject_IsTrue(is_long);
        if (long_ < 0)
            return NULL;
        if (long_)
            Py_RETURN_TRUE;
        PyGC_Enable();
    }
    collector_pauses--;
    Py_RETURN_FALSE;
}

/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"encode", encode, METH_O,
     "encode(obj): obj in the records codec, or None if it holds another type."},
    {"decode", decode, METH_O, "decode(buffer): the object encoded by encode()."},
    {"drain_at_into", (PyCFunction)(void (*)(void))drain_at_into, METH_FASTCALL,
     "drain_at_into(batch, into, loc, weight): ChangeBatch.drain_at_into, compiled."},
    {"drain_located_into", (PyCFunction)(void (*)(void))drain_located_into, METH_FASTCALL,
     "drain_located_into(batch, into, locations): ChangeBatch.drain_located_into, compiled."},
    {"merge_keys", (PyCFunction)(void (*)(void))merge_keys, METH_FASTCALL,
     "merge_keys(keys, pos, fuel, other, base, data, older_first, floor, known, advance): "
     "pytimely.differential.trace._Merge._work, compiled."},
    {"index_updates", (PyCFunction)(void (*)(void))index_updates, METH_FASTCALL,
     "index_updates(updates, time): the index and size of Batch.from_updates, compiled."},
    {"count_changes", (PyCFunction)(void (*)(void))count_changes, METH_FASTCALL,
     "count_changes(key, times, ins, outs, f, corrections, product): "
     "pytimely.differential.reduce._count_changes for loop times, compiled."},
    {"advance_product", (PyCFunction)(void (*)(void))advance_product, METH_FASTCALL,
     "advance_product(frontier, product, fallback, t): advance_by for loop times, compiled."},
    {"history_extend", (PyCFunction)(void (*)(void))history_extend, METH_FASTCALL,
     "history_extend(index, data): pytimely.differential.reduce._History.extend, compiled."},
    {"index_self", (PyCFunction)(void (*)(void))index_self, METH_FASTCALL,
     "index_self(records, index, fresh): a threshold's records indexed as they arrive."},
    {"pack_records", (PyCFunction)(void (*)(void))pack_records, METH_FASTCALL,
     "pack_records(records, index, fresh, product): index_self into packed histories."},
    {"pack_extend", (PyCFunction)(void (*)(void))pack_extend, METH_FASTCALL,
     "pack_extend(index, data, product): history_extend into packed histories."},
    {"packed_compact", (PyCFunction)(void (*)(void))packed_compact, METH_FASTCALL,
     "packed_compact(index, keys, frontier, product): compact_grown of packed histories."},
    {"history_compact", (PyCFunction)(void (*)(void))history_compact, METH_FASTCALL,
     "history_compact(index, limits, keys, floor, known, advance): "
     "pytimely.differential.reduce._History.compact_grown, compiled."},
    {"chain_pending", (PyCFunction)(void (*)(void))chain_pending, METH_FASTCALL,
     "chain_pending(fresh, index, pending, waiting, outer, floor, made, product): "
     "the pending times of _ChainTimes.closure for many keys, compiled."},
    {"threshold_ready", (PyCFunction)(void (*)(void))threshold_ready, METH_FASTCALL,
     "threshold_ready(ready, pending, ins, outs, f, corrections, product): "
     "a threshold's evaluation over private histories, compiled."},
    {"records_ready", (PyCFunction)(void (*)(void))records_ready, METH_FASTCALL,
     "records_ready(ready, pending, ins, outs, f, corrections, product, frontier): "
     "threshold_ready into records and packed output histories."},
    {"gather_ready", (PyCFunction)(void (*)(void))gather_ready, METH_FASTCALL,
     "gather_ready(waiting, times, ready): the keys waiting at times, by key, compiled."},
    {"join_pairs", (PyCFunction)(void (*)(void))join_pairs, METH_FASTCALL,
     "join_pairs(data, others, f, swap, mine, theirs, lub, product): a join's pairs, compiled."},
    {"updates_of", (PyCFunction)(void (*)(void))updates_of, METH_FASTCALL,
     "updates_of(key, datas): pytimely.differential.reduce._updates_of, compiled."},
    {"pause_collector", pause_collector, METH_NOARGS,
     "pause_collector(): pytimely.worker._pause_collector, compiled."},
    {"collector_paused", collector_paused, METH_NOARGS,
     "collector_paused(): whether a step holds a pause_collector()."},
    {"resume_collector", resume_collector, METH_O,
     "resume_collector(long): end a pause; True: the last pause, of a long step, is left for "
     "the caller to freeze and end with resume_collector(False)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pytimely._speedups",
    "Compiled fast paths of the exchange and of progress counting (optional; see pytimely/_native.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&RouteCacheType) < 0 || PyType_Ready(&InvocationClockType) < 0)
        return NULL;
    crc32_init();
    crc32_short_init();
    str_records = PyUnicode_InternFromString("records");
    str_batches = PyUnicode_InternFromString("batches");
    if (str_records == NULL || str_batches == NULL)
        return NULL;
#if !defined(__linux__)
    PyObject *time_module = PyImport_ImportModule("time");
    if (time_module == NULL)
        return NULL;
    perf_counter = PyObject_GetAttrString(time_module, "perf_counter");
    Py_DECREF(time_module);
    if (perf_counter == NULL)
        return NULL;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAGIC", MAGIC) < 0 ||
        PyModule_AddIntConstant(m, "API", API_VERSION) < 0 ||
        PyModule_AddObjectRef(m, "RouteCache", (PyObject *)&RouteCacheType) < 0 ||
        PyModule_AddObjectRef(m, "InvocationClock", (PyObject *)&InvocationClockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
