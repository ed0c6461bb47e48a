/* src/core/crc32c.c - CRC-32C (Castagnoli), for TensorBoard's record framing and the
 * checksum tubelet's safetensors files carry (core/internal.h). Slicing by 8 over tables made
 * once, about 1-2 GB/s: a checkpoint of ViT-B's size costs well under the time its write
 * takes, so there is no hardware path to keep in step with this one. Tests: tests/test_core.c
 * (RFC 3720's vectors, any split of a buffer, the bitwise definition), tests/test_tfevents.c. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "core/internal.h"

#define POLY 0x82F63B78u /* reflected */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* table[0]: one byte's CRC, bit by bit (the definition); table[k]: the same byte followed by
 * k zero bytes, so 8 bytes fold in one step. */
static void make_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xffu];
}

uint32_t tbi_crc32c_extend(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, make_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = table[7][lo & 0xffu] ^ table[6][(lo >> 8) & 0xffu] ^ table[5][(lo >> 16) & 0xffu] ^
            table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^
            table[0][p[7]];
    }
    for (; n > 0; n--, p++)
        c = (c >> 8) ^ table[0][(c ^ *p) & 0xffu];
    return ~c;
}

uint32_t tbi_crc32c(const void *data, size_t n)
{
    return tbi_crc32c_extend(0, data, n);
}
