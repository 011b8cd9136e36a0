/*
 * Kafka's wire primitives shared by the C extensions (header-only, static inline):
 * the producer's app/client/producer/_native.c and the broker's JSON produce loop
 * app/common/_jsonrecords.c. setup.py puts app/common on both extensions' include path.
 *
 * kafka_murmur2(data, length): Kafka's murmur2 (the Java client's Utils.murmur2, seed
 * 0x9747b28c), the hash its default partitioner takes modulo the partition count of a
 * keyed record's positive-masked value; the same value as app/common/partitioner.py's.
 *
 * kafka_varint_size(value), kafka_put_varint(out, value): RecordBatch v2's zig-zag
 * varints (at most 10 bytes); kafka_put_varint writes one at out and answers its length.
 *
 * No state, no Python objects beyond Py_ssize_t: safe from any thread, with or without
 * the GIL.
 */
#ifndef LOGBUS_KAFKA_WIRE_H
#define LOGBUS_KAFKA_WIRE_H

#include <Python.h>
#include <stdint.h>

static inline int32_t
kafka_murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length >> 2;
    for (Py_ssize_t i = 0; i < words; i++) {
        const unsigned char *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = length & ~(Py_ssize_t)3;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[base + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[base + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[base];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static inline int
kafka_varint_size(int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline int
kafka_put_varint(unsigned char *out, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

#endif /* LOGBUS_KAFKA_WIRE_H */
