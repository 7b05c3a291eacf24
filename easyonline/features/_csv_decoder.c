/* Compiled core of VectorCsvParser: a batch of CSV lines -> id, dense and label arrays.
 *
 * On two cores every microsecond of input CPU comes out of the training
 * step; numpy needs ~5 us per 40-field sample (twenty passes over the
 * bytes), this one pass needs well under one. It follows the numpy path's
 * rules exactly (vector_csv.py): plain decimals only, every line with every
 * field, and CsvParser's checks of labels and weights (a binary label 0 or
 * 1, any other label finite, a sample weight finite and >= 0); anything else
 * returns False and the batch goes to TensorFlow's CsvParser, which rejects
 * just the lines that fail, with their reasons. Ids are FarmHash Fingerprint64 % (2^63 - 1), as
 * tf.strings.to_hash_bucket_fast computes them (port of farmhashna::Hash64,
 * farmhash.cc, MIT licence).
 *
 * Multi-value fields (tags, weighted tags "id:weight", sequences) follow
 * multi_value_tf.py: split on their separator, empty and padding values
 * dropped, ids hashed, read as ints (negative ones dropped) or bucketized,
 * weighted values of weight <= 0 dropped, a sequence cut to its first
 * max_length ids. A value TensorFlow would reject or flag (a weight that is
 * not a plain decimal, an id that is not an int) declines the batch too.
 *
 * Python API:
 *   parse(blob, count, num_fields, separator, columns, ids, dense, labels[, multi]) -> bool
 *     blob: ``count`` lines joined by newlines; columns: tuple of
 *     (field, kind, out, default_int, default_float, pads), see Column;
 *     ids int64[count, n_ids], dense float32[count, n_dense], labels
 *     float32[count, n_labels] (label fields, then the sample weight):
 *     writable C-contiguous buffers, filled in place (their sizes give
 *     n_ids, n_dense and n_labels). multi: tuple of (field, sub, separator,
 *     kv_separator or -1, max_length, pads, default, boundaries, ids,
 *     splits, weights or None), see Multi: ids int64[capacity] and weights
 *     float32[capacity] take the flat values, splits int64[count + 1] the
 *     row splits (splits[count]: how many values were written).
 *   fingerprint64(bytes) -> int
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HASH_BUCKETS 0x7fffffffffffffffULL
#define PADDING_ID (-1LL)
#define MAX_FLOAT_DIGITS 15
#define MAX_INT_DIGITS 18

/* Label columns (5..10) write to labels[row, out] after their check: BINARY 0 or 1, NUMBER finite, WEIGHT
 * finite and >= 0 (a plain decimal is always finite; checked anyway, as CsvParser checks). */
enum { HASH_ID = 1, INT_ID = 2, FLOAT_DENSE = 3, INT_DENSE = 4, INT_BINARY = 5, FLOAT_BINARY = 6, INT_NUMBER = 7,
       FLOAT_NUMBER = 8, INT_WEIGHT = 9, FLOAT_WEIGHT = 10, LAST_KIND = FLOAT_WEIGHT };

/* ---- FarmHash Fingerprint64 (farmhashna::Hash64) ---- */

static const uint64_t k0 = 0xc3a5c85c97cb3127ULL;
static const uint64_t k1 = 0xb492b66fbe98f273ULL;
static const uint64_t k2 = 0x9ae16a3b2f90404fULL;

static inline uint64_t fetch64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t fetch32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rotate64(uint64_t v, int s) { return s == 0 ? v : (v >> s) | (v << (64 - s)); }
static inline uint64_t shift_mix(uint64_t v) { return v ^ (v >> 47); }

static inline uint64_t hash_len_16(uint64_t u, uint64_t v, uint64_t mul) {
    uint64_t a = (u ^ v) * mul;
    a ^= (a >> 47);
    uint64_t b = (v ^ a) * mul;
    b ^= (b >> 47);
    return b * mul;
}

static uint64_t hash_len_0_to_16(const uint8_t *s, size_t len) {
    if (len >= 8) {
        uint64_t mul = k2 + len * 2;
        uint64_t a = fetch64(s) + k2;
        uint64_t b = fetch64(s + len - 8);
        uint64_t c = rotate64(b, 37) * mul + a;
        uint64_t d = (rotate64(a, 25) + b) * mul;
        return hash_len_16(c, d, mul);
    }
    if (len >= 4) {
        uint64_t mul = k2 + len * 2;
        uint64_t a = fetch32(s);
        return hash_len_16(len + (a << 3), fetch32(s + len - 4), mul);
    }
    if (len > 0) {
        uint8_t a = s[0], b = s[len >> 1], c = s[len - 1];
        uint32_t y = (uint32_t)a + ((uint32_t)b << 8);
        uint32_t z = (uint32_t)len + ((uint32_t)c << 2);
        return shift_mix(y * k2 ^ z * k0) * k2;
    }
    return k2;
}

static uint64_t hash_len_17_to_32(const uint8_t *s, size_t len) {
    uint64_t mul = k2 + len * 2;
    uint64_t a = fetch64(s) * k1;
    uint64_t b = fetch64(s + 8);
    uint64_t c = fetch64(s + len - 8) * mul;
    uint64_t d = fetch64(s + len - 16) * k2;
    return hash_len_16(rotate64(a + b, 43) + rotate64(c, 30) + d, a + rotate64(b + k2, 18) + c, mul);
}

static uint64_t hash_len_33_to_64(const uint8_t *s, size_t len) {
    uint64_t mul = k2 + len * 2;
    uint64_t a = fetch64(s) * k2;
    uint64_t b = fetch64(s + 8);
    uint64_t c = fetch64(s + len - 8) * mul;
    uint64_t d = fetch64(s + len - 16) * k2;
    uint64_t y = rotate64(a + b, 43) + rotate64(c, 30) + d;
    uint64_t z = hash_len_16(y, a + rotate64(b + k2, 18) + c, mul);
    uint64_t e = fetch64(s + 16) * mul;
    uint64_t f = fetch64(s + 24);
    uint64_t g = (y + fetch64(s + len - 32)) * mul;
    uint64_t h = (z + fetch64(s + len - 24)) * mul;
    return hash_len_16(rotate64(e + f, 43) + rotate64(g, 30) + h, e + rotate64(f + a, 18) + g, mul);
}

typedef struct { uint64_t first, second; } pair64;

static inline pair64 weak_hash_len_32_with_seeds(const uint8_t *s, uint64_t a, uint64_t b) {
    uint64_t w = fetch64(s), x = fetch64(s + 8), y = fetch64(s + 16), z = fetch64(s + 24);
    a += w;
    b = rotate64(b + a + z, 21);
    uint64_t c = a;
    a += x;
    a += y;
    b += rotate64(a, 44);
    pair64 r = {a + z, b + c};
    return r;
}

static uint64_t fingerprint64(const uint8_t *s, size_t len) {
    const uint64_t seed = 81;
    if (len <= 32) return len <= 16 ? hash_len_0_to_16(s, len) : hash_len_17_to_32(s, len);
    if (len <= 64) return hash_len_33_to_64(s, len);
    uint64_t x = seed, y = seed * k1 + 113, z = shift_mix(y * k2 + 113) * k2, t;
    pair64 v = {0, 0}, w = {0, 0};
    x = x * k2 + fetch64(s);
    const uint8_t *end = s + ((len - 1) / 64) * 64;
    const uint8_t *last64 = end + ((len - 1) & 63) - 63;
    do {
        x = rotate64(x + y + v.first + fetch64(s + 8), 37) * k1;
        y = rotate64(y + v.second + fetch64(s + 48), 42) * k1;
        x ^= w.second;
        y += v.first + fetch64(s + 40);
        z = rotate64(z + w.first, 33) * k1;
        v = weak_hash_len_32_with_seeds(s, v.second * k1, x + w.first);
        w = weak_hash_len_32_with_seeds(s + 32, z + w.second, y + fetch64(s + 16));
        t = z; z = x; x = t;
        s += 64;
    } while (s != end);
    uint64_t mul = k1 + ((z & 0xff) << 1);
    s = last64;
    w.first += ((len - 1) & 63);
    v.first += w.first;
    w.first += v.first;
    x = rotate64(x + y + v.first + fetch64(s + 8), 37) * mul;
    y = rotate64(y + v.second + fetch64(s + 48), 42) * mul;
    x ^= w.second * 9;
    y += v.first * 9 + fetch64(s + 40);
    z = rotate64(z + w.first, 33) * mul;
    v = weak_hash_len_32_with_seeds(s, v.second * mul, x + w.first);
    w = weak_hash_len_32_with_seeds(s + 32, z + w.second, y + fetch64(s + 16));
    t = z; z = x; x = t;
    return hash_len_16(hash_len_16(v.first, w.first, mul) + shift_mix(y) * k0 + z,
                       hash_len_16(v.second, w.second, mul) + x, mul);
}

/* ---- plain decimals ---- */

static const double POW10[MAX_FLOAT_DIGITS + 1] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* An optional leading minus, 1..max_digits digits and (if allow_dot) at most one dot; 0 if not that. */
static int plain_decimal(const uint8_t *s, size_t len, int max_digits, int allow_dot,
                         int64_t *mantissa, int *fraction, int *negative) {
    size_t i = 0;
    int digits = 0, dot_at = -1;
    int64_t m = 0;
    *negative = len > 0 && s[0] == '-';
    if (*negative) i = 1;
    for (; i < len; i++) {
        uint8_t c = s[i];
        if (c >= '0' && c <= '9') {
            if (++digits > max_digits) return 0;
            m = m * 10 + (c - '0');
        } else if (c == '.' && allow_dot && dot_at < 0) {
            dot_at = digits;
        } else {
            return 0;
        }
    }
    if (digits == 0) return 0;
    *mantissa = m;
    *fraction = dot_at < 0 ? 0 : digits - dot_at;
    return 1;
}

/* float32 of a plain decimal as strtof rounds it; 0 when not plain or the rounding is ambiguous. */
static int parse_float(const uint8_t *s, size_t len, float *out) {
    int64_t m;
    int fraction, negative;
    if (!plain_decimal(s, len, MAX_FLOAT_DIGITS, 1, &m, &fraction, &negative)) return 0;
    double exact = (double)m / POW10[fraction]; /* both exact: one correctly rounded division */
    uint64_t bits;
    memcpy(&bits, &exact, 8);
    /* Exactly halfway between two float32 values: the decimal itself may lie on either side. */
    if ((bits & ((1ULL << 29) - 1)) == (1ULL << 28)) return 0;
    *out = (float)(negative ? -exact : exact);
    return 1;
}

static int parse_int(const uint8_t *s, size_t len, int64_t *out) {
    int64_t m;
    int fraction, negative;
    if (!plain_decimal(s, len, MAX_INT_DIGITS, 0, &m, &fraction, &negative)) return 0;
    *out = negative ? -m : m;
    return 1;
}

/* ---- columns ---- */

typedef struct {
    Py_ssize_t field;
    int kind;
    Py_ssize_t out;
    int64_t default_int;  /* the id of an empty HASH_ID field; the value of an empty int field */
    float default_float;
    Py_ssize_t num_pads;
    const uint8_t **pad_bytes; /* HASH_ID: padding strings */
    Py_ssize_t *pad_lengths;
    int64_t *pad_ints;         /* INT_ID: padding values */
} Column;

static void free_columns(Column *columns, Py_ssize_t n) {
    if (!columns) return;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMem_Free(columns[i].pad_bytes);
        PyMem_Free(columns[i].pad_lengths);
        PyMem_Free(columns[i].pad_ints);
    }
    PyMem_Free(columns);
}

/* Reads the columns tuple; the pad byte pointers borrow from it (alive for the call). */
static Column *read_columns(PyObject *spec, Py_ssize_t num_fields, Py_ssize_t *count) {
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "columns must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    Column *columns = PyMem_Calloc(n ? n : 1, sizeof(Column));
    if (!columns) return (Column *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        Column *c = &columns[i];
        PyObject *pads;
        long long default_int;
        double default_float;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "ninLdO!", &c->field, &c->kind, &c->out, &default_int,
                              &default_float, &PyTuple_Type, &pads)) goto fail;
        if (c->field < 0 || c->field >= num_fields || c->kind < HASH_ID || c->kind > LAST_KIND) {
            PyErr_Format(PyExc_ValueError, "column %zd: bad field or kind", i);
            goto fail;
        }
        c->default_int = default_int;
        c->default_float = (float)default_float;
        c->num_pads = PyTuple_GET_SIZE(pads);
        if (c->num_pads) {
            c->pad_bytes = PyMem_Calloc(c->num_pads, sizeof(uint8_t *));
            c->pad_lengths = PyMem_Calloc(c->num_pads, sizeof(Py_ssize_t));
            c->pad_ints = PyMem_Calloc(c->num_pads, sizeof(int64_t));
            if (!c->pad_bytes || !c->pad_lengths || !c->pad_ints) { PyErr_NoMemory(); goto fail; }
            for (Py_ssize_t k = 0; k < c->num_pads; k++) {
                PyObject *pad = PyTuple_GET_ITEM(pads, k);
                if (PyBytes_Check(pad)) {
                    c->pad_bytes[k] = (const uint8_t *)PyBytes_AS_STRING(pad);
                    c->pad_lengths[k] = PyBytes_GET_SIZE(pad);
                } else {
                    c->pad_ints[k] = PyLong_AsLongLong(pad);
                    if (PyErr_Occurred()) goto fail;
                }
            }
        }
    }
    *count = n;
    return columns;
fail:
    free_columns(columns, n);
    return NULL;
}

/* Writes one column of one line; 0 if the field declines the batch. */
static int convert(const Column *c, const uint8_t *s, size_t len, Py_ssize_t row, int64_t *ids, Py_ssize_t n_ids,
                   float *dense, Py_ssize_t n_dense, float *labels, Py_ssize_t n_labels) {
    int64_t i;
    float f;
    switch (c->kind) {
    case HASH_ID:
        if (len == 0) {
            i = c->default_int;
        } else {
            i = (int64_t)(fingerprint64(s, len) % HASH_BUCKETS);
            for (Py_ssize_t k = 0; k < c->num_pads; k++)
                if ((size_t)c->pad_lengths[k] == len && memcmp(c->pad_bytes[k], s, len) == 0) i = PADDING_ID;
        }
        ids[row * n_ids + c->out] = i;
        return 1;
    case INT_ID:
        if (len == 0) i = c->default_int;
        else if (!parse_int(s, len, &i)) return 0;
        for (Py_ssize_t k = 0; k < c->num_pads; k++)
            if (c->pad_ints[k] == i) i = PADDING_ID;
        ids[row * n_ids + c->out] = i < 0 ? PADDING_ID : i;
        return 1;
    case FLOAT_DENSE:
        if (len == 0) f = c->default_float;
        else if (!parse_float(s, len, &f)) return 0;
        dense[row * n_dense + c->out] = f;
        return 1;
    case INT_DENSE:
        if (len == 0) i = c->default_int;
        else if (!parse_int(s, len, &i)) return 0;
        dense[row * n_dense + c->out] = (float)i;
        return 1;
    case INT_BINARY:
    case INT_NUMBER:
    case INT_WEIGHT:
        if (len == 0) i = c->default_int;
        else if (!parse_int(s, len, &i)) return 0;
        f = (float)i; /* CsvParser checks the label cast to float32 */
        break;
    default: /* FLOAT_BINARY, FLOAT_NUMBER, FLOAT_WEIGHT */
        if (len == 0) f = c->default_float;
        else if (!parse_float(s, len, &f)) return 0;
        break;
    }
    if (c->kind == INT_BINARY || c->kind == FLOAT_BINARY) {
        if (f != 0.0f && f != 1.0f) return 0;
    } else if (!isfinite(f) || ((c->kind == INT_WEIGHT || c->kind == FLOAT_WEIGHT) && !(f >= 0.0f))) {
        return 0;
    }
    labels[row * n_labels + c->out] = f;
    return 1;
}

/* ---- multi-value fields ---- */

enum { MV_HASH = 1, MV_INT = 2, MV_BUCKET = 3 };

typedef struct {
    Py_ssize_t field;
    int sub;                    /* MV_HASH, MV_INT or MV_BUCKET */
    int separator;
    int kv;                     /* the kv_separator of weighted tags; -1: not weighted */
    Py_ssize_t max_length;      /* a sequence keeps its first max_length ids; 0: all */
    Py_ssize_t num_pads;
    const uint8_t **pad_bytes;  /* padding values (dropped) */
    Py_ssize_t *pad_lengths;
    const uint8_t *default_bytes; /* what an empty field reads as */
    Py_ssize_t default_length;
    const float *boundaries;    /* MV_BUCKET */
    Py_ssize_t num_boundaries;
    Py_buffer ids, splits, weights; /* weights.obj NULL: not weighted */
    Py_ssize_t capacity, used;
} Multi;

static void free_multis(Multi *multis, Py_ssize_t n) {
    if (!multis) return;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMem_Free(multis[i].pad_bytes);
        PyMem_Free(multis[i].pad_lengths);
        if (multis[i].ids.obj) PyBuffer_Release(&multis[i].ids);
        if (multis[i].splits.obj) PyBuffer_Release(&multis[i].splits);
        if (multis[i].weights.obj) PyBuffer_Release(&multis[i].weights);
    }
    PyMem_Free(multis);
}

/* Reads the multi tuple; pads, default and boundaries borrow from it (alive for the call). */
static Multi *read_multis(PyObject *spec, Py_ssize_t num_fields, Py_ssize_t count, Py_ssize_t *n_out) {
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "multi must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    Multi *multis = PyMem_Calloc(n ? n : 1, sizeof(Multi));
    if (!multis) return (Multi *)PyErr_NoMemory();
    *n_out = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Multi *m = &multis[i];
        PyObject *pads, *ids, *splits, *weights;
        const char *def, *bounds;
        Py_ssize_t bounds_length;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "niiinO!y#y#OOO", &m->field, &m->sub, &m->separator,
                              &m->kv, &m->max_length, &PyTuple_Type, &pads, &def, &m->default_length, &bounds,
                              &bounds_length, &ids, &splits, &weights)) goto fail;
        if (m->field < 0 || m->field >= num_fields || m->sub < MV_HASH || m->sub > MV_BUCKET || m->max_length < 0
            || bounds_length % 4 != 0) {
            PyErr_Format(PyExc_ValueError, "multi %zd: bad field, sub kind, max_length or boundaries", i);
            goto fail;
        }
        m->default_bytes = (const uint8_t *)def;
        m->boundaries = (const float *)bounds;
        m->num_boundaries = bounds_length / 4;
        if (PyObject_GetBuffer(ids, &m->ids, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
        if (PyObject_GetBuffer(splits, &m->splits, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
        m->capacity = m->ids.len / 8;
        if (m->splits.len != (count + 1) * 8) {
            PyErr_Format(PyExc_ValueError, "multi %zd: splits must hold count + 1 int64", i);
            goto fail;
        }
        if (weights != Py_None) {
            if (PyObject_GetBuffer(weights, &m->weights, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto fail;
            if (m->weights.len / 4 < m->capacity || m->kv < 0) {
                PyErr_Format(PyExc_ValueError, "multi %zd: weights need a kv_separator and room for every id", i);
                goto fail;
            }
        } else if (m->kv >= 0) {
            PyErr_Format(PyExc_ValueError, "multi %zd: a kv_separator needs a weights buffer", i);
            goto fail;
        }
        m->num_pads = PyTuple_GET_SIZE(pads);
        if (m->num_pads) {
            m->pad_bytes = PyMem_Calloc(m->num_pads, sizeof(uint8_t *));
            m->pad_lengths = PyMem_Calloc(m->num_pads, sizeof(Py_ssize_t));
            if (!m->pad_bytes || !m->pad_lengths) { PyErr_NoMemory(); goto fail; }
            for (Py_ssize_t k = 0; k < m->num_pads; k++) {
                PyObject *pad = PyTuple_GET_ITEM(pads, k);
                if (!PyBytes_Check(pad)) {
                    PyErr_Format(PyExc_TypeError, "multi %zd: padding values must be bytes", i);
                    goto fail;
                }
                m->pad_bytes[k] = (const uint8_t *)PyBytes_AS_STRING(pad);
                m->pad_lengths[k] = PyBytes_GET_SIZE(pad);
            }
        }
    }
    return multis;
fail:
    free_multis(multis, n);
    return NULL;
}

static int is_padding(const Multi *m, const uint8_t *t, size_t len) {
    for (Py_ssize_t k = 0; k < m->num_pads; k++)
        if ((size_t)m->pad_lengths[k] == len && memcmp(m->pad_bytes[k], t, len) == 0) return 1;
    return 0;
}

/* The id of one value: 1 and *id; 2: dropped (a negative int id); 0: declines the batch (not a number). */
static int value_id(const Multi *m, const uint8_t *t, size_t len, int64_t *id) {
    float f;
    switch (m->sub) {
    case MV_HASH:
        *id = (int64_t)(fingerprint64(t, len) % HASH_BUCKETS);
        return 1;
    case MV_INT:
        if (!parse_int(t, len, id)) return 0;
        return *id < 0 ? 2 : 1;
    default: { /* MV_BUCKET: how many boundaries are <= the value (std::upper_bound, as Bucketize) */
        if (!parse_float(t, len, &f)) return 0;
        Py_ssize_t lo = 0, hi = m->num_boundaries;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (f < m->boundaries[mid]) hi = mid; else lo = mid + 1;
        }
        *id = lo;
        return 1;
    }
    }
}

/* Appends one row's ids (and weights); 0 if a value declines the batch. */
static int convert_multi(Multi *m, const uint8_t *s, size_t len, Py_ssize_t row) {
    int64_t *ids = m->ids.buf, *splits = m->splits.buf;
    float *weights = m->weights.buf;
    if (len == 0) { s = m->default_bytes; len = (size_t)m->default_length; }
    Py_ssize_t kept = 0;
    for (size_t i = 0; i <= len;) {
        size_t start = i;
        while (i < len && s[i] != m->separator) i++;
        const uint8_t *t = s + start;
        size_t tlen = i - start;
        i++; /* past the separator (or the end) */
        if (tlen == 0) continue;
        int64_t id;
        int r;
        if (m->kv >= 0) { /* id<kv>weight: a malformed value is TensorFlow's to reject */
            const uint8_t *kv = memchr(t, m->kv, tlen);
            if (!kv || kv == t) return 0;
            size_t id_length = (size_t)(kv - t);
            float w;
            if (!parse_float(kv + 1, tlen - id_length - 1, &w)) return 0;
            if (!(w > 0.0f) || is_padding(m, t, id_length)) continue;
            r = value_id(m, t, id_length, &id);
            if (r == 0) return 0;
            if (r == 2) continue;
            if (m->used >= m->capacity) return 0;
            weights[m->used] = w;
        } else {
            if (is_padding(m, t, tlen)) continue;
            if (m->max_length && kept >= m->max_length) { /* cut, but TensorFlow still reads every number */
                if (m->sub == MV_HASH) break;
                if (value_id(m, t, tlen, &id) == 0) return 0;
                continue;
            }
            r = value_id(m, t, tlen, &id);
            if (r == 0) return 0;
            if (r == 2) continue;
            if (m->used >= m->capacity) return 0;
        }
        ids[m->used++] = id;
        kept++;
    }
    splits[row + 1] = m->used;
    return 1;
}

/* A writable buffer of count rows of itemsize-byte items; *columns gets how many items a row holds. */
static int writable(PyObject *obj, Py_buffer *view, Py_ssize_t count, Py_ssize_t itemsize, Py_ssize_t *columns,
                    const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return 0;
    if (view->len % (count * itemsize) != 0) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, not rows of %zd-byte items for %zd lines", name,
                     view->len, itemsize, count);
        PyBuffer_Release(view);
        return 0;
    }
    *columns = view->len / (count * itemsize);
    return 1;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    Py_buffer blob, ids_view = {0}, dense_view = {0}, labels_view = {0};
    Py_ssize_t count, num_fields, n_ids, n_dense, n_labels, n_columns = 0;
    int separator;
    PyObject *spec, *ids_obj, *dense_obj, *labels_obj, *multi_spec = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nniOOOO|O", &blob, &count, &num_fields, &separator, &spec, &ids_obj, &dense_obj,
                          &labels_obj, &multi_spec)) return NULL;
    Column *columns = NULL;
    Multi *multis = NULL;
    Py_ssize_t n_multis = 0;
    Py_ssize_t *starts = NULL;
    if (num_fields < 1 || count < 1) {
        PyErr_SetString(PyExc_ValueError, "count and num_fields must be positive");
        goto done;
    }
    if (!writable(ids_obj, &ids_view, count, 8, &n_ids, "ids")) goto done;
    if (!writable(dense_obj, &dense_view, count, 4, &n_dense, "dense")) goto done;
    if (!writable(labels_obj, &labels_view, count, 4, &n_labels, "labels")) goto done;
    columns = read_columns(spec, num_fields, &n_columns);
    if (!columns) goto done;
    if (multi_spec) {
        multis = read_multis(multi_spec, num_fields, count, &n_multis);
        if (!multis) goto done;
    }
    starts = PyMem_Calloc(num_fields + 1, sizeof(Py_ssize_t));
    if (!starts) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_columns; k++) { /* every write stays inside its array */
        int kind = columns[k].kind;
        Py_ssize_t width = kind <= INT_ID ? n_ids : kind <= INT_DENSE ? n_dense : n_labels;
        if (columns[k].out < 0 || columns[k].out >= width) {
            PyErr_Format(PyExc_ValueError, "column %zd writes to column %zd of %zd", k, columns[k].out, width);
            goto done;
        }
    }
    const uint8_t *data = blob.buf;
    Py_ssize_t size = blob.len, pos = 0;
    int ok = 1;
    for (Py_ssize_t k = 0; k < n_multis; k++) ((int64_t *)multis[k].splits.buf)[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t row = 0; row < count && ok; row++) {
        /* starts[k] = first byte of field k; starts[num_fields] = one past the line's end + 1 */
        Py_ssize_t field = 0;
        starts[0] = pos;
        while (pos < size && data[pos] != '\n') {
            if (data[pos] == separator) {
                if (++field >= num_fields) { ok = 0; break; }
                starts[field] = pos + 1;
            }
            pos++;
        }
        if (!ok || field != num_fields - 1 || (row == count - 1) != (pos == size)) { ok = 0; break; }
        starts[num_fields] = pos + 1;
        pos++; /* past the newline */
        for (Py_ssize_t k = 0; k < n_columns; k++) {
            const Column *c = &columns[k];
            Py_ssize_t start = starts[c->field];
            if (!convert(c, data + start, (size_t)(starts[c->field + 1] - 1 - start), row, ids_view.buf, n_ids,
                         dense_view.buf, n_dense, labels_view.buf, n_labels)) { ok = 0; break; }
        }
        for (Py_ssize_t k = 0; k < n_multis && ok; k++) {
            Multi *m = &multis[k];
            Py_ssize_t start = starts[m->field];
            if (!convert_multi(m, data + start, (size_t)(starts[m->field + 1] - 1 - start), row)) ok = 0;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    free_columns(columns, n_columns);
    free_multis(multis, n_multis);
    PyMem_Free(starts);
    PyBuffer_Release(&blob);
    if (ids_view.obj) PyBuffer_Release(&ids_view);
    if (dense_view.obj) PyBuffer_Release(&dense_view);
    if (labels_view.obj) PyBuffer_Release(&labels_view);
    return result;
}

static PyObject *py_fingerprint64(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint64_t h = fingerprint64(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(blob, count, num_fields, separator, columns, ids, dense, labels[, multi]) -> bool"},
    {"fingerprint64", py_fingerprint64, METH_VARARGS, "FarmHash Fingerprint64 of bytes, as TensorFlow computes it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csv_decoder", NULL, -1, methods};

PyMODINIT_FUNC PyInit__csv_decoder(void) { return PyModule_Create(&module); }
