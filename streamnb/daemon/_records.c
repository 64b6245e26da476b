/* The records of a Kafka record batch (message format v2), read in C.
 *
 * kafka-python reads each record of a fetched batch in Python (``DefaultRecordBatch._read_msg``
 * and ``decode_varint`` a field): on the SMS stream that was 14% of the daemon's main
 * thread's samples. ``read_records`` reads the same fields of all a batch's records in one
 * call, with the same checks; ``streamnb.daemon.records`` makes kafka-python's record
 * objects of them. A varint beyond 64 bits, which kafka-python reads as a larger Python int
 * and no broker writes (batches are CRC-checked), is refused as corrupt.
 *
 * Record =>
 *   Length => Varint
 *   Attributes => Int8 (as a varint, as kafka-python reads it; unused)
 *   TimestampDelta => Varlong
 *   OffsetDelta => Varint
 *   Key => Bytes (varint length, -1 for null)
 *   Value => Bytes
 *   Headers => [HeaderKey (String) HeaderValue (Bytes)]
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint of buffer[*pos:end] (at most 10 bytes, kafka-python's bound), *pos moved
 * past it; -1 with ValueError set if it runs past ``end`` or out of int64's range. */
static int
read_varint(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) {
            PyErr_SetString(PyExc_ValueError, "record runs past the end of its batch");
            return -1;
        }
        unsigned char c = b[p++];
        result |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            break;
        shift += 7;
        if (shift >= 64) {
            PyErr_SetString(PyExc_ValueError, "Out of int64 range");
            return -1;
        }
    }
    *pos = p;
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return 0;
}

/* bytes of the next ``length`` bytes (None for -1), *pos moved past them. */
static PyObject *
read_bytes(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, int64_t length)
{
    if (length < 0)
        Py_RETURN_NONE;
    if (length > end - *pos) {
        PyErr_SetString(PyExc_ValueError, "record field runs past the end of its batch");
        return NULL;
    }
    PyObject *data = PyBytes_FromStringAndSize((const char *)b + *pos, (Py_ssize_t)length);
    *pos += (Py_ssize_t)length;
    return data;
}

static PyObject *
read_headers(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos)
{
    int64_t count;
    if (read_varint(b, end, pos, &count) < 0)
        return NULL;
    if (count < 0) {
        PyErr_Format(PyExc_ValueError, "Found invalid number of record headers %lld",
                     (long long)count);
        return NULL;
    }
    if (count > end - *pos) { /* each header takes two bytes at least */
        PyErr_SetString(PyExc_ValueError, "record headers run past the end of its batch");
        return NULL;
    }
    PyObject *headers = PyList_New(0);
    if (headers == NULL)
        return NULL;
    for (int64_t k = 0; k < count; k++) {
        int64_t key_len, value_len;
        if (read_varint(b, end, pos, &key_len) < 0)
            goto fail;
        if (key_len < 0) {
            PyErr_Format(PyExc_ValueError, "Invalid negative header key size %lld",
                         (long long)key_len);
            goto fail;
        }
        if (key_len > end - *pos) {
            PyErr_SetString(PyExc_ValueError, "header key runs past the end of its batch");
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)b + *pos, (Py_ssize_t)key_len,
                                             "strict");
        if (key == NULL)
            goto fail;
        *pos += (Py_ssize_t)key_len;
        PyObject *value = read_varint(b, end, pos, &value_len) < 0
                          ? NULL : read_bytes(b, end, pos, value_len);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL || PyList_Append(headers, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* One record: (length, timestamp delta, offset delta, key, value, headers). */
static PyObject *
read_record(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos)
{
    int64_t length, attributes, ts_delta, offset_delta, key_len, value_len;
    if (read_varint(b, end, pos, &length) < 0)
        return NULL;
    Py_ssize_t start = *pos;
    if (read_varint(b, end, pos, &attributes) < 0 || read_varint(b, end, pos, &ts_delta) < 0
        || read_varint(b, end, pos, &offset_delta) < 0 || read_varint(b, end, pos, &key_len) < 0)
        return NULL;
    PyObject *key = read_bytes(b, end, pos, key_len);
    if (key == NULL)
        return NULL;
    PyObject *value = read_varint(b, end, pos, &value_len) < 0
                      ? NULL : read_bytes(b, end, pos, value_len);
    PyObject *headers = value == NULL ? NULL : read_headers(b, end, pos);
    if (headers != NULL && *pos - start != length) {
        PyErr_Format(PyExc_ValueError,
                     "Invalid record size: expected to read %lld bytes in record payload, but "
                     "instead read %zd", (long long)length, *pos - start);
        Py_CLEAR(headers);
    }
    if (headers == NULL) {
        Py_DECREF(key);
        Py_XDECREF(value);
        return NULL;
    }
    PyObject *record = Py_BuildValue("(LLLNNN)", (long long)length, (long long)ts_delta,
                                     (long long)offset_delta, key, value, headers);
    return record; /* N: the tuple took the references, or dropped them on failure */
}

PyDoc_STRVAR(read_records_doc,
"read_records(buffer, pos, count) -> (records, pos)\n\n"
"The next ``count`` records of a v2 record batch's ``buffer`` (bytes-like) from ``pos``:\n"
"each (length, timestamp delta, offset delta, key, value, headers), key and value bytes or\n"
"None, headers a list of (str, bytes or None); and the position after the last. Raises\n"
"ValueError where kafka-python's reader raises ValueError or IndexError.");

static PyObject *
read_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, count;
    if (!PyArg_ParseTuple(args, "y*nn:read_records", &view, &pos, &count))
        return NULL;
    PyObject *records = NULL;
    /* a record takes 7 bytes at least: a corrupt count fails here, not in a huge list */
    if (pos < 0 || pos > view.len || count < 0 || count > (view.len - pos) / 7 + 1) {
        PyErr_SetString(PyExc_ValueError, "read_records: position or count out of range");
        goto done;
    }
    records = PyList_New(count);
    if (records == NULL)
        goto done;
    const unsigned char *b = view.buf;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *record = read_record(b, view.len, &pos);
        if (record == NULL) {
            Py_CLEAR(records);
            goto done;
        }
        PyList_SET_ITEM(records, k, record);
    }
done:
    PyBuffer_Release(&view);
    if (records == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", records, pos);
}

static PyMethodDef methods[] = {
    {"read_records", read_records, METH_VARARGS, read_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "The records of a Kafka record batch, read in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    return PyModule_Create(&module);
}
